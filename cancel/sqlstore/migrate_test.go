package sqlstore

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// TestMigrateUpgradesEarlierSchema: a database created by the schema before
// an older version (testdata/schema-before-issue9: no payment_id, case-insensitive
// ids on MySQL, the two-column expiry index) is brought to the current one
// by Migrate, twice in a row, and its orders keep working.
func TestMigrateUpgradesEarlierSchema(t *testing.T) {
	ctx := context.Background()
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		b, err := os.ReadFile("testdata/schema-before-issue9/" + string(d) + ".sql")
		require.NoError(t, err)
		for _, q := range strings.Split(string(b), ";") {
			if strings.TrimSpace(stripComments(q)) == "" {
				continue
			}
			_, err := db.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		s, err := New(db, d)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		// An order placed before the upgrade.
		_, err = db.ExecContext(ctx, rebind(d, "INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms) VALUES ('old-1', 'alice', 'show-1', 0, 0, 0, 0)"))
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, "INSERT INTO oe_order_seat (show_id, seat_id, order_no, state) VALUES ('show-1', 'A1', 'old-1', 1)")
		require.NoError(t, err)

		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Migrate(ctx), "idempotent")
		has, err := s.hasColumn(ctx, "oe_order", "payment_id")
		require.NoError(t, err)
		assert.True(t, has)

		_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "old-1", Reason: cancel.ReasonUser, UserID: "ALICE"})
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "ALICE is not alice, in an upgraded table too")
		_, err = s.Order(ctx, "OLD-1")
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, s.Place(ctx, tx, cancel.Placement{OrderNo: "new-1", UserID: "bob", ShowID: "show-1", Seats: []string{"a1"}, ExpireAt: time.UnixMilli(0)}), "a1 is not A1")
		require.NoError(t, tx.Commit())

		res, err := s.PayPending(ctx, cancel.Payment{OrderNo: "old-1", UserID: "alice", PaymentID: "pay-1"})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, []string{"A1"}, res.Seats)
		again, err := s.PayPending(ctx, cancel.Payment{OrderNo: "old-1", PaymentID: "pay-2"})
		require.NoError(t, err)
		assert.Equal(t, "pay-1", again.PaymentID)
		recorded, err := s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-2", OrderNo: "old-1", UserID: "alice", Status: expiry.StatusPaid})
		require.NoError(t, err)
		assert.True(t, recorded)
		nos, _, err := s.Expired(ctx, "", 10)
		require.NoError(t, err)
		assert.Equal(t, []string{"new-1"}, nos)

		if d == MySQL {
			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('oe_order', 'oe_order_seat') AND COLUMN_NAME IN ('order_no', 'user_id', 'show_id', 'seat_id') AND COLLATION_NAME <> 'ascii_bin'").Scan(&n))
			assert.Zero(t, n, "every id column is ascii_bin")
		} else {
			var indexes string
			q := "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'oe_order'"
			if d == SQLite {
				q = "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'oe_order' AND sql IS NOT NULL ORDER BY name)"
			}
			require.NoError(t, db.QueryRow(q).Scan(&indexes))
			assert.Contains(t, indexes, "oe_order_due")
			assert.NotContains(t, indexes, "oe_order_status_expire", "the earlier expiry index is gone")
		}
	})
}

func stripComments(q string) string {
	var lines []string
	for _, l := range strings.Split(q, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestMigrateKeysDiscrepanciesByScope: an oe_payment_discrepancy of the
// version before payment ids were per scope (primary key payment_id alone)
// is re-keyed by (scope, payment_id) by Migrate, twice in a row, keeping
// its rows; then another scope records the same payment id as its own.
func TestMigrateKeysDiscrepanciesByScope(t *testing.T) {
	ctx := context.Background()
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		stmts, err := Schema(d)
		require.NoError(t, err)
		for _, q := range stmts {
			if !strings.Contains(q, "TABLE IF NOT EXISTS oe_payment_discrepancy ") {
				continue
			}
			// The previous version's key.
			q = strings.Replace(q, "PRIMARY KEY (scope, payment_id)", "PRIMARY KEY (payment_id)", 1)
			_, err := db.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		_, err = db.ExecContext(ctx, "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms) VALUES ('pay-1', 'other?tenant=1', 'o1', 'u1', 2, 1, 1)")
		require.NoError(t, err)
		s, err := New(db, d)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		n, err := s.discrepancyKeyColumns(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the previous version's key")

		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Migrate(ctx), "idempotent")
		n, err = s.discrepancyKeyColumns(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "keyed by (scope, payment_id)")
		var rows int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_payment_discrepancy WHERE payment_id = 'pay-1' AND scope = 'other?tenant=1' AND settled_at_ms IS NULL").Scan(&rows))
		assert.Equal(t, 1, rows, "the row recorded before is kept")

		recorded, err := s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "o1", UserID: "u2", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.True(t, recorded, "the same payment id in this scope is another payment")
		recorded, err = s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "o1", UserID: "u2", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.False(t, recorded, "once per payment id of the scope")
		ds, err := s.ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, ds, 1, "a store claims its own scope's records only")
		assert.Equal(t, "u2", ds[0].UserID)
	})
}
