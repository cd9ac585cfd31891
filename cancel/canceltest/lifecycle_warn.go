package canceltest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runWarnings is the part of RunStore on the expiry warning
// (cancel.WarnStore): at most once per order, only inside its window, never
// for a decided order.
func runWarnings(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()
	t.Run("MarkWarned", func(t *testing.T) {
		h, now := setup(t)
		w := warns(t, h)
		p := place(t, h, "u1", now.Add(time.Hour))
		res, err := w.MarkWarned(ctx, p.OrderNo, time.Minute)
		require.NoError(t, err)
		assert.False(t, res.Fired, "more than the lead away")
		assert.False(t, res.Warned)
		assert.Equal(t, p.OrderNo, res.Order.No)
		assert.Greater(t, res.Order.Remaining(), time.Minute)
		res, err = w.MarkWarned(ctx, p.OrderNo, 2*time.Hour)
		require.NoError(t, err)
		assert.True(t, res.Fired)
		assert.Equal(t, expiry.StatusPending, res.Order.Status)
		assert.Equal(t, "u1", res.Order.UserID)
		assert.InDelta(t, time.Hour.Seconds(), res.Order.Remaining().Seconds(), 10)
		for i := 0; i < 3; i++ { // a redelivered warning
			again, err := w.MarkWarned(ctx, p.OrderNo, 2*time.Hour)
			require.NoError(t, err)
			assert.False(t, again.Fired, "at most once per order")
			assert.True(t, again.Warned)
		}
		due := place(t, h, "u1", now.Add(-time.Second))
		res, err = w.MarkWarned(ctx, due.OrderNo, time.Hour)
		require.NoError(t, err)
		assert.False(t, res.Fired, "a due order is not warned")
		_, err = w.MarkWarned(ctx, "nope", time.Hour)
		assert.ErrorIs(t, err, expiry.ErrNotFound)

		// Redelivered after the payment: never fires.
		paid := place(t, h, "u1", now.Add(time.Minute))
		_, err = h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)
		res, err = w.MarkWarned(ctx, paid.OrderNo, time.Hour)
		require.NoError(t, err)
		assert.False(t, res.Fired)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		cancelled := place(t, h, "u1", now.Add(time.Minute))
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: cancelled.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		res, err = w.MarkWarned(ctx, cancelled.OrderNo, time.Hour)
		require.NoError(t, err)
		assert.False(t, res.Fired)

		// Concurrent deliveries: one fires.
		q := place(t, h, "u1", now.Add(time.Minute))
		var fired atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.MarkWarned(ctx, q.OrderNo, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Fired {
					fired.Add(1)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int32(1), fired.Load())
	})
}
