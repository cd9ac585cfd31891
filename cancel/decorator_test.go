package cancel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// A host wraps its stores in decorators of its own: metrics, tracing, a
// circuit breaker. These two are written as a host writes them, forwarding
// every method by hand (no embedding, which would forward what the author
// never saw), and count the calls. They must compile against the library's
// two store interfaces, and the stores behind them must keep every
// guarantee: the conformance suites pass through them, and the two
// guarantees an optional interface found by type assertion used to lose
// behind a wrapper (a late payment's reinstatement; the seat store's refund
// record when SQL went back in time) still hold.

// calls counts a decorator's calls per method.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *calls) of(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

type meteredOrders struct {
	inner cancel.OrderStore
	c     *calls
}

var _ cancel.OrderStore = meteredOrders{}

func (m meteredOrders) Order(ctx context.Context, no string) (expiry.Order, error) {
	m.c.add("Order")
	return m.inner.Order(ctx, no)
}

func (m meteredOrders) CancelPending(ctx context.Context, r cancel.Request) (cancel.Result, error) {
	m.c.add("CancelPending")
	return m.inner.CancelPending(ctx, r)
}

func (m meteredOrders) CancelDue(ctx context.Context, nos []string, r cancel.Reason) ([]cancel.Result, error) {
	m.c.add("CancelDue")
	return m.inner.CancelDue(ctx, nos, r)
}

func (m meteredOrders) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	m.c.add("PayPending")
	return m.inner.PayPending(ctx, p)
}

func (m meteredOrders) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(context.Context, cancel.Hold, int) (string, error)) (cancel.Result, error) {
	m.c.add("ReinstateCancelled")
	return m.inner.ReinstateCancelled(ctx, p, claim)
}

func (m meteredOrders) SetDeadline(ctx context.Context, d cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	m.c.add("SetDeadline")
	return m.inner.SetDeadline(ctx, d)
}

func (m meteredOrders) MarkWarned(ctx context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	m.c.add("MarkWarned")
	return m.inner.MarkWarned(ctx, no, lead)
}

func (m meteredOrders) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	m.c.add("RecordDiscrepancy")
	return m.inner.RecordDiscrepancy(ctx, d)
}

func (m meteredOrders) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	m.c.add("ClaimDiscrepancies")
	return m.inner.ClaimDiscrepancies(ctx, lease, limit)
}

func (m meteredOrders) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	m.c.add("SettleDiscrepancy")
	return m.inner.SettleDiscrepancy(ctx, paymentID)
}

func (m meteredOrders) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	m.c.add("Expired")
	return m.inner.Expired(ctx, cursor, limit)
}

func (m meteredOrders) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	m.c.add("Statuses")
	return m.inner.Statuses(ctx, nos)
}

func (m meteredOrders) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	m.c.add("Claims")
	return m.inner.Claims(ctx, cursor, limit)
}

func (m meteredOrders) Scope() string { return m.inner.Scope() }

type meteredSeats struct {
	inner cancel.SeatStore
	c     *calls
}

var _ cancel.SeatStore = meteredSeats{}

func (m meteredSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	m.c.add("Lock")
	return m.inner.Lock(ctx, h, limit)
}

func (m meteredSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	m.c.add("Release")
	return m.inner.Release(ctx, h)
}

func (m meteredSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	m.c.add("ReleaseAll")
	return m.inner.ReleaseAll(ctx, holds)
}

func (m meteredSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	m.c.add("Sell")
	return m.inner.Sell(ctx, h)
}

func (m meteredSeats) SeatStates(ctx context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	m.c.add("SeatStates")
	return m.inner.SeatStates(ctx, show, seats)
}

func (m meteredSeats) Refunded(ctx context.Context, paymentID string) (bool, error) {
	m.c.add("Refunded")
	return m.inner.Refunded(ctx, paymentID)
}

func (m meteredSeats) MarkRefunded(ctx context.Context, paymentID, orderNo string) error {
	m.c.add("MarkRefunded")
	return m.inner.MarkRefunded(ctx, paymentID, orderNo)
}

func (m meteredSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	m.c.add("ScanLocks")
	return m.inner.ScanLocks(ctx, cursor, count)
}

func (m meteredSeats) ScanSold(ctx context.Context, cursor string, count int) ([]cancel.SeatSale, string, error) {
	m.c.add("ScanSold")
	return m.inner.ScanSold(ctx, cursor, count)
}

func (m meteredSeats) Lost(ctx context.Context) (string, bool, error) {
	m.c.add("Lost")
	return m.inner.Lost(ctx)
}

