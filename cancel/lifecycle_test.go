package cancel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// lateEnv is env with the late-payment policy on, the warning hook, a fake
// clock shared by both stores and a sender that keeps what it was sent.
type lateEnv struct {
	*env
	clock  *expirytest.FakeClock
	sent   *capture
	warned map[string]int
	h      *expiry.Handler
	sched  *expiry.Scheduler
}

type capture struct {
	mu   sync.Mutex
	msgs []sentMsg
}

type sentMsg struct {
	m     expiry.Message
	delay time.Duration
}

func (c *capture) Send(_ context.Context, m expiry.Message, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, sentMsg{m, d})
	return nil
}

func (c *capture) take() []sentMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.msgs
	c.msgs = nil
	return out
}

func newLateEnv(t *testing.T, accept bool, skew time.Duration) *lateEnv {
	clock := expirytest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	e := &lateEnv{env: &env{store: memstore.NewStore(clock.Now), seats: memstore.NewSeats(clock.Now), ev: &expirytest.Recorder{}},
		clock: clock, sent: &capture{}, warned: map[string]int{}}
	var err error
	e.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: e.sent, Runtime: expiry.Runtime{Clock: skewed{clock, skew}}, WarnBefore: 2 * time.Minute})
	require.NoError(t, err)
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev},
		AcceptLatePayments: accept, Scheduler: e.sched,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.disc = append(e.disc, d)
			return nil
		},
		OnWarning: func(_ context.Context, o expiry.Order) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.warned[o.No]++
			return nil
		}})
	require.NoError(t, err)
	e.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: e.svc, Warner: e.svc, Sender: e.sent})
	require.NoError(t, err)
	return e
}

type skewed struct {
	expiry.Clock
	skew time.Duration
}

func (s skewed) Now() time.Time { return s.Clock.Now().Add(s.skew) }

func (e *lateEnv) placeAt(t *testing.T, no, user string, ttl time.Duration, seats ...string) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "s", Seats: seats, ExpireAt: e.clock.Now().Add(ttl)}
	require.NoError(t, e.svc.Place(context.Background(), p, e.store.Place)) // Place schedules it (Config.Scheduler)
	return p
}

func (e *lateEnv) seat(t *testing.T, seat string) cancel.SeatState {
	st, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	return st[seat]
}

func (e *lateEnv) held(t *testing.T, user string) int {
	n, err := e.seats.Held(context.Background(), "s", user)
	require.NoError(t, err)
	return n
}

func (e *lateEnv) warnings(no string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.warned[no]
}

