package cancel_test

// Outcome tests of the second outside review: each judges who paid, who was
// refunded and who holds which seat, never the library's own rule for a step.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// honoured reports whether paymentID paid order no (the order is paid and a
// repeat of the payment is taken as a repeat, not a second payment).
func (e *lateEnv) honoured(t *testing.T, no, paymentID string) bool {
	t.Helper()
	res, err := e.store.PayPending(context.Background(), pay(no, "", paymentID))
	require.NoError(t, err)
	return res.Order.Status == expiry.StatusPaid && res.PaymentID == paymentID
}

func (e *lateEnv) refunds(paymentID string) int {
	n := 0
	for _, d := range e.hooked() {
		if d.PaymentID == paymentID {
			n++
		}
	}
	return n
}

// assertFate checks I14 for paymentID: honoured or refunded once, not both.
func (e *lateEnv) assertFate(t *testing.T, no, paymentID string) {
	t.Helper()
	h, r := e.honoured(t, no, paymentID), e.refunds(paymentID)
	assert.False(t, h && r > 0, "I14: payment %s both honoured and refunded %d×", paymentID, r)
	assert.True(t, h || r == 1, "I14: payment %s neither honoured nor refunded once (%d)", paymentID, r)
	if !h {
		st := e.seat(t, "a1")
		assert.False(t, st.OrderNo == no && st.Status == cancel.SeatSold, "I15: seat a1 sold to %s, whose payment was refunded", no)
	}
}

// A late payment refused because another order held the seat, repeated by
// the provider after that order was cancelled: the id was refunded, so the
// repeat must not reinstate the order.
func TestRefundedPaymentNeverHonouredByItsRepeat(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.clock.Advance(time.Minute)
	_, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	e.placeAt(t, "o2", "u2", time.Hour, "a1")
	_, err = e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a1 is held by o2")
	require.Equal(t, 1, e.refunds("pay-1"))
	_, err = e.svc.UserCancel(ctx, "o2", "u2")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err = e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "repeat %d of a refunded payment", i+1)
	}
	e.assertFate(t, "o1", "pay-1")
	assert.Zero(t, e.held(t, "u1"), "I8")
}

// One buyer: the timeout's release fails, so the late payment finds a1
// still locked by o1 itself and is refunded; the reconciler frees a1; the
// provider repeats the payment.
func TestRefundedPaymentNeverHonouredAfterTheRepair(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.clock.Advance(time.Minute)
	e.seats.Fail = func(op string) error {
		if op == "Release" {
			return assert.AnError
		}
		return nil
	}
	_, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err, "a failed release is left to the reconciler")
	e.seats.Fail = nil
	require.Equal(t, "o1", e.seat(t, "a1").OrderNo, "still locked by o1")
	res, err := e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
	if err == nil && res.Order.Status == expiry.StatusPaid {
		t.Skip("the library honoured pay-1 at once; nothing was refunded, so nothing can flip")
	}
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	// The reconciler's repair of the stale lock, as its lock pass does it.
	_, err = e.seats.Release(ctx, cancel.Hold{ShowID: "s", OrderNo: "o1", UserID: "u1", Seats: []string{"a1"}})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, _ = e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
	}
	e.assertFate(t, "o1", "pay-1")
}

// A buyer who let o1 time out and placed o2 pays o1 late: the purchase
// limit (1 seat) holds whichever path gave the seats, or the payment is
// refunded.
func TestLateReinstatementKeepsThePurchaseLimit(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	const limit = 1
	place := func(no, seat string, ttl time.Duration) {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{seat}, ExpireAt: e.clock.Now().Add(ttl), Limit: limit}
		require.NoError(t, e.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
	}
	place("o1", "a1", time.Minute)
	e.clock.Advance(time.Minute)
	_, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	place("o2", "a2", time.Hour)
	_, err = e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
	held := 0
	for _, no := range []string{"o1", "o2"} {
		o, oerr := e.store.Order(ctx, no)
		require.NoError(t, oerr)
		if o.Status != expiry.StatusCancelled {
			held++
		}
	}
	assert.LessOrEqual(t, held, limit, "I17: u1 holds %d live orders of one seat each", held)
	assert.LessOrEqual(t, e.held(t, "u1"), limit, "I17: the seat store's counter")
	if held <= limit {
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 1, e.refunds("pay-1"), "I14: the refused payment is refunded")
	}
}

// Extend repeated for ever: the deadline never moves past the maximum hold
// from the order's placement, by the store's clock.
func TestExtendNeverPastTheMaximumHold(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	placed := e.clock.Now()
	e.placeAt(t, "o1", "u1", 10*time.Minute, "a1")
	for i := 0; i < 50; i++ {
		e.clock.Advance(9 * time.Minute)
		_, err := e.svc.Extend(ctx, "o1", "u1", 10*time.Minute)
		require.NoError(t, err)
	}
	o, err := e.store.Order(ctx, "o1")
	require.NoError(t, err)
	assert.LessOrEqual(t, o.ExpireAt.Sub(placed), cancel.MaxHoldDefault, "I17: a deadline never moves past the maximum hold")
	cancelled, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	assert.True(t, cancelled, "the held order timed out at the cap (%v after placement)", o.ExpireAt.Sub(placed))
}

// A shortened order is warned before its new deadline: the warning follows
// the deadline as the expiry message does.
func TestShortenedOrderIsWarned(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", 30*time.Minute, "a1")
	pending := e.sent.take()
	res, err := e.svc.Shorten(ctx, "o1", "", 5*time.Minute)
	require.NoError(t, err)
	require.True(t, res.Changed)
	pending = append(pending, e.sent.take()...)
	deadline := res.Order.ExpireAt
	// Deliver every message at its time, in order, until the new deadline
	// (and the re-arms they send).
	start := e.clock.Now()
	for len(pending) > 0 {
		next := 0
		for i, m := range pending {
			if m.delay < pending[next].delay {
				next = i
			}
		}
		m := pending[next]
		pending = append(pending[:next], pending[next+1:]...)
		at := start.Add(m.delay)
		if at.After(deadline) {
			continue
		}
		if at.After(e.clock.Now()) {
			e.clock.Advance(at.Sub(e.clock.Now()))
		}
		_, err := e.h.Handle(ctx, m.m)
		require.NoError(t, err)
		for _, r := range e.sent.take() {
			r.delay += e.clock.Now().Sub(start)
			pending = append(pending, r)
		}
	}
	assert.Equal(t, 1, e.warnings("o1"), "warned once before its new deadline")
}
