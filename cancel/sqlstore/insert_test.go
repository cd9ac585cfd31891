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

// Insert on every dialect (one statement on PostgreSQL, a transaction
// elsewhere): the order and every claim commit together; a number placed
// already is ErrOrderExists and a seat claimed by a live order
// ErrSeatUnavailable, and neither leaves a row. (Insert sends nothing:
// cancel.Service.Place sends once it returned nil.)
func TestInsertPlacesOrderAndClaimsTogether(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s, err := sqlstore.New(db, d)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			insert := s.Insert(db, nil)
			at := time.Now().Add(time.Hour).Truncate(time.Second)
			p := func(no string, seats ...string) cancel.Placement {
				return cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: seats, ExpireAt: at, Limit: 4, LockID: "1.1"}
			}
			count := func(q string, arg string) int {
				var n int
				if d == sqlstore.Postgres {
					q = "SELECT COUNT(*) FROM " + q + " WHERE order_no = $1"
				} else {
					q = "SELECT COUNT(*) FROM " + q + " WHERE order_no = ?"
				}
				require.NoError(t, db.QueryRowContext(ctx, q, arg).Scan(&n))
				return n
			}

			require.NoError(t, insert(ctx, p("A", "a1", "a2", "a3")))
			o, err := s.Order(ctx, "A")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPending, o.Status)
			assert.Equal(t, 3, count("oe_order_seat", "A"), "every claim")

			err = insert(ctx, p("A", "b1"))
			assert.ErrorIs(t, err, cancel.ErrOrderExists)
			assert.Zero(t, count("oe_order_seat", "B"))
			err = insert(ctx, p("C", "c1", "a2"))
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
			assert.Zero(t, count("oe_order", "C"), "the order goes with its claims")
			assert.Zero(t, count("oe_order_seat", "C"))
			assert.Equal(t, 3, count("oe_order_seat", "A"), "the live order keeps its claims")

			// More seats than are kept prepared, and one seat.
			many := make([]string, cancel.MaxSeats)
			for i := range many {
				many[i] = "m" + string(rune('A'+i/26)) + string(rune('a'+i%26))
			}
			require.NoError(t, insert(ctx, p("M", many...)))
			require.NoError(t, insert(ctx, p("D", "d1")))
			assert.Equal(t, cancel.MaxSeats, count("oe_order_seat", "M"))
			assert.Equal(t, 1, count("oe_order_seat", "D"))
		})
	}
}
