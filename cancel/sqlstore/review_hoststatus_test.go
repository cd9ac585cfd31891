package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// An outside review of the i19 branch (40ac3e1: statuses the host owns),
// on the host schemas of host_status_test.go, on every dialect, judged by
// the host's rows, money and the seat store.

// placeHeld places an order on c's schema and puts it in the host's status.
func placeHeld(t *testing.T, c hostStatusCase, d sqlstore.Dialect, db *sql.DB, s *sqlstore.Store, svc *cancel.Service, no, user, show string, limit int, seats ...string) cancel.Placement {
	ctx := context.Background()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: seats, ExpireAt: now.Add(time.Hour), Limit: limit}
	require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
	c.setStatus(t, db, d, no, c.hold)
	return p
}

// A payment for an order in the host's status, repeated by the provider
// while the host flips the order between its status and pending, and a
// reconcile round runs after each flip: the payment is decided once,
// refunded once (I9), never honoured after its refund (I14); the order's
// seat never freed or sold while it is pending or the host's (I2, I15,
// I19); the buyer's counter stays 1 (I8).
func TestReviewHostStatusPaymentWhileFlipping(t *testing.T) {
	c := hostStatusCases[0]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		rs := redisSeats(t, s)
		b := &refundBook{}
		svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: b.hook(s.Scope()), AcceptLatePayments: true, Runtime: quiet})
		require.NoError(t, err)
		r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Settle: time.Millisecond, Grace: time.Minute, Runtime: quiet})
		require.NoError(t, err)
		show, u := "ev"+testenv.Unique(), testenv.Unique()
		p := placeHeld(t, c, d, db, s, svc, "F"+u, "u1", show, 1, "f1")
		paid := false
		for i := 0; i < 6; i++ {
			switch {
			case i%2 == 1:
				c.setStatus(t, db, d, p.OrderNo, c.pending)
			case i > 0:
				c.setStatus(t, db, d, p.OrderNo, c.hold)
			}
			res, err := svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "pay" + u})
			if err == nil && res.Order.Status == expiry.StatusPaid {
				paid = true
			}
			_, err = r.Round(ctx)
			require.NoError(t, err)
			if !paid {
				assert.Equal(t, "locked:"+p.OrderNo, holder(t, rs, show, "f1"), "flip %d: I19: the seat stays the order's", i)
				n, err := rs.Held(ctx, show, "u1")
				require.NoError(t, err)
				assert.Equal(t, 1, n, "flip %d: I8", i)
			}
		}
		assert.False(t, paid, "I14: the first delivery found the order the host's: refunded, never honoured later")
		assert.Equal(t, 1, b.count(s.Scope(), "pay"+u), "I9: refunded once")
	})
}
