package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

type env struct {
	store   *memstore.Store
	seats   *memstore.Seats
	svc     *cancel.Service
	ev      *expirytest.Recorder
	mu      sync.Mutex
	disc    []cancel.Discrepancy
	hookErr error // what the refund hook answers
}

func newEnv(t *testing.T) *env {
	e := &env{store: memstore.NewStore(nil), seats: memstore.NewSeats(nil), ev: &expirytest.Recorder{}}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev},
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.disc = append(e.disc, d)
			return e.hookErr
		}})
	require.NoError(t, err)
	return e
}

func (e *env) hooked() []cancel.Discrepancy {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]cancel.Discrepancy(nil), e.disc...)
}

func (e *env) place(t *testing.T, no, user string, ttl time.Duration) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "s", Seats: []string{no + "a", no + "b"}, ExpireAt: time.Now().Add(ttl)}
	require.NoError(t, e.svc.Place(context.Background(), p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
	return p
}

func pay(no, user, id string) cancel.Payment {
	return cancel.Payment{OrderNo: no, UserID: user, PaymentID: id}
}

func TestCancelReleasesAfterCommit(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	res, err := e.svc.UserCancel(context.Background(), "o1", "u1")
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, 2, res.Released)
	held, _ := e.seats.Held(context.Background(), "s", "u1")
	assert.Zero(t, held)
	assert.Equal(t, 1, e.ev.Count(expiry.KindCancelled))
}

func TestReleaseFailureIsNotAnError(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", -time.Second)
	e.seats.Fail = func(op string) error {
		if op == "Release" {
			return errors.New("redis down")
		}
		return nil
	}
	cancelled, _, err := e.svc.Timeout(context.Background(), "o1")
	require.NoError(t, err, "the order is cancelled; Redis is repaired later")
	assert.True(t, cancelled)
	assert.Equal(t, 1, e.ev.Count(expiry.KindReleaseFailed))
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Len(t, show, 2, "still locked in Redis until the reconciler runs")
}

func TestUserCancelOwnership(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "alice", time.Hour)
	_, err := e.svc.UserCancel(context.Background(), "o1", "mallory")
	assert.ErrorIs(t, err, cancel.ErrNotOwner)
	_, err = e.svc.UserCancel(context.Background(), "o1", "")
	assert.ErrorIs(t, err, expiry.ErrInvalidID)
	_, err = e.svc.Pay(context.Background(), pay("o1", "mallory", "p1"))
	assert.ErrorIs(t, err, cancel.ErrNotOwner)
	o, _ := e.store.Order(context.Background(), "o1")
	assert.Equal(t, expiry.StatusPending, o.Status)
}

func TestPayLosesToCancel(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", -time.Second)
	ok, _, err := e.svc.Timeout(context.Background(), "o1")
	require.NoError(t, err)
	require.True(t, ok)
	res, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p1"))
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.False(t, res.Changed)
	assert.Equal(t, []cancel.Discrepancy{{PaymentID: "p1", OrderNo: "o1", UserID: "u1", Status: expiry.StatusCancelled}}, e.hooked())
	assert.Equal(t, 1, e.ev.Count(expiry.KindDiscrepancy))
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Empty(t, show, "no seat sold to a cancelled order")
}

func TestPayTwiceIsQuiet(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	res, err := e.svc.Pay(context.Background(), pay("o1", "", "p1"))
	require.NoError(t, err)
	assert.True(t, res.Changed)
	res, err = e.svc.Pay(context.Background(), pay("o1", "", "p1"))
	require.NoError(t, err, "a repeated callback is not a discrepancy")
	assert.False(t, res.Changed)
	assert.Equal(t, "p1", res.PaymentID)
	assert.Empty(t, e.hooked())
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Equal(t, cancel.SeatSold, show["o1a"].Status)
	held, _ := e.seats.Held(context.Background(), "s", "u1")
	assert.Equal(t, 2, held, "I8: paid seats still count")
}

