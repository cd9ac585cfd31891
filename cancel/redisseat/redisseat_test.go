package redisseat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// harness is the store under test plus what the suite needs to provoke a
// data loss (canceltest.Wiper): it deletes every key of its namespace, on
// every master, as a Redis restart without persistence would.
type harness struct {
	*redisseat.Seats
	t   *testing.T
	rdb redis.UniversalClient
	ns  string
}

func newHarness(t *testing.T, rdb redis.UniversalClient, ns string) *harness {
	s, err := redisseat.New(rdb, ns)
	require.NoError(t, err)
	if ns == "" {
		ns = redisseat.DefaultNamespace
	}
	return &harness{Seats: s, t: t, rdb: rdb, ns: ns}
}

func (h *harness) Wipe() {
	ctx := context.Background()
	wipe := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, h.ns+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := h.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, wipe)
	case *redis.Client:
		err = wipe(ctx, c)
	default:
		h.t.Fatalf("harness: cannot wipe a %T", h.rdb)
	}
	require.NoError(h.t, err, "wipe namespace %s", h.ns)
}

// Now reads the Redis server's clock (canceltest.Clock): the suite checks
// lock times and ages against it.
func (h *harness) Now(ctx context.Context) (time.Time, error) { return h.rdb.Time(ctx).Result() }

func TestRedis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		return newHarness(t, testenv.Redis(t), "oe-"+testenv.Unique())
	})
}

// The scripts touch only the keys of one show, which share a hash tag, so
// they must pass the same suite on a real three-master Redis Cluster.
func TestRedisCluster(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		return newHarness(t, testenv.RedisCluster(t), "oe-"+testenv.Unique())
	})
}

// TestRedisClusterAcrossNodes: shows spread over the cluster's masters are
// locked, scanned by the reconciler's pass and released, with every count
// exact: nothing in the store assumes one node.
func TestRedisClusterAcrossNodes(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.RedisCluster(t)
	s, err := redisseat.New(rdb, "oe-"+testenv.Unique())
	require.NoError(t, err)

	nodes := map[string]bool{}
	var holds []cancel.Hold
	for i := 0; i < 24; i++ {
		show := fmt.Sprintf("show%02d-%s", i, testenv.Unique())
		master, err := rdb.MasterForKey(ctx, "{"+show+"}") // every key of the show has this tag
		require.NoError(t, err)
		nodes[master.Options().Addr] = true
		h := cancel.Hold{ShowID: show, OrderNo: fmt.Sprintf("o%02d", i), UserID: "u1", Seats: []string{"A1", "A2"}}
		require.NoError(t, s.Lock(ctx, h, 2))
		holds = append(holds, h)
	}
	require.GreaterOrEqual(t, len(nodes), 2, "the shows must land on more than one master")

	seen := map[string]int{}
	cursor := ""
	for pass := 0; ; pass++ {
		require.Less(t, pass, 1000, "the scan must end")
		locks, next, err := s.ScanLocks(ctx, cursor, 10)
		require.NoError(t, err)
		for _, l := range locks {
			seen[l.OrderNo]++
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	for _, h := range holds {
		assert.GreaterOrEqual(t, seen[h.OrderNo], 2, "both seats of %s found by the scan", h.OrderNo)
		n, err := s.Release(ctx, h)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		held, err := s.Held(ctx, h.ShowID, "u1")
		require.NoError(t, err)
		assert.Zero(t, held, "I8 on %s", h.ShowID)
	}
}

// miniredis runs the same Lua scripts; the embedded demo relies on it.
func TestMiniredis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatStore {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return newHarness(t, rdb, "")
	})
}

func TestNew(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	_, err := redisseat.New(rdb, "a{b}")
	require.Error(t, err, "a namespace cannot carry a hash tag")
	_, err = redisseat.New(nil, "")
	require.Error(t, err)
}

// RetireShow's refusal is typed.
func TestRetireShowRefusesLocks(t *testing.T) {
	ctx := context.Background()
	s, err := redisseat.New(testenv.Redis(t), "oe-"+testenv.Unique())
	require.NoError(t, err)
	h := cancel.Hold{ShowID: "show-" + testenv.Unique(), OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}
	require.NoError(t, s.Lock(ctx, h, 0))
	assert.ErrorIs(t, s.RetireShow(ctx, h.ShowID), redisseat.ErrShowHasLocks)
}
