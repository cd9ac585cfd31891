package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// softDelete is an ORM's table with a soft delete (GORM's gorm.Model): a
// row whose deleted_at is set is deleted for the host, so it must be for
// the library too (Condition IsNull). No claims table.
var softDelete = hostSchema{
	name: "softdelete",
	mapping: sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "gorm_orders", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
		Statuses:  sqlstore.Statuses{Pending: "pending", Paid: []any{"paid"}, Cancelled: []any{"cancelled", "expired"}, CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "expired", cancel.ReasonReconcile: "expired"}},
		Deadline:  sqlstore.Time{Column: "expire_at", Type: sqlstore.DateTimeUTC},
		CreatedAt: sqlstore.Time{Column: "created_at", Type: sqlstore.DateTimeUTC},
		UpdatedAt: sqlstore.Time{Column: "updated_at", Type: sqlstore.DateTimeUTC},
		Where:     []sqlstore.Condition{{Column: "deleted_at", Value: sqlstore.IsNull}},
	}},
	ddl: func(d sqlstore.Dialect) []string {
		return []string{
			sub(d, `CREATE TABLE gorm_orders (
				{pk},
				created_at {dt} NULL,
				updated_at {dt} NULL,
				deleted_at {dt} NULL,
				order_no   VARCHAR(64) NOT NULL,
				user_id    VARCHAR(64) NOT NULL,
				show_id    VARCHAR(64) NOT NULL,
				status     VARCHAR(16) NOT NULL,
				expire_at  {dt} NOT NULL
			)`),
			"CREATE UNIQUE INDEX gorm_orders_no ON gorm_orders (order_no)",
			"CREATE INDEX gorm_orders_due ON gorm_orders (deleted_at, status, expire_at, order_no)",
		}
	},
	resolution: time.Second,
}

// A soft-deleted order is invisible to the library: not found, never
// expired, cancelled or paid, absent from Statuses; Place writes NULL.
func TestSoftDeletedOrdersAreInvisible(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, softDelete)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			for _, no := range []string{"live", "gone"} {
				require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "sh", Seats: []string{no}, ExpireAt: now.Add(-time.Minute)}))
			}
			var nulls int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM gorm_orders WHERE deleted_at IS NULL").Scan(&nulls))
			require.Equal(t, 2, nulls, "Place writes no deletion time")
			_, err = db.Exec(rebindQ(d, "UPDATE gorm_orders SET deleted_at = updated_at WHERE order_no = ?"), "gone")
			require.NoError(t, err)

			_, err = s.Order(ctx, "gone")
			require.ErrorIs(t, err, expiry.ErrNotFound, "a soft-deleted order is not found")
			o, err := s.Order(ctx, "live")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPending, o.Status)

			nos, _, err := s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"live"}, nos, "the scan sees only the live order")
			st, err := s.Statuses(ctx, []string{"live", "gone"})
			require.NoError(t, err)
			assert.Contains(t, st, "live")
			assert.NotContains(t, st, "gone")

			_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "gone", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.ErrorIs(t, err, expiry.ErrNotFound)
			_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "gone", PaymentID: "p-gone"})
			require.ErrorIs(t, err, expiry.ErrNotFound)
			var status string
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT status FROM gorm_orders WHERE order_no = ?"), "gone").Scan(&status))
			assert.Equal(t, "pending", status, "the deleted row is left as it was")

			res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "live", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.Equal(t, []string{"live"}, res.Seats, "the side table's seats")
		})
	}
}

// A unique key that holds the soft-delete column does not make the order
// number unique (NULLs are distinct in a unique key): Check says so, and
// the column may still lead the scan's index.
func TestSoftDeleteCheck(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			var ddl []string
			for _, q := range softDelete.ddl(d) {
				if q == "CREATE UNIQUE INDEX gorm_orders_no ON gorm_orders (order_no)" {
					q = "CREATE UNIQUE INDEX gorm_orders_no ON gorm_orders (order_no, deleted_at)"
				}
				ddl = append(ddl, q)
			}
			applyDDL(t, db, ddl)
			s, err := sqlstore.New(db, d, softDelete.mapping)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			assert.EqualError(t, s.Check(ctx), checkErrText([]string{
				"orders table gorm_orders: the order number order_no is not unique: want a unique key on (order_no) (the condition columns [] may join it)",
			}))
		})
	}
}
