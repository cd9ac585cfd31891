//go:build openholes

package sqlstore_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// An open hole an outside review of the scope work found, kept as a
// failing test behind the openholes build tag so that CI stays green while
// it is: go test -tags openholes -run TestOpenHole ./cancel/sqlstore/
//
// A record made before the library kept scopes whose order the host has
// deleted since (soft, as here, or hard) cannot be told to be this store's:
// Migrate moves from "" only the records of orders it can read. Its
// payment is decided again if the provider repeats the callback.

// Hole 2 (I14, I9). Hosts delete closed orders, a soft-delete flag most
// often. An order soft-deleted before the upgrade is not one of the store's
// orders (Where deleted = 0), so its pre-scope records stay in "", which no
// mapped store reads, and Check says nothing of them. The repeated callback
// of a payment that paid it is refunded (the order is "gone"), and a
// refunded one is refunded twice. (migrate.go documents "a repeat of its
// callback is decided again"; that is the money hole.)
func TestOpenHoleScopeSoftDeletedBeforeUpgrade(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, window.ddl(d))
		applyDDL(t, db, preScopeDDL[d])
		ms := time.Now().UnixMilli()
		// o1 cancelled, pay-1 refunded (settled); o2 paid by pay-2 (its
		// decision row); both soft-deleted by the host since.
		reviewExec(t, d, db, "INSERT INTO orders (number, customer, show_code, status, created_ms, deleted) VALUES ('o1', 'u1', 'ev', 30, ?, 1)", ms)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u1', 2, 1, 1, 2)")
		reviewExec(t, d, db, "INSERT INTO orders (number, customer, show_code, status, created_ms, paid_txn, deleted) VALUES ('o2', 'u1', 'ev', 20, ?, 'pay-2', 1)", ms)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-2', 'o2', 'u1', 0, 1, 1, 1)")

		m := window.mapping
		m.Orders.PreviousScopes = []string{""}
		w := reviewService(t, db, d, reviewOpts{mapping: &m}) // Migrate and Check pass
		_, err := w.pay("o2", "pay-2")
		t.Logf("pay-2 repeated: %v", err)
		assert.Equal(t, 0, w.refunds("pay-2"), "I14: pay-2 paid o2 before the upgrade; it must not be refunded")
		_, err = w.pay("o1", "pay-1")
		t.Logf("pay-1 repeated: %v", err)
		assert.Equal(t, 0, w.refunds("pay-1"), "I9: pay-1 was refunded before the upgrade")
	})
}
