package cancel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/internal/onebyone"
)

// batchSeats is memstore's seat store with a ReleaseAll made of Releases,
// counting its calls (one seat-store round trip each).
type batchSeats struct {
	*memstore.Seats
	mu    sync.Mutex
	calls int
	err   error
}

func (b *batchSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	b.mu.Lock()
	b.calls++
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]int, len(holds))
	for i, h := range holds {
		n, err := b.Release(ctx, h)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

func TestExpireDue(t *testing.T) {
	ctx := context.Background()
	for _, batch := range []bool{true, false} {
		t.Run(map[bool]string{true: "batch", false: "one by one"}[batch], func(t *testing.T) {
			store, ev := memstore.NewStore(nil), &expirytest.Recorder{}
			seats := &batchSeats{Seats: memstore.NewSeats(nil)}
			var orders cancel.OrderStore = store
			if !batch {
				orders = onebyone.Store{OrderStore: store}
			}
			svc, err := cancel.New(cancel.Config{Store: orders, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
			require.NoError(t, err)
			place := func(no, show string, ttl time.Duration) {
				p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: show, Seats: []string{no + "a", no + "b"}, ExpireAt: time.Now().Add(ttl)}
				require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
			}
			place("o1", "s1", -time.Second)
			place("o2", "s1", -time.Second)
			place("o3", "s2", -time.Second)
			place("o4", "s2", time.Hour)
			res, err := svc.ExpireDue(ctx, []string{"o1", "o2", "o3", "o4", "missing"}, "")
			require.NoError(t, err)
			got := map[string]int{}
			for _, r := range res {
				assert.True(t, r.Changed)
				got[r.Order.No] = r.Released
			}
			assert.Equal(t, map[string]int{"o1": 2, "o2": 2, "o3": 2}, got, "the due orders, each seat released")
			assert.Equal(t, 3, ev.Count(expiry.KindCancelled))
			for show, want := range map[string]int{"s1": 0, "s2": 2} {
				st, err := seats.Show(ctx, show)
				require.NoError(t, err)
				assert.Len(t, st, want, "show %s: only o4's seats stay locked", show)
			}
			o, err := store.Order(ctx, "o4")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPending, o.Status, "I4")
			if batch {
				assert.Equal(t, 1, seats.calls, "one seat-store call for the three orders of two shows")
			}
		})
	}
}

func TestExpireDueReleaseFailureIsNotAnError(t *testing.T) {
	ctx := context.Background()
	store, ev := memstore.NewStore(nil), &expirytest.Recorder{}
	seats := &batchSeats{Seats: memstore.NewSeats(nil), err: errors.New("redis down")}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	for _, no := range []string{"o1", "o2"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no}, ExpireAt: time.Now().Add(-time.Second)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	}
	res, err := svc.ExpireDue(ctx, []string{"o1", "o2"}, cancel.ReasonTimeout)
	require.NoError(t, err, "the orders are cancelled; the seat store is repaired later")
	assert.Len(t, res, 2)
	assert.Equal(t, 2, ev.Count(expiry.KindReleaseFailed))
	st, err := seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Len(t, st, 2, "still locked until the reconciler runs")
}
