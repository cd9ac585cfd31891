package river_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// pollInterval is how often the tests' clients look for due jobs: with
// riverdatabasesql (no LISTEN) and riversqlite a due job waits up to this
// long, plus the fetch itself, before it is worked.
const pollInterval = 50 * time.Millisecond

// backend is one database River runs on in these tests.
type backend struct {
	name string
	// open returns a fresh, empty database (a PostgreSQL schema of its own,
	// or a new SQLite file) with River's tables migrated.
	open func(t *testing.T) (*sql.DB, riverdriver.Driver[*sql.Tx])
}

var backends = []backend{
	{"postgres", func(t *testing.T) (*sql.DB, riverdriver.Driver[*sql.Tx]) {
		db := testenv.Postgres(t) // a schema of its own, dropped at cleanup
		d := riverdatabasesql.New(db)
		migrate(t, d)
		return db, d
	}},
	{"sqlite", func(t *testing.T) (*sql.DB, riverdriver.Driver[*sql.Tx]) {
		db := openSQLite(t, filepath.Join(t.TempDir(), "river.db"))
		d := riversqlite.New(db)
		migrate(t, d)
		return db, d
	}},
}

// openSQLite opens a SQLite file for River and the order store together.
// One connection: SQLite runs one writer at a time, and River's own
// goroutines would otherwise meet SQLITE_BUSY (see riversqlite's package
// documentation).
func openSQLite(t testing.TB, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func migrate(t testing.TB, d riverdriver.Driver[*sql.Tx]) {
	m, err := rivermigrate.New(d, &rivermigrate.Config{Logger: quiet()})
	require.NoError(t, err)
	_, err = m.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
}

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newClient returns a River client on d that works the expiry queue with w
// (nil: an insert-only client), stopped at cleanup.
func newClient(t testing.TB, d riverdriver.Driver[*sql.Tx], w *oeriver.Worker, cfg *river.Config) *river.Client[*sql.Tx] {
	if cfg == nil {
		cfg = &river.Config{}
	}
	cfg.Logger = quiet()
	cfg.TestOnly = true // no staggered start of River's services
	if w != nil {
		workers := river.NewWorkers()
		river.AddWorker(workers, w)
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{oeriver.QueueDefault: {MaxWorkers: 10}}
		cfg.FetchPollInterval = pollInterval
		cfg.FetchCooldown = 10 * time.Millisecond
	}
	c, err := river.NewClient(d, cfg)
	require.NoError(t, err)
	if w != nil {
		ctx := context.Background()
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			assert.NoError(t, c.Stop(ctx))
		})
	}
	return c
}

// recorder is a Processor that decodes what it is given, as the Shell
// would, and reports it.
type recorder struct{ ch chan expirytest.Delivery }

func (r recorder) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	m, err := expiry.DecodeMessage(d.Body)
	if err != nil {
		return expiry.Ack
	}
	m.TraceID, m.Trace = d.TraceID, d.Trace.Clean()
	r.ch <- expirytest.Delivery{Message: m, At: time.Now()}
	return expiry.Ack
}

// schedulerInterval is River's (v0.51.2) fixed interval between the leader's
// moves of scheduled jobs to available, each looking that far ahead: a job
// due at least this long after its insert is available by its due time and
// worked within pollInterval; a shorter delay may wait for the next move.
const schedulerInterval = 5 * time.Second

func TestSenderConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			expirytest.RunSender(t, func(t *testing.T) expirytest.SenderHarness {
				_, d := b.open(t)
				ch := make(chan expirytest.Delivery, 100)
				client := newClient(t, d, oeriver.NewWorker(recorder{ch}), nil)
				s, err := oeriver.NewSender(client, oeriver.Config{})
				require.NoError(t, err)
				// Delay: past the scheduler's look-ahead, so the lateness
				// measured is the poll's. Tolerance: the poll interval plus
				// the fetch on a loaded 2-core machine under -race.
				return expirytest.SenderHarness{Sender: s, Received: ch, Delay: schedulerInterval + time.Second, Tolerance: time.Second}
			})
		})
	}
}

// The trace context travels in the job's args and reaches the Processor.
func TestTraceContextTravels(t *testing.T) {
	_, d := backends[1].open(t)
	ch := make(chan expirytest.Delivery, 1)
	client := newClient(t, d, oeriver.NewWorker(recorder{ch}), nil)
	s, err := oeriver.NewSender(client, oeriver.Config{})
	require.NoError(t, err)
	tc := expiry.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	m := expiry.Message{OrderNo: "tr-1", Hop: 2, TraceID: "t-9", Trace: tc}
	require.NoError(t, s.Send(context.Background(), m, 0))
	select {
	case got := <-ch:
		assert.Equal(t, m, got.Message)
	case <-time.After(15 * time.Second):
		t.Fatal("not delivered")
	}
}

