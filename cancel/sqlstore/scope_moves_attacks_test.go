package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
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

// An adversarial review of 2b2d209 (Orders.Scope, Check's moved-scope
// refusal, Migrate's adoption of pre-scope records), judged by money: who
// was refunded how often, what paid. Its holes led to the design as it
// stands: Check asks by ownership (are the records of this store's
// orders?) instead of comparing Where conditions, Migrate moves records
// only from scopes the host lists (Orders.PreviousScopes), and of "" only
// those whose order is the store's and fits the record. The tests are the
// review's scenarios with the host doing what Check asks.

// preScopeDDL is the pre-scope oe_payment_discrepancy (payment_id alone
// the key, no scope column), as an earlier version created it.
var preScopeDDL = map[sqlstore.Dialect][]string{
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

func reviewExec(t *testing.T, d sqlstore.Dialect, db *sql.DB, q string, args ...any) {
	t.Helper()
	_, err := db.Exec(bindQ(d, q), args...)
	require.NoError(t, err, q)
}

// checkOnly builds a store for m, migrates it and returns Check's answer.
func checkOnly(t *testing.T, db *sql.DB, d sqlstore.Dialect, m sqlstore.Mapping) error {
	t.Helper()
	s, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(context.Background()))
	return s.Check(context.Background())
}

// uncheckedService is reviewService without Check: the store a host runs
// when Check refuses every choice it has (see below).
func uncheckedService(t *testing.T, db *sql.DB, d sqlstore.Dialect, m sqlstore.Mapping, book *refundBook) *reviewWorld {
	t.Helper()
	s, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(context.Background()))
	sent := &countingSender{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent, Runtime: quiet})
	require.NoError(t, err)
	seats := memstore.NewSeats(nil).Scoped(s.Scope())
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: book.hook(s.Scope()), Scheduler: sched, Runtime: quiet})
	require.NoError(t, err)
	return &reviewWorld{d: d, db: db, s: s, svc: svc, seats: seats, book: book, label: s.Scope(), sent: sent}
}

// Hole 1 (I9, I14, I16). Two tenants of one table each have an order o1 of
// a buyer u1 (per-tenant order and buyer sequences collide all the time).
// Before the upgrade tenant 8 refunded pay-1 for its cancelled o1. Tenant 7
// migrates first, "" listed: the first version found "its" o1 of u1 and
// took tenant 8's record (tenant 7's o1 is pending: a refund's record does
// not fit it). Tenant 8's repeated callback is then refunded a second time, and
// tenant 7's own, unrelated pay-1 (its provider account) for its pending o1
// is answered by tenant 8's record: neither honoured nor refunded.
func TestReviewScopeAdoptionAmbiguousTenants(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, preScopeDDL[d])
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u1', 'ev', 'CANCELLED', ?, 'user')", due)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u1', 2, 1, 1, 2)")
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (7, 'o1', 'u1', 'ev', 'NEW', ?)", due)

		m7, m8 := tenant(7), tenant(8)
		m7.Orders.PreviousScopes, m8.Orders.PreviousScopes = []string{""}, []string{""}
		w7 := reviewService(t, db, d, reviewOpts{mapping: &m7}) // migrates first
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8})

		_, err := w8.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w8.refunds("pay-1"), "I9: tenant 8 refunded pay-1 before the upgrade; its repeated callback must not refund it again")

		res, err := w7.pay("o1", "pay-1")
		assert.NoError(t, err, "I14/I16: tenant 7's own pay-1 for its pending o1 must not be answered by tenant 8's record")
		assert.Equal(t, expiry.StatusPaid, res.Order.Status, "tenant 7's pay-1 paid nothing")
		st, _ := w7.status(t, "o1")
		if st != expiry.StatusPaid {
			assert.Equal(t, 1, w7.refunds("pay-1"), "I14: tenant 7's pay-1 neither honoured (o1 is %v) nor refunded", st)
		}
	})
}

