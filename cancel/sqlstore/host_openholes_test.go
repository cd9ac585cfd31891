//go:build openholes

package sqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Holes an outside review found that are still open, kept as failing
// tests behind the openholes build tag so that CI stays green while they
// are: go test -tags openholes -run TestHostReviewBroken ./cancel/sqlstore/

// The previous-previous version's table (no scope column) holds a mapped
// tenant's records: a refund made and settled, and a payment that paid.
// Migrate gives them scope "" (the library's schema's), and the re-key
// makes them another scope's: the tenant's own repeated callback refunds
// again. A host that edits its Where (adopting a soft-delete flag) moves
// its scope the same way.
func TestHostReviewBrokenScopeMovesRefundAgain(t *testing.T) {
	preScope := map[sqlstore.Dialect][]string{
		sqlstore.MySQL: {`CREATE TABLE oe_payment_discrepancy (
			payment_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
			order_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
			user_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
			status SMALLINT NOT NULL, recorded_at_ms BIGINT NOT NULL, tried_at_ms BIGINT NOT NULL, settled_at_ms BIGINT NULL,
			PRIMARY KEY (payment_id), KEY oe_payment_discrepancy_due (settled_at_ms, tried_at_ms)) ENGINE=InnoDB`},
		sqlstore.Postgres: {`CREATE TABLE oe_payment_discrepancy (
			payment_id VARCHAR(64) PRIMARY KEY, order_no VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL,
			status SMALLINT NOT NULL, recorded_at_ms BIGINT NOT NULL, tried_at_ms BIGINT NOT NULL, settled_at_ms BIGINT)`,
			"CREATE INDEX oe_payment_discrepancy_due ON oe_payment_discrepancy (settled_at_ms, tried_at_ms, payment_id)"},
		sqlstore.SQLite: {`CREATE TABLE oe_payment_discrepancy (
			payment_id TEXT NOT NULL PRIMARY KEY, order_no TEXT NOT NULL, user_id TEXT NOT NULL,
			status INTEGER NOT NULL, recorded_at_ms INTEGER NOT NULL, tried_at_ms INTEGER NOT NULL, settled_at_ms INTEGER)`,
			"CREATE INDEX oe_payment_discrepancy_due ON oe_payment_discrepancy (settled_at_ms, tried_at_ms, payment_id)"},
	}
	t.Run("rows before the scope column", func(t *testing.T) {
		eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
			applyDDL(t, db, shop.ddl(d))
			applyDDL(t, db, preScope[d])
			nowS := time.Now().Unix()
			for _, q := range []string{
				// Tenant 8's o1, cancelled; its pay-1 refunded (settled).
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')",
				"INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u8', 2, 1, 1, 2)",
				// Tenant 8's o2, paid by pay-2 (its decision row).
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, payment_ref) VALUES (8, 'o2', 'u8', 'ev', 'PAID', ?, 'pay-2')",
				"INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-2', 'o2', 'u8', 0, 1, 1, 1)",
			} {
				var args []any
				if strings.Contains(q, "?") {
					args = append(args, nowS+3600)
				}
				_, err := db.Exec(bindQ(d, q), args...)
				require.NoError(t, err, q)
			}
			m := tenant(8)
			w := reviewService(t, db, d, reviewOpts{mapping: &m}) // Migrate: scope, then the new key
			_, err := w.pay("o1", "pay-1")
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.Equal(t, 0, w.refunds("pay-1"), "I9: pay-1 was refunded (and settled) before the upgrade; the repeated callback must not refund it again")
			res, err := w.pay("o2", "pay-2")
			require.NoError(t, err)
			require.Equal(t, expiry.StatusPaid, res.Order.Status)
			deleteOrder(t, w, &m, "o2", "hard")
			_, err = w.pay("o2", "pay-2")
			t.Logf("pay-2 after the delete: %v", err)
			assert.Equal(t, 0, w.refunds("pay-2"), "I14: pay-2 paid o2 before the upgrade; it must not be refunded")
		})
	})
	t.Run("Where edited", func(t *testing.T) {
		eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
			applyDDL(t, db, window.ddl(d))
			before := window.mapping
			before.Orders.Where = nil // before the host adopted its soft-delete flag
			after := window.mapping
			shared, book := memstore.NewSeats(nil), &refundBook{}
			w1 := reviewService(t, db, d, reviewOpts{mapping: &before, shared: shared, book: book, label: "orders"})
			w1.place(t, "o1", "u1", "a1")
			_, err := w1.svc.UserCancel(context.Background(), "o1", "u1")
			require.NoError(t, err)
			_, err = w1.pay("o1", "pay-1")
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			w1.place(t, "o2", "u1", "a2")
			_, err = w1.pay("o2", "pay-2")
			require.NoError(t, err)

			w2 := reviewService(t, db, d, reviewOpts{mapping: &after, shared: shared, book: book, label: "orders"})
			t.Logf("scope %q became %q", w1.s.Scope(), w2.s.Scope())
			_, err = w2.pay("o1", "pay-1")
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.Equal(t, 1, w2.refunds("pay-1"), "I9: pay-1 refunded once, before and after the host's mapping change")
			deleteOrder(t, w2, &after, "o2", "soft")
			_, err = w2.pay("o2", "pay-2")
			t.Logf("pay-2 after the soft delete: %v", err)
			assert.Equal(t, 0, w2.refunds("pay-2"), "I14: pay-2 paid o2; it must not be refunded")
		})
	})
}