func TestInvalidInput(t *testing.T) {
	e := newEnv(t)
	for _, no := range []string{"", "a{b}", "x'--", "\x00"} {
		_, err := e.svc.Cancel(context.Background(), cancel.Request{OrderNo: no, Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		_, err = e.svc.Pay(context.Background(), pay(no, "", "p1"))
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		_, err = e.svc.Pay(context.Background(), pay("ok1", "", no))
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "payment id %q", no)
	}
	e.place(t, "ok1", "u1", time.Hour)
	for _, r := range []cancel.Reason{"", "far-too-long-a-reason", "bad reason"} {
		_, err := e.svc.Cancel(context.Background(), cancel.Request{OrderNo: "ok1", Reason: r})
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "reason %q", r)
	}
	_, err := cancel.New(cancel.Config{Seats: e.seats})
	assert.Error(t, err)
	_, err = cancel.New(cancel.Config{Store: e.store})
	assert.Error(t, err)
	_, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, PlaceTimeout: -time.Second})
	assert.ErrorContains(t, err, "PlaceTimeout")
}

func TestSellFailureIsNotAnError(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	e.seats.Fail = func(op string) error {
		if op == "Sell" {
			return errors.New("redis down")
		}
		return nil
	}
	res, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p1"))
	require.NoError(t, err, "the payment is recorded; Redis is repaired later")
	assert.True(t, res.Changed)
	assert.Equal(t, 1, e.ev.Count(expiry.KindSellFailed))
}

// I9: a provider repeats a callback that was answered with an error; the
// refund hook must run once per payment, not once per callback.
func TestDiscrepancyHookOncePerPayment(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", -time.Second)
	ok, _, err := e.svc.Timeout(context.Background(), "o1")
	require.NoError(t, err)
	require.True(t, ok)
	for i := 0; i < 3; i++ {
		_, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p1"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	}
	assert.Len(t, e.hooked(), 1, "the hook runs once for one payment repeated three times")
	assert.Equal(t, 1, e.ev.Count(expiry.KindDiscrepancy), "counted once per payment")
}

// A second payment for a paid order (the buyer paid twice) is a discrepancy
// of its own; the first payment stands.
func TestSecondPaymentIsADiscrepancy(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	_, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p1"))
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		res, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p2"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, "p1", res.PaymentID, "the first payment paid the order")
	}
	assert.Equal(t, []cancel.Discrepancy{{PaymentID: "p2", OrderNo: "o1", UserID: "u1", Status: expiry.StatusPaid}}, e.hooked())
}

// I9 across failures: a hook that fails is not settled; a retry after the
// lease calls it again, and once it succeeded never again.
func TestFailedHookIsRetried(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	var mu sync.Mutex
	calls, fail := 0, true
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, DiscrepancyLease: time.Nanosecond,
		OnDiscrepancy: func(context.Context, cancel.Discrepancy) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if fail {
				return errors.New("provider down")
			}
			return nil
		}})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a"}, ExpireAt: time.Now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	_, _, err = svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	_, err = svc.Pay(ctx, pay("o1", "u1", "p1"))
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	hooked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	// The lease is a nanosecond, but the store's clock counts milliseconds:
	// retry until the failing hook has been tried again.
	require.Eventually(t, func() bool {
		n, err := svc.RetryDiscrepancies(ctx, 10)
		require.NoError(t, err)
		require.Zero(t, n, "still failing")
		return hooked() == 2
	}, 5*time.Second, time.Millisecond)
	mu.Lock()
	fail = false
	mu.Unlock()
	require.Eventually(t, func() bool {
		n, err := svc.RetryDiscrepancies(ctx, 10)
		return err == nil && n == 1
	}, 5*time.Second, time.Millisecond)
	n, err := svc.RetryDiscrepancies(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "settled: never called again")
	_, err = svc.Pay(ctx, pay("o1", "u1", "p1"))
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 3, calls, "the first try, the failed retry, the successful one; the repeated callback adds none")
}

