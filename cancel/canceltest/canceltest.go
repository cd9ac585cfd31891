// Package canceltest is the conformance suite for order stores and seat
// stores. Every implementation in this module (the in-memory fakes, the SQL
// store on SQLite, MariaDB and PostgreSQL, the Redis seat store) runs it, and
// a host's own adapter should too:
//
//	func TestMyStore(t *testing.T) {
//		canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness { … })
//	}
//
// The suite checks the invariants (README, "Invariants") that a single store is
// responsible for: one terminal state per order (I1), duplicate calls change
// nothing (I5), the due guard uses the store's clock (I4), seats are released
// at most once and never another order's (I2), and the purchase-limit counter
// matches the seats held (I8); and, with hostile-but-legal input (I13): a
// discrepancy is recorded once per payment id and retried after a lease
// (I9), ids match byte for byte (I10), an order number placed twice is
// ErrOrderExists, and the expiry scan pages past orders that stay pending
// (I12). Its optional part runs on stores that implement cancel.Reinstater,
// cancel.DeadlineStore and cancel.WarnStore (late payments, deadline control,
// the expiry warning), with the hostile-but-legal races of each: a late
// callback repeated and raced by a second payment id, a late payment racing
// the seat's sale to another order, an extension racing the timeout, a
// warning redelivered after the payment. Stores that implement
// cancel.BatchCanceller run the batch cases (only the due and pending orders
// of a batch change, a batch racing payments never leaves an order both paid
// and released), seat stores that implement cancel.BatchReleaser the
// ReleaseAll case.
package canceltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
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

// Store is what the suite tests: the cancel.OrderStore, the
// cancel.DiscrepancyStore and the reconciler's read side of them.
type Store interface {
	cancel.OrderStore
	cancel.DiscrepancyStore
	Expired(ctx context.Context, cursor string, limit int) (nos []string, next string, err error)
	Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error)
	Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error)
}

// StoreHarness is one fresh, empty store.
type StoreHarness struct {
	Store Store
	// Place commits a new pending order (in its own transaction).
	Place func(ctx context.Context, p cancel.Placement) error
	// Now reads the store's clock.
	Now func(ctx context.Context) (time.Time, error)
	// CaseFoldingKeys says the store's unique keys on ids fold case, as a
	// host's MySQL/MariaDB table with a *_ci collation does: two seats (or
	// order numbers) that differ only by case are one row for the
	// database. Lookups must still match ids exactly (I10); the suite then
	// expects the second of two such seats to be refused with
	// cancel.ErrSeatUnavailable instead of claimed.
	CaseFoldingKeys bool
	// Resolution is how finely the store keeps a deadline (0: a
	// millisecond). A store that rounds to a coarser one must round up,
	// never down (I4).
	Resolution time.Duration
	// WriteResolution is how finely it keeps an order's last write (the
	// age Statuses answers; 0: a millisecond).
	WriteResolution time.Duration
	// NoWriteTime says the store does not record an order's last write
	// (a Mapping without UpdatedAt): every age is cancel.AgeUnknown.
	NoWriteTime bool
	// NoClaims says the store keeps no seat claims in SQL (a Mapping
	// without a claims table): Claims returns none, and Place cannot refuse
	// a seat another order holds (the seat store does, before it). The
	// suite asserts that Claims is empty and skips what only claims show.
	NoClaims bool
}

var seq atomic.Uint64

// pay is a payment of order no by user (any user: "") with a new payment id.
func pay(no, user string) cancel.Payment {
	return cancel.Payment{OrderNo: no, UserID: user, PaymentID: id("pay")}
}

// orderNos are the order numbers of ps.
func orderNos(ps []cancel.Placement) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.OrderNo
	}
	return out
}

// id returns an id unique within the process run, so suites on shared
// servers never collide.
func id(prefix string) string {
	return fmt.Sprintf("%s-%x-%d", prefix, rand.Uint32(), seq.Add(1))
}

// assertDeadline checks a deadline read back against the one placed: within
// a millisecond, or for a store of a coarser Resolution, rounded up to it.
func assertDeadline(t *testing.T, h StoreHarness, placed, got time.Time, msg ...any) {
	t.Helper()
	if h.Resolution <= time.Millisecond {
		assert.WithinDuration(t, placed, got, time.Millisecond, msg...)
		return
	}
	assert.False(t, got.Before(placed.Truncate(time.Millisecond)), "I4: a deadline is never moved earlier: placed %v, read %v", placed, got)
	assert.Less(t, got.Sub(placed), h.Resolution, msg...)
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
		_, err := h.Store.PayPending(ctx, pay(b.OrderNo, ""))
		require.NoError(t, err)
		st, err := h.Store.Statuses(ctx, []string{a.OrderNo, b.OrderNo, "missing"})
		require.NoError(t, err)
		assert.Equal(t, map[string]expiry.Status{a.OrderNo: expiry.StatusPending, b.OrderNo: expiry.StatusPaid}, statusesOf(st))
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

	runLifecycle(t, setup, place)
	runBatch(t, setup, place)
}

// statusesOf drops the ages of a Statuses answer.
func statusesOf(st map[string]cancel.OrderState) map[string]expiry.Status {
	out := make(map[string]expiry.Status, len(st))
	for no, s := range st {
		out[no] = s.Status
	}
	return out
}
