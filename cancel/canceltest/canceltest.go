// Package canceltest is the conformance suite for order stores and seat
// stores. Every implementation in this module (the in-memory fakes, the SQL
// store on SQLite, MariaDB and PostgreSQL, the Redis seat store) runs it, and
// a host's own adapter should too:
//
//	func TestMyStore(t *testing.T) {
//		canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness { … })
//	}
//
// The suite checks the invariants of DESIGN.md that a single store is
// responsible for: one terminal state per order (I1), duplicate calls change
// nothing (I5), the due guard uses the store's clock (I4), seats are released
// at most once and never another order's (I2), and the purchase-limit counter
// matches the seats held (I8).
package canceltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Store is what the suite tests: the cancel.OrderStore and the reconciler's
// read side of it.
type Store interface {
	cancel.OrderStore
	Expired(ctx context.Context, limit int) ([]string, error)
	Statuses(ctx context.Context, nos []string) (map[string]expiry.Status, error)
	Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error)
}

// StoreHarness is one fresh, empty store.
type StoreHarness struct {
	Store Store
	// Place commits a new pending order (in its own transaction).
	Place func(ctx context.Context, p cancel.Placement) error
	// Now reads the store's clock.
	Now func(ctx context.Context) (time.Time, error)
}

var seq atomic.Uint64

// id returns an id unique within the process run, so suites on shared
// servers never collide.
func id(prefix string) string {
	return fmt.Sprintf("%s-%x-%d", prefix, rand.Uint32(), seq.Add(1))
}