// stubCanceller answers Timeout from a function.
type stubCanceller func(orderNo string) (bool, expiry.Order, error)

func (f stubCanceller) Timeout(_ context.Context, no string) (bool, expiry.Order, error) {
	return f(no)
}

// waitJob waits until job id reaches state.
func waitJob(t *testing.T, c *river.Client[*sql.Tx], id int64, state rivertype.JobState) *rivertype.JobRow {
	t.Helper()
	var row *rivertype.JobRow
	require.Eventually(t, func() bool {
		var err error
		row, err = c.JobGet(context.Background(), id)
		require.NoError(t, err)
		return row.State == state
	}, 20*time.Second, 20*time.Millisecond, "job %d never reached %s", id, state)
	return row
}

// Bad input is counted and cancelled on its first attempt, never retried
// (I7); a transient failure is retried by River and then succeeds.
func TestWorkerVerdicts(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			db, d := b.open(t)
			var failures atomic.Int32
			failures.Store(1)
			var obs expirytest.Recorder
			w := oeriver.NewWorker(nil) // attached below, as a host wires it
			// A short retry delay so the retried job comes back within the
			// test; River's default policy waits attempt^4 seconds.
			client := newClient(t, d, w, &river.Config{RetryPolicy: retryAfter(100 * time.Millisecond)})
			s, err := oeriver.NewSender(client, oeriver.Config{})
			require.NoError(t, err)
			h, err := expiry.NewHandler(expiry.HandlerConfig{Sender: s, Runtime: expiry.Runtime{Observer: &obs, Logger: quiet()},
				Canceller: stubCanceller(func(no string) (bool, expiry.Order, error) {
					if no == "flaky" && failures.Add(-1) >= 0 {
						return false, expiry.Order{}, errors.New("store down")
					}
					return true, expiry.Order{No: no}, nil
				})})
			require.NoError(t, err)
			w.Attach(expiry.NewShell(h))

			bad, err := client.Insert(ctx, oeriver.Args{Body: "oe1 no-hop"}, &river.InsertOpts{Queue: oeriver.QueueDefault})
			require.NoError(t, err)
			// Args River itself could not decode into Args: a JSON array.
			var rawID int64
			insert := `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES ('[1]', $1, 25, $2, 'available') RETURNING id`
			if b.name == "sqlite" {
				insert = `INSERT INTO river_job (args, kind, max_attempts, queue, state) VALUES ('[1]', ?, 25, ?, 'available') RETURNING id`
			}
			require.NoError(t, db.QueryRowContext(ctx, insert, oeriver.Kind, oeriver.QueueDefault).Scan(&rawID))
			flaky, err := client.Insert(ctx, oeriver.Args{Body: "oe1 flaky 1"}, &river.InsertOpts{Queue: oeriver.QueueDefault})
			require.NoError(t, err)

			for _, id := range []int64{bad.Job.ID, rawID} {
				row := waitJob(t, client, id, rivertype.JobStateCancelled)
				assert.Equal(t, 1, row.Attempt, "cancelled on its first attempt")
			}
			row := waitJob(t, client, flaky.Job.ID, rivertype.JobStateCompleted)
			assert.Equal(t, 2, row.Attempt, "failed once, retried, then handled")
			require.Len(t, row.Errors, 1)
			assert.Contains(t, row.Errors[0].Error, "transiently")
			assert.Equal(t, 2, obs.Count(expiry.KindBadMessage), "both bad jobs counted")
		})
	}
}

type retryAfter time.Duration

func (r retryAfter) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Duration(r)) }

// A job worked before a Processor is attached is retried, not lost.
func TestWorkerNotAttached(t *testing.T) {
	w := oeriver.NewWorker(nil)
	err := w.Work(context.Background(), &river.Job[oeriver.Args]{JobRow: &rivertype.JobRow{}, Args: oeriver.Args{Body: "oe1 A 1"}})
	assert.ErrorIs(t, err, oeriver.ErrNotAttached)
}

func TestNewSenderChecks(t *testing.T) {
	_, err := oeriver.NewSender[*sql.Tx](nil, oeriver.Config{})
	assert.Error(t, err)
	c, err := river.NewClient(riversqlite.New(nil), &river.Config{Logger: quiet()})
	require.NoError(t, err)
	for _, cfg := range []oeriver.Config{{WarnBefore: -time.Second}, {WarnBefore: time.Microsecond}, {MaxAttempts: -1}} {
		_, err := oeriver.NewSender(c, cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

// rowsIn counts the rows of table ("river_job", an order table) in db.
func rowsIn(t testing.TB, db *sql.DB, table string) int {
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), fmt.Sprintf("SELECT count(*) FROM %s", table)).Scan(&n))
	return n
}
