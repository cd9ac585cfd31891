package cancel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// failingHook fails while fail is set; its error wraps ErrDiscrepancy on
// purpose, so that a Service that branched on it first would refund.
func failingHook(fail *atomic.Bool) cancel.Hook {
	return func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if fail.Load() {
			return fmt.Errorf("coupon service refused order %s: %w", r.Order.No, cancel.ErrDiscrepancy)
		}
		return nil
	}
}

// seatsOf is the seat store's view of p's seats: seat → status.
func seatsOf(t *testing.T, e *env, p cancel.Placement) map[string]cancel.SeatStatus {
	st, err := e.seats.Show(context.Background(), p.ShowID)
	require.NoError(t, err)
	out := map[string]cancel.SeatStatus{}
	for _, seat := range p.Seats {
		if s, ok := st[seat]; ok && s.OrderNo == p.OrderNo {
			out[seat] = s.Status
		}
	}
	return out
}

func locked(p cancel.Placement) map[string]cancel.SeatStatus {
	out := map[string]cancel.SeatStatus{}
	for _, seat := range p.Seats {
		out[seat] = cancel.SeatLocked
	}
	return out
}

// A failed hook is the Service's error: no release, no sale, no
// discrepancy, no refund; the next attempt, the hook succeeding, decides.
func TestServiceHookFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var fail atomic.Bool
	fail.Store(true)
	e.store.SetHook(failingHook(&fail))
	due := e.place(t, "o1", "u1", -time.Second)
	mine := e.place(t, "o2", "u2", time.Hour)
	paid := e.place(t, "o3", "u3", time.Hour)

	cancelled, _, err := e.svc.Timeout(ctx, due.OrderNo)
	require.ErrorIs(t, err, cancel.ErrHook)
	assert.False(t, cancelled)
	_, err = e.svc.UserCancel(ctx, mine.OrderNo, "u2")
	require.ErrorIs(t, err, cancel.ErrHook)
	payment := pay(paid.OrderNo, "u3", "pay-1")
	_, err = e.svc.Pay(ctx, payment)
	require.ErrorIs(t, err, cancel.ErrHook)

	for _, p := range []cancel.Placement{due, mine, paid} {
		o, err := e.store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, p.OrderNo)
		assert.Equal(t, locked(p), seatsOf(t, e, p), "%s: its seats still locked by it, none released or sold", p.OrderNo)
	}
	held, err := e.seats.Held(ctx, "s", "u3")
	require.NoError(t, err)
	assert.Equal(t, 2, held, "the purchase-limit counter untouched")
	assert.Empty(t, e.hooked(), "nothing refunded")
	claimed, err := e.store.ClaimDiscrepancies(ctx, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, claimed, "no discrepancy recorded")
	assert.Zero(t, e.ev.Count(expiry.KindCancelled)+e.ev.Count(expiry.KindPaid)+e.ev.Count(expiry.KindDiscrepancy))

	fail.Store(false)
	cancelled, _, err = e.svc.Timeout(ctx, due.OrderNo)
	require.NoError(t, err)
	assert.True(t, cancelled)
	assert.Empty(t, seatsOf(t, e, due), "released once cancelled")
	res, err := e.svc.UserCancel(ctx, mine.OrderNo, "u2")
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, 2, res.Released)
	res, err = e.svc.Pay(ctx, payment) // the provider repeats its callback
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, map[string]cancel.SeatStatus{paid.Seats[0]: cancel.SeatSold, paid.Seats[1]: cancel.SeatSold}, seatsOf(t, e, paid))
	res, err = e.svc.Pay(ctx, payment)
	require.NoError(t, err, "repeated again: the same payment, paid once")
	assert.False(t, res.Changed)
	assert.Empty(t, e.hooked(), "never refunded")
}

// The Handler, given the hook's failure through Service.Timeout, leaves the
// message to be redelivered (an error, not done), and cancels on the
// redelivery once the hook succeeds.
func TestHandlerRetriesAFailedHook(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var fail atomic.Bool
	fail.Store(true)
	e.store.SetHook(failingHook(&fail))
	p := e.place(t, "o1", "u1", -time.Second)
	sender := &countingSender{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: e.svc, Sender: sender})
	require.NoError(t, err)

	out, err := h.Handle(ctx, expiry.Message{OrderNo: p.OrderNo})
	require.ErrorIs(t, err, cancel.ErrHook, "an error: the transport redelivers the message")
	assert.Equal(t, expiry.OutcomeFailed, out)
	assert.Zero(t, sender.n.Load(), "not re-armed as if it were not due")

	fail.Store(false)
	out, err = h.Handle(ctx, expiry.Message{OrderNo: p.OrderNo})
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeCancelled, out)
	assert.Empty(t, seatsOf(t, e, p))
}

type countingSender struct{ n atomic.Int32 }

func (s *countingSender) Send(context.Context, expiry.Message, time.Duration) error {
	s.n.Add(1)
	return nil
}
