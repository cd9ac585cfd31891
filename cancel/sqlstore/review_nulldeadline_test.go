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
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// An outside review of the i19 branch (40ac3e1: NULL deadlines), on the
// host schemas of host_nulldeadline_test.go, on every dialect.

// NULL deadlines and the operator's deadline controls. An order without a
// deadline (the operator's hand-made order, a deadline the host cleared)
// is "pending and never due until it has one". Extend ("at least In from
// now") finds it later than any time already: nothing to do, no error.
// ExpireNow cancels it at once and frees its seats, and a late payment
// after it is refunded, never reinstated. Nothing of it becomes due by
// itself on the way.
func TestReviewNullDeadlineExtendAndExpireNow(t *testing.T) {
	for _, c := range nullDeadlineCases[:2] { // the schemas with a deadline column of their own
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				s := hostStore(t, db, d, c.hs)
				rs := redisSeats(t, s)
				b := &refundBook{}
				svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: b.hook(s.Scope()), AcceptLatePayments: true, Runtime: quiet})
				require.NoError(t, err)
				now, err := s.Now(ctx)
				require.NoError(t, err)
				show, u := "ev"+testenv.Unique(), testenv.Unique()
				p := cancel.Placement{OrderNo: "N" + u, UserID: "u1", ShowID: show, Seats: []string{"n1"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
				_, err = db.ExecContext(ctx, bindQ(d, "UPDATE "+c.table+" SET "+c.col+" = NULL WHERE "+c.no+" = ?"+c.where), p.OrderNo)
				require.NoError(t, err)

				res, err := svc.Extend(ctx, p.OrderNo, "", time.Minute)
				require.NoError(t, err)
				assert.False(t, res.Changed, "an order with no deadline is not given one by an extension")
				o, err := s.Order(ctx, p.OrderNo)
				require.NoError(t, err)
				assert.True(t, o.ExpireAt.IsZero(), "still no deadline, not %v", o.ExpireAt)

				ex, err := svc.ExpireNow(ctx, p.OrderNo)
				require.NoError(t, err)
				assert.True(t, ex.Changed, "ExpireNow cancels an order with no deadline")
				assert.Empty(t, holder(t, rs, show, "n1"), "I2: its seat is freed")
				n, err := rs.Held(ctx, show, "u1")
				require.NoError(t, err)
				assert.Zero(t, n, "I8")
				_, err = svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "late" + u})
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "after ExpireNow a late payment is refunded")
				assert.Equal(t, 1, b.count(s.Scope(), "late"+u), "I9: once")
			})
		})
	}
}
