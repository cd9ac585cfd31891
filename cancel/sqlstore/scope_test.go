package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// tenant returns the shop schema's mapping scoped to another tenant.
func tenant(id int) sqlstore.Mapping {
	m := shop.mapping
	m.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: id}}
	c := *m.Claims
	c.Where = []sqlstore.Condition{{Column: "tenant_id", Value: id}}
	m.Claims = &c
	return m
}

// Two tenants' stores on one database, scoped by Mapping.Where, and one seat
// store: tenant 7's reconciler must never free tenant 8's seats (I16). The
// library refuses a seat store that does not serve the order store's scope,
// and with each tenant's own scope (Seats.Scoped) tenant 8's pending order
// keeps its lock through tenant 7's rounds.
func TestTenantReconcilerLeavesOtherTenantsSeats(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	applyDDL(t, db, shop.ddl(sqlstore.SQLite))
	clock := expirytest.NewFakeClock(time.Now())
	shared := memstore.NewSeats(clock.Now)
	stores := map[int]*sqlstore.Store{}
	for _, id := range []int{7, 8} {
		s, err := sqlstore.New(db, sqlstore.SQLite, tenant(id))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Check(ctx))
		stores[id] = s
	}
	assert.Equal(t, "shop_order?tenant_id=7", stores[7].Scope())

	// One seat store for both: refused at startup, by both constructors.
	_, err := cancel.New(cancel.Config{Store: stores[8], Seats: shared})
	require.ErrorContains(t, err, `scope "shop_order?tenant_id=8"`)
	svcShared, err := cancel.New(cancel.Config{Store: memstore.NewStore(nil), Seats: shared})
	require.NoError(t, err)
	_, err = reconcile.New(reconcile.Config{Orders: stores[7], Seats: shared, Service: svcShared})
	require.ErrorContains(t, err, `scope "shop_order?tenant_id=7"`)

	// Each tenant's own scope of the seat store.
	seats8 := shared.Scoped(stores[8].Scope())
	svc8, err := cancel.New(cancel.Config{Store: stores[8], Seats: seats8})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o9", UserID: "u8", ShowID: "ev", Seats: []string{"x1"}, ExpireAt: clock.Now().Add(time.Hour)}
	require.NoError(t, svc8.Place(ctx, p, stores[8].Insert(db, nil)))
	// Tenant 7 has an order under the same number, cancelled long ago.
	p7 := cancel.Placement{OrderNo: "o9", UserID: "u7", ShowID: "ev", Seats: []string{"x1"}, ExpireAt: clock.Now().Add(time.Hour)}
	seats7 := shared.Scoped(stores[7].Scope())
	svc7, err := cancel.New(cancel.Config{Store: stores[7], Seats: seats7})
	require.NoError(t, err)
	require.NoError(t, svc7.Place(ctx, p7, stores[7].Insert(db, nil)), "the same seat in another tenant's scope is another seat")
	_, err = svc7.UserCancel(ctx, "o9", "u7")
	require.NoError(t, err)
	r7, err := reconcile.New(reconcile.Config{Orders: stores[7], Seats: seats7, Service: svc7, Settle: time.Nanosecond})
	require.NoError(t, err)
	clock.Advance(2 * reconcile.GraceDefault)
	time.Sleep(1100 * time.Millisecond) // past Settle by the SQL clock (the shop schema keeps seconds)
	for i := 0; i < 2; i++ {
		_, err = r7.Round(ctx)
		require.NoError(t, err)
	}
	st, err := seats8.Show(ctx, "ev")
	require.NoError(t, err)
	assert.Equal(t, "o9", st["x1"].OrderNo, "I16: tenant 8's pending order keeps its seat")
	o, err := stores[8].Order(ctx, "o9")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
	held, err := seats8.Held(ctx, "ev", "u8")
	require.NoError(t, err)
	assert.Equal(t, 1, held)
	st, err = shared.Show(ctx, "ev")
	require.NoError(t, err)
	assert.Empty(t, st, "the unscoped store sees no tenant's seats")
}

// A batch through one tenant's store changes only that tenant's orders,
// even under numbers another tenant's due orders share (I16).
func TestCancelDueStaysInItsScope(t *testing.T) {
	ctx := context.Background()
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			applyDDL(t, db, shop.ddl(d))
			stores := map[int]*sqlstore.Store{}
			for _, id := range []int{7, 8} {
				s, err := sqlstore.New(db, d, tenant(id))
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				stores[id] = s
			}
			now, err := stores[7].Now(ctx)
			require.NoError(t, err)
			place := func(id int, no string) {
				p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{no + "-x"}, ExpireAt: now.Add(-2 * time.Second)}
				require.NoError(t, stores[id].Insert(db, nil)(ctx, p))
			}
			place(7, "d1")
			place(8, "d1")
			place(8, "d2")
			res, err := stores[7].CancelDue(ctx, []string{"d1", "d2"}, cancel.ReasonReconcile)
			require.NoError(t, err)
			require.Len(t, res, 1)
			assert.Equal(t, "d1", res[0].Order.No)
			assert.Equal(t, []string{"d1-x"}, res[0].Seats)
			for _, no := range []string{"d1", "d2"} {
				o, err := stores[8].Order(ctx, no)
				require.NoError(t, err)
				assert.Equal(t, expiry.StatusPending, o.Status, "I16: tenant 8's %s is untouched", no)
			}
			claims, _, err := stores[8].Claims(ctx, "", 10)
			require.NoError(t, err)
			assert.Len(t, claims, 2, "tenant 8's claims are kept")
		})
	}
}
