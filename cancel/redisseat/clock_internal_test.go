package redisseat

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Issue 9 item 5 (I11): the time of a lock must be the Redis server's, not
// the locking host's. A host whose clock runs two minutes ahead must still
// write a lock time that agrees with Redis TIME.
func TestLockTimeIsRedisTime(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s, err := New(rdb, "oe-"+testenv.Unique())
	require.NoError(t, err)
	s.now = func() time.Time { return time.Now().Add(2 * time.Minute) } // this host runs ahead

	h := cancel.Hold{ShowID: "show-" + testenv.Unique(), OrderNo: "o1", UserID: "u1", Seats: []string{"A1"}}
	_, err = s.Lock(ctx, h, 0)
	require.NoError(t, err)
	server, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	show, err := s.Show(ctx, h.ShowID)
	require.NoError(t, err)
	lockedAt := show["A1"].LockedAt
	assert.WithinDuration(t, server, lockedAt, 5*time.Second,
		"the lock's time is Redis's (%v), not the host's (%v ahead)", server, lockedAt.Sub(server))
}
