package redisseat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// harness is the store under test plus what the suite needs to provoke a
// data loss (SeatsHarness.Wipe): it deletes every key of its namespace, on
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

// Now reads the Redis server's clock (SeatsHarness.Now): the suite checks
// lock times and ages against it.
func (h *harness) Now(ctx context.Context) (time.Time, error) { return h.rdb.Time(ctx).Result() }

func (h *harness) suite() canceltest.SeatsHarness {
	return canceltest.SeatsHarness{Seats: h.Seats, Now: h.Now, Wipe: h.Wipe}
}

func TestRedis(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
		return newHarness(t, testenv.Redis(t), "oe-"+testenv.Unique()).suite()
	})
}

// The scripts touch only the keys of one show, which share a hash tag, so
// they must pass the same suite on a real three-master Redis Cluster.
func TestRedisCluster(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
		return newHarness(t, testenv.RedisCluster(t), "oe-"+testenv.Unique()).suite()
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
		require.NoError(t, lockErr(s.Lock(ctx, h, 2)))
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
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return newHarness(t, rdb, "").suite()
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

// Check reads maxmemory-policy: the shared test servers run noeviction, a
// server answering allkeys-lru is refused, one refusing CONFIG passes.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t) // miniredis has no CONFIG: like a managed Redis that refuses it
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := redisseat.New(rdb, "")
	require.NoError(t, err)
	assert.NoError(t, s.Check(ctx), "CONFIG refused: Check cannot tell")

	for policy, bad := range map[string]bool{"allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true, "volatile-lru": false, "noeviction": false} {
		m := miniredis.RunT(t)
		require.NoError(t, m.Server().Register("CONFIG", func(c *server.Peer, _ string, _ []string) {
			c.WriteLen(2)
			c.WriteBulk("maxmemory-policy")
			c.WriteBulk(policy)
		}))
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		s, err := redisseat.New(rdb, "")
		require.NoError(t, err)
		err = s.Check(ctx)
		if bad {
			assert.ErrorIs(t, err, redisseat.ErrEvictingPolicy, policy)
			assert.ErrorContains(t, err, policy)
		} else {
			assert.NoError(t, err, policy)
		}
		rdb.Close()
	}

	for name, rdb := range map[string]redis.UniversalClient{"redis": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		s, err := redisseat.New(rdb, "oe-"+testenv.Unique())
		require.NoError(t, err)
		assert.NoError(t, s.Check(ctx), "%s runs noeviction", name)
	}
}

// Locks written before the lock index existed (in the seat hash only) are
// invisible to ScanLocks until Reindex has run; an index entry whose seat
// is no longer locked is dropped by the scan.
func TestReindexAndDrift(t *testing.T) {
	for name, rdb := range map[string]redis.UniversalClient{"redis": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) { testReindexAndDrift(t, rdb) })
	}
}