// The late payment repeated 3×: one reinstatement, two repeats, no refund.
func TestLatePaymentReinstates(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1", "a2")
	e.clock.Advance(time.Minute)
	cancelled, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	require.True(t, cancelled)
	require.Zero(t, e.held(t, "u1"))
	for i := 0; i < 3; i++ {
		res, err := e.svc.Pay(ctx, pay("o1", "u1", "late-1"))
		require.NoError(t, err, "callback %d", i+1)
		assert.Equal(t, i == 0, res.Changed, "callback %d", i+1)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
	}
	assert.Equal(t, 1, e.ev.Count(expiry.KindReinstated))
	assert.Zero(t, e.ev.Count(expiry.KindDiscrepancy))
	assert.Empty(t, e.hooked(), "nothing to refund")
	for _, s := range []string{"a1", "a2"} {
		st := e.seat(t, s)
		assert.Equal(t, cancel.SeatSold, st.Status, "seat %s sold", s)
		assert.Equal(t, "o1", st.OrderNo)
	}
	assert.Equal(t, 2, e.held(t, "u1"), "I8: the paid order's seats count again")
	o, err := e.store.Order(ctx, "o1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPaid, o.Status)
	// A second payment for the reinstated order is a discrepancy.
	_, err = e.svc.Pay(ctx, pay("o1", "u1", "late-2"))
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.Len(t, e.hooked(), 1)
}

func TestLatePaymentNeverAfterUserCancelOrExpireNow(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.placeAt(t, "o2", "u1", time.Minute, "a2")
	_, err := e.svc.UserCancel(ctx, "o1", "u1")
	require.NoError(t, err)
	res, err := e.svc.ExpireNow(ctx, "o2")
	require.NoError(t, err)
	require.True(t, res.Changed)
	assert.Equal(t, 1, e.ev.Count(expiry.KindDeadlineChanged), "expired_now")
	for _, no := range []string{"o1", "o2"} {
		for i := 0; i < 3; i++ {
			_, err := e.svc.Pay(ctx, pay(no, "u1", "p-"+no))
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}
		assert.Empty(t, e.seat(t, "a1").OrderNo+e.seat(t, "a2").OrderNo, "no seat taken back")
	}
	assert.Len(t, e.hooked(), 2, "I9: refunded once per payment id")
	assert.Zero(t, e.ev.Count(expiry.KindReinstated))
}

func TestLatePaymentPolicyOffRefunds(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, false, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.clock.Advance(time.Minute)
	_, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	_, err = e.svc.Pay(ctx, pay("o1", "u1", "p1"))
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.Len(t, e.hooked(), 1)
}

// A seat re-sold to another order: the late payment is refunded (once per
// payment id, however often it is repeated) and the other order keeps it.
func TestLatePaymentSeatResold(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1", "a2")
	e.clock.Advance(time.Minute)
	_, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	e.placeAt(t, "o2", "u2", time.Hour, "a2")
	for i := 0; i < 3; i++ {
		_, err = e.svc.Pay(ctx, pay("o1", "u1", "late-1"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	}
	assert.Len(t, e.hooked(), 1, "I9")
	assert.Equal(t, "o2", e.seat(t, "a2").OrderNo, "never taken from the other order")
	assert.Empty(t, e.seat(t, "a1").OrderNo, "a1 given back, not left locked")
	assert.Zero(t, e.held(t, "u1"), "I8")
	assert.Equal(t, 1, e.held(t, "u2"))
	o, err := e.store.Order(ctx, "o1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
}

// Two late payments with different ids racing, each repeated: one
// reinstates, the other is refunded once, the repeats are repeats.
func TestLatePaymentRace(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		e := newLateEnv(t, true, 0)
		e.placeAt(t, "o1", "u1", time.Minute, "a1", "a2")
		e.clock.Advance(time.Minute)
		_, _, err := e.svc.Timeout(ctx, "o1")
		require.NoError(t, err)
		var changed atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.svc.Pay(ctx, pay("o1", "u1", []string{"pa", "pb"}[i%2]))
				if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
					t.Error(err)
				}
				if res.Changed {
					changed.Add(1)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int32(1), changed.Load())
		require.Len(t, e.hooked(), 1, "the losing payment id is refunded once")
		assert.Equal(t, 2, e.held(t, "u1"))
	}
}

// A late payment racing the seat's sale to another order: never both.
func TestLatePaymentRacingResale(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 30; round++ {
		e := newLateEnv(t, true, 0)
		e.placeAt(t, "o1", "u1", time.Minute, "a1")
		e.clock.Advance(time.Minute)
		_, _, err := e.svc.Timeout(ctx, "o1")
		require.NoError(t, err)
		var wg sync.WaitGroup
		var placeErr error
		var res cancel.Result
		wg.Add(2)
		go func() {
			defer wg.Done()
			p := cancel.Placement{OrderNo: "o2", UserID: "u2", ShowID: "s", Seats: []string{"a1"}, ExpireAt: e.clock.Now().Add(time.Hour)}
			placeErr = e.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) })
		}()
		go func() { defer wg.Done(); res, _ = e.svc.Pay(ctx, pay("o1", "u1", "late")) }()
		wg.Wait()
		st := e.seat(t, "a1")
		if res.Changed {
			assert.ErrorIs(t, placeErr, cancel.ErrSeatUnavailable)
			assert.Equal(t, "o1", st.OrderNo)
			assert.Equal(t, cancel.SeatSold, st.Status)
		} else {
			require.NoError(t, placeErr)
			assert.Equal(t, "o2", st.OrderNo)
			assert.Len(t, e.hooked(), 1)
		}
		assert.Equal(t, 1, e.held(t, "u1")+e.held(t, "u2"), "I8: one seat, one holder")
	}
}

// A store without the optional interfaces: a late payment is refunded, the
// deadline calls say ErrUnsupported.
func TestLateUnsupportedStore(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	var refunds int
	svc, err := cancel.New(cancel.Config{Store: plainStore{store}, Seats: seats, AcceptLatePayments: true,
		OnDiscrepancy: func(context.Context, cancel.Discrepancy) error { refunds++; return nil }})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a1"}, ExpireAt: time.Now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	_, _, err = svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	_, err = svc.Pay(ctx, pay("o1", "u1", "p1"))
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.Equal(t, 1, refunds)
	_, err = svc.Extend(ctx, "o1", "", time.Minute)
	assert.ErrorIs(t, err, cancel.ErrUnsupported)
	_, err = svc.Warn(ctx, "o1", time.Minute)
	assert.ErrorIs(t, err, cancel.ErrUnsupported)
}

// plainStore is a store that cannot do the optional transitions: it
// answers them with cancel.ErrUnsupported, as a host's own store may.
type plainStore struct{ *memstore.Store }

func (plainStore) ReinstateCancelled(context.Context, cancel.Payment, func(context.Context, cancel.Hold, int) (string, error)) (cancel.Result, error) {
	return cancel.Result{}, cancel.ErrUnsupported
}

func (plainStore) SetDeadline(context.Context, cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	return cancel.DeadlineResult{}, cancel.ErrUnsupported
}

