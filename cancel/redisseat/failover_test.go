package redisseat_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
)

// After a Redis Cluster failover the slots of the dead master are served by
// its promoted replica, but a go-redis ClusterClient reloads its slot map
// only on a MOVED or READONLY reply, or every ClusterStateReloadInterval (60
// s by default): a master that refuses connections triggers neither. The
// seat store asks the client to reload when a node cannot be reached, so the
// call after the one that failed reaches the promoted node. Here the slot
// map comes from ClusterSlots: first every slot on a dead address, then on
// a live server (miniredis, standing in for the promoted replica).
func TestClusterClientFollowsAPromotion(t *testing.T) {
	ctx := context.Background()
	promoted := miniredis.RunT(t)
	dead := "127.0.0.1:1" // nothing listens on port 1
	var loads atomic.Int32
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			addr := promoted.Addr()
			if loads.Add(1) == 1 {
				addr = dead
			}
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
		},
		DialTimeout: 200 * time.Millisecond, MaxRedirects: 1,
	})
	defer rdb.Close()
	s, err := redisseat.New(rdb, "oe-failover")
	require.NoError(t, err)
	h := cancel.Hold{ShowID: "s1", OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}

	_, err = s.Lock(ctx, h, 0)
	require.Error(t, err, "the first call goes to the dead master")
	assert.Contains(t, err.Error(), "redisseat: lock o1", "a clear error, naming the operation and the order")
	// The reload runs in the background: a few calls, 50 ms apart, instead
	// of a minute of failures.
	var errs []error
	for range 10 {
		if _, err = s.Lock(ctx, h, 0); err == nil {
			break
		}
		errs = append(errs, err)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, "the seat store's calls still go to the dead master: %v", errs)
	assert.LessOrEqual(t, len(errs), 2, "failed calls after the first: %v", errs)
	show, err := s.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Equal(t, "o1", show["A1"].OrderNo)
}
