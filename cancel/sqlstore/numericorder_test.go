package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// numericOrder numbers its orders with an integer column (saleor's
// order_order.number beside its uuid key), and its claims name the order by
// that integer too.
var numericOrder = hostSchema{
	name: "numericorder",
	mapping: sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "int_orders", OrderNo: "number", NumericOrderNo: true, UserID: "buyer", ShowID: "show_id", Status: "status",
			Statuses:  sqlstore.Statuses{Pending: "new", Paid: []any{"paid"}, Cancelled: []any{"cancelled"}},
			Deadline:  sqlstore.Time{Column: "due_at", Type: sqlstore.EpochSeconds},
			UpdatedAt: sqlstore.Time{Column: "modified_at", Type: sqlstore.EpochSeconds},
			PaymentID: "payment_ref", CancelReason: "close_reason",
		},
		Claims: &sqlstore.Claims{Table: "int_order_seats", ShowID: "show_id", SeatID: "seat", OrderNo: "order_number"},
	},
	ddl: func(d sqlstore.Dialect) []string {
		return []string{
			sub(d, `CREATE TABLE int_orders (
				{pk},
				number       BIGINT      NOT NULL,
				buyer        VARCHAR(64) NOT NULL,
				show_id      VARCHAR(64) NOT NULL,
				status       VARCHAR(16) NOT NULL,
				due_at       BIGINT      NOT NULL,
				modified_at  BIGINT      NULL,
				payment_ref  VARCHAR(64) NULL,
				close_reason VARCHAR(32) NULL
			)`),
			"CREATE UNIQUE INDEX int_orders_number ON int_orders (number)",
			"CREATE INDEX int_orders_due ON int_orders (status, due_at, number)",
			`CREATE TABLE int_order_seats (
				show_id      VARCHAR(64) NOT NULL,
				seat         VARCHAR(64) NOT NULL,
				order_number BIGINT      NOT NULL,
				PRIMARY KEY (show_id, seat)
			)`,
			"CREATE INDEX int_order_seats_number ON int_order_seats (order_number)",
		}
	},
	caseFolding: true, // MariaDB's default collation
	resolution:  time.Second,
}

// An integer order-number column: order numbers are the canonical decimal
// form of an int64, any other finds no order and Place refuses it.
func TestNumericOrderNumberColumn(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, numericOrder)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "42", UserID: "u1", ShowID: "sh", Seats: []string{"a1"}, ExpireAt: now.Add(-time.Second)}
			require.NoError(t, placeTx(t, db, s, p))
			bad := p
			bad.OrderNo, bad.Seats = "042", []string{"a2"}
			require.ErrorIs(t, placeTx(t, db, s, bad), expiry.ErrInvalidID, "042 is no number of an integer column")
			o, err := s.Order(ctx, "42")
			require.NoError(t, err)
			assert.Equal(t, "u1", o.UserID)
			for _, no := range []string{"042", "-0", "42.0", "x"} {
				_, err := s.Order(ctx, no)
				assert.ErrorIs(t, err, expiry.ErrNotFound, no)
				res, err := s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				assert.ErrorIs(t, err, expiry.ErrNotFound, no)
				assert.False(t, res.Changed)
			}
			st, err := s.Statuses(ctx, []string{"42", "042", "x"})
			require.NoError(t, err)
			assert.Equal(t, []string{"42"}, keys(st))
			nos, _, err := s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"42"}, nos)
			claims, _, err := s.Claims(ctx, "", 10)
			require.NoError(t, err)
			require.Len(t, claims, 1)
			assert.Equal(t, "42", claims[0].OrderNo)
			res, err := s.PayPending(ctx, cancel.Payment{OrderNo: "42", PaymentID: "P1"})
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.Equal(t, []string{"a1"}, res.Seats)
		})
	}
}

// The whole store suite on it, its order numbers given as numbers, the
// dialects side by side as TestHostSchemas runs them.
func TestNumericOrderNumberSuite(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
				return corpusHarness(t, d, d, numericOrder)
			})
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
