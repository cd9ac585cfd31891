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
)

// A gap an outside review of the i19 branch found (NULL deadlines), kept as a
// test of the test command.

// Shorten on an order with no deadline (NULL: the operator's hand-made
// order) must give it one: it is due later than any time, so "at most
// atMost from now" moves it. It changed nothing (Changed false, no error),
// so no library call could make the order expire, short of ExpireNow.
func TestReviewHoleNullDeadlineShortenGivesOne(t *testing.T) {
	for _, c := range nullDeadlineCases[:2] {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				s := hostStore(t, db, d, c.hs)
				rs := redisSeats(t, s)
				sent := &countingSender{}
				sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent, Runtime: quiet})
				require.NoError(t, err)
				svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, Scheduler: sched, Runtime: quiet})
				require.NoError(t, err)
				now, err := s.Now(ctx)
				require.NoError(t, err)
				show, u := "ev"+testenv.Unique(), testenv.Unique()
				p := cancel.Placement{OrderNo: "N" + u, UserID: "u1", ShowID: show, Seats: []string{"n1"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
				_, err = db.ExecContext(ctx, bindQ(d, "UPDATE "+c.table+" SET "+c.col+" = NULL WHERE "+c.no+" = ?"+c.where), p.OrderNo)
				require.NoError(t, err)
				before := sent.count()
				res, err := svc.Shorten(ctx, p.OrderNo, "", time.Minute)
				require.NoError(t, err)
				assert.True(t, res.Changed, "Shorten gives an order with no deadline one")
				o, err := s.Order(ctx, p.OrderNo)
				require.NoError(t, err)
				assert.False(t, o.ExpireAt.IsZero(), "it has a deadline now")
				assert.Greater(t, sent.count(), before, "and its expiry message is sent")
			})
		})
	}
}
