package redisseat

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// I11: the time of a lock is the Redis server's, read by
// TIME in the lock script; the package keeps no host clock at all. On a real
// Redis the lock's time agrees with TIME.
func TestLockTimeIsRedisTime(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s, err := New(rdb, "oe-"+testenv.Unique())
	require.NoError(t, err)

	h := cancel.Hold{ShowID: "show-" + testenv.Unique(), OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}
	require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
	server, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	show, err := s.Show(ctx, h.ShowID)
	require.NoError(t, err)
	lockedAt := show["A1"].LockedAt
	assert.WithinDuration(t, server, lockedAt, time.Second, "the lock's time is Redis's")
	assert.False(t, lockedAt.After(server), "stamped before the TIME read after it")
}

// With the server's clock far from the host's (miniredis lets a test set
// it), the lock's time and its age at the scan follow the server: the host
// running two hours ahead changes nothing, and the age is exactly the time
// that passed on the server.
func TestLockTimeAndAgeFollowTheServerClock(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := New(rdb, "")
	require.NoError(t, err)

	server := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond).UTC() // this host runs 2 h ahead of Redis
	m.SetTime(server)
	h := cancel.Hold{ShowID: "show1", OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}
	require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
	m.SetTime(server.Add(90 * time.Second))
	locks, next, err := s.ScanLocks(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, locks, 1)
	assert.True(t, locks[0].LockedAt.Equal(server), "LockedAt %v is the server's time %v", locks[0].LockedAt, server)
	assert.Equal(t, 90*time.Second, locks[0].Age, "the age is the server's clock at the scan minus the lock's time")

	// A restored lock is stamped by the server too.
	_, err = s.Restore(ctx, []cancel.Claim{{ShowID: "show1", SeatID: "A2", OrderNo: "o1", UserID: "u1", Status: expiry.StatusPending}})
	require.NoError(t, err)
	st, err := s.Show(ctx, "show1")
	require.NoError(t, err)
	assert.True(t, st["A2"].LockedAt.Equal(server.Add(90*time.Second)))
}

// The lock script refuses a seat listed twice even when the caller skips
// Hold.Validate (which refuses it first): one seat cannot count twice.
func TestLockScriptRefusesDuplicateSeat(t *testing.T) {
	ctx := context.Background()
	for name, rdb := range map[string]redis.UniversalClient{"redis": testenv.Redis(t), "cluster": testenv.RedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			s, err := New(rdb, "oe-"+testenv.Unique())
			require.NoError(t, err)
			show := "show-" + testenv.Unique()
			res, err := lockScript.Run(ctx, rdb, s.keys(show), "o1", "u1", 1, "A1", "A1").Slice()
			require.NoError(t, err)
			assert.Equal(t, []any{int64(-2), "A1"}, res)
			st, err := s.Show(ctx, show)
			require.NoError(t, err)
			assert.Empty(t, st, "nothing locked")
			n, err := s.Held(ctx, show, "u1")
			require.NoError(t, err)
			assert.Zero(t, n, "nothing counted")

			_, err = s.Lock(ctx, cancel.Hold{ShowID: show, OrderNo: "o1", UserID: "u1", Seats: []string{"A1", "A1"}}, 0)
			assert.ErrorIs(t, err, expiry.ErrInvalidID)
		})
	}
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }
