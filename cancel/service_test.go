package cancel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/fake"
)

type events struct {
	mu sync.Mutex
	k  map[expiry.Kind]int
}

func (e *events) Observe(_ context.Context, ev expiry.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.k == nil {
		e.k = map[expiry.Kind]int{}
	}
	e.k[ev.Kind]++
}

func (e *events) n(k expiry.Kind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.k[k]
}

type env struct {
	store *fake.Store
	seats *fake.Seats
	svc   *cancel.Service
	ev    *events
	disc  []cancel.Discrepancy
}

func newEnv(t *testing.T) *env {
	e := &env{store: fake.NewStore(nil), seats: fake.NewSeats(nil), ev: &events{}}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Seller: e.seats, Observer: e.ev,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) { e.disc = append(e.disc, d) }})
	require.NoError(t, err)
	return e
}

func (e *env) place(t *testing.T, no, user string, ttl time.Duration) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "s", Seats: []string{no + "a", no + "b"}, ExpireAt: time.Now().Add(ttl)}
	_, err := e.seats.Lock(context.Background(), p.Hold(), 0)
	require.NoError(t, err)
	require.NoError(t, e.store.Place(context.Background(), p))
	return p
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
	assert.Equal(t, 1, e.ev.n(expiry.KindCancelled))
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
	assert.Equal(t, 1, e.ev.n(expiry.KindReleaseFailed))
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
	_, err = e.svc.Pay(context.Background(), "o1", "mallory")
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
	res, err := e.svc.Pay(context.Background(), "o1", "u1")
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.False(t, res.Changed)
	assert.Equal(t, []cancel.Discrepancy{{OrderNo: "o1", UserID: "u1", Status: expiry.StatusCancelled}}, e.disc)
	assert.Equal(t, 1, e.ev.n(expiry.KindDiscrepancy))
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Empty(t, show, "no seat sold to a cancelled order")
}

func TestPayTwiceIsQuiet(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", "u1", time.Hour)
	res, err := e.svc.Pay(context.Background(), "o1", "")
	require.NoError(t, err)
	assert.True(t, res.Changed)
	res, err = e.svc.Pay(context.Background(), "o1", "")
	require.NoError(t, err, "a repeated callback is not a discrepancy")
	assert.False(t, res.Changed)
	assert.Empty(t, e.disc)
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Equal(t, expiry.StatusPaid, show["o1a"].Status)
	held, _ := e.seats.Held(context.Background(), "s", "u1")
	assert.Equal(t, 2, held, "I8: paid seats still count")
}

func TestInvalidInput(t *testing.T) {
	e := newEnv(t)
	for _, no := range []string{"", "a{b}", "x'--", "\x00"} {
		_, err := e.svc.Cancel(context.Background(), cancel.Request{OrderNo: no, Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		_, err = e.svc.Pay(context.Background(), no, "")
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
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
	res, err := e.svc.Pay(context.Background(), "o1", "u1")
	require.NoError(t, err, "the payment is recorded; Redis is repaired later")
	assert.True(t, res.Changed)
	assert.Equal(t, 1, e.ev.n(expiry.KindSellFailed))
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
		_, err := e.svc.Pay(context.Background(), "o1", "u1")
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	}
	assert.Len(t, e.disc, 1, "the hook runs once for one payment repeated three times")
	assert.Equal(t, 1, e.ev.n(expiry.KindDiscrepancy), "counted once per payment")
}