// The placing sequence owned by the library: a failed insert gives the seats
// back; an order number placed again (a retry, a double submit) never frees
// the live order's seats (I2, I8); an unknown commit keeps them.
func TestPlace(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	live := e.place(t, "o1", "u1", time.Hour)
	insert := e.store.Place

	again := live // a retry after an unknown commit: same seats
	err := e.svc.Place(ctx, again, insert)
	assert.ErrorIs(t, err, cancel.ErrOrderExists)
	other := cancel.Placement{OrderNo: "o1", UserID: "u2", ShowID: "s", Seats: []string{"x1"}, ExpireAt: live.ExpireAt}
	err = e.svc.Place(ctx, other, insert) // the same number, other seats
	assert.ErrorIs(t, err, cancel.ErrOrderExists)
	// Two submits racing past the existence check: the loser's insert finds
	// the number taken and releases its own seat only.
	racing := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"x2"}, ExpireAt: live.ExpireAt}
	late, err := cancel.New(cancel.Config{Store: blind{e.store}, Seats: e.seats})
	require.NoError(t, err)
	err = late.Place(ctx, racing, insert)
	assert.ErrorIs(t, err, cancel.ErrOrderExists)
	show, _ := e.seats.Show(ctx, "s")
	for _, s := range live.Seats {
		assert.Equal(t, "o1", show[s].OrderNo, "the live order keeps its seats")
	}
	assert.NotContains(t, show, "x1", "the failed placement's seat is free again")
	assert.NotContains(t, show, "x2", "the racing placement's seat is free again")
	for user, want := range map[string]int{"u1": 2, "u2": 0} {
		n, _ := e.seats.Held(ctx, "s", user)
		assert.Equal(t, want, n, "I8 for %s", user)
	}

	unknown := cancel.Placement{OrderNo: "o2", UserID: "u1", ShowID: "s", Seats: []string{"y1"}, ExpireAt: live.ExpireAt}
	err = e.svc.Place(ctx, unknown, func(ctx context.Context, unknown cancel.Placement) error {
		return fmt.Errorf("%w: connection reset", expiry.ErrCommitUnknown)
	})
	assert.ErrorIs(t, err, expiry.ErrCommitUnknown)
	show, _ = e.seats.Show(ctx, "s")
	assert.Equal(t, "o2", show["y1"].OrderNo, "the order may exist: its seat stays locked")

	dup := cancel.Placement{OrderNo: "o3", UserID: "u1", ShowID: "s", Seats: []string{"z1", "z1"}, ExpireAt: live.ExpireAt}
	err = e.svc.Place(ctx, dup, insert)
	assert.ErrorIs(t, err, expiry.ErrInvalidID, "a seat listed twice")

	var seen time.Duration
	slow := cancel.Placement{OrderNo: "o4", UserID: "u1", ShowID: "s", Seats: []string{"w1"}, ExpireAt: live.ExpireAt}
	err = e.svc.Place(ctx, slow, func(ctx context.Context, slow cancel.Placement) error {
		d, ok := ctx.Deadline()
		require.True(t, ok, "the host's transaction is bounded")
		seen = time.Until(d)
		return errors.New("rolled back")
	})
	assert.Error(t, err)
	assert.LessOrEqual(t, seen, cancel.PlaceTimeoutDefault)
	show, _ = e.seats.Show(ctx, "s")
	assert.NotContains(t, show, "w1")
}

// blind is an order store whose reads miss every order, as a read does that
// ran before a concurrent placement of the same number committed.
type blind struct{ *memstore.Store }

func (blind) Order(_ context.Context, no string) (expiry.Order, error) {
	return expiry.Order{}, fmt.Errorf("blind: %s: %w", no, expiry.ErrNotFound)
}

