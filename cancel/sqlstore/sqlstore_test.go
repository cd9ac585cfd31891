package sqlstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

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
	}
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

func TestPostgres(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		return harness(t, testenv.Postgres(t), sqlstore.Postgres)
	})
}
