package canceltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runTransitions runs the store suite's tests of the state changes: placing, reading, cancelling and paying one order, with their guards, and the three-way race.
func runTransitions(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()

	t.Run("PlaceAndRead", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour))
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, p.OrderNo, o.No)
		assert.Equal(t, "u1", o.UserID)
		assert.Equal(t, "show-1", o.ShowID)
		assert.Equal(t, expiry.StatusPending, o.Status)
		assertDeadline(t, h, p.ExpireAt, o.ExpireAt)
		assert.WithinDuration(t, now, o.ReadAt, 10*time.Second, "ReadAt is the store's clock")
		assert.InDelta(t, time.Hour.Seconds(), o.Remaining().Seconds(), 10)
	})

	t.Run("Missing", func(t *testing.T) {
		h, _ := setup(t)
		_, err := h.Store.Order(ctx, "nope")
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: "nope", Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.PayPending(ctx, pay("nope", ""))
		assert.ErrorIs(t, err, expiry.ErrNotFound)
	})

	t.Run("CancelOnce", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour), "b2", "a1")
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, []string{"a1", "b2"}, res.Seats, "seats, sorted")
		assert.Equal(t, expiry.StatusCancelled, res.Order.Status)
		assert.Equal(t, "u1", res.Order.UserID)
		assert.Equal(t, "show-1", res.Order.ShowID)
		again, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout})
		require.NoError(t, err)
		assert.False(t, again.Changed, "I5: a second cancel changes nothing")
		assert.Empty(t, again.Seats)
		assert.Equal(t, expiry.StatusCancelled, again.Order.Status)
	})

	t.Run("DueGuardUsesStoreClock", func(t *testing.T) {
		h, now := setup(t)
		future := place(t, h, "u1", now.Add(time.Hour))
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: future.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.False(t, res.Changed, "I4: not due by the store's clock")
		assert.Equal(t, expiry.StatusPending, res.Order.Status)
		past := place(t, h, "u1", now.Add(-time.Second))
		res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: past.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.True(t, res.Changed)
	})

	t.Run("Ownership", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "alice", now.Add(time.Hour))
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "mallory"})
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		_, err = h.Store.PayPending(ctx, pay(p.OrderNo, "mallory"))
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "another user's calls touch nothing")
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "alice"})
		require.NoError(t, err)
		assert.True(t, res.Changed)
	})

	// Some ticketing systems know a buyer by email alone: such an id is
	// placed, and matched byte for byte like any other (I10).
	t.Run("EmailIDs", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "ann.buyer+tix@example.com", now.Add(time.Hour), "A1")
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "Ann.Buyer+tix@example.com"})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "a case variant of an email is another buyer")
		_, err = h.Store.PayPending(ctx, pay(p.OrderNo, "ann.buyer+tix@EXAMPLE.com"))
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "ann.buyer+tix@example.com"})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, "ann.buyer+tix@example.com", res.Order.UserID)
	})

	// I10: ids match byte for byte on every store, whatever the database's
	// default collation (MySQL/MariaDB's are case-insensitive).
	t.Run("IDsMatchExactly", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "alice", now.Add(time.Hour), "A1")
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "ALICE"})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "ALICE is not alice")
		_, err = h.Store.PayPending(ctx, pay(p.OrderNo, "Alice"))
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "Alice is not alice")

		variant := strings.ToUpper(p.OrderNo)
		require.NotEqual(t, p.OrderNo, variant)
		_, err = h.Store.Order(ctx, variant)
		assert.ErrorIs(t, err, expiry.ErrNotFound, "a case variant of an order number is another order")
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: variant, Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: variant, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.PayPending(ctx, pay(variant, ""))
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		st, err := h.Store.Statuses(ctx, []string{variant})
		require.NoError(t, err)
		assert.Empty(t, st, "Statuses of a case variant")
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "case variants touched nothing")

		if h.NoClaims {
			return // seats are the seat store's: nothing in SQL to fold
		}
		if h.CaseFoldingKeys {
			err := h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "bob", ShowID: "show-1", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "a1 is A1 for a case-folding key: refused, never a second claim")
			err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "carol", ShowID: "show-1", Seats: []string{"b1", "B1"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "b1 and B1 are one seat for a case-folding key")
			claims, _, err := h.Store.Claims(ctx, "", 10)
			require.NoError(t, err)
			require.Len(t, claims, 1, "only the first order's seat is claimed")
			assert.Equal(t, cancel.Claim{ShowID: "show-1", SeatID: "A1", OrderNo: p.OrderNo, UserID: "alice", Status: expiry.StatusPending}, claims[0])
			return
		}
		q := place(t, h, "bob", now.Add(time.Hour), "a1")
		err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "carol", ShowID: "show-1", Seats: []string{"b1", "B1"}, ExpireAt: now.Add(time.Hour)})
		assert.NoError(t, err, "b1 and B1 are two seats of one order")
		claims, _, err := h.Store.Claims(ctx, "", 10)
		require.NoError(t, err)
		seats := map[string]string{}
		for _, c := range claims {
			seats[c.SeatID] = c.OrderNo
		}
		assert.Equal(t, p.OrderNo, seats["A1"])
		assert.Equal(t, q.OrderNo, seats["a1"], "A1 and a1 are two seats")
		assert.Len(t, seats, 4)
	})

	// A second placement under an existing order number (a
	// retry after an unknown commit, a double submit) fails with
	// ErrOrderExists and leaves the live order as it was; it is not
	// ErrSeatUnavailable, so a caller can tell "this order exists" from
	// "someone else holds the seat".
	t.Run("OrderNumberPlacedTwice", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour), "r1", "r2")
		for _, again := range []cancel.Placement{
			p, // the same placement retried
			{OrderNo: p.OrderNo, UserID: "u1", ShowID: "show-1", Seats: []string{"r3"}, ExpireAt: now.Add(2 * time.Hour)},
			{OrderNo: p.OrderNo, UserID: "u2", ShowID: "show-2", Seats: []string{"r1"}, ExpireAt: now.Add(time.Hour)},
		} {
			err := h.Place(ctx, again)
			require.Error(t, err, "an order number is placed once")
			assert.ErrorIs(t, err, cancel.ErrOrderExists)
			assert.NotErrorIs(t, err, cancel.ErrSeatUnavailable, "the order exists; no seat was refused")
			assert.NotErrorIs(t, err, expiry.ErrInvalidID)
		}
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, "u1", o.UserID)
		assert.Equal(t, "show-1", o.ShowID)
		assert.Equal(t, expiry.StatusPending, o.Status)
		assertDeadline(t, h, p.ExpireAt, o.ExpireAt, "the first placement's expiry stands")
		if !h.NoClaims {
			claims, _, err := h.Store.Claims(ctx, "", 10)
			require.NoError(t, err)
			var got []string
			for _, c := range claims {
				got = append(got, c.ShowID+"/"+c.SeatID)
			}
			assert.Equal(t, []string{"show-1/r1", "show-1/r2"}, got, "no seat of a refused placement is claimed")
		}
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		assert.Equal(t, []string{"r1", "r2"}, res.Seats)
	})

	t.Run("PayThenCancel", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(-time.Second), "s1", "s2")
		payment := pay(p.OrderNo, "u1")
		res, err := h.Store.PayPending(ctx, payment)
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		assert.Equal(t, []string{"s1", "s2"}, res.Seats)
		assert.Equal(t, payment.PaymentID, res.PaymentID)
		c, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.False(t, c.Changed, "I1: a paid order is never cancelled")
		assert.Equal(t, expiry.StatusPaid, c.Order.Status)
		assert.Equal(t, payment.PaymentID, c.PaymentID, "a paid order's result names its payment")
		payment.UserID = ""
		again, err := h.Store.PayPending(ctx, payment)
		require.NoError(t, err)
		assert.False(t, again.Changed, "I5: a repeated payment changes nothing")
		assert.Empty(t, again.Seats)
		if !h.NoClaims { // sold seats stay claimed
			err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"s1"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
		}
	})

	t.Run("CancelThenPay", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour))
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "u1"})
		require.NoError(t, err)
		res, err := h.Store.PayPending(ctx, pay(p.OrderNo, "u1"))
		require.NoError(t, err)
		assert.False(t, res.Changed, "I1: a cancelled order is never paid")
		assert.Equal(t, expiry.StatusCancelled, res.Order.Status)
		assert.Empty(t, res.PaymentID, "a cancelled order has no payment")
	})

	// I1 under contention: pay, user cancel and timeout race on each order.
	t.Run("ThreeWayRace", func(t *testing.T) {
		h, now := setup(t)
		const orders, callers = 20, 6
		ps := make([]cancel.Placement, orders)
		for i := range ps {
			ps[i] = place(t, h, "u1", now.Add(-time.Second))
		}
		var wins [orders]atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, orders*callers)
		for i := range ps {
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var res cancel.Result
					var err error
					switch c % 3 {
					case 0:
						res, err = h.Store.PayPending(ctx, pay(ps[i].OrderNo, "u1"))
					case 1:
						res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: ps[i].OrderNo, Reason: cancel.ReasonUser, UserID: "u1"})
					default:
						res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: ps[i].OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
					}
					if err != nil {
						errs <- err
						return
					}
					if res.Changed {
						wins[i].Add(1)
						if len(res.Seats) != 2 {
							errs <- fmt.Errorf("winner of %s got %d seats", ps[i].OrderNo, len(res.Seats))
						}
					} else if len(res.Seats) != 0 {
						errs <- errors.New("a loser got seats")
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range ps {
			assert.Equal(t, int32(1), wins[i].Load(), "I1: exactly one winner for %s", ps[i].OrderNo)
			o, err := h.Store.Order(ctx, ps[i].OrderNo)
			require.NoError(t, err)
			assert.NotEqual(t, expiry.StatusPending, o.Status)
		}
	})
}
