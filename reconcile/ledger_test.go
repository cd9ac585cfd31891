package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// pausedSeats holds its first Release until the test lets it go: a lock
// pass that judged a lock and then paused (a GC pause, a slow network).
type pausedSeats struct {
	*memstore.Seats
	reached, proceed chan struct{}
	first            bool
	// after observes the seat store right after the paused release.
	after func()
}

func (p *pausedSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	if !p.first {
		p.first = true
		close(p.reached)
		<-p.proceed
		defer p.after()
	}
	return p.Seats.Release(ctx, h)
}

// A lock pass reads o1 as cancelled long ago and pauses; another pass frees
// the stale lock; a late payment reinstates o1 and locks a1 again under the
// same number, and its sale fails; the first pass resumes. The paid order's
// seat must stay its own: a release acts only on the lock it judged (I15).
func TestLockPassNeverFreesANewerLockOfTheSameOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	svc, err := cancel.New(cancel.Config{Store: e.store, Seats: e.seats, AcceptLatePayments: true,
		OnDiscrepancy: func(context.Context, cancel.Discrepancy) error { return nil }})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a1"}, ExpireAt: e.clock().Add(time.Minute)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
	e.advance(time.Minute)
	e.seats.Fail = func(op string) error {
		if op == "Release" {
			return assert.AnError
		}
		return nil
	}
	cancelled, _, err := svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	require.True(t, cancelled)
	e.seats.Fail = nil
	e.advance(time.Hour) // cancelled long ago: past Settle and Grace

	var afterPause cancel.SeatState
	paused := &pausedSeats{Seats: e.seats, reached: make(chan struct{}), proceed: make(chan struct{})}
	paused.after = func() {
		st, err := e.seats.Show(ctx, "s")
		assert.NoError(t, err)
		afterPause = st["a1"]
	}
	a, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: paused, Service: svc})
	require.NoError(t, err)
	b, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := a.Round(ctx); done <- err }()
	<-paused.reached
	_, err = b.Round(ctx)
	require.NoError(t, err)
	st, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, st["a1"].OrderNo, "the other pass freed the stale lock")

	e.seats.Fail = func(op string) error {
		if op == "Sell" {
			return assert.AnError
		}
		return nil
	}
	res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "o1", UserID: "u1", PaymentID: "pay-1"})
	require.NoError(t, err)
	require.True(t, res.Changed, "the late payment reinstated o1")
	e.seats.Fail = nil
	close(paused.proceed)
	require.NoError(t, <-done)

	o, err := e.store.Order(ctx, "o1")
	require.NoError(t, err)
	require.Equal(t, expiry.StatusPaid, o.Status)
	assert.Equal(t, "o1", afterPause.OrderNo, "I15: the paid order's seat was freed (for anyone to take) by a pass that judged its older lock")
	st, err = e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, "o1", st["a1"].OrderNo, "I15: the paid order's seat was freed by a pass that judged its older lock")
	held, err := e.seats.Held(ctx, "s", "u1")
	require.NoError(t, err)
	assert.Equal(t, 1, held, "I8")
}
