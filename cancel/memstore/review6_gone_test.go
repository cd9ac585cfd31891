package memstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// TestReview6RefundedPaymentOfDeletedOrderIsNeverAnsweredPaid (I14, memstore,
// the caveat of 6d60c3e): SQL (Snapshot) goes back in time to when the
// order was pending, after P was refunded; P's repeat is refused by
// refusedBefore, which records the refund with Status pending (settled: the
// seat store's record says refunded). The host deletes the order; then the
// seat store loses its data (Wipe: a Redis restart without persistence,
// I13). P's next repeat: memstore's PayPending finds a settled decision
// with Status pending for this order and answers P as the payment that
// paid it: a refunded payment answered honoured. Before the change it was
// ErrDiscrepancy (recorded before).
func TestReview6RefundedPaymentOfDeletedOrderIsNeverAnsweredPaid(t *testing.T) {
	ctx := context.Background()
	st := memstore.NewStore(nil)
	seats := memstore.NewSeats(nil)
	var mu sync.Mutex
	refunds := map[string]int{}
	svc, err := cancel.New(cancel.Config{Store: st, Seats: seats, OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
		mu.Lock()
		defer mu.Unlock()
		refunds[d.PaymentID]++
		return nil
	}})
	require.NoError(t, err)
	o := cancel.Placement{OrderNo: "G1", UserID: "u1", ShowID: "s1", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, o, st.Place))
	backup := st.Snapshot()
	_, err = svc.UserCancel(ctx, o.OrderNo, "u1")
	require.NoError(t, err)
	pay := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-1"}
	_, err = svc.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, refunds[pay.PaymentID])

	backup() // SQL goes back in time
	_, err = svc.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "refusedBefore")

	require.True(t, st.DeleteOrder(o.OrderNo)) // the host deletes the order
	seats.Wipe()                               // Redis restarts without persistence

	res, err := svc.Pay(ctx, pay)
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: a refunded payment is never answered as honoured (answer %+v)", res)
	assert.NotEqual(t, expiry.StatusPaid, res.Order.Status)
	mu.Lock()
	assert.Equal(t, 1, refunds[pay.PaymentID], "refunded once")
	mu.Unlock()
}