func (plainStore) MarkWarned(context.Context, string, time.Duration) (expiry.WarnResult, error) {
	return expiry.WarnResult{}, cancel.ErrUnsupported
}

// The message path follows an extended deadline without a new message: the
// message at the old deadline re-arms, the warning too; a shortened one gets
// a new message.
func TestExtendFollowsMessagePath(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", 10*time.Minute, "a1")
	msgs := e.sent.take()
	require.Len(t, msgs, 2, "the warning and the expiry message")
	warning, expiryMsg := msgs[0], msgs[1]
	require.True(t, warning.m.Warning)
	assert.Equal(t, 8*time.Minute, warning.delay)
	assert.Equal(t, 10*time.Minute, expiryMsg.delay)

	e.clock.Advance(5 * time.Minute)
	for i := 0; i < 3; i++ { // repeated by a double click: at least 10 minutes from now
		_, err := e.svc.Extend(ctx, "o1", "u1", 10*time.Minute)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, e.ev.Count(expiry.KindDeadlineChanged))
	assert.Empty(t, e.sent.take(), "an extension sends nothing")
	_, err := e.svc.Extend(ctx, "o1", "u2", time.Hour)
	assert.ErrorIs(t, err, cancel.ErrNotOwner)

	e.clock.Advance(3 * time.Minute) // the warning's old time
	out, err := e.h.Handle(ctx, warning.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeRearmed, out, "the warning follows the extension")
	re := e.sent.take()
	require.Len(t, re, 1)
	assert.Equal(t, 5*time.Minute, re[0].delay, "15m deadline - 2m lead - 8m now")
	assert.Zero(t, e.warnings("o1"))

	e.clock.Advance(2 * time.Minute) // the expiry message's old time
	out, err = e.h.Handle(ctx, expiryMsg.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeRearmed, out, "I4: not cancelled at the old deadline")
	require.Len(t, e.sent.take(), 1)

	e.clock.Advance(3 * time.Minute)
	out, err = e.h.Handle(ctx, re[0].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeWarned, out)
	assert.Equal(t, 1, e.warnings("o1"))
	for i := 0; i < 3; i++ { // redelivered
		out, err = e.h.Handle(ctx, re[0].m)
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeFinal, out)
	}
	assert.Equal(t, 1, e.warnings("o1"), "a redelivered warning never fires twice")
	assert.Equal(t, 1, e.ev.Count(expiry.KindWarned))

	// Shortened: a new warning (at once: less than the lead is left; this
	// order was warned already, so it ends) and a new expiry message, due
	// at the new deadline.
	res, err := e.svc.Shorten(ctx, "o1", "", 30*time.Second)
	require.NoError(t, err)
	require.True(t, res.Changed)
	short := e.sent.take()
	require.Len(t, short, 2)
	assert.True(t, short[0].m.Warning)
	assert.Zero(t, short[0].delay)
	out, err = e.h.Handle(ctx, short[0].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeFinal, out, "warned once already")
	assert.Equal(t, 1, e.warnings("o1"))
	assert.Equal(t, 30*time.Second, short[1].delay)
	e.clock.Advance(30 * time.Second)
	out, err = e.h.Handle(ctx, short[1].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeCancelled, out)
	assert.Equal(t, 2, e.ev.Count(expiry.KindDeadlineChanged))
}

func TestExtendDueOrderIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.clock.Advance(time.Minute)
	res, err := e.svc.Extend(ctx, "o1", "", time.Hour)
	require.NoError(t, err)
	assert.False(t, res.Changed, "a due order is the timeout's")
	cancelled, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	assert.True(t, cancelled)
	_, err = e.svc.Extend(ctx, "o1", "", 0)
	assert.ErrorIs(t, err, expiry.ErrInvalidID)
}

// A warning redelivered after the payment never fires; one arriving early
// (the placing host's clock runs 10 minutes ahead) re-arms by the store's
// clock.
func TestWarningAfterPaymentAndSkewedHost(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 10*time.Minute)
	e.placeAt(t, "o1", "u1", 20*time.Minute, "a1")
	msgs := e.sent.take()
	require.Len(t, msgs, 2)
	warning := msgs[0]
	assert.Equal(t, 8*time.Minute, warning.delay, "the skewed host thinks 10 minutes have passed")
	e.clock.Advance(warning.delay)
	out, err := e.h.Handle(ctx, warning.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeRearmed, out, "early by the store's clock")
	re := e.sent.take()
	require.Len(t, re, 1)
	assert.Equal(t, 10*time.Minute, re[0].delay)

	_, err = e.svc.Pay(ctx, pay("o1", "u1", "p1"))
	require.NoError(t, err)
	e.clock.Advance(re[0].delay)
	out, err = e.h.Handle(ctx, re[0].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeFinal, out)
	assert.Zero(t, e.warnings("o1"), "never after the payment")
}
