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
// library either refuses such wiring at startup or keeps each tenant's seats
// apart; tenant 8's pending order keeps its lock either way.
func TestTenantReconcilerLeavesOtherTenantsSeats(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	applyDDL(t, db, shop.ddl(sqlstore.SQLite))
	clock := expirytest.NewFakeClock(time.Now())
	seats := memstore.NewSeats(clock.Now)
	stores := map[int]*sqlstore.Store{}
	for _, id := range []int{7, 8} {
		s, err := sqlstore.New(db, sqlstore.SQLite, tenant(id))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Check(ctx))
		stores[id] = s
	}
	svc8, err := cancel.New(cancel.Config{Store: stores[8], Seats: seats})
	if err != nil {
		t.Logf("tenant 8's wiring refused at startup: %v", err)
		return
	}
	p := cancel.Placement{OrderNo: "o9", UserID: "u8", ShowID: "ev", Seats: []string{"x1"}, ExpireAt: clock.Now().Add(time.Hour)}
	require.NoError(t, svc8.Place(ctx, p, func(ctx context.Context) error { return stores[8].Insert(db, nil, p, nil)(ctx) }))

	svc7, err := cancel.New(cancel.Config{Store: stores[7], Seats: seats})
	require.NoError(t, err)
	r7, err := reconcile.New(reconcile.Config{Orders: stores[7], Seats: seats, Service: svc7})
	if err != nil {
		t.Logf("tenant 7's reconciler refused at startup: %v", err)
		return
	}
	clock.Advance(2 * reconcile.GraceDefault)
	_, err = r7.Round(ctx)
	require.NoError(t, err)
	st, err := seats.Show(ctx, "ev")
	require.NoError(t, err)
	assert.Equal(t, "o9", st["x1"].OrderNo, "I16: tenant 7's reconciler freed tenant 8's pending order's seat")
	o, err := stores[8].Order(ctx, "o9")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
}
