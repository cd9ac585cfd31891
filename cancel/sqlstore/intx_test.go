package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// TestInTxNamesTheContext: when the caller's context ends mid-transaction,
// database/sql rolls the transaction back by itself and later calls fail
// with sql.ErrTxDone. The storm found this surfacing as an unexplained error;
// the store must say the context ended (and that nothing was committed).
func TestInTxNamesTheContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fnResult bool // fn returns the statement's ErrTxDone; else nil, so COMMIT meets it
	}{
		{"statement after the context ended", true},
		{"commit after the context ended", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db"))
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			s, err := New(db, SQLite)
			require.NoError(t, err)
			require.NoError(t, s.Migrate(context.Background()))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
				if _, err := tx.Exec("INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms) VALUES ('o1', 'u', 's', 0, 0, 0, 0)"); err != nil {
					return err
				}
				cancel()
				for { // database/sql rolls back in its own goroutine
					_, err := tx.Exec("SELECT 1")
					if errors.Is(err, sql.ErrTxDone) {
						if tc.fnResult {
							return err
						}
						return nil
					}
					require.NoError(t, err)
					time.Sleep(time.Millisecond)
				}
			})
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, sql.ErrTxDone)

			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM oe_order").Scan(&n))
			require.Zero(t, n, "nothing was committed")
		})
	}
}

func TestInTxKeepsOtherErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	other := errors.New("boom")
	require.Same(t, other, ctxCause(ctx, other), "only ErrTxDone is renamed")
	require.NoError(t, ctxCause(ctx, nil))
	require.Same(t, sql.ErrTxDone, ctxCause(context.Background(), sql.ErrTxDone), "a live context is not blamed")
}
