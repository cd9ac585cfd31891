package cancel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// An outside review of fbc1d86 (the stores taken whole): the discrepancy
// record written without a hook, the seat store's refund record always
// read, a late payment refunded when the store cannot reinstate. Judged by
// money (refund hook calls per payment id, what paid) and seats.

// book counts refund hook calls per payment id.
type book struct {
	mu sync.Mutex
	n  map[string]int
}

func (b *book) hook(_ context.Context, d cancel.Discrepancy) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[string]int{}
	}
	b.n[d.PaymentID]++
	return nil
}

func (b *book) of(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[id]
}

// A host runs without a refund hook (it refunds by hand from Pay's
// ErrDiscrepancy), then deploys one. The records written meanwhile are the
// order store's now: the hook-less Service records each payment once and
// never claims them (RetryDiscrepancies does nothing without a hook), so
// its repeated callbacks never look "tried". Once a Service with a hook
// runs, each recorded payment is refunded exactly once however the
// provider repeats it, and a payment that paid is never refunded (I9,
// I14). The KindDiscrepancy event is counted once per payment.
//
// Note: the backlog recorded before the hook is refunded by the hook when
// it arrives; a host that had refunded those by hand must key its manual
// refunds by PaymentID at the provider (I9) or settle them first.
func TestReviewDiscrepanciesWithoutHookThenHook(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	ev := &expirytest.Recorder{}
	bare, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	place := func(no string) {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no + "a"}, ExpireAt: time.Now().Add(time.Hour)}
		require.NoError(t, bare.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	}
	place("c1")
	_, err = bare.UserCancel(ctx, "c1", "u1")
	require.NoError(t, err)
	place("p1")
	_, err = bare.Pay(ctx, pay("p1", "", "pay-ok"))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err = bare.Pay(ctx, pay("c1", "", "pay-late"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		_, err = bare.Pay(ctx, pay("gone", "", "pay-gone"))
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		res, err := bare.Pay(ctx, pay("p1", "", "pay-ok"))
		assert.NoError(t, err, "the payment that paid p1, repeated")
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
	}
	assert.Equal(t, 2, ev.Count(expiry.KindDiscrepancy), "one per payment id, not per repeat")
	n, err := bare.RetryDiscrepancies(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n)

	b := &book{}
	hooked, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: b.hook, DiscrepancyLease: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = hooked.RetryDiscrepancies(ctx, 10) }()
		go func() { defer wg.Done(); _, _ = hooked.Pay(ctx, pay("c1", "", "pay-late")) }()
	}
	wg.Wait()
	time.Sleep(5 * time.Millisecond)
	for i := 0; i < 3; i++ {
		_, err := hooked.RetryDiscrepancies(ctx, 10)
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond)
	}
	assert.Equal(t, 1, b.of("pay-late"), "I9: refunded once")
	assert.Equal(t, 1, b.of("pay-gone"), "I9: refunded once")
	assert.Zero(t, b.of("pay-ok"), "I14: it paid p1")
	for _, id := range []string{"pay-late", "pay-gone"} {
		r, err := seats.Refunded(ctx, id)
		require.NoError(t, err)
		assert.True(t, r, "%s: the seat store records the refund", id)
	}
}

// unsupported is a host's order store that cannot reinstate; with claims
// true its ReinstateCancelled first takes the seats through the Service's
// claim (as a store does inside its transaction) and then gives up with
// ErrUnsupported, as a store may when it finds it cannot keep them.
type unsupported struct {
	*memstore.Store
	claims bool
}

func (u unsupported) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(context.Context, cancel.Hold, int) (string, error)) (cancel.Result, error) {
	if u.claims {
		o, err := u.Store.Order(ctx, p.OrderNo)
		if err != nil {
			return cancel.Result{}, err
		}
		if _, err := claim(ctx, cancel.Hold{ShowID: o.ShowID, OrderNo: o.No, UserID: o.UserID, Seats: []string{p.OrderNo + "a"}}, 0); err != nil {
			return cancel.Result{}, err
		}
	}
	return cancel.Result{}, fmt.Errorf("the host's store: reinstate %s: %w", p.OrderNo, cancel.ErrUnsupported)
}

// A late payment (policy on) for an order its timeout cancelled, on a
// store that cannot reinstate (ErrUnsupported), repeated by the provider
// from eight goroutines at once: refunded exactly once, never honoured;
// the order stays cancelled; its seats stay free and uncounted (a claim the
// store took before giving up is given back); a second payment of the same
// order is a second refund; a buyer may take the seats afterwards (I8,
// I9, I14, I15).
func TestReviewLatePaymentUnsupportedRefundedOnce(t *testing.T) {
	for _, claims := range []bool{false, true} {
		t.Run(map[bool]string{false: "refuses", true: "claims-then-refuses"}[claims], func(t *testing.T) {
			ctx := context.Background()
			store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
			b := &book{}
			svc, err := cancel.New(cancel.Config{Store: unsupported{Store: store, claims: claims}, Seats: seats, AcceptLatePayments: true, OnDiscrepancy: b.hook})
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"o1a"}, ExpireAt: time.Now().Add(-time.Second), Limit: 1}
			require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
			changed, _, err := svc.Timeout(ctx, "o1")
			require.NoError(t, err)
			require.True(t, changed)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = svc.Pay(ctx, pay("o1", "", "late-1"))
				}()
			}
			wg.Wait()
			for _, err := range errs {
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
			}
			_, err = svc.Pay(ctx, pay("o1", "", "late-2"))
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.Equal(t, 1, b.of("late-1"), "I9: once")
			assert.Equal(t, 1, b.of("late-2"), "I9: once")
			o, err := store.Order(ctx, "o1")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusCancelled, o.Status, "I14: never honoured")
			show, err := seats.Show(ctx, "s")
			require.NoError(t, err)
			assert.Empty(t, show, "I15: the refused reinstatement holds no seat")
			n, err := seats.Held(ctx, "s", "u1")
			require.NoError(t, err)
			assert.Zero(t, n, "I8")
			p2 := cancel.Placement{OrderNo: "o2", UserID: "u1", ShowID: "s", Seats: []string{"o1a"}, ExpireAt: time.Now().Add(time.Hour), Limit: 1}
			require.NoError(t, svc.Place(ctx, p2, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }), "the seat is free for the buyer again, within the limit")
		})
	}
}
