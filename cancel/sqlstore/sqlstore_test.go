package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// harness migrates a fresh database and wraps it for the suite.
func harness(t *testing.T, db *sql.DB, d sqlstore.Dialect) canceltest.StoreHarness {
	ctx := context.Background()
	s, err := sqlstore.New(db, d)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "Migrate is idempotent")
	require.NoError(t, s.Check(ctx), "the library's schema passes its own check")
	return canceltest.StoreHarness{
		Store: s,
		Now:   s.Now,
		Place: func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := s.Place(ctx, tx, p); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		HookOutbox: func(t *testing.T) (func(context.Context, cancel.Querier, cancel.Result) error, func(context.Context) ([]string, error)) {
			return outbox(t, db, d)
		},
		Delete: func(ctx context.Context, no string) error {
			return hostDelete(ctx, db, d, "oe_order", "order_no", "oe_order_seat", "order_no", no)
		},
	}
}

// hostDelete is a host's own delete of order no: its claims (claims ""
// for none), then its row.
func hostDelete(ctx context.Context, db *sql.DB, d sqlstore.Dialect, orders, no, claims, claimNo, orderNo string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if claims != "" {
		if _, err := tx.ExecContext(ctx, bindQ(d, "DELETE FROM "+claims+" WHERE "+claimNo+" = ?"), orderNo); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, bindQ(d, "DELETE FROM "+orders+" WHERE "+no+" = ?"), orderNo); err != nil {
		return err
	}
	return tx.Commit()
}

// outbox is the hook suite's outbox table: a row per transition, written
// in the transition's transaction; a second row for one order is a
// duplicate key.
func outbox(t *testing.T, db *sql.DB, d sqlstore.Dialect) (func(context.Context, cancel.Querier, cancel.Result) error, func(context.Context) ([]string, error)) {
	_, err := db.ExecContext(context.Background(), "CREATE TABLE hook_outbox (order_no VARCHAR(64) NOT NULL PRIMARY KEY, status VARCHAR(16) NOT NULL)")
	require.NoError(t, err)
	insert := "INSERT INTO hook_outbox (order_no, status) VALUES (?, ?)"
	if d == sqlstore.Postgres {
		insert = "INSERT INTO hook_outbox (order_no, status) VALUES ($1, $2)"
	}
	write := func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		_, err := tx.ExecContext(ctx, insert, r.Order.No, r.Order.Status.String())
		return err
	}
	rows := func(ctx context.Context) ([]string, error) {
		rs, err := db.QueryContext(ctx, "SELECT order_no FROM hook_outbox ORDER BY order_no")
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []string
		for rs.Next() {
			var no string
			if err := rs.Scan(&no); err != nil {
				return nil, err
			}
			out = append(out, no)
		}
		return out, rs.Err()
	}
	return write, rows
}

// OpenSQLite opens a file database the way the examples do.
func openSQLite(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLite(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return harness(t, openSQLite(t), sqlstore.SQLite)
	})
}

func TestMySQL(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return harness(t, testenv.MySQL(t), sqlstore.MySQL)
	})
}

// TestMySQL8 runs MySQL 8's statements (no DELETE … RETURNING) on the
// MariaDB the tests have: no MySQL 8 can be installed here.
func TestMySQL8(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return harness(t, testenv.MySQL(t), sqlstore.MySQL8)
	})
}

func TestPostgres(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return harness(t, testenv.Postgres(t), sqlstore.Postgres)
	})
}

// TestHooks runs the transition-hook suite on every dialect, its outbox
// row written in the transition's transaction.
func TestHooks(t *testing.T) {
	for _, c := range []struct {
		d    sqlstore.Dialect
		open func(t testing.TB) *sql.DB
	}{{sqlstore.SQLite, func(t testing.TB) *sql.DB { return openSQLite(t.(*testing.T)) }}, {sqlstore.MySQL, testenv.MySQL}, {sqlstore.MySQL8, testenv.MySQL}, {sqlstore.Postgres, testenv.Postgres}} {
		t.Run(string(c.d), func(t *testing.T) {
			canceltest.RunHooks(t, func(t *testing.T) canceltest.StoreHarness {
				return harness(t, c.open(t), c.d)
			})
		})
	}
}

// TestOneConnectionPool: the store prepares its statements before it begins
// a transaction. Preparing inside one would need a second connection, and a
// pool the transactions have exhausted (here: a pool of one) would never
// give it; the first cancel would hang.
func TestOneConnectionPool(t *testing.T) {
	db := openSQLite(t)
	db.SetMaxOpenConns(1)
	h := harness(t, db, sqlstore.SQLite)
	ctx, cancelCtx := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelCtx()
	now, err := h.Now(ctx)
	require.NoError(t, err)
	for i, pay := range []bool{false, true} {
		p := cancel.Placement{OrderNo: fmt.Sprintf("one-%d", i), UserID: "u1", ShowID: "s1", Seats: []string{fmt.Sprintf("A%d", i)}, ExpireAt: now.Add(-time.Second)}
		require.NoError(t, h.Place(ctx, p))
		var res cancel.Result
		if pay {
			res, err = h.Store.PayPending(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u1", PaymentID: "pay-1"})
		} else {
			res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		}
		require.NoError(t, err, "the first transition on a fresh store must not wait for a second connection")
		require.True(t, res.Changed)
		require.Equal(t, p.Seats, res.Seats)
	}
}

func TestCloseThenUse(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	s, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	_, _, err = s.Expired(ctx, "", 10) // prepares a statement
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	nos, _, err := s.Expired(ctx, "", 10)
	require.NoError(t, err, "a closed store prepares again")
	assert.Empty(t, nos)
	require.NoError(t, db.Ping(), "the *sql.DB is the host's and stays open")
}
