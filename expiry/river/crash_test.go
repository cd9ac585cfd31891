package river_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// The child process of TestCrashAfterCommit reads these.
const (
	envCrashChild  = "OE_RIVER_CRASH_CHILD"  // "1": be the child
	envCrashSchema = "OE_RIVER_CRASH_SCHEMA" // the parent's PostgreSQL schema
	envCrashOrder  = "OE_RIVER_CRASH_ORDER"  // the order number to place
)

// crashHold is how long the crashed order holds its seats: long enough for
// the child to start, commit and die before it is due.
const crashHold = 4 * time.Second

// placeTx places p and schedules its expiry job in one transaction, as a
// host does with this transport: both commit or neither.
func placeTx(ctx context.Context, db *sql.DB, store *sqlstore.Store, s *oeriver.Sender[*sql.Tx], p cancel.Placement, commit bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := store.Place(ctx, tx, p); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := s.ScheduleTx(ctx, tx, p.OrderNo, p.ExpireAt); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// The process that placed an order dies right after its commit, before any
// code after the commit runs (where an after-commit send would be). The
// order's expiry job committed with it, so a fresh process's River client
// works it and the order is cancelled by its timeout; the reconciler then
// finds nothing to repair.
func TestCrashAfterCommit(t *testing.T) {
	if os.Getenv(envCrashChild) == "1" {
		crashChild(t)
		return
	}
	ctx := context.Background()
	db := testenv.Postgres(t)
	var schema string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema))
	store, err := sqlstore.New(db, sqlstore.Postgres)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	d := riverdatabasesql.New(db)
	migrate(t, d)

	const no = "crash-1"
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAfterCommit$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashChild+"=1", envCrashSchema+"="+schema, envCrashOrder+"="+no)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child must die, not exit: %s", out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child must be SIGKILLed after its commit: %v\n%s", err, out)

	o, err := store.Order(ctx, no)
	require.NoError(t, err, "the order committed")
	require.Equal(t, expiry.StatusPending, o.Status)
	assert.Equal(t, 1, rowsIn(t, db, "river_job"), "its expiry job committed with it")

	// A fresh process: the cancel path, the Handler on this transport, and
	// a River client working the queue. The seat store is in memory here:
	// the child's seat locks are not the point (cancel/redisseat in a host).
	seats := memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Logger: quiet()}})
	require.NoError(t, err)
	w := oeriver.NewWorker(nil)
	client := newClient(t, d, w, nil)
	sender, err := oeriver.NewSender(client, oeriver.Config{})
	require.NoError(t, err)
	var obs expirytest.Recorder
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: &obs, Logger: quiet()}})
	require.NoError(t, err)
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: expiry.Runtime{Logger: quiet()}})
	require.NoError(t, err)
	// The first round, before the order is due, rebuilds the empty seat
	// store from SQL, as the child's Redis would hold them: the order's
	// seat locked.
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Expired, "not due yet (crashHold too short for this machine?)")
	held, err := seats.Held(ctx, "s1", "u1")
	require.NoError(t, err)
	require.Equal(t, 1, held)
	w.Attach(expiry.NewShell(h))

	// Until the job's handling is over: the cancel commits, then releases
	// the seats, then the Handler reports; the status alone may be read in
	// between (CI run 13).
	require.Eventually(t, func() bool {
		o, err = store.Order(ctx, no)
		require.NoError(t, err)
		return o.Status == expiry.StatusCancelled && slices.ContainsFunc(obs.Of(expiry.KindHandled), func(e expiry.Event) bool {
			return e.Outcome == expiry.OutcomeCancelled
		})
	}, 20*time.Second, 20*time.Millisecond, "the order is cancelled by its job")
	now, err := store.Now(ctx)
	require.NoError(t, err)
	assert.False(t, now.Before(o.ExpireAt), "not before its deadline by the database's clock (I4)")
	// Once, or more if the job came a little early by the database's clock
	// and the Handler re-armed it.
	assert.GreaterOrEqual(t, obs.Count(expiry.KindHandled), 1, "handled by the new process")
	held, err = seats.Held(ctx, "s1", "u1")
	require.NoError(t, err)
	assert.Zero(t, held, "its seat released by the cancel path")
	assert.Eventually(t, func() bool { // River records completions in batches
		jobs, err := client.JobList(ctx, river.NewJobListParams().States(rivertype.JobStateCompleted))
		require.NoError(t, err)
		return len(jobs.Jobs) > 0
	}, 10*time.Second, 20*time.Millisecond, "the job completed")

	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.False(t, rep.Rebuilt)
	assert.Zero(t, rep.Expired, "no expired order left for the reconciler")
	assert.Zero(t, rep.LostRaces)
	assert.Zero(t, rep.Skipped)
	assert.Zero(t, rep.Released)
	assert.Zero(t, rep.Sold)
	assert.Zero(t, rep.Restored)
}

// crashChild places the order in its transaction with ScheduleTx, commits,
// and kills itself at once: nothing after the commit ever runs.
func crashChild(t *testing.T) {
	ctx := context.Background()
	dsn, err := withSearchPath(os.Getenv(testenv.EnvPostgres), os.Getenv(envCrashSchema))
	require.NoError(t, err)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	store, err := sqlstore.New(db, sqlstore.Postgres)
	require.NoError(t, err)
	// An insert-only client: this process works no jobs.
	client, err := river.NewClient(riverdriver.Driver[*sql.Tx](riverdatabasesql.New(db)), &river.Config{Logger: quiet()})
	require.NoError(t, err)
	sender, err := oeriver.NewSender(client, oeriver.Config{})
	require.NoError(t, err)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	no := os.Getenv(envCrashOrder)
	p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-r1c1"}, ExpireAt: now.Add(crashHold)}
	require.NoError(t, placeTx(ctx, db, store, sender, p, true))
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never reached: an after-commit send would have been here
}

// withSearchPath sets search_path in a pgx DSN, URL or key=value.
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " search_path=" + schema, nil
}

// A rolled-back placement leaves neither the order nor its job (I6).
func TestRollbackLeavesNoJob(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			db, d := b.open(t)
			dialect := sqlstore.Postgres
			if b.name == "sqlite" {
				dialect = sqlstore.SQLite
			}
			store, err := sqlstore.New(db, dialect)
			require.NoError(t, err)
			require.NoError(t, store.Migrate(ctx))
			client := newClient(t, d, nil, nil)
			sender, err := oeriver.NewSender(client, oeriver.Config{WarnBefore: time.Second})
			require.NoError(t, err)
			now, err := store.Now(ctx)
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "rb-1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: now.Add(time.Minute)}

			require.NoError(t, placeTx(ctx, db, store, sender, p, false))
			_, err = store.Order(ctx, p.OrderNo)
			assert.ErrorIs(t, err, expiry.ErrNotFound, "no order")
			assert.Zero(t, rowsIn(t, db, "river_job"), "no job")

			require.NoError(t, placeTx(ctx, db, store, sender, p, true))
			assert.Equal(t, 2, rowsIn(t, db, "river_job"), "committed: the expiry job and its warning")
		})
	}
}
