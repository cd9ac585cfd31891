package canceltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runLatePayments is the part of RunStore on late payments
// (cancel.Reinstater): reinstated once, never after a user cancel or a
// reconcile, a seat retaken, races, each payment id decided once.
func runLatePayments(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()
	// A late payment after the timeout reinstates the order once; the
	// provider repeating the callback (3×) is a repeat, not a payment.
	t.Run("LateReinstate", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		p := place(t, h, "u1", now.Add(-time.Second), "l2", "l1")
		timeout(t, h, p.OrderNo)
		c := newClaimer()
		late := pay(p.OrderNo, "u1")
		res, err := r.ReinstateCancelled(ctx, late, c.claim)
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, []string{"l1", "l2"}, res.Seats, "the cancelled order's seats, sorted")
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		assert.Equal(t, late.PaymentID, res.PaymentID)
		assert.Equal(t, "u1", res.Order.UserID)
		assert.Equal(t, "show-1", res.Order.ShowID)
		assert.Equal(t, int32(1), c.calls.Load())
		if !h.NoClaims {
			assert.Equal(t, map[string]expiry.Status{"l1": expiry.StatusPaid, "l2": expiry.StatusPaid}, claimsOf(t, h, p.OrderNo), "its claims are back, sold")
		}
		for i := 0; i < 3; i++ {
			again, err := r.ReinstateCancelled(ctx, late, c.claim)
			require.NoError(t, err)
			assert.False(t, again.Changed, "I5: a repeated late callback")
			assert.Equal(t, expiry.StatusPaid, again.Order.Status)
			assert.Equal(t, late.PaymentID, again.PaymentID)
			paid, err := h.Store.PayPending(ctx, late)
			require.NoError(t, err)
			assert.False(t, paid.Changed)
			assert.Equal(t, late.PaymentID, paid.PaymentID, "the reinstating payment is the order's payment")
		}
		assert.Equal(t, int32(1), c.calls.Load(), "the seats are claimed once")
		cres, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.False(t, cres.Changed, "I1: a reinstated order is paid, for good")
		if !h.NoClaims {
			err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"l1"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "a reinstated order's seat is claimed")
		}
		st, err := h.Store.Statuses(ctx, []string{p.OrderNo})
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, st[p.OrderNo].Status)
	})

	t.Run("LateAfterReconcile", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		p := place(t, h, "u1", now.Add(-time.Second))
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
		require.NoError(t, err)
		require.True(t, res.Changed)
		got, err := r.ReinstateCancelled(ctx, pay(p.OrderNo, ""), newClaimer().claim)
		require.NoError(t, err)
		assert.True(t, got.Changed, "the reconciler's cancel is a timeout too")
	})

	// Never after the user's own cancel, nor an operator's expire-now; never
	// an order that is not cancelled.
	t.Run("LateNotAfterUserCancel", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		for _, reason := range []cancel.Reason{cancel.ReasonUser, cancel.ReasonExpireNow, "host-own"} {
			p := place(t, h, "u1", now.Add(-time.Second))
			_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: reason})
			require.NoError(t, err)
			c := newClaimer()
			res, err := r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
			require.NoError(t, err, reason)
			assert.False(t, res.Changed, reason)
			assert.Equal(t, expiry.StatusCancelled, res.Order.Status, reason)
			assert.Empty(t, res.PaymentID)
			assert.Zero(t, c.calls.Load(), "%s: nothing claimed", reason)
			assert.Empty(t, claimsOf(t, h, p.OrderNo))
		}
		pending := place(t, h, "u1", now.Add(time.Hour))
		res, err := r.ReinstateCancelled(ctx, pay(pending.OrderNo, ""), newClaimer().claim)
		require.NoError(t, err)
		assert.False(t, res.Changed)
		assert.Equal(t, expiry.StatusPending, res.Order.Status, "a pending order is paid by PayPending, not reinstated")
		paid := place(t, h, "u1", now.Add(time.Hour))
		first := pay(paid.OrderNo, "")
		_, err = h.Store.PayPending(ctx, first)
		require.NoError(t, err)
		res, err = r.ReinstateCancelled(ctx, pay(paid.OrderNo, ""), newClaimer().claim)
		require.NoError(t, err)
		assert.False(t, res.Changed)
		assert.Equal(t, first.PaymentID, res.PaymentID)

		_, err = r.ReinstateCancelled(ctx, pay("nope", ""), newClaimer().claim)
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		q := place(t, h, "alice", now.Add(-time.Second))
		timeout(t, h, q.OrderNo)
		_, err = r.ReinstateCancelled(ctx, pay(q.OrderNo, "ALICE"), newClaimer().claim)
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "I10")
		_, err = r.ReinstateCancelled(ctx, cancel.Payment{OrderNo: q.OrderNo}, newClaimer().claim)
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "a payment needs its id")
	})

	// A seat re-sold to another order in the meantime: never taken from it,
	// in SQL or in the seat store; the order stays cancelled.
	t.Run("LateSeatRetaken", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		p := place(t, h, "u1", now.Add(-time.Second), "t1", "t2")
		timeout(t, h, p.OrderNo)
		other := place(t, h, "u2", now.Add(time.Hour), "t2")
		c := newClaimer()
		if h.NoClaims { // only the seat store knows t2 is held
			c.held["show-1/t2"] = other.OrderNo
		}
		_, err := r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "the unique live claim (or the seat store) refuses it")
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status)
		assert.Empty(t, claimsOf(t, h, p.OrderNo), "no claim of t1 left behind")
		if !h.NoClaims {
			assert.Equal(t, map[string]expiry.Status{"t2": expiry.StatusPending}, claimsOf(t, h, other.OrderNo))
		}
		delete(c.held, "show-1/t2")

		// The seat store refusing (a lock there SQL does not know yet) is
		// the same: nothing committed.
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: other.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		c.fail = fmt.Errorf("redis: seat t1: %w", cancel.ErrSeatUnavailable)
		_, err = r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
		assert.Empty(t, claimsOf(t, h, p.OrderNo))
		c.fail = errors.New("redis: connection reset")
		_, err = r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
		assert.Error(t, err, "a transient seat-store error is an error")
		o, err = h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status, "a refused claim commits nothing")
		assert.Empty(t, claimsOf(t, h, p.OrderNo))

		// Once the seats are free again, a late payment can reinstate.
		c.fail = nil
		res, err := r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
		require.NoError(t, err)
		assert.True(t, res.Changed)
	})

	// Hostile but legal: several late callbacks for one order at once, two
	// payment ids and each one repeated. Exactly one reinstates; the others
	// see it paid by the winner (a repeat of it, or a second payment).
	t.Run("LateRace", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		for round := 0; round < 4; round++ {
			p := place(t, h, "u1", now.Add(-time.Second))
			timeout(t, h, p.OrderNo)
			ids := []string{id("pay"), id("pay")}
			c := newClaimer()
			var wins atomic.Int32
			var mu sync.Mutex
			answers := map[string]int{}
			var wg sync.WaitGroup
			for i := 0; i < 6; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := r.ReinstateCancelled(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: ids[i%2]}, c.claim)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Changed {
						wins.Add(1)
					}
					mu.Lock()
					answers[res.PaymentID]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			require.Equal(t, int32(1), wins.Load(), "I1: one late payment reinstates")
			assert.Equal(t, int32(1), c.calls.Load(), "the seats are claimed by the winner only")
			assert.Len(t, answers, 1, "every answer names the winning payment: %v", answers)
		}
	})

	// The claim is held to the purchase limit the order was placed with
	// (I17): a buyer who placed another order since may not pass it.
	t.Run("LateClaimKeepsThePlacementLimit", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		p := cancel.Placement{OrderNo: id("o"), UserID: "u1", ShowID: "show-1", Seats: []string{id("seat")}, ExpireAt: now.Add(-time.Second), Limit: 3}
		require.NoError(t, h.Place(ctx, p))
		timeout(t, h, p.OrderNo)
		c := newClaimer()
		res, err := r.ReinstateCancelled(ctx, pay(p.OrderNo, "u1"), c.claim)
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.Equal(t, 3, c.limit, "the limit the order was placed with")
	})

	// A payment id is decided once (I14): one recorded as a discrepancy
	// (refunded) never reinstates an order later, and one that reinstated
	// an order is never recorded as a discrepancy after it.
	t.Run("LateDecidedOnce", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		p := place(t, h, "u1", now.Add(-time.Second))
		timeout(t, h, p.OrderNo)
		refunded := pay(p.OrderNo, "u1")
		recorded, err := h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: refunded.PaymentID, OrderNo: p.OrderNo, UserID: "u1", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		require.True(t, recorded)
		c := newClaimer()
		_, err = r.ReinstateCancelled(ctx, refunded, c.claim)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a refunded payment id never pays")
		assert.Zero(t, c.calls.Load(), "nothing claimed")
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status)

		honoured := pay(p.OrderNo, "u1")
		res, err := r.ReinstateCancelled(ctx, honoured, c.claim)
		require.NoError(t, err)
		require.True(t, res.Changed)
		recorded, err = h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: honoured.PaymentID, OrderNo: p.OrderNo, UserID: "u1", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.False(t, recorded, "an honoured payment id is never recorded for a refund")
		due, err := h.Store.ClaimDiscrepancies(ctx, 0, 100)
		require.NoError(t, err)
		for _, d := range due {
			assert.NotEqual(t, honoured.PaymentID, d.PaymentID, "an honoured payment is never handed to the refund hook")
		}
	})

	// A payment id pays one order, and never one after it was refunded
	// (I14), on the pending path too.
	t.Run("PaymentDecidedOnceAcrossOrders", func(t *testing.T) {
		h, now := setup(t)
		a, b := place(t, h, "u1", now.Add(time.Hour)), place(t, h, "u1", now.Add(time.Hour))
		p := pay(a.OrderNo, "")
		res, err := h.Store.PayPending(ctx, p)
		require.NoError(t, err)
		require.True(t, res.Changed)
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: b.OrderNo, PaymentID: p.PaymentID})
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "the payment of another order pays nothing")
		o, err := h.Store.Order(ctx, b.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status)
		recorded, err := h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: p.PaymentID, OrderNo: b.OrderNo, UserID: "u1", Status: expiry.StatusPending})
		require.NoError(t, err)
		assert.False(t, recorded, "an honoured payment is never recorded for a refund")

		refunded := pay(b.OrderNo, "")
		recorded, err = h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: refunded.PaymentID, OrderNo: a.OrderNo, UserID: "u1", Status: expiry.StatusPaid})
		require.NoError(t, err)
		require.True(t, recorded)
		_, err = h.Store.PayPending(ctx, refunded)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a refunded payment id pays nothing later")
		o, err = h.Store.Order(ctx, b.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status)
		res, err = h.Store.PayPending(ctx, pay(b.OrderNo, ""))
		require.NoError(t, err)
		assert.True(t, res.Changed, "a new payment id pays it")
	})

	// The same id raced: a late reinstatement against the record of its own
	// refusal (two deliveries of one callback on two hosts). Never both.
	t.Run("LateDecidedOnceRace", func(t *testing.T) {
		h, now := setup(t)
		r := reinstater(t, h)
		for round := 0; round < 6; round++ {
			p := place(t, h, "u1", now.Add(-time.Second))
			timeout(t, h, p.OrderNo)
			pm := pay(p.OrderNo, "u1")
			var reinstated, recorded bool
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				res, err := r.ReinstateCancelled(ctx, pm, newClaimer().claim)
				if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
					t.Error(err)
				}
				reinstated = err == nil && res.Changed
			}()
			go func() {
				defer wg.Done()
				ok, err := h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: pm.PaymentID, OrderNo: p.OrderNo, UserID: "u1", Status: expiry.StatusCancelled})
				if err != nil {
					t.Error(err)
				}
				recorded = ok
			}()
			wg.Wait()
			require.True(t, reinstated != recorded, "I14: payment %s reinstated %v and recorded for a refund %v", pm.PaymentID, reinstated, recorded)
		}
	})
}