// One order may carry at most cancel.MaxSeats seats: a seat-store script
// runs atomically, and an unbounded one would block its Redis shard.
func TestSeatsPerOrderAreBounded(t *testing.T) {
	e := newEnv(t)
	seats := make([]string, cancel.MaxSeats+1)
	for i := range seats {
		seats[i] = fmt.Sprintf("s%d", i)
	}
	p := cancel.Placement{OrderNo: "big", UserID: "u1", ShowID: "s", Seats: seats, ExpireAt: time.Now().Add(time.Hour)}
	err := e.svc.Place(context.Background(), p, func(_ context.Context, p cancel.Placement) error {
		t.Fatal("an order over the bound reached the store")
		return nil
	})
	assert.ErrorIs(t, err, expiry.ErrInvalidID)
	_, err = e.seats.Release(context.Background(), p.Hold())
	assert.ErrorIs(t, err, expiry.ErrInvalidID, "the seat store refuses it too")
	p.Seats = seats[:cancel.MaxSeats]
	require.NoError(t, e.svc.Place(context.Background(), p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
}

// The seat store's refund record is a second guard beside SQL's: while the
// seat store cannot answer, SQL decides alone, as without it. A payment is
// honoured, and a refund made (once), during the outage; the refund's mark
// is simply missing afterwards.
func TestRefundRecordUnreachableSQLDecides(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	e.place(t, "o2", "u1", time.Hour)
	_, err := e.svc.UserCancel(ctx, "o2", "u1")
	require.NoError(t, err)
	e.seats.Fail = func(op string) error {
		if op == "Refunded" || op == "MarkRefunded" || op == "SeatStates" {
			return errors.New("redis down")
		}
		return nil
	}
	res, err := e.svc.Pay(ctx, pay("o1", "u1", "p1"))
	require.NoError(t, err)
	assert.True(t, res.Changed, "honoured: SQL decides")
	for i := 0; i < 2; i++ {
		_, err = e.svc.Pay(ctx, pay("o2", "u1", "p2"))
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	}
	assert.Len(t, e.hooked(), 1, "refunded once: SQL's record keeps the repeat from the hook")
	assert.Zero(t, e.ev.Count(expiry.KindDiverged))
	e.seats.Fail = nil
	refunded, err := e.seats.Refunded(ctx, "p2")
	require.NoError(t, err)
	assert.False(t, refunded, "the mark failed; nothing else depends on it")
}

// Placing is one call: Place schedules the order's expiry message (and its
// warning) through Config.Scheduler once the host's insert returned nil, and
// sends nothing for an order that did not commit (I6). After an unknown
// commit the seats stay locked and a message goes out only for an order
// the store shows committed; for any other the reconciler decides.
func TestPlaceSchedulesAfterCommit(t *testing.T) {
	ctx := context.Background()
	sent := &capture{}
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent, WarnBefore: time.Minute})
	require.NoError(t, err)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
	require.NoError(t, err)
	at := time.Now().Add(time.Hour)
	pl := func(no string) cancel.Placement {
		return cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no + "a"}, ExpireAt: at}
	}
	firsts := func() map[string]int { // expiry messages (not warnings) per order
		n := map[string]int{}
		for _, m := range sent.take() {
			assert.Equal(t, 1, m.m.Hop)
			if !m.m.Warning {
				n[m.m.OrderNo]++
			}
		}
		return n
	}
	locked := func(seat string) bool {
		show, err := seats.Show(ctx, "s")
		require.NoError(t, err)
		_, ok := show[seat]
		return ok
	}

	require.NoError(t, svc.Place(ctx, pl("ok"), store.Place))
	msgs := sent.take()
	require.Len(t, msgs, 2, "the warning and the expiry message, after the insert")
	assert.True(t, msgs[0].m.Warning)
	assert.Equal(t, "ok", msgs[1].m.OrderNo)
	assert.InDelta(t, time.Hour, msgs[1].delay, float64(time.Minute))

	err = svc.Place(ctx, pl("rolledback"), func(ctx context.Context, p cancel.Placement) error {
		if err := store.Place(ctx, p); err != nil {
			return err
		}
		return errors.New("the host's own row failed") // a rollback, as far as the order goes
	})
	require.Error(t, err)
	assert.Empty(t, firsts(), "I6: nothing is sent for an order that did not commit")
	assert.False(t, locked("rolledbacka"), "its seat is free again")

	err = svc.Place(ctx, pl("lost"), func(context.Context, cancel.Placement) error {
		return fmt.Errorf("%w: connection reset", expiry.ErrCommitUnknown)
	})
	assert.ErrorIs(t, err, expiry.ErrCommitUnknown)
	assert.Empty(t, firsts(), "no order in the store: no message, the reconciler decides")
	assert.True(t, locked("losta"), "the order may yet appear: its seat stays locked")

	err = svc.Place(ctx, pl("committed"), func(ctx context.Context, p cancel.Placement) error {
		if err := store.Place(ctx, p); err != nil {
			return err
		}
		return fmt.Errorf("%w: connection reset after the server committed", expiry.ErrCommitUnknown)
	})
	assert.ErrorIs(t, err, expiry.ErrCommitUnknown, "the host still learns that its commit was not confirmed")
	assert.Equal(t, map[string]int{"committed": 1}, firsts(), "the order committed: it gets its message")
	assert.True(t, locked("committeda"))
}
