package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Redis loses its data (a restart without persistence): the reconciler
// notices the missing marker and rebuilds seats and counters from SQL, so
// I2 and I8 hold again after one round, and pending orders still expire.
func TestRedisDataLoss(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	show := "loss-" + testenv.Unique()
	w := e2e.NewWorld(t, testenv.MySQL(t), sqlstore.MySQL, rdb, show)
	now, err := w.Store.Now(ctx)
	require.NoError(t, err)
	var placed []cancel.Placement
	for i := 0; i < 30; i++ {
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", show, i), UserID: fmt.Sprintf("u%d", i%4), ShowID: show,
			Seats: []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}, ExpireAt: now.Add(time.Hour)}
		if i%3 == 2 {
			p.ExpireAt = now.Add(2 * time.Second)
		}
		require.NoError(t, w.Place(ctx, p))
		placed = append(placed, p)
		switch i % 3 {
		case 0:
			_, err = w.Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo})
		case 1:
			_, err = w.Service.UserCancel(ctx, p.OrderNo, p.UserID)
		}
		require.NoError(t, err)
	}

	// Every key of the namespace is gone, marker included.
	keys, err := rdb.Keys(ctx, "oe-"+show+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, rdb.Del(ctx, keys...).Err())

	rep, err := w.Reconciler(t).Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 40, rep.Restored, "10 paid and 10 pending orders, 2 seats each")
	bad, err := w.Check(ctx, placed, false)
	require.NoError(t, err)
	assert.Empty(t, bad, "I2 and I8 after the rebuild")

	// The pending orders still expire, and their restored seats go back.
	time.Sleep(time.Until(placed[2].ExpireAt) + 100*time.Millisecond)
	rep, err = w.Reconciler(t).Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 10, rep.Expired)
	assert.Zero(t, rep.Restored, "the store is marked restored")
	bad, err = w.Check(ctx, placed, true)
	require.NoError(t, err)
	assert.Empty(t, bad)
	t.Logf("FIGURE redis data loss: orders=%d seats_restored=40 violations=%d", len(placed), len(bad))
}
