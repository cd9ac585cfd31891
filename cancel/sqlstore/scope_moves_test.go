package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
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

// The previous-previous version's table (no scope column) holds a mapped
// tenant's records: a refund made and settled, and a payment that paid.
// Migrate gives them scope "" (the library's schema's), and the re-key
// made them another scope's: the tenant's own repeated callback refunded
// again (an outside review's finding). A host that edits its Where
// (adopting a soft-delete flag) moved its scope the same way. Check now
// refuses such a mapping, naming the scope whose records are of its
// orders; with that scope in Orders.PreviousScopes (Migrate moves the
// records) or as Orders.Scope, each payment keeps its one fate.
func TestScopeThatMovesKeepsItsPaymentRecords(t *testing.T) {
	t.Run("rows before the scope column", func(t *testing.T) {
		eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
			applyDDL(t, db, shop.ddl(d))
			applyDDL(t, db, preScopeDDL[d])
			nowS := time.Now().Unix()
			for _, q := range []string{
				// Tenant 8's o1, cancelled; its pay-1 refunded (settled).
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')",
				"INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u8', 2, 1, 1, 2)",
				// Tenant 8's o2, paid by pay-2 (its decision row).
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, payment_ref) VALUES (8, 'o2', 'u8', 'ev', 'PAID', ?, 'pay-2')",
				"INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-2', 'o2', 'u8', 0, 1, 1, 1)",
				// Tenant 7 has an o1 of its own, another buyer's.
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (7, 'o1', 'u7', 'ev', 'PENDING', ?)",
			} {
				var args []any
				if strings.Contains(q, "?") {
					args = append(args, nowS+3600)
				}
				_, err := db.Exec(bindQ(d, q), args...)
				require.NoError(t, err, q)
			}
			// Tenant 8's store without PreviousScopes: Check names "".
			m := tenant(8)
			plain, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			defer plain.Close()
			require.NoError(t, plain.Migrate(context.Background())) // the scope column, then the new key
			err = plain.Check(context.Background())
			require.ErrorIs(t, err, sqlstore.ErrMapping)
			assert.ErrorContains(t, err, `list "" in Orders.PreviousScopes`)
			t.Logf("Check: %v", err)
			// Tenant 7's store migrates first, "" listed: the records are
			// not its own (o1 is its order number too, but another buyer's).
			m7 := tenant(7)
			m7.Orders.PreviousScopes = []string{""}
			w7 := reviewService(t, db, d, reviewOpts{mapping: &m7})
			m.Orders.PreviousScopes = []string{""}
			w := reviewService(t, db, d, reviewOpts{mapping: &m})
			var n int
			require.NoError(t, db.QueryRow(bindQ(d, "SELECT COUNT(*) FROM oe_payment_discrepancy WHERE scope = ?"), w.s.Scope()).Scan(&n))
			assert.Equal(t, 2, n, "tenant 8's records are tenant 8's")
			require.NoError(t, db.QueryRow(bindQ(d, "SELECT COUNT(*) FROM oe_payment_discrepancy WHERE scope = ?"), w7.s.Scope()).Scan(&n))
			assert.Zero(t, n, "none of them is tenant 7's")
			_, err = w.pay("o1", "pay-1")
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
	for _, fix := range []string{"PreviousScopes", "Scope"} {
		t.Run("Where edited, "+fix, func(t *testing.T) {
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

				moved, err := sqlstore.New(db, d, after)
				require.NoError(t, err)
				defer moved.Close()
				require.NoError(t, moved.Migrate(context.Background()))
				err = moved.Check(context.Background())
				require.ErrorIs(t, err, sqlstore.ErrMapping, "the edited Where moves the scope from %q to %q", w1.s.Scope(), moved.Scope())
				assert.ErrorContains(t, err, fmt.Sprintf("list %q in Orders.PreviousScopes", w1.s.Scope()))
				t.Logf("Check: %v", err)

				if fix == "Scope" {
					after.Orders.Scope = w1.s.Scope()
				} else {
					after.Orders.PreviousScopes = []string{w1.s.Scope()}
				}
				w2 := reviewService(t, db, d, reviewOpts{mapping: &after, shared: shared, book: book, label: "orders"})
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
}
