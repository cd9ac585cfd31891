package canceltest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runPayments runs the store suite's tests of payment ids: the one an order was paid with, and the discrepancies (recorded once, claimed under a lease, settled).
func runPayments(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()

	// The store keeps the payment id that paid an order, so a
	// repeated callback (same id) is told from a second payment (another id).
	t.Run("PaymentID", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour))
		first := pay(p.OrderNo, "u1")
		res, err := h.Store.PayPending(ctx, first)
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.Equal(t, first.PaymentID, res.PaymentID)
		for _, tc := range []struct {
			name string
			p    cancel.Payment
		}{
			{"the same callback again", first},
			{"the same payment, no user", cancel.Payment{OrderNo: p.OrderNo, PaymentID: first.PaymentID}},
			{"a second payment", pay(p.OrderNo, "u1")},
		} {
			res, err := h.Store.PayPending(ctx, tc.p)
			require.NoError(t, err, tc.name)
			assert.False(t, res.Changed, tc.name)
			assert.Empty(t, res.Seats, tc.name)
			assert.Equal(t, expiry.StatusPaid, res.Order.Status, tc.name)
			assert.Equal(t, first.PaymentID, res.PaymentID, "%s: the payment that paid the order", tc.name)
		}
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "U1", PaymentID: first.PaymentID})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "U1 is not u1")
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, o.Status)

		q := place(t, h, "u1", now.Add(time.Hour))
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: q.OrderNo, UserID: "u1"})
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "a payment needs its id")
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: q.OrderNo, PaymentID: "bad id"})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		o, err = h.Store.Order(ctx, q.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "a refused payment changes nothing")
		second := pay(q.OrderNo, "")
		res, err = h.Store.PayPending(ctx, second)
		require.NoError(t, err)
		assert.True(t, res.Changed, "a payment without a user pays any user's order")
		assert.Equal(t, second.PaymentID, res.PaymentID)
	})

	// I14: the host deletes a paid order (archived, or removed by its
	// buyer); the provider repeats the payment's callback afterwards. It
	// is the payment that paid the order, answered as for a paid order
	// still there (nothing changes, no error), never a missing order the
	// service would refund. Another payment id, or a deleted order that
	// was cancelled, is missing as before.
	t.Run("PaidOrderDeleted", func(t *testing.T) {
		h, now := setup(t)
		if h.Delete == nil {
			t.Skip("the harness cannot delete an order")
		}
		p := place(t, h, "u1", now.Add(time.Hour))
		first := pay(p.OrderNo, "u1")
		res, err := h.Store.PayPending(ctx, first)
		require.NoError(t, err)
		require.True(t, res.Changed)
		c := place(t, h, "u2", now.Add(time.Hour))
		res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonUser, UserID: "u2"})
		require.NoError(t, err)
		require.True(t, res.Changed)
		require.NoError(t, h.Delete(ctx, p.OrderNo))
		require.NoError(t, h.Delete(ctx, c.OrderNo))
		_, err = h.Store.Order(ctx, p.OrderNo)
		require.ErrorIs(t, err, expiry.ErrNotFound, "the host deleted it")

		for _, tc := range []struct {
			name string
			p    cancel.Payment
		}{
			{"the same callback again", first},
			{"the same payment, no user", cancel.Payment{OrderNo: p.OrderNo, PaymentID: first.PaymentID}},
		} {
			res, err := h.Store.PayPending(ctx, tc.p)
			require.NoError(t, err, tc.name)
			assert.False(t, res.Changed, tc.name)
			assert.Empty(t, res.Seats, tc.name)
			assert.Equal(t, expiry.StatusPaid, res.Order.Status, tc.name)
			assert.Equal(t, first.PaymentID, res.PaymentID, "%s: the payment that paid the order", tc.name)
			assert.Equal(t, "u1", res.Order.UserID, tc.name)
		}
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u2", PaymentID: first.PaymentID})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "u2 is not u1")
		_, err = h.Store.PayPending(ctx, pay(p.OrderNo, ""))
		assert.ErrorIs(t, err, expiry.ErrNotFound, "another payment finds no order")
		_, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: c.OrderNo, PaymentID: first.PaymentID})
		assert.ErrorIs(t, err, expiry.ErrNotFound, "the payment paid another order, not this one")
		_, err = h.Store.PayPending(ctx, pay(c.OrderNo, ""))
		assert.ErrorIs(t, err, expiry.ErrNotFound, "a payment of a deleted cancelled order finds no order")
	})

	// I14: the host deletes a paid order and reuses its number for a new
	// order (another buyer's). The old payment's repeated callback is the
	// payment of the order it paid: answered as paid (no error, so the
	// provider stops repeating it; never refunded), and it pays nothing of
	// the new order, whether that is pending or paid by its own payment.
	t.Run("PaidOrderNumberReused", func(t *testing.T) {
		h, now := setup(t)
		if h.Delete == nil {
			t.Skip("the harness cannot delete an order")
		}
		p := place(t, h, "u1", now.Add(time.Hour))
		first := pay(p.OrderNo, "u1")
		res, err := h.Store.PayPending(ctx, first)
		require.NoError(t, err)
		require.True(t, res.Changed)
		require.NoError(t, h.Delete(ctx, p.OrderNo))
		again := cancel.Placement{OrderNo: p.OrderNo, UserID: "u2", ShowID: p.ShowID, Seats: []string{id("s")}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, h.Place(ctx, again), "the host reuses the number")

		repeat := func(stage string, want expiry.Status, paidBy string) {
			t.Helper()
			for _, rp := range []cancel.Payment{first, {OrderNo: p.OrderNo, PaymentID: first.PaymentID}} {
				res, err := h.Store.PayPending(ctx, rp)
				require.NoError(t, err, "%s: the old payment's repeat is answered", stage)
				assert.False(t, res.Changed, stage)
				assert.Empty(t, res.Seats, "%s: it sells nothing", stage)
				assert.Equal(t, expiry.StatusPaid, res.Order.Status, stage)
				assert.Equal(t, first.PaymentID, res.PaymentID, "%s: the payment that paid the order under this number", stage)
			}
			o, err := h.Store.Order(ctx, p.OrderNo)
			require.NoError(t, err)
			assert.Equal(t, want, o.Status, "%s: the new order is untouched", stage)
			assert.Equal(t, "u2", o.UserID, stage)
			if paidBy != "" {
				res, err := h.Store.PayPending(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: paidBy})
				require.NoError(t, err)
				assert.Equal(t, paidBy, res.PaymentID, "%s: the new order is paid by its own payment", stage)
			}
		}
		repeat("the new order pending", expiry.StatusPending, "")

		// The new order is paid by its own payment. Each payment's repeat
		// is answered as the payment that paid the order it paid, whatever
		// the ids' order: never as a second payment of the other's order,
		// which would answer an honoured payment with a discrepancy on
		// every repeat.
		for _, second := range []string{"0" + id("pay"), "z" + id("pay")} {
			require.NoError(t, h.Delete(ctx, p.OrderNo), "the host deletes the order under the number")
			next := again
			next.Seats = []string{id("s")}
			require.NoError(t, h.Place(ctx, next), "the host reuses the number")
			own := cancel.Payment{OrderNo: p.OrderNo, UserID: "u2", PaymentID: second}
			res, err := h.Store.PayPending(ctx, own)
			require.NoError(t, err)
			require.True(t, res.Changed, "the new order takes its own payment")
			repeat("the new order paid by "+second, expiry.StatusPaid, second)
			for _, rp := range []cancel.Payment{own, {OrderNo: p.OrderNo, PaymentID: second}} {
				res, err := h.Store.PayPending(ctx, rp)
				require.NoError(t, err, "the new payment's repeat is answered")
				assert.False(t, res.Changed)
				assert.Equal(t, second, res.PaymentID, "the payment that paid the new order")
				assert.Equal(t, "u2", res.Order.UserID)
			}
		}

		// The order under the number is the host's to cancel too: the old
		// payment's repeat is still the payment of the order it paid.
		require.NoError(t, h.Delete(ctx, p.OrderNo))
		next := again
		next.Seats = []string{id("s")}
		require.NoError(t, h.Place(ctx, next), "the host reuses the number")
		res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		require.True(t, res.Changed)
		repeat("the new order cancelled", expiry.StatusCancelled, "")
	})

	// I9: a discrepancy is recorded once per payment id,
	// however often (and however concurrently) it is reported.
	t.Run("DiscrepancyRecordedOnce", func(t *testing.T) {
		h, _ := setup(t)
		d := cancel.Discrepancy{PaymentID: id("pay"), OrderNo: id("o"), UserID: "u1", Status: expiry.StatusCancelled}
		recorded, err := h.Store.RecordDiscrepancy(ctx, d)
		require.NoError(t, err)
		assert.True(t, recorded)
		recorded, err = h.Store.RecordDiscrepancy(ctx, d)
		require.NoError(t, err)
		assert.False(t, recorded, "the same payment id again")
		other := d
		other.OrderNo, other.Status = id("o"), expiry.StatusPaid
		recorded, err = h.Store.RecordDiscrepancy(ctx, other)
		require.NoError(t, err)
		assert.False(t, recorded, "the payment id decides, not the rest")
		_, err = h.Store.RecordDiscrepancy(ctx, cancel.Discrepancy{OrderNo: id("o"), UserID: "u1", Status: expiry.StatusCancelled})
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "a discrepancy needs its payment id")

		const callers = 8
		for round := 0; round < 5; round++ {
			d := cancel.Discrepancy{PaymentID: id("pay"), OrderNo: id("o"), UserID: "u1", Status: expiry.StatusCancelled}
			var wins atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					recorded, err := h.Store.RecordDiscrepancy(ctx, d)
					if err != nil {
						errs <- err
						return
					}
					if recorded {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			assert.Equal(t, int32(1), wins.Load(), "I9: exactly one of %d concurrent records of %s", callers, d.PaymentID)
		}
	})

	// I9: unsettled discrepancies are claimed again after a
	// lease, by the store's clock, by one claimer at a time, until settled.
	t.Run("DiscrepancyClaimLeaseSettle", func(t *testing.T) {
		h, _ := setup(t)
		const lease = 500 * time.Millisecond
		// Checks that something is not claimable yet hold only while less
		// than a lease has passed; on a stalled machine they are skipped.
		within := func(since time.Time, what string) bool {
			if time.Since(since) < lease {
				return true
			}
			t.Logf("skipped (more than a lease passed): %s", what)
			return false
		}
		tag := id("")
		start := time.Now()
		a := cancel.Discrepancy{PaymentID: "pay-a" + tag, OrderNo: id("o"), UserID: "u1", Status: expiry.StatusCancelled}
		b := cancel.Discrepancy{PaymentID: "pay-b" + tag, OrderNo: id("o"), UserID: "u2", Status: expiry.StatusPaid}
		for _, d := range []cancel.Discrepancy{a, b} {
			recorded, err := h.Store.RecordDiscrepancy(ctx, d)
			require.NoError(t, err)
			require.True(t, recorded)
		}
		got, err := h.Store.ClaimDiscrepancies(ctx, lease, 10)
		require.NoError(t, err)
		if within(start, "a record is tried when it is recorded") {
			assert.Empty(t, got, "a record is tried when it is recorded: its hook is running")
		}

		time.Sleep(lease + 100*time.Millisecond)
		start = time.Now()
		got, err = h.Store.ClaimDiscrepancies(ctx, lease, 1)
		require.NoError(t, err)
		assert.Equal(t, []cancel.Discrepancy{a}, got, "limit, oldest first, every field kept")
		got, err = h.Store.ClaimDiscrepancies(ctx, lease, 10)
		require.NoError(t, err)
		if within(start, "a claimed record waits a lease") {
			assert.Equal(t, []cancel.Discrepancy{b}, got, "a claimed record waits a lease")
		}
		got, err = h.Store.ClaimDiscrepancies(ctx, lease, 10)
		require.NoError(t, err)
		if within(start, "nothing left to claim") {
			assert.Empty(t, got)
		}

		// Concurrent claimers never share a record within a lease.
		time.Sleep(lease + 100*time.Millisecond)
		start = time.Now()
		const claimers = 6
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for c := 0; c < claimers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds, err := h.Store.ClaimDiscrepancies(ctx, lease, 10)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					seen[d.PaymentID]++
				}
			}()
		}
		wg.Wait()
		if within(start, "concurrent claimers") {
			assert.Equal(t, map[string]int{a.PaymentID: 1, b.PaymentID: 1}, seen, "each record claimed once")
		}

		require.NoError(t, h.Store.SettleDiscrepancy(ctx, a.PaymentID))
		require.NoError(t, h.Store.SettleDiscrepancy(ctx, a.PaymentID), "settling is idempotent")
		recorded, err := h.Store.RecordDiscrepancy(ctx, a)
		require.NoError(t, err)
		assert.False(t, recorded, "a settled payment id stays recorded")
		time.Sleep(lease + 100*time.Millisecond)
		got, err = h.Store.ClaimDiscrepancies(ctx, lease, 10)
		require.NoError(t, err)
		assert.Equal(t, []cancel.Discrepancy{b}, got, "a settled record is never claimed again")
		require.NoError(t, h.Store.SettleDiscrepancy(ctx, b.PaymentID))
		err = h.Store.SettleDiscrepancy(ctx, id("pay"))
		assert.ErrorIs(t, err, expiry.ErrNotFound, "settling a payment id never recorded")
		got, err = h.Store.ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, got, "nothing unsettled")
		_, err = h.Store.ClaimDiscrepancies(ctx, -time.Second, 10)
		assert.Error(t, err, "a negative lease")
		got, err = h.Store.ClaimDiscrepancies(ctx, lease, 0)
		require.NoError(t, err)
		assert.Empty(t, got)
	})
}
