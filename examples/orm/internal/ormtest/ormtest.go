// Package ormtest is the test harness of the examples/orm hosts: one
// library wiring on a real database, and the three outcomes of a placement
// that each host must show with its own data-access layer (committed, the
// host's row failing, the commit failing after the transaction's work
// succeeded). It takes its databases from the caller, so that the example
// module's own packages import nothing internal to the library.
package ormtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// NoteTable is the host's own table, one row per order: its order number is
// the key, so a second note for an order fails.
const NoteTable = "CREATE TABLE order_note (order_no VARCHAR(64) PRIMARY KEY, note VARCHAR(200) NOT NULL)"

// Env is one library wiring on a fresh database: the SQL store, seats in
// memory, and a Service whose Scheduler records what it sends.
type Env struct {
	DB      *sql.DB
	Dialect sqlstore.Dialect
	Store   *sqlstore.Store
	Seats   *memstore.Seats
	Svc     *cancel.Service
	Sent    *Capture
}

// NewEnv migrates the library's schema and the host's table on db.
func NewEnv(t testing.TB, db *sql.DB, d sqlstore.Dialect) *Env {
	ctx := context.Background()
	store, err := sqlstore.New(db, d)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = db.ExecContext(ctx, NoteTable)
	require.NoError(t, err)
	e := &Env{DB: db, Dialect: d, Store: store, Seats: memstore.NewSeats(nil), Sent: &Capture{}}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: e.Sent})
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // the unknown commit is logged, and expected
	e.Svc, err = cancel.New(cancel.Config{Store: store, Seats: e.Seats, Scheduler: sched, Runtime: expiry.Runtime{Logger: quiet}})
	require.NoError(t, err)
	return e
}

// Capture is a DelaySender that keeps the order numbers it was sent.
type Capture struct {
	mu     sync.Mutex
	orders []string
}

// Send implements expiry.DelaySender.
func (c *Capture) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.orders = append(c.orders, m.OrderNo)
	return nil
}

// Sent is the order numbers of every message so far.
func (c *Capture) Sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.orders...)
}

// Host is an example host under test: Place places p and its note in one
// transaction through Service.Place; SetLastStep sets a function the host
// runs last in that transaction, after its own row (nil: none).
type Host struct {
	Place       func(ctx context.Context, p cancel.Placement, note string) error
	SetLastStep func(func(ctx context.Context, q cancel.Querier) error)
}

// Run runs the three outcomes of a placement on each database of open (one
// fresh database per subtest), with the host newHost builds on its Env.
func Run(t *testing.T, open map[sqlstore.Dialect]func(testing.TB) *sql.DB, newHost func(t *testing.T, e *Env) Host) {
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
		opener, ok := open[d]
		if !ok {
			continue
		}
		t.Run(string(d), func(t *testing.T) {
			t.Run("committed", func(t *testing.T) {
				e := NewEnv(t, opener(t), d)
				h := newHost(t, e)
				p := e.placement("o1")
				require.NoError(t, h.Place(context.Background(), p, "window seat"))
				e.requireOrder(t, p, true)
				assert.Equal(t, "window seat", e.note(t, p.OrderNo), "the host's row committed with the order")
				assert.Equal(t, []string{p.OrderNo}, e.Sent.Sent(), "one expiry message, sent once the insert committed")
				assert.True(t, e.locked(t, p), "its seats are locked")
			})
			t.Run("the host's row fails", func(t *testing.T) {
				e := NewEnv(t, opener(t), d)
				h := newHost(t, e)
				p := e.placement("o2")
				_, err := e.DB.ExecContext(context.Background(), e.rebind("INSERT INTO order_note (order_no, note) VALUES (?, ?)"), p.OrderNo, "taken")
				require.NoError(t, err)
				err = h.Place(context.Background(), p, "a second note for the order")
				require.Error(t, err, "the host's row hits its key")
				assert.NotErrorIs(t, err, expiry.ErrCommitUnknown, "a failure inside the transaction is no unknown commit")
				e.requireOrder(t, p, false)
				assert.Equal(t, "taken", e.note(t, p.OrderNo), "the host's table as it was")
				assert.Empty(t, e.Sent.Sent(), "I6: no message for a rolled-back order")
				assert.False(t, e.locked(t, p), "its seats are free again")
			})
			t.Run("the commit fails", func(t *testing.T) {
				e := NewEnv(t, opener(t), d)
				h := newHost(t, e)
				h.SetLastStep(e.BreakSession)
				p := e.placement("o3")
				err := h.Place(context.Background(), p, "lost with its connection")
				require.Error(t, err, "the session died after the work")
				h.SetLastStep(nil)
				e.requireOrder(t, p, false)
				assert.Empty(t, e.note(t, p.OrderNo), "nor did the host's row")
				assert.Empty(t, e.Sent.Sent(), "I6: the order is not in the store: no message; the reconciler decides")
				if errors.Is(err, expiry.ErrCommitUnknown) {
					// The COMMIT got no answer: the order might have committed.
					assert.True(t, e.locked(t, p), "the order might have committed: its seats stay locked")
				} else {
					// sqlstore's Insert proves its transaction (a savepoint)
					// after the host's rows and before COMMIT: it saw the
					// session die before COMMIT was sent and the order is not
					// there, so nothing was placed, and the seats go back.
					assert.False(t, e.locked(t, p), "nothing was placed: its seats are free again")
				}
			})
		})
	}
}

