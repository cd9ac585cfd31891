package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// Review of 695ca10 (Orders.PreviousScopes, Check by ownership).

// R2-A (I9, I16). Tenant 7's configuration lists tenant 8's derived scope
// in PreviousScopes (copied from the wrong tenant, as hole 6 copied it into
// Scope). New refuses that as a Scope, but not as a previous scope: tenant
// 7's Migrate moves every tenant-8 record, and tenant 8's repeated
// callback of a payment it refunded is refunded again.
func TestReview2PreviousScopeOfAnotherTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')", due)
		book := &refundBook{}
		m8 := tenant(8)
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8, book: book})
		_, err := w8.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		require.Equal(t, 1, w8.refunds("pay-1"))

		m7 := tenant(7)
		m7.Orders.PreviousScopes = []string{w8.s.Scope()}
		s7, err := sqlstore.New(db, d, m7)
		if err != nil {
			t.Logf("New refused: %v", err)
			return
		}
		defer s7.Close()
		require.NoError(t, s7.Migrate(ctx))
		t.Logf("tenant 7 Check: %v", s7.Check(ctx))

		c8, err := sqlstore.New(db, d, m8)
		require.NoError(t, err)
		t.Logf("tenant 8 Check after: %v", c8.Check(ctx))
		c8.Close()
		w8b := uncheckedService(t, db, d, m8, book)
		_, err = w8b.pay("o1", "pay-1")
		t.Logf("tenant 8 repeat: %v", err)
		assert.Equal(t, 1, book.count(w8.s.Scope(), "pay-1"), "I9: tenant 8's pay-1 refunded again after tenant 7 listed tenant 8's scope (%q) as previous", w8.s.Scope())
	})
}

// R2-B (I9, I14; false positive then I16). Two tenants, no payment id
// column (paidBy is ""), per-tenant order and buyer sequences: a status-0
// record of tenant 8 fits any paid tenant-7 order of the same number and
// buyer. Check on tenant 7 refuses and names tenant 8's scope to list;
// the host does as told (PreviousScopes, Migrate), and tenant 8's refunded
// payment is refunded again, its honoured one refunded.
func TestReview2CheckAdvisesOtherTenantWithoutPaymentColumn(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		due := time.Now().Unix() + 3600
		nopay := func(id int) sqlstore.Mapping {
			m := tenant(id)
			m.Orders.PaymentID = ""
			return m
		}
		book := &refundBook{}
		m8 := nopay(8)
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8, book: book})
		for i := 1; i <= 4; i++ {
			no := fmt.Sprintf("o%d", i)
			w8.place(t, no, "u1", "a"+no)
			_, err := w8.pay(no, "p8-"+no)
			require.NoError(t, err)
		}
		w8.place(t, "o5", "u2", "ao5")
		_, err := w8.svc.UserCancel(ctx, "o5", "u2")
		require.NoError(t, err)
		_, err = w8.pay("o5", "p8-o5")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		require.Equal(t, 1, w8.refunds("p8-o5"))
		// Tenant 7: its own paid orders o1..o4 of its buyer u1 (its own sequences).
		for i := 1; i <= 4; i++ {
			reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (7, ?, 'u1', 'ev', 'PAID', ?)", fmt.Sprintf("o%d", i), due)
		}

		m7 := nopay(7)
		err = checkOnly(t, db, d, m7)
		t.Logf("tenant 7 Check: %v", err)
		assert.NoError(t, err, "tenant 7 has no records anywhere: Check must not name tenant 8's scope")
		if err == nil {
			return
		}
		m7.Orders.PreviousScopes = []string{w8.s.Scope()} // as Check asked
		require.NoError(t, checkOnly(t, db, d, m7))
		_, err = w8.pay("o5", "p8-o5")
		t.Logf("tenant 8 repeat of refunded p8-o5: %v", err)
		assert.Equal(t, 1, w8.refunds("p8-o5"), "I9: tenant 8's p8-o5 refunded again")
		_, err = w8.pay("o1", "p8-o1")
		t.Logf("tenant 8 repeat of honoured p8-o1: %v", err)
		assert.Equal(t, 0, w8.refunds("p8-o1"), "I14: tenant 8's p8-o1 paid o1; its repeat refunded")
	})
}

// R2-C (I9). The library's own schema (scope "") runs beside a mapped
// store that ran before scopes: the own store keeps writing "" records
// (every honoured payment writes one), so Check's 8 most recent records of
// "" are always the own store's, and the mapped store's own pre-scope
// refund records in "" are never named. Its repeated callback refunds
// again.
func TestReview2CheckSampleFloodedByOwnSchema(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, preScopeDDL[d])
		due := time.Now().Unix() + 3600
		reviewExec(t, d, db, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o1', 'u8', 'ev', 'CANCELLED', ?, 'user')", due)
		reviewExec(t, d, db, "INSERT INTO oe_payment_discrepancy (payment_id, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES ('pay-1', 'o1', 'u8', 2, 1, 1, 2)")

		own := reviewService(t, db, d, reviewOpts{})
		for i := 0; i < 8; i++ {
			no := fmt.Sprintf("n%d", i)
			own.place(t, no, "c1", "s"+no)
			_, err := own.pay(no, "own-"+no)
			require.NoError(t, err)
		}
		m := tenant(8)
		err := checkOnly(t, db, d, m)
		t.Logf("tenant 8 Check: %v", err)
		if err != nil {
			assert.ErrorContains(t, err, `list "" in Orders.PreviousScopes`)
			return
		}
		w := reviewService(t, db, d, reviewOpts{mapping: &m})
		_, err = w.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w.refunds("pay-1"), "I9: pay-1 was refunded before the upgrade; Check passed, its record left in \"\"")
	})
}