// Hole 3 (false positive, then I16). A host ran one store on shop_order
// with no Where (scope "shop_order") and refunded pay-1. It goes
// multi-tenant: its existing orders become tenant 7's, and tenant 8 is new.
// Check refuses tenant 8, which has no record at all, and keeps refusing it
// whatever Orders.Scope it sets (its Where [tenant_id=8] holds the old
// scope's empty conditions). The only Scope that passes is the one Check
// names, "shop_order" - tenant 7's - and with it tenant 7's record answers
// for tenant 8's own pay-1: neither honoured nor refunded.
func TestReviewScopeCheckRefusesNewTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (7, 'o1', 'u1', 'ev', 'CANCELLED', ?, 'user')", due)
		// The previous version's single-tenant store (no Where; the table's
		// unique key was order_code alone then) refunded pay-1 for o1, now
		// tenant 7's: its record, as that store wrote it.
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (8, 'o0', 'u0', 'ev', 'NEW', ?)", due)
		s0, err := sqlstore.New(db, d, tenant(7))
		require.NoError(t, err)
		require.NoError(t, s0.Migrate(context.Background()))
		s0.Close()
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'shop_order', 'o1', 'u1', 2, 1, 1, 2)")

		// Multi-tenant now. Check asks tenant 7 for its old scope.
		m7 := tenant(7)
		err = checkOnly(t, db, d, m7)
		require.ErrorIs(t, err, sqlstore.ErrMapping)
		assert.ErrorContains(t, err, `list "shop_order" in Orders.PreviousScopes`)
		m7.Orders.PreviousScopes = []string{"shop_order"}
		require.NoError(t, checkOnly(t, db, d, m7))

		// Tenant 8: new, no records. Derived scope, then explicit.
		m8 := tenant(8)
		err = checkOnly(t, db, d, m8)
		t.Logf("Check on tenant 8: %v", err)
		assert.NoError(t, err, "a new tenant with no payment records is refused")
		m8.Orders.Scope = "shop_order?tenant_id=8"
		err = checkOnly(t, db, d, m8)
		assert.NoError(t, err, "a new tenant is refused even with its own explicit Scope")
		t.Logf("Check on tenant 8: %v", err)

		m8 = tenant(8)
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8})
		res, err := w8.pay("o0", "pay-1") // tenant 8's provider account's own pay-1
		t.Logf("tenant 8's pay-1: %v", err)
		st, _ := w8.status(t, "o0")
		assert.True(t, st == expiry.StatusPaid || w8.refunds("pay-1") == 1,
			"I14/I16: tenant 8's pay-1 neither honoured (o0 %v, result %v) nor refunded: tenant 7's record answered for it", st, res.Order.Status)
	})
}

// Probe (I9): the scope moves with a spelling Check's subset test does not
// see; for each, does Check refuse the edited mapping, or does a repeated
// callback of a refunded payment refund again?
func TestReviewScopeMovesCheckMayMiss(t *testing.T) {
	edits := map[string]func(d sqlstore.Dialect, schema string, m *sqlstore.Mapping){
		"qualified table": func(d sqlstore.Dialect, schema string, m *sqlstore.Mapping) { m.Orders.Table = schema + ".orders" },
		"column case": func(d sqlstore.Dialect, schema string, m *sqlstore.Mapping) {
			m.Orders.Where = []sqlstore.Condition{{Column: "Deleted", Value: 0}}
		},
		"string value": func(d sqlstore.Dialect, schema string, m *sqlstore.Mapping) {
			m.Orders.Where = []sqlstore.Condition{{Column: "deleted", Value: "0"}}
		},
		"is null": func(d sqlstore.Dialect, schema string, m *sqlstore.Mapping) {
			m.Orders.Where = []sqlstore.Condition{{Column: "deleted_at", Value: sqlstore.IsNull}}
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				applyDDL(t, db, window.ddl(d))
				applyDDL(t, db, []string{"ALTER TABLE orders ADD COLUMN deleted_at BIGINT NULL"})
				var schema string
				switch d {
				case sqlstore.MySQL:
					require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&schema))
				case sqlstore.Postgres:
					require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
				default:
					schema = "main"
				}
				before := window.mapping
				book := &refundBook{}
				w1 := reviewService(t, db, d, reviewOpts{mapping: &before, book: book, label: "x"})
				w1.place(t, "o1", "u1", "a1")
				_, err := w1.svc.UserCancel(context.Background(), "o1", "u1")
				require.NoError(t, err)
				_, err = w1.pay("o1", "pay-1")
				require.ErrorIs(t, err, cancel.ErrDiscrepancy)
				require.Equal(t, 1, book.count("x", "pay-1"))

				after := window.mapping
				after.Claims = nil
				edit(d, schema, &after)
				err = checkOnly(t, db, d, after)
				t.Logf("Check: %v", err)
				if err != nil {
					return
				}
				w2 := reviewService(t, db, d, reviewOpts{mapping: &after, book: book, label: "x"})
				_, err = w2.pay("o1", "pay-1")
				t.Logf("scope %q -> %q; repeat: %v", w1.s.Scope(), w2.s.Scope(), err)
				assert.Equal(t, 1, book.count("x", "pay-1"), "I9: pay-1 refunded once, before and after the edit (scope %q -> %q)", w1.s.Scope(), w2.s.Scope())
			})
		})
	}
}

