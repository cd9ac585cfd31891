package cancel_test

// Review 16 of d2be752 on the in-memory stores (memstore's PayPending now
// also answers from the payment's decision when the order under the number
// is paid by another): the host deletes a paid order and reuses its
// number. Judged by who paid, who was refunded, and Pay's error.

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

type r16Mem struct {
	st      *memstore.Store
	svc     *cancel.Service
	mu      sync.Mutex
	refunds map[string]int
}

func newR16Mem(t *testing.T, late bool) *r16Mem {
	e := &r16Mem{st: memstore.NewStore(nil), refunds: map[string]int{}}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.st, Seats: memstore.NewSeats(nil), AcceptLatePayments: late,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.refunds[d.PaymentID]++
			return nil
		}})
	require.NoError(t, err)
	return e
}

func (e *r16Mem) refunded(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refunds[id]
}

func (e *r16Mem) place(t *testing.T, no, user, seat string) {
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "sh", Seats: []string{seat}, ExpireAt: time.Now().Add(time.Hour)}
	require.NoError(t, e.svc.Place(context.Background(), p, e.st.Place))
}

// reuse: P1 pays N (u1); the host deletes N and places u2's order under N.
func (e *r16Mem) reuse(t *testing.T) cancel.Payment {
	ctx := context.Background()
	e.place(t, "N1", "u1", "a1")
	p1 := cancel.Payment{OrderNo: "N1", UserID: "u1", PaymentID: "pay-m"}
	r, err := e.svc.Pay(ctx, p1)
	require.NoError(t, err)
	require.True(t, r.Changed)
	require.True(t, e.st.DeleteOrder("N1"))
	e.place(t, "N1", "u2", "a2")
	return p1
}

// TestReview16MemThirdPaymentRefundedOnce (I9, I14): the new order paid by
// P2; P3 is refunded once however often repeated, P1 and P2 are answered.
func TestReview16MemThirdPaymentRefundedOnce(t *testing.T) {
	ctx := context.Background()
	e := newR16Mem(t, false)
	p1 := e.reuse(t)
	p2 := cancel.Payment{OrderNo: "N1", PaymentID: "pay-a"}
	r, err := e.svc.Pay(ctx, p2)
	require.NoError(t, err)
	require.True(t, r.Changed)
	p3 := cancel.Payment{OrderNo: "N1", PaymentID: "pay-z"}
	for i := 0; i < 3; i++ {
		a, err := e.svc.Pay(ctx, p3)
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "answer %+v", a)
		for _, p := range []cancel.Payment{p1, p2, {OrderNo: "N1", PaymentID: p1.PaymentID}} {
			a, err := e.svc.Pay(ctx, p)
			assert.NoError(t, err)
			assert.Equal(t, p.PaymentID, a.PaymentID)
		}
	}
	assert.Equal(t, 1, e.refunded(p3.PaymentID))
	assert.Equal(t, 0, e.refunded(p1.PaymentID))
	assert.Equal(t, 0, e.refunded(p2.PaymentID))
	// P1 named with the new buyer is never u2's payment.
	a, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "N1", UserID: "u2", PaymentID: p1.PaymentID})
	assert.False(t, err == nil && a.Order.UserID == "u2", "answer %+v err %v", a, err)
}

// TestReview16MemOldPaymentRepeatWhenNewOrderCancelled (I14, the change's
// aim, memstore): the new order under the reused number is cancelled by
// its timeout. P1's repeat is answered (it paid the old order), pays
// nothing, never refunded; with AcceptLatePayments it never reinstates the
// new order.
func TestReview16MemOldPaymentRepeatWhenNewOrderCancelled(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "strict", true: "late"}[late], func(t *testing.T) {
			ctx := context.Background()
			e := newR16Mem(t, late)
			p1 := e.reuse(t)
			r, err := e.svc.Cancel(ctx, cancel.Request{OrderNo: "N1", Reason: cancel.ReasonTimeout})
			require.NoError(t, err)
			require.True(t, r.Changed)
			for _, p := range []cancel.Payment{p1, {OrderNo: "N1", PaymentID: p1.PaymentID}} {
				a, err := e.svc.Pay(ctx, p)
				assert.NoError(t, err, "I14: honoured P1's repeat is answered, not ErrDiscrepancy for ever (answer %+v)", a)
			}
			o, err := e.st.Order(ctx, "N1")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusCancelled, o.Status, "P1 pays nothing of the new order")
			assert.Equal(t, 0, e.refunded(p1.PaymentID))
		})
	}
}
