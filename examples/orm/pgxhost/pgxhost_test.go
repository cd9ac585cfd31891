package pgxhost

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/examples/orm/internal/ormtest"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// poolDB is a fresh PostgreSQL schema (testenv's) reached the way a pgx
// host reaches its database: a pgxpool.Pool, and a *sql.DB on it.
func poolDB(t testing.TB) *sql.DB {
	ctx := context.Background()
	var schema string
	require.NoError(t, testenv.Postgres(t).QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema))
	cfg, err := pgxpool.ParseConfig(os.Getenv(testenv.EnvPostgres))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() {
		assert.NoError(t, db.Close())
		pool.Close()
	})
	return db
}

func TestPgx(t *testing.T) {
	ormtest.Run(t, map[sqlstore.Dialect]func(testing.TB) *sql.DB{sqlstore.Postgres: poolDB}, func(t *testing.T, e *ormtest.Env) ormtest.Host {
		h := New(e.DB, e.Svc, e.Store)
		return ormtest.Host{Place: h.Place, SetLastStep: func(f func(context.Context, cancel.Querier) error) { h.lastStep = f }}
	})
}

// The *sql.Conn the store gets and the pgx.Tx are one transaction: the same
// transaction id, and what the store's side wrote goes with the pgx
// rollback.
func TestPgxSharesTheTransaction(t *testing.T) {
	ctx := context.Background()
	e := ormtest.NewEnv(t, poolDB(t), sqlstore.Postgres)
	h := New(e.DB, e.Svc, e.Store)
	rollback := errors.New("the host changed its mind")
	err := h.inTx(ctx, func(conn *sql.Conn, tx pgx.Tx) error {
		var viaConn, viaTx int64
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT txid_current()").Scan(&viaConn))
		require.NoError(t, tx.QueryRow(ctx, "SELECT txid_current()").Scan(&viaTx))
		assert.Equal(t, viaTx, viaConn, "one transaction")
		_, err := conn.ExecContext(ctx, "INSERT INTO order_note (order_no, note) VALUES ('x1', 'through the *sql.Conn')")
		require.NoError(t, err)
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	var n int
	require.NoError(t, e.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM order_note").Scan(&n))
	assert.Zero(t, n, "the pgx rollback took the *sql.Conn's row with it")
}