// Hole 5 (I9, and no way out). A host that changed its Where under the
// previous version (scope column, no moved-scope check) has records in two
// scopes of its one table: "orders" (before it adopted deleted = 0) and
// "orders?deleted=0" (after). Check refuses every Orders.Scope: each choice
// leaves the other scope's records to be decided again, and a store run
// with the scope Check named first refunds the other scope's payment twice.
func TestReviewScopeTwoOldScopesNoWayOut(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, window.ddl(d))
		ms := time.Now().UnixMilli()
		reviewExec(t, d, db, "INSERT INTO orders (number, customer, show_code, status, created_ms) VALUES ('o1', 'u1', 'ev', 30, ?)", ms)
		reviewExec(t, d, db, "INSERT INTO orders (number, customer, show_code, status, created_ms) VALUES ('o3', 'u1', 'ev', 30, ?)", ms)
		// Migrate creates the table (scoped) through a store of this table.
		m := window.mapping
		require.NoError(t, func() error {
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			defer s.Close()
			return s.Migrate(context.Background())
		}())
		// (the scope is an argument: bindQ would turn its '?' into $n)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', ?, 'o1', 'u1', 2, 1, 1, 2)", "orders")
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-3', ?, 'o3', 'u1', 2, 1, 1, 2)", "orders?deleted=0")

		err := checkOnly(t, db, d, m)
		require.ErrorIs(t, err, sqlstore.ErrMapping)
		assert.ErrorContains(t, err, `list "orders" in Orders.PreviousScopes`)
		m.Orders.PreviousScopes = []string{"orders"}
		require.NoError(t, checkOnly(t, db, d, m), "the way out: the old scope listed")
		book := &refundBook{}
		w := uncheckedService(t, db, d, m, book)
		_, err = w.pay("o3", "pay-3")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w.refunds("pay-3"), "I9: pay-3 was refunded (and settled) under the store's intermediate scope")
		_, err = w.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w.refunds("pay-1"))
	})
}

// Hole 6 (I16). An explicit Orders.Scope that is another tenant's derived
// scope ("set Orders.Scope to %q" copied into the wrong tenant's config):
// Check accepts it though its Where (tenant_id = 7) contradicts the
// scope's (tenant_id = 8), and tenant 8's record answers for tenant 7's
// own payment.
func TestReviewScopeExplicitScopeOfAnotherTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')", due)
		m8 := tenant(8)
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8})
		_, err := w8.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)

		m7 := tenant(7)
		m7.Orders.Scope = w8.s.Scope()
		_, err = sqlstore.New(db, d, m7)
		assert.ErrorContains(t, err, "another store's rows", "Orders.Scope %q names tenant_id=8; the Where says tenant_id=7", m7.Orders.Scope)
	})
}

// Hole 7 (I9, I14). The library's own schema (oe_order) and a mapped store
// share one database, as they shared the pre-scope oe_payment_discrepancy.
// adoptUnscoped gives up on every "" record as soon as oe_order exists, so
// the mapped tenant's records of orders it still has stay in "", Check
// says nothing, and its repeated callbacks are decided again: a refunded
// payment refunded twice, a payment that paid a (since deleted) order
// refunded.
func TestReviewScopeAdoptionBesideOwnSchema(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, preScopeDDL[d])
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')", due)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u8', 2, 1, 1, 2)")
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, payment_ref) VALUES (8, 'o2', 'u8', 'ev', 'PAID', ?, 'pay-2')", due)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-2', 'o2', 'u8', 0, 1, 1, 1)")

		own := reviewService(t, db, d, reviewOpts{}) // the library's schema, another service of the host
		_ = own
		m := tenant(8)
		m.Orders.PreviousScopes = []string{""}
		w := reviewService(t, db, d, reviewOpts{mapping: &m})
		var n int
		require.NoError(t, db.QueryRow(bindQ(d, "SELECT COUNT(*) FROM oe_payment_discrepancy WHERE scope = ?"), w.s.Scope()).Scan(&n))
		t.Logf("records in %q: %d", w.s.Scope(), n)
		_, err := w.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w.refunds("pay-1"), "I9: pay-1 was refunded before the upgrade")
		deleteOrder(t, w, &m, "o2", "hard")
		_, err = w.pay("o2", "pay-2")
		t.Logf("pay-2 after the delete: %v", err)
		assert.Equal(t, 0, w.refunds("pay-2"), "I14: pay-2 paid o2 before the upgrade; it must not be refunded")
	})
}

// Cost (not money): every Migrate of every mapped store reads every record
// left in "" (other tenants' not yet adopted, deleted orders' for ever)
// and looks each one's order up, one query per record.
func TestReviewScopeAdoptionCost(t *testing.T) {
	if os.Getenv("OE_COST_PROBES") == "" {
		t.Skip("a cost probe: OE_COST_PROBES=1 runs it")
	}
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, preScopeDDL[d])
		const n = 20000
		tx, err := db.Begin()
		require.NoError(t, err)
		for i := 0; i < n; i += 500 {
			var b strings.Builder
			b.WriteString("INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ")
			for j := i; j < i+500; j++ {
				if j > i {
					b.WriteString(",")
				}
				b.WriteString("('pay-" + strings.Repeat("0", 6-len(itoa(j))) + itoa(j) + "', 'gone-" + itoa(j) + "', 'u', 2, 1, 1, 2)")
			}
			_, err := tx.Exec(b.String())
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
		m := tenant(7)
		m.Orders.PreviousScopes = []string{""}
		s, err := sqlstore.New(db, d, m)
		require.NoError(t, err)
		defer s.Close()
		for i := 0; i < 2; i++ {
			start := time.Now()
			require.NoError(t, s.Migrate(context.Background()))
			t.Logf("Migrate %d with %d records left in \"\": %v", i+1, n, time.Since(start))
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
