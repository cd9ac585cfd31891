package cancel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// A cancel reports the order's deadline and the store's clock at the
// cancel, so its lateness is measured by the store's clock alone.
func TestCancelReportsLatenessByTheStoresClock(t *testing.T) {
	ctx := context.Background()
	storeNow := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	store, seats := memstore.NewStore(func() time.Time { return storeNow }), memstore.NewSeats(nil)
	log := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: log}})
	require.NoError(t, err)
	for _, no := range []string{"late", "early"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no}, ExpireAt: storeNow.Add(-2500 * time.Millisecond)}
		if no == "early" {
			p.ExpireAt = storeNow.Add(time.Minute)
		}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	}
	ok, _, err := svc.Timeout(ctx, "late")
	require.NoError(t, err)
	require.True(t, ok)
	_, err = svc.UserCancel(ctx, "early", "u1")
	require.NoError(t, err)

	cancelled := log.Of(expiry.KindCancelled)
	require.Len(t, cancelled, 2)
	late, known := cancelled[0].Lateness()
	assert.True(t, known)
	assert.Equal(t, 2500*time.Millisecond, late, "2.5 s past its deadline by the store's clock")
	assert.Equal(t, "timeout", cancelled[0].Reason)
	early, known := cancelled[1].Lateness()
	assert.True(t, known)
	assert.Equal(t, -time.Minute, early, "the user cancelled a minute before the deadline")
	for _, e := range cancelled {
		assert.Equal(t, 1, e.Seats, "%s: the seats the cancel freed", e.OrderNo)
	}
}

// A refund is counted when the hook succeeded and the record is settled,
// once per payment id however often the callback repeats.
func TestRefundedOncePerPayment(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	log := &expirytest.Recorder{}
	fail := true
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: log}, DiscrepancyLease: time.Nanosecond,
		OnDiscrepancy: func(context.Context, cancel.Discrepancy) error {
			if fail {
				return assert.AnError
			}
			return nil
		}})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a"}, ExpireAt: time.Now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	_, _, err = svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "o1", PaymentID: "p1"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	if found := log.Of(expiry.KindDiscrepancy); assert.Len(t, found, 1) {
		assert.Equal(t, "paid_after_cancelled", found[0].Reason, "what the payment met")
	}
	assert.Len(t, log.Of(expiry.KindHookFailed), 1)
	assert.Empty(t, log.Of(expiry.KindRefunded), "the hook failed: no refund yet")
	fail = false
	require.Eventually(t, func() bool {
		n, err := svc.RetryDiscrepancies(ctx, 10)
		return err == nil && n == 1
	}, 5*time.Second, time.Millisecond)
	for range 3 {
		_, _ = svc.Pay(ctx, cancel.Payment{OrderNo: "o1", PaymentID: "p1"})
		_, _ = svc.RetryDiscrepancies(ctx, 10)
	}
	refunded := log.Of(expiry.KindRefunded)
	require.Len(t, refunded, 1)
	assert.Equal(t, "o1", refunded[0].OrderNo)
}