func (m meteredSeats) MarkRestored(ctx context.Context, token string) error {
	m.c.add("MarkRestored")
	return m.inner.MarkRestored(ctx, token)
}

func (m meteredSeats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	m.c.add("Missing")
	return m.inner.Missing(ctx, claims)
}

func (m meteredSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	m.c.add("Restore")
	return m.inner.Restore(ctx, claims)
}

func (m meteredSeats) Scope() string { return m.inner.Scope() }

// checkedSeats is meteredSeats with the reads the seat suite checks with,
// taken from the store behind it.
type checkedSeats struct {
	meteredSeats
	s *memstore.Seats
}

func (c checkedSeats) RetireShow(ctx context.Context, show string) error {
	return c.s.RetireShow(ctx, show)
}

func (c checkedSeats) Show(ctx context.Context, show string) (map[string]cancel.SeatState, error) {
	return c.s.Show(ctx, show)
}

func (c checkedSeats) Held(ctx context.Context, show, user string) (int, error) {
	return c.s.Held(ctx, show, user)
}

func (c checkedSeats) ListedShows(ctx context.Context) ([]string, error) {
	return c.s.ListedShows(ctx)
}

func TestDecoratedStoresPassTheSuites(t *testing.T) {
	c := &calls{}
	t.Run("OrderStore", func(t *testing.T) {
		canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
			s := memstore.NewStore(nil)
			return canceltest.StoreHarness{Store: meteredOrders{s, c}, Place: s.Place, Now: s.Now}
		})
	})
	t.Run("SeatStore", func(t *testing.T) {
		canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
			s := memstore.NewSeats(nil)
			return canceltest.SeatsHarness{Seats: checkedSeats{meteredSeats{s, c}, s}, Now: s.Now, Wipe: s.Wipe}
		})
	})
	// The suites went through the decorators, the optional transitions and
	// the records for SQL going back in time included (none was skipped).
	for _, name := range []string{"CancelDue", "ReinstateCancelled", "SetDeadline", "MarkWarned", "ClaimDiscrepancies",
		"ReleaseAll", "SeatStates", "Refunded", "MarkRefunded", "ScanSold", "Missing", "Restore"} {
		assert.Positive(t, c.of(name), "the suites called %s through the decorator", name)
	}
}

// The two guarantees a wrapper used to lose in silence, through the
// Service: a late payment for an order its timeout cancelled reinstates it
// (no refund); and after SQL went back in time and forgot a refund, the
// provider's repeat of that payment is not refunded again.
func TestDecoratedStoresKeepTheGuarantees(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	store, seats := memstore.NewStore(now), memstore.NewSeats(now)
	c := &calls{}
	var mu sync.Mutex
	refunds := map[string]int{}
	svc, err := cancel.New(cancel.Config{Store: meteredOrders{store, c}, Seats: meteredSeats{seats, c}, AcceptLatePayments: true,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			mu.Lock()
			defer mu.Unlock()
			refunds[d.PaymentID]++
			return nil
		}})
	require.NoError(t, err)
	place := func(no, seat string) {
		p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: "s", Seats: []string{seat}, ExpireAt: clock.Add(time.Minute)}
		require.NoError(t, svc.Place(ctx, p, store.Place))
	}

	// A late payment reinstates.
	place("late", "a1")
	clock = clock.Add(2 * time.Minute)
	cancelled, _, err := svc.Timeout(ctx, "late")
	require.NoError(t, err)
	require.True(t, cancelled)
	res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "late", UserID: "u-late", PaymentID: "pay-late"})
	require.NoError(t, err)
	assert.True(t, res.Changed, "reinstated, not refunded")
	st, err := seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, cancel.SeatSold, st["a1"].Status)
	assert.Equal(t, "late", st["a1"].OrderNo)

	// SQL goes back in time after a refund.
	place("gone", "b1")
	_, err = svc.UserCancel(ctx, "gone", "u-gone")
	require.NoError(t, err)
	restore := store.Snapshot()
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "gone", UserID: "u-gone", PaymentID: "pay-gone"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	restore() // the failover lost the discrepancy's record
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "gone", UserID: "u-gone", PaymentID: "pay-gone"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	mu.Lock()
	assert.Equal(t, map[string]int{"pay-gone": 1}, refunds, "I9: refunded once, although SQL forgot it; the late payment never")
	mu.Unlock()
	assert.Positive(t, c.of("ReinstateCancelled"))
	assert.Positive(t, c.of("Refunded"))
	assert.Positive(t, c.of("MarkRefunded"))
}
