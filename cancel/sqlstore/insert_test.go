package sqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// sentLog is a DelaySender that records the order numbers it was given.
type sentLog struct {
	mu  sync.Mutex
	nos []string
}

func (s *sentLog) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nos = append(s.nos, m.OrderNo)
	return nil
}

func (s *sentLog) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nos...)
}

// Insert on every dialect (one statement on PostgreSQL, a transaction
// elsewhere): the order and every claim commit together, its message is sent
// once it has committed; a number placed already is ErrOrderExists and a seat
// claimed by a live order ErrSeatUnavailable, and neither leaves a row or
// sends a message (I6).
func TestInsertPlacesOrderAndClaimsTogether(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s, err := sqlstore.New(db, d)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			log := &sentLog{}
			sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: log})
			require.NoError(t, err)
			insert := s.Insert(db, sched, nil)
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
			assert.Equal(t, []string{"A"}, log.sent())

			err = insert(ctx, p("A", "b1"))
			assert.ErrorIs(t, err, cancel.ErrOrderExists)
			assert.Zero(t, count("oe_order_seat", "B"))
			err = insert(ctx, p("C", "c1", "a2"))
			assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
			assert.Zero(t, count("oe_order", "C"), "the order goes with its claims")
			assert.Zero(t, count("oe_order_seat", "C"))
			assert.Equal(t, 3, count("oe_order_seat", "A"), "the live order keeps its claims")
			assert.Equal(t, []string{"A"}, log.sent(), "no message for an order that was not placed")

			// More seats than are kept prepared, and one seat.
			many := make([]string, cancel.MaxSeats)
			for i := range many {
				many[i] = "m" + string(rune('A'+i/26)) + string(rune('a'+i%26))
			}
			require.NoError(t, insert(ctx, p("M", many...)))
			require.NoError(t, insert(ctx, p("D", "d1")))
			assert.Equal(t, cancel.MaxSeats, count("oe_order_seat", "M"))
			assert.Equal(t, 1, count("oe_order_seat", "D"))
			assert.Equal(t, []string{"A", "M", "D"}, log.sent())
		})
	}
}
