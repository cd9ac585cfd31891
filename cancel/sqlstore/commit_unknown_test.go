package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// loseAcks, when set, makes the next COMMIT of a lostAckDriver connection
// land and then fail as a connection broken on the reply would.
var loseAcks atomic.Bool

var registerLostAck sync.Once

// lostAckDriver is SQLite whose COMMIT can land with its reply lost.
type lostAckDriver struct{ sqlite.Driver }

func (d *lostAckDriver) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	return &lostAckConn{Conn: c}, nil
}

type lostAckConn struct{ driver.Conn }

func (c *lostAckConn) Begin() (driver.Tx, error) { //nolint:staticcheck // driver.Conn requires it
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *lostAckConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return lostAckTx{tx}, nil
}

type lostAckTx struct{ driver.Tx }

func (t lostAckTx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	if loseAcks.CompareAndSwap(true, false) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// A COMMIT that fails after the database committed is reported as an
// unknown outcome (expiry.ErrCommitUnknown), never retried or reported as
// nothing changed: the caller would retry the compare-and-set, find its own
// cancel and answer it as somebody else's. A COMMIT the database refused,
// or one database/sql had already rolled back, changed nothing and is not
// wrapped.
func TestCommitLostOnTheWire(t *testing.T) {
	registerLostAck.Do(func() { sql.Register("sqlite-lostack", &lostAckDriver{}) })
	db, err := sql.Open("sqlite-lostack", "file:"+filepath.Join(t.TempDir(), "oe.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	s, err := New(db, SQLite)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Migrate(ctx))
	for _, no := range []string{"o1", "o2", "o3"} {
		require.NoError(t, s.Place(ctx, db, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no + "a"}, ExpireAt: time.Now().Add(-time.Minute)}))
	}

	loseAcks.Store(true)
	_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "o1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.ErrorIs(t, err, expiry.ErrCommitUnknown)
	o, err := s.Order(ctx, "o1")
	require.NoError(t, err)
	require.Equal(t, expiry.StatusCancelled, o.Status, "the COMMIT landed")

	loseAcks.Store(true)
	res, err := s.CancelDue(ctx, []string{"o2", "o3"}, cancel.ReasonTimeout)
	require.ErrorIs(t, err, expiry.ErrCommitUnknown)
	require.Empty(t, res)
	for _, no := range []string{"o2", "o3"} {
		o, err := s.Order(ctx, no)
		require.NoError(t, err)
		require.Equal(t, expiry.StatusCancelled, o.Status, "the COMMIT landed")
	}

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"rolled back by database/sql", sql.ErrTxDone},
		{"refused by the database", errors.New("SQLITE_BUSY: database is locked")},
		{"rolled back by PostgreSQL", errors.New("commit unexpectedly resulted in rollback")},
	} {
		require.NotErrorIs(t, commitErr(ctx, tc.err), expiry.ErrCommitUnknown, tc.name)
	}
	require.NoError(t, commitErr(ctx, nil))
}

// A transaction whose failed statement the code inside it swallowed (a
// host's hook) commits nothing, and every database says so in a way that is
// not an unknown outcome: PostgreSQL answers its COMMIT with ROLLBACK;
// MySQL and SQLite go on after a failed statement and commit the rest.
func TestCommitOfASwallowedFailureIsKnown(t *testing.T) {
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		s := migrated(t, db, d)
		ctx := context.Background()
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT no_such_column FROM oe_order")
			require.Error(t, err)
			return nil // swallowed
		})
		require.NotErrorIs(t, err, expiry.ErrCommitUnknown)
		if d == Postgres {
			require.Error(t, err, "PostgreSQL's COMMIT of an aborted transaction rolls back")
		}
	})
}

// A COMMIT the database answers by refusing it, after it rolled the
// transaction back, is a known outcome: a deferred constraint (a host's
// hook writes an audit row whose foreign key is DEFERRABLE INITIALLY
// DEFERRED and, for this order, points at nothing) fails at COMMIT with
// PostgreSQL's 23503 or SQLite's 787, every time, and nothing committed.
// Insert already calls such a refusal known (refusedCommit); a transition
// that called it unknown would make its callers stop going one by one
// (Timeout's batches, the expired pass), so that one bad order holds its
// batch-mates back round after round (I12).
func TestCommitRefusedByADeferredConstraintIsKnown(t *testing.T) {
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		if d == MySQL {
			t.Skip("MySQL checks every constraint at once: no COMMIT refuses one")
		}
		if d == SQLite {
			_, err := db.Exec("PRAGMA foreign_keys = ON")
			require.NoError(t, err)
			db.SetMaxOpenConns(1) // the pragma is the connection's
		}
		s := migrated(t, db, d)
		ctx := context.Background()
		_, err := db.ExecContext(ctx, "CREATE TABLE oe_test_ref (order_no VARCHAR(64) PRIMARY KEY)")
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, "CREATE TABLE oe_test_audit (order_no VARCHAR(64) NOT NULL REFERENCES oe_test_ref (order_no) DEFERRABLE INITIALLY DEFERRED)")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE oe_test_audit")
			_, _ = db.ExecContext(context.Background(), "DROP TABLE oe_test_ref")
		})
		for _, no := range []string{"bad1", "bad2"} {
			require.NoError(t, s.Place(ctx, db, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no + "a"}, ExpireAt: time.Now().Add(-time.Hour)}))
		}
		ins := "INSERT INTO oe_test_audit (order_no) VALUES (?)"
		if d == Postgres {
			ins = "INSERT INTO oe_test_audit (order_no) VALUES ($1)"
		}
		s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			_, err := tx.ExecContext(ctx, ins, r.Order.No)
			return err
		})
		_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "bad1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.Error(t, err)
		assert.NotErrorIs(t, err, expiry.ErrCommitUnknown, "CancelPending: the database refused the COMMIT and rolled back")
		_, err = s.CancelDue(ctx, []string{"bad1", "bad2"}, cancel.ReasonTimeout)
		require.Error(t, err)
		assert.NotErrorIs(t, err, expiry.ErrCommitUnknown, "CancelDue: the database refused the COMMIT and rolled back")
		for _, no := range []string{"bad1", "bad2"} {
			o, err := s.Order(ctx, no)
			require.NoError(t, err)
			require.Equal(t, expiry.StatusPending, o.Status, "nothing committed")
		}
	})
}