func (e *Env) placement(no string) cancel.Placement {
	return cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-a", no + "-b"},
		ExpireAt: time.Now().Add(15 * time.Minute), Limit: 4}
}

func (e *Env) rebind(q string) string {
	if e.Dialect != sqlstore.Postgres {
		return q
	}
	out, n := []byte(nil), 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			out = fmt.Appendf(out, "$%d", n)
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

func (e *Env) requireOrder(t *testing.T, p cancel.Placement, exists bool) {
	o, err := e.Store.Order(context.Background(), p.OrderNo)
	if !exists {
		require.ErrorIs(t, err, expiry.ErrNotFound, "the order did not commit")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
}

func (e *Env) note(t *testing.T, no string) string {
	var s string
	err := e.DB.QueryRowContext(context.Background(), e.rebind("SELECT note FROM order_note WHERE order_no = ?"), no).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return s
}

func (e *Env) locked(t *testing.T, p cancel.Placement) bool {
	show, err := e.Seats.Show(context.Background(), p.ShowID)
	require.NoError(t, err)
	n := 0
	for _, s := range p.Seats {
		if st, ok := show[s]; ok && st.OrderNo == p.OrderNo {
			n++
		}
	}
	return n == len(p.Seats)
}

// BreakSession ends the database session that q runs on, from another
// connection, and waits until the server has ended it: the transaction's
// next statement, its COMMIT, then fails on a broken connection, as it
// does when a network or a server dies at that moment.
func (e *Env) BreakSession(ctx context.Context, q cancel.Querier) error {
	idQ, killQ, goneQ := "SELECT CONNECTION_ID()", "KILL CONNECTION %d", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	if e.Dialect == sqlstore.Postgres {
		idQ, killQ, goneQ = "SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)", "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
	}
	rows, err := q.QueryContext(ctx, idQ)
	if err != nil {
		return fmt.Errorf("ormtest: session id: %w", err)
	}
	var id int64
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return errors.Join(fmt.Errorf("ormtest: session id: %w", err), rows.Close())
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("ormtest: session id: %w", err)
	}
	if id == 0 {
		return errors.New("ormtest: no session id")
	}
	if _, err := e.DB.ExecContext(ctx, fmt.Sprintf(killQ, id)); err != nil {
		return fmt.Errorf("ormtest: end session %d: %w", id, err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := e.DB.QueryRowContext(ctx, goneQ, id).Scan(&n); err != nil {
			return fmt.Errorf("ormtest: session %d: %w", id, err)
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("ormtest: session %d still there", id)
}
