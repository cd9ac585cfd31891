package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func run(t *testing.T, db *sql.DB, d sqlstore.Dialect, rdb redis.UniversalClient) {
	var out strings.Builder
	rep, err := Run(context.Background(), db, d, rdb, "bf"+testenv.Unique(), &out)
	t.Log(out.String())
	require.NoError(t, err)
	assert.Equal(t, Report{Placed: 12, Paid: 4, UserCancelled: 2, Expired: 6, Refunds: 1}, rep)
	// A second start on the same tables: the migrations and the check again.
	_, err = Open(context.Background(), Config{DB: db, Dialect: d, Redis: rdb, Namespace: "bf" + testenv.Unique()})
	require.NoError(t, err, "a restart migrates nothing and checks again")
}

func TestSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	run(t, db, sqlstore.SQLite, rdb)
}

// TestMariaDB and TestPostgres run the service on real servers (skipped
// without them, failed with OE_REQUIRE_SERVERS=1).
func TestMariaDB(t *testing.T) {
	run(t, testenv.MySQL(t), sqlstore.MySQL, testenv.Redis(t))
}

func TestPostgres(t *testing.T) {
	run(t, testenv.Postgres(t), sqlstore.Postgres, testenv.Redis(t))
}
