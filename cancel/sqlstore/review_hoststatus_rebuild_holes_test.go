package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// A hole an outside review of the i19 branch found, kept as a test
// of the test command.

// The seat store loses its data while the host holds an order in its own
// status (an operator's hold on the buyer's two seats, limit 2). I19: the
// host's order holds its seats "as a pending one does"; I8: the counter
// counts the seats of orders in a status the host owns. The reconciler's
// rebuild from SQL leaves them out: the counter reads 0 and the buyer takes
// two more seats past the limit (I17), on every dialect, on real Redis.
func TestReviewHoleHostStatusRebuildForgetsItsSeats(t *testing.T) {
	c := hostStatusCases[0]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		rdb := testenv.Redis(t)
		ns := "rvh" + testenv.Unique()
		root, err := redisseat.New(rdb, ns)
		require.NoError(t, err)
		rs := root.Scoped(s.Scope())
		svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, Runtime: quiet})
		require.NoError(t, err)
		show, u := "ev"+testenv.Unique(), testenv.Unique()
		placeHeld(t, c, d, db, s, svc, "H"+u, "buyer", show, 2, "h1", "h2")
		r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Runtime: quiet})
		require.NoError(t, err)
		_, err = r.Round(ctx) // the first round after the store started: a rebuild of an empty store
		require.NoError(t, err)
		n, err := rs.Held(ctx, show, "buyer")
		require.NoError(t, err)
		require.Equal(t, 2, n)

		keys, err := rdb.Keys(ctx, ns+"*").Result()
		require.NoError(t, err)
		require.NotEmpty(t, keys)
		require.NoError(t, rdb.Del(ctx, keys...).Err()) // Redis lost its data
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		t.Logf("round after the loss: %+v", rep)
		require.True(t, rep.Rebuilt)

		n, err = rs.Held(ctx, show, "buyer")
		require.NoError(t, err)
		assert.Equal(t, 2, n, "I8: the buyer's counter counts the seats of its order in the host's status")
		assert.Equal(t, "locked:H"+u, holder(t, rs, show, "h1"), "I19: the host's order holds its seat as a pending one does")
		now, err := s.Now(ctx)
		require.NoError(t, err)
		more := cancel.Placement{OrderNo: "M" + u, UserID: "buyer", ShowID: show, Seats: []string{"m1", "m2"}, ExpireAt: now.Add(time.Hour), Limit: 2}
		err = svc.Place(ctx, more, s.Insert(db, nil))
		assert.ErrorIs(t, err, cancel.ErrLimitExceeded, "I17: the buyer holds two seats (limit 2); two more must be refused")
	})
}
