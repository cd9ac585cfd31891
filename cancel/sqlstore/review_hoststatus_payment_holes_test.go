package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// A hole an outside review of the i19 branch found, kept as a test
// of the test command.

// The host writes the provider's payment id into the order's payment
// column and puts the order in a status of its own ("payment under
// review": the host took the payment and holds the order while its
// fraud check runs). The provider repeats its callback; the library's
// Pay refunds the payment the host took. When the host then writes paid,
// the payment has been both honoured (the order is paid by it, its seats
// sold) and refunded (I14). The library reads that very column to answer a
// repeated callback of a paid order as paid; here it ignores it.
func TestReviewHoleHostStatusPaymentTheHostTookIsRefunded(t *testing.T) {
	c := hostStatusCases[0] // seatflow: pay_no is the mapping's PaymentID
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		rs := redisSeats(t, s)
		b := &refundBook{}
		svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: b.hook(s.Scope()), Runtime: quiet})
		require.NoError(t, err)
		show, u := "ev"+testenv.Unique(), testenv.Unique()
		p := placeHeld(t, c, d, db, s, svc, "R"+u, "u1", show, 0, "r1")
		_, err = db.ExecContext(ctx, bindQ(d, "UPDATE order_info SET pay_no = ? WHERE order_no = ?"), "pay"+u, p.OrderNo)
		require.NoError(t, err)

		for range 2 { // the provider's callback, and its repeat
			_, err = svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "pay" + u})
			assert.NoError(t, err, "I19: the payment the host took, in its review status, is the host's: answered, so the provider stops repeating it")
		}
		c.setStatus(t, db, d, p.OrderNo, int64(1)) // review passed: the host marks it paid
		o, err := s.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		require.Equal(t, expiry.StatusPaid, o.Status)
		res, err := svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "pay" + u})
		t.Logf("repeated after the host paid: %+v %v", res.Order.Status, err)
		assert.Zero(t, b.count(s.Scope(), "pay"+u), "I14: pay%s paid %s (the host wrote it into the order's payment column); it must not be refunded", u, p.OrderNo)
	})
}