func testReindexAndDrift(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	ns := "oe-" + testenv.Unique()
	s, err := redisseat.New(rdb, ns)
	require.NoError(t, err)
	show := "show-" + testenv.Unique()
	// What the previous version left: a lock and a sale in the hash, the show listed.
	require.NoError(t, rdb.HSet(ctx, ns+":{"+show+"}:seats", "A1", "L|o1|u1|1700000000000", "A2", "S|o2|u2").Err())
	require.NoError(t, rdb.SAdd(ctx, ns+":shows", show).Err())

	locks, _, err := s.ScanLocks(ctx, "", 100)
	require.NoError(t, err)
	assert.Empty(t, locks, "not indexed yet")
	shows, err := s.ListedShows(ctx)
	require.NoError(t, err)
	assert.Empty(t, shows, "that scan unlisted the show: Reindex must find it anyway")
	n, err := s.Reindex(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the lock, not the sale")
	n, err = s.Reindex(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "idempotent")
	assert.Equal(t, []string{show}, must(s.ListedShows(ctx)), "a reindexed lock lists its show")
	locks, _, err = s.ScanLocks(ctx, "", 100)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	assert.Equal(t, cancel.SeatLock{ShowID: show, SeatID: "A1", OrderNo: "o1", UserID: "u1",
		LockedAt: time.UnixMilli(1700000000000).UTC(), Age: locks[0].Age, LockID: "1700000000000"}, locks[0], "a value of the version before lock generations: its id is its time")
	assert.Greater(t, locks[0].Age, 24*time.Hour)

	// Drift: the index names a seat that is not locked (its hash field was
	// deleted by hand). The scan drops it and, the index empty, the show.
	require.NoError(t, rdb.HDel(ctx, ns+":{"+show+"}:seats", "A1").Err())
	locks, _, err = s.ScanLocks(ctx, "", 100)
	require.NoError(t, err)
	assert.Empty(t, locks)
	assert.Zero(t, rdb.SCard(ctx, ns+":{"+show+"}:locked").Val())
	shows, err = s.ListedShows(ctx)
	require.NoError(t, err)
	assert.Empty(t, shows)
}

// RetireShow's refusal is typed.
func TestRetireShowRefusesLocks(t *testing.T) {
	ctx := context.Background()
	s, err := redisseat.New(testenv.Redis(t), "oe-"+testenv.Unique())
	require.NoError(t, err)
	h := cancel.Hold{ShowID: "show-" + testenv.Unique(), OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}
	require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
	assert.ErrorIs(t, s.RetireShow(ctx, h.ShowID), redisseat.ErrShowHasLocks)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Two scopes of one namespace share no key: a lock, a counter, a scan and a
// rebuild marker of one are not the other's (I16), on Redis and on Cluster
// (a scope with braces must not change the shows' hash tags).
func TestScopedStoresShareNoKey(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range map[string]redis.UniversalClient{"redis": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			root, err := redisseat.New(rdb, "oe-"+testenv.Unique())
			require.NoError(t, err)
			a, b := root.Scoped("tenant_id=7"), root.Scoped("tenant={8} x")
			assert.Equal(t, "tenant_id=7", a.Scope())
			assert.Empty(t, root.Scope())
			show := "show-" + testenv.Unique()
			h := cancel.Hold{ShowID: show, OrderNo: "o1", UserID: "u1", Seats: []string{"A1", "A2"}}
			require.NoError(t, lockErr(a.Lock(ctx, h, 2)))
			require.NoError(t, lockErr(b.Lock(ctx, h, 2)), "the same seat in another scope is another seat")
			for _, s := range []*redisseat.Seats{root, b} {
				n, err := s.Held(ctx, show, "u1")
				require.NoError(t, err)
				if s == root {
					assert.Zero(t, n)
				} else {
					assert.Equal(t, 2, n)
				}
			}
			locks, _, err := a.ScanLocks(ctx, "", 100)
			require.NoError(t, err)
			assert.Len(t, locks, 2, "a scans its own locks")
			locks, _, err = root.ScanLocks(ctx, "", 100)
			require.NoError(t, err)
			assert.Empty(t, locks, "the namespace itself sees no scope's locks")
			n, err := b.Release(ctx, h)
			require.NoError(t, err)
			assert.Equal(t, 2, n)
			st, err := a.Show(ctx, show)
			require.NoError(t, err)
			assert.Len(t, st, 2, "b's release left a's locks alone")
			_, lost, err := a.Lost(ctx)
			require.NoError(t, err)
			assert.True(t, lost, "each scope has its own rebuild marker")
		})
	}
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }

// Lock sends the show's listing and the lock script in one pipeline; after
// the server forgot its scripts (a restart, SCRIPT FLUSH) the script's
// EVALSHA fails with NOSCRIPT, and Lock must load it and still lock, with
// the show listed for the reconciler's scan.
func TestLockAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := redisseat.New(rdb, "oe")
	require.NoError(t, err)
	h := cancel.Hold{ShowID: "s1", OrderNo: "o1", UserID: "u1", Seats: []string{"a1", "a2"}}
	for i, flush := range []bool{false, true} {
		if flush {
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			h = cancel.Hold{ShowID: "s2", OrderNo: "o2", UserID: "u1", Seats: []string{"b1"}}
		}
		id, err := s.Lock(ctx, h, 0)
		require.NoError(t, err, "lock %d", i)
		assert.NotEmpty(t, id)
		show, err := s.Show(ctx, h.ShowID)
		require.NoError(t, err)
		for _, seat := range h.Seats {
			assert.Equal(t, h.OrderNo, show[seat].OrderNo, "seat %s", seat)
		}
		shows, err := s.ListedShows(ctx)
		require.NoError(t, err)
		assert.Contains(t, shows, h.ShowID)
	}
	_, err = s.Lock(ctx, h, 0)
	assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "the seats are taken")
}

// ReleaseAll's pipeline of EVALSHAs, one per show, when the server lost its
// scripts: each call falls back to loading the script and still releases.
func TestReleaseAllAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := redisseat.New(rdb, "oe")
	require.NoError(t, err)
	a := cancel.Hold{ShowID: "s1", OrderNo: "o1", UserID: "u1", Seats: []string{"a1", "a2"}}
	b := cancel.Hold{ShowID: "s2", OrderNo: "o2", UserID: "u1", Seats: []string{"b1"}}
	for _, h := range []cancel.Hold{a, b} {
		_, err := s.Lock(ctx, h, 0)
		require.NoError(t, err)
	}
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	ns, err := s.ReleaseAll(ctx, []cancel.Hold{a, b})
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1}, ns)
	for _, show := range []string{"s1", "s2"} {
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Empty(t, st)
	}
}
