package canceltest

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runReads runs the store suite's tests of the reconciler's reads: seat claims, expired orders, statuses with their ages, claims paging.
func runReads(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()

	t.Run("SeatClaims", func(t *testing.T) {
		h, now := setup(t)
		if h.NoClaims {
			t.Skip("no claims in SQL: the seat store refuses a held seat")
		}
		p := place(t, h, "u1", now.Add(time.Hour), "x1", "x2")
		err := h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"x9", "x2"}, ExpireAt: now.Add(time.Hour)})
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "a seat of a live order cannot be claimed again")
		err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-2", Seats: []string{"x2"}, ExpireAt: now.Add(time.Hour)})
		assert.NoError(t, err, "the same seat id in another show is another seat")
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"x9", "x2"}, ExpireAt: now.Add(time.Hour)})
		assert.NoError(t, err, "a cancelled order's seats can be claimed again")
		err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"bad seat"}, ExpireAt: now.Add(time.Hour)})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	t.Run("Expired", func(t *testing.T) {
		h, now := setup(t)
		older := place(t, h, "u1", now.Add(-2*time.Minute))
		newer := place(t, h, "u1", now.Add(-time.Minute))
		place(t, h, "u1", now.Add(time.Hour))
		paid := place(t, h, "u1", now.Add(-3*time.Minute))
		_, err := h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)
		nos, next, err := h.Store.Expired(ctx, "", 10)
		require.NoError(t, err)
		assert.Equal(t, []string{older.OrderNo, newer.OrderNo}, nos, "pending and due only, oldest first")
		assert.Empty(t, next, "fewer than limit: the scan is complete")
		nos, next, err = h.Store.Expired(ctx, "", 1)
		require.NoError(t, err)
		assert.Equal(t, []string{older.OrderNo}, nos, "limit")
		assert.NotEmpty(t, next)
		nos, next, err = h.Store.Expired(ctx, "", 0)
		require.NoError(t, err)
		assert.Empty(t, nos)
		assert.Empty(t, next)
		_, _, err = h.Store.Expired(ctx, "not a cursor", 10)
		assert.Error(t, err, "a cursor the store did not make")
	})

	// I12: keyset paging in (expire_at, order number) order
	// returns every due order exactly once, although the ones already
	// returned stay pending (a round that skips an order whose cancel keeps
	// failing goes past it, not back to it).
	t.Run("ExpiredPaging", func(t *testing.T) {
		h, now := setup(t)
		at := now.Truncate(time.Millisecond)
		var due []cancel.Placement
		for i, ago := range []time.Duration{3, 3, 3, 2, 1, 1, 2, 3} { // ties on expire_at
			p := place(t, h, "u1", at.Add(-ago*time.Minute), fmt.Sprintf("e%d", i))
			due = append(due, p)
		}
		place(t, h, "u1", at.Add(time.Hour), "f1") // not due
		paid := place(t, h, "u1", at.Add(-4*time.Minute), "p1")
		_, err := h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)

		for _, limit := range []int{1, 2, 3, 8, 9} {
			var got []string
			cursor, pages := "", 0
			for {
				nos, next, err := h.Store.Expired(ctx, cursor, limit)
				require.NoError(t, err)
				require.LessOrEqual(t, len(nos), limit)
				got = append(got, nos...)
				pages++
				if next == "" {
					assert.Less(t, len(nos), limit, "limit %d: next is empty only after a short page", limit)
					break
				}
				assert.Len(t, nos, limit, "limit %d: a page before the last is full", limit)
				require.Less(t, pages, 20, "limit %d: paging does not end", limit)
				cursor = next
			}
			assert.ElementsMatch(t, orderNos(due), got, "limit %d: every due pending order exactly once", limit)
			expiries := make([]time.Time, len(got))
			for i, no := range got {
				o, err := h.Store.Order(ctx, no)
				require.NoError(t, err)
				expiries[i] = o.ExpireAt
			}
			assert.True(t, sort.SliceIsSorted(expiries, func(i, j int) bool { return expiries[i].Before(expiries[j]) }), "limit %d: oldest first: %v", limit, expiries)
		}

		// An order decided between two pages is not returned by the later one.
		first, next, err := h.Store.Expired(ctx, "", 4)
		require.NoError(t, err)
		rest, _, err := h.Store.Expired(ctx, next, 10)
		require.NoError(t, err)
		require.Len(t, rest, 4)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: rest[0], Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		again, _, err := h.Store.Expired(ctx, next, 10)
		require.NoError(t, err)
		assert.Equal(t, rest[1:], again, "the cancelled one is gone, the cursor still holds")
		assert.NotContains(t, again, first[0])
	})

	t.Run("Statuses", func(t *testing.T) {
		h, now := setup(t)
		a := place(t, h, "u1", now.Add(time.Hour))
		b := place(t, h, "u1", now.Add(time.Hour))
		c := place(t, h, "u2", now.Add(time.Hour))
		_, err := h.Store.PayPending(ctx, pay(b.OrderNo, ""))
		require.NoError(t, err)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		st, err := h.Store.Statuses(ctx, []string{a.OrderNo, b.OrderNo, c.OrderNo, "missing"})
		require.NoError(t, err)
		assert.Equal(t, map[string]expiry.Status{a.OrderNo: expiry.StatusPending, b.OrderNo: expiry.StatusPaid, c.OrderNo: expiry.StatusCancelled}, statusesOf(st))
		// The show and the seats each order was placed with, decided or
		// not: the reconciler's lock pass judges an order's locks by them.
		for _, p := range []cancel.Placement{a, b, c} {
			assert.Equal(t, p.ShowID, st[p.OrderNo].ShowID, "order %s", p.OrderNo)
			assert.ElementsMatch(t, p.Seats, st[p.OrderNo].Seats, "order %s: its placed seats", p.OrderNo)
		}
		many := make([]string, 1200) // more than one IN list
		for i := range many {
			many[i] = id("m")
		}
		many[1100] = a.OrderNo
		st, err = h.Store.Statuses(ctx, many)
		require.NoError(t, err)
		assert.Equal(t, map[string]expiry.Status{a.OrderNo: expiry.StatusPending}, statusesOf(st))
	})

	// The age is the time since the order's last write by the store's
	// clock: the reconciler leaves the locks of an order decided moments
	// ago to the host that decided it (reconcile.Config.Settle).
	t.Run("StatusesAge", func(t *testing.T) {
		h, now := setup(t)
		res := max(h.WriteResolution, time.Millisecond)
		slack := res + 500*time.Millisecond // a loaded machine's statements
		placedA := time.Now()
		a := place(t, h, "u1", now.Add(time.Hour))
		if h.NoWriteTime {
			st, err := h.Store.Statuses(ctx, []string{a.OrderNo})
			require.NoError(t, err)
			assert.Equal(t, cancel.AgeUnknown, st[a.OrderNo].Age, "a store without a write time answers AgeUnknown")
			return
		}
		wait := res + 400*time.Millisecond
		time.Sleep(wait)
		b := place(t, h, "u1", now.Add(time.Hour))
		_, err := h.Store.PayPending(ctx, pay(b.OrderNo, ""))
		require.NoError(t, err)
		st, err := h.Store.Statuses(ctx, []string{a.OrderNo, b.OrderNo})
		require.NoError(t, err)
		ageA, ageB := st[a.OrderNo].Age, st[b.OrderNo].Age
		assert.GreaterOrEqual(t, ageA, wait-res, "pending since it was placed")
		assert.LessOrEqual(t, ageA, time.Since(placedA)+res)
		assert.GreaterOrEqual(t, ageB, time.Duration(0), "never negative")
		assert.Less(t, ageB, slack, "paid just now")
		assert.Greater(t, ageA, ageB)

		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: a.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		st, err = h.Store.Statuses(ctx, []string{a.OrderNo})
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, st[a.OrderNo].Status)
		assert.Less(t, st[a.OrderNo].Age, slack, "a decision is a write: the age starts again")
	})

	t.Run("Claims", func(t *testing.T) {
		h, now := setup(t)
		a := place(t, h, "u1", now.Add(time.Hour), "a1", "a2")
		b := place(t, h, "u2", now.Add(time.Hour), "b1")
		c := place(t, h, "u3", now.Add(time.Hour), "c1")
		_, err := h.Store.PayPending(ctx, pay(b.OrderNo, ""))
		require.NoError(t, err)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		var all []cancel.Claim
		if h.NoClaims {
			all, next, err := h.Store.Claims(ctx, "", 10)
			require.NoError(t, err)
			assert.Empty(t, all, "no claims in SQL")
			assert.Empty(t, next)
			return
		}
		cursor, calls := "", 0
		for {
			batch, next, err := h.Store.Claims(ctx, cursor, 2)
			require.NoError(t, err)
			all = append(all, batch...)
			calls++
			if next == "" {
				break
			}
			require.Less(t, calls, 10)
			cursor = next
		}
		assert.Equal(t, []cancel.Claim{
			{ShowID: "show-1", SeatID: "a1", OrderNo: a.OrderNo, UserID: "u1", Status: expiry.StatusPending},
			{ShowID: "show-1", SeatID: "a2", OrderNo: a.OrderNo, UserID: "u1", Status: expiry.StatusPending},
			{ShowID: "show-1", SeatID: "b1", OrderNo: b.OrderNo, UserID: "u2", Status: expiry.StatusPaid},
		}, all, "pending and paid claims in key order; a cancelled order has none")
	})
}
