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
// (I12). It tests cancel.OrderStore and cancel.SeatStore whole: the
// optional transitions (late payments, deadline control, the expiry
// warning) with the hostile-but-legal races of each (a late callback
// repeated and raced by a second payment id, a late payment racing the
// seat's sale to another order, an extension racing the timeout, a warning
// redelivered after the payment), skipped, saying so, only for a store that
// answers them with cancel.ErrUnsupported; the batch cases (only the due
// and pending orders of a batch change, a batch racing payments never
// leaves an order both paid and released); ReleaseAll; and the seat
// store's records for when SQL goes back in time. RunHooks is the suite of
// a store's transition hook (cancel.Hook), apart from RunStore.
//
// Interfaces (1): SeatStore, cancel.SeatStore with the reads the seat suite
// checks with. What a suite needs around a store (its clock, a way to lose
// its data) is a field of StoreHarness or SeatsHarness.
//
// # Names
//
// RunStore, RunSeats and RunHooks, the suites; StoreHarness and
// SeatsHarness, what a host's test hands them; the interface above.
package canceltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// StoreHarness is one fresh, empty store.
type StoreHarness struct {
	Store cancel.OrderStore
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
	// HookOutbox, when set, gives RunHooks
	// a write through the hook's transaction and a read of what committed:
	// write adds a row for r.Order.No (and fails on a duplicate), rows
	// returns the order numbers of every row. It prepares what it needs
	// (its table) before it returns. Nil: the suite checks the rollback by
	// the order and its claims only (an in-memory store has no transaction).
	HookOutbox func(t *testing.T) (write func(ctx context.Context, tx cancel.Querier, r cancel.Result) error, rows func(ctx context.Context) ([]string, error))
	// Delete deletes order no's rows as the host's own code does (a closed
	// order archived, or removed by its buyer): the order and its claims,
	// never the library's records of payments. Nil: the cases of a deleted
	// order are skipped.
	Delete func(ctx context.Context, orderNo string) error
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

// setupFunc returns a fresh harness and its store's clock.
type setupFunc func(t *testing.T) (StoreHarness, time.Time)

// placeFunc places an order of user due at expireAt on show-1 (two new
// seats when none are given).
type placeFunc func(t *testing.T, h StoreHarness, user string, expireAt time.Time, seats ...string) cancel.Placement

// RunStore runs the order-store suite, one area per file (transitions.go,
// payments.go, reads.go, lifecycle.go); newHarness must return a fresh store.
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

	runTransitions(t, setup, place)
	runPayments(t, setup, place)
	runReads(t, setup, place)
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
