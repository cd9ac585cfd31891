package river_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
)

// A Service that also has a Config.Scheduler on the River sender (for
// Shorten) sends the first message a second time after the commit, beside
// the job ScheduleTx put in the order's transaction: two jobs, which River's
// unique jobs cannot fold (uniqueness by args must cover scheduled jobs, and
// would drop Shorten's new job of the same order). The duplicate is
// harmless (I5): the order is cancelled once, and both jobs complete.
func TestPlaceWithSchedulerDuplicatesHarmlessly(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t, filepath.Join(t.TempDir(), "river.db"))
	d := riversqlite.New(db)
	migrate(t, d)
	store, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	w := oeriver.NewWorker(nil)
	client := newClient(t, d, w, nil)
	rec := &expirytest.Recorder{}
	sender, err := oeriver.NewSender(client, oeriver.Config{})
	require.NoError(t, err)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender})
	require.NoError(t, err)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(nil), Scheduler: sched, Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	w.Attach(expiry.NewShell(h))

	now, err := store.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "dup-1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: now.Add(time.Second)}
	require.NoError(t, svc.Place(ctx, p, store.Insert(db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		return sender.ScheduleTx(ctx, tx, p.OrderNo, p.ExpireAt)
	})))
	assert.Equal(t, 2, rowsIn(t, db, "river_job"), "the job in the transaction, and the Scheduler's after the commit")

	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM river_job WHERE state <> 'completed'").Scan(&left))
		return left == 0
	}, 30*time.Second, 50*time.Millisecond, "both jobs worked")
	o, err := store.Order(ctx, p.OrderNo)
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	assert.Equal(t, 1, rec.Count(expiry.KindCancelled), "cancelled once; the other job found it cancelled")
}