// RunStore runs the order-store suite; newHarness must return a fresh store.
func RunStore(t *testing.T, newHarness func(t *testing.T) StoreHarness) {
	ctx := context.Background()
	setup := func(t *testing.T) (StoreHarness, time.Time) {
		h := newHarness(t)
		now, err := h.Now(ctx)
		require.NoError(t, err)
		return h, now
	}
	place := func(t *testing.T, h StoreHarness, user string, expireAt time.Time, seats ...string) cancel.Placement {
		p := cancel.Placement{OrderNo: id("o"), UserID: user, ShowID: "show-1", Seats: seats, ExpireAt: expireAt}
		if len(seats) == 0 {
			p.Seats = []string{id("s"), id("s")}
		}
		require.NoError(t, h.Place(ctx, p))
		return p
	}

	t.Run("PlaceAndRead", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour))
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, p.OrderNo, o.No)
		assert.Equal(t, "u1", o.UserID)
		assert.Equal(t, "show-1", o.ShowID)
		assert.Equal(t, expiry.StatusPending, o.Status)
		assert.WithinDuration(t, p.ExpireAt, o.ExpireAt, time.Millisecond)
		assert.WithinDuration(t, now, o.ReadAt, 10*time.Second, "ReadAt is the store's clock")
		assert.InDelta(t, time.Hour.Seconds(), o.Remaining().Seconds(), 10)
	})

	t.Run("Missing", func(t *testing.T) {
		h, _ := setup(t)
		_, err := h.Store.Order(ctx, "nope")
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: "nope", Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.PayPending(ctx, "nope", "")
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
		_, err = h.Store.PayPending(ctx, p.OrderNo, "mallory")
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "another user's calls touch nothing")
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "alice"})
		require.NoError(t, err)
		assert.True(t, res.Changed)
	})

	// I10: ids match byte for byte on every store, whatever the database's
	// default collation (MySQL/MariaDB's are case-insensitive).
	t.Run("IDsMatchExactly", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "alice", now.Add(time.Hour), "A1")
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "ALICE"})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "ALICE is not alice")
		_, err = h.Store.PayPending(ctx, p.OrderNo, "Alice")
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "Alice is not alice")

		variant := strings.ToUpper(p.OrderNo)
		require.NotEqual(t, p.OrderNo, variant)
		_, err = h.Store.Order(ctx, variant)
		assert.ErrorIs(t, err, expiry.ErrNotFound, "a case variant of an order number is another order")
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: variant, Reason: cancel.ReasonUser})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: variant, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		_, err = h.Store.PayPending(ctx, variant, "")
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		st, err := h.Store.Statuses(ctx, []string{variant})
		require.NoError(t, err)
		assert.Empty(t, st, "Statuses of a case variant")
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "case variants touched nothing")

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

	// A second placement under an existing order number (a retry after an
	// unknown commit, a double submit) fails and leaves the live order as it
	// was; its error is not ErrSeatUnavailable, so a caller can tell "this
	// order exists" from "someone else holds the seat".
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
			assert.NotErrorIs(t, err, cancel.ErrSeatUnavailable, "the order exists; no seat was refused")
			assert.NotErrorIs(t, err, expiry.ErrInvalidID)
		}
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, "u1", o.UserID)
		assert.Equal(t, "show-1", o.ShowID)
		assert.Equal(t, expiry.StatusPending, o.Status)
		assert.WithinDuration(t, p.ExpireAt, o.ExpireAt, time.Millisecond, "the first placement's expiry stands")
		claims, _, err := h.Store.Claims(ctx, "", 10)
		require.NoError(t, err)
		var got []string
		for _, c := range claims {
			got = append(got, c.ShowID+"/"+c.SeatID)
		}
		assert.Equal(t, []string{"show-1/r1", "show-1/r2"}, got, "no seat of a refused placement is claimed")
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		assert.Equal(t, []string{"r1", "r2"}, res.Seats)
	})

	t.Run("PayThenCancel", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(-time.Second), "s1", "s2")
		res, err := h.Store.PayPending(ctx, p.OrderNo, "u1")
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		assert.Equal(t, []string{"s1", "s2"}, res.Seats)
		c, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.False(t, c.Changed, "I1: a paid order is never cancelled")
		assert.Equal(t, expiry.StatusPaid, c.Order.Status)
		again, err := h.Store.PayPending(ctx, p.OrderNo, "")
		require.NoError(t, err)
		assert.False(t, again.Changed, "I5: a repeated payment changes nothing")
		// Sold seats stay claimed.
		err = h.Place(ctx, cancel.Placement{OrderNo: id("o"), UserID: "u2", ShowID: "show-1", Seats: []string{"s1"}, ExpireAt: now.Add(time.Hour)})
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
	})

	t.Run("CancelThenPay", func(t *testing.T) {
		h, now := setup(t)
		p := place(t, h, "u1", now.Add(time.Hour))
		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonUser, UserID: "u1"})
		require.NoError(t, err)
		res, err := h.Store.PayPending(ctx, p.OrderNo, "u1")
		require.NoError(t, err)
		assert.False(t, res.Changed, "I1: a cancelled order is never paid")
		assert.Equal(t, expiry.StatusCancelled, res.Order.Status)
	})

	t.Run("SeatClaims", func(t *testing.T) {
		h, now := setup(t)
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
		_, err := h.Store.PayPending(ctx, paid.OrderNo, "")
		require.NoError(t, err)
		nos, err := h.Store.Expired(ctx, 10)
		require.NoError(t, err)
		assert.Equal(t, []string{older.OrderNo, newer.OrderNo}, nos, "pending and due only, oldest first")
		nos, err = h.Store.Expired(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, []string{older.OrderNo}, nos, "limit")
	})

	t.Run("Statuses", func(t *testing.T) {
		h, now := setup(t)
		a := place(t, h, "u1", now.Add(time.Hour))
		b := place(t, h, "u1", now.Add(time.Hour))
		_, err := h.Store.PayPending(ctx, b.OrderNo, "")
		require.NoError(t, err)
		st, err := h.Store.Statuses(ctx, []string{a.OrderNo, b.OrderNo, "missing"})
		require.NoError(t, err)
		assert.Equal(t, map[string]expiry.Status{a.OrderNo: expiry.StatusPending, b.OrderNo: expiry.StatusPaid}, st)
		many := make([]string, 1200) // more than one IN list
		for i := range many {
			many[i] = id("m")
		}
		many[1100] = a.OrderNo
		st, err = h.Store.Statuses(ctx, many)
		require.NoError(t, err)
		assert.Equal(t, map[string]expiry.Status{a.OrderNo: expiry.StatusPending}, st)
	})

	t.Run("Claims", func(t *testing.T) {
		h, now := setup(t)
		a := place(t, h, "u1", now.Add(time.Hour), "a1", "a2")
		b := place(t, h, "u2", now.Add(time.Hour), "b1")
		c := place(t, h, "u3", now.Add(time.Hour), "c1")
		_, err := h.Store.PayPending(ctx, b.OrderNo, "")
		require.NoError(t, err)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		var all []cancel.Claim
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
						res, err = h.Store.PayPending(ctx, ps[i].OrderNo, "u1")
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
