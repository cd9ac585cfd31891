package canceltest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runSeatLocks is the part of RunSeats on locking: all or nothing, the
// purchase limit, a seat listed twice, one order number for two users,
// concurrent locks.
func runSeatLocks(t *testing.T, newSeats func(t *testing.T) SeatStore) {
	ctx := context.Background()
	t.Run("LockAllOrNothing", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		_, err := s.Lock(ctx, a, 0)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "locking again: the seats are not free, even for the same order")
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"), "I8: a refused lock counts nothing")
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"3", "2"}}
		_, err = s.Lock(ctx, b, 0)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Len(t, show, 2, "seat 3 was not locked: all or nothing")
		assert.Equal(t, a.OrderNo, show["2"].OrderNo)
		assert.Equal(t, cancel.SeatLocked, show["2"].Status)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"))
		assert.Equal(t, 0, held(t, s, a.ShowID, "u2"))
	})
	// A hold without seats locks nothing: no lock id (an id would name a
	// lock that holds no seat, and "" is what a caller stores for none), no
	// count against the limit, no show listed for the lock scan.
	t.Run("LockWithoutSeats", func(t *testing.T) {
		s := newSeats(t)
		for _, limit := range []int{0, 1} {
			lockID, err := s.Lock(ctx, hold("u1"), limit)
			require.NoError(t, err, "limit %d", limit)
			assert.Empty(t, lockID, "limit %d: no lock, no id", limit)
		}
		h := hold("u1")
		_, err := s.Lock(ctx, h, 0)
		require.NoError(t, err)
		assert.Zero(t, held(t, s, h.ShowID, "u1"), "I8")
		show, err := s.Show(ctx, h.ShowID)
		require.NoError(t, err)
		assert.Empty(t, show)
		shows, err := s.ListedShows(ctx)
		require.NoError(t, err)
		assert.Empty(t, shows, "nothing for the lock scan to walk")
	})
	t.Run("Limit", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 3)))
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u1", Seats: []string{"3", "4"}}
		assert.ErrorIs(t, lockErr(s.Lock(ctx, b, 3)), cancel.ErrLimitExceeded)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"))
		b.Seats = b.Seats[:1]
		assert.NoError(t, lockErr(s.Lock(ctx, b, 3)))
		assert.Equal(t, 3, held(t, s, a.ShowID, "u1"))
		assert.Error(t, lockErr(s.Lock(ctx, hold("u1", "9"), -1)), "a negative limit is nonsense")
	})
	// I8, I13: a seat listed twice in one Lock must not
	// count twice. A store may refuse the hold (expiry.ErrInvalidID) or lock
	// the seat once; either way the counter ends at zero after the release.
	t.Run("SeatListedTwice", func(t *testing.T) {
		for _, limit := range []int{0, 1} {
			s := newSeats(t)
			a := hold("u1", "A1", "A1")
			if _, err := s.Lock(ctx, a, limit); err != nil {
				require.ErrorIs(t, err, expiry.ErrInvalidID, "limit %d: refused as invalid, or locked once", limit)
				show, err := s.Show(ctx, a.ShowID)
				require.NoError(t, err)
				assert.Empty(t, show, "a refused hold locks nothing")
				assert.Zero(t, held(t, s, a.ShowID, "u1"))
				continue
			}
			assert.Equal(t, 1, held(t, s, a.ShowID, "u1"), "I8: one seat held, one counted")
			n, err := s.Release(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			assert.Zero(t, held(t, s, a.ShowID, "u1"), "I8: nothing held, the counter is back at zero")
		}
		// Release and Sell merge a seat listed twice (they are idempotent).
		s := newSeats(t)
		a := hold("u1", "A1")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		twice := a
		twice.Seats = []string{"A1", "A1"}
		if n, err := s.Sell(ctx, twice); err == nil {
			assert.Equal(t, 1, n)
		} else {
			assert.ErrorIs(t, err, expiry.ErrInvalidID)
		}
		assert.LessOrEqual(t, held(t, s, a.ShowID, "u1"), 1, "I8")
	})
	// A seat locked by order X for one user is not free for a Lock of the
	// same order number by another user (a client-chosen order number
	// placed twice): that Lock must fail and change nothing.
	t.Run("SameOrderOtherUser", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u2", Seats: []string{"2", "1"}}
		assert.ErrorIs(t, lockErr(s.Lock(ctx, b, 0)), cancel.ErrSeatUnavailable, "same order number, other user: not free")
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Len(t, show, 1, "seat 2 stays free: all or nothing")
		assert.Equal(t, "u1", show["1"].UserID)
		assert.Equal(t, 1, held(t, s, a.ShowID, "u1"))
		assert.Zero(t, held(t, s, a.ShowID, "u2"), "I8: u2 holds nothing")

		// Selling for the same order number but the other user leaves u1's
		// lock alone: the counters would drift (u1 counted, u2 sold).
		n, err := s.Sell(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u2", Seats: []string{"1"}})
		require.NoError(t, err)
		assert.Zero(t, n)
		show, err = s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatLocked, OrderNo: a.OrderNo, UserID: "u1", LockedAt: show["1"].LockedAt, LockID: show["1"].LockID}, show["1"])

		// The same order number may lock other seats for another user (a
		// double submit whose insert will fail); releasing the order then
		// takes each seat off its own user's counter.
		require.NoError(t, lockErr(s.Lock(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u2", Seats: []string{"2", "3"}}, 0)))
		assert.Equal(t, 2, held(t, s, a.ShowID, "u2"))
		n, err = s.Release(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u1", Seats: []string{"1", "2", "3"}})
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		assert.Zero(t, held(t, s, a.ShowID, "u1"), "I8: u1's seat came off u1's counter")
		assert.Zero(t, held(t, s, a.ShowID, "u2"), "I8: u2's seats came off u2's counter")
	})
	t.Run("ConcurrentLocks", func(t *testing.T) {
		s := newSeats(t)
		show := id("show")
		var won atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Lock(ctx, cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: fmt.Sprintf("u%d", i), Seats: []string{"1", "2"}}, 0)
				if err == nil {
					won.Add(1)
				} else {
					assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, int64(1), won.Load(), "one order gets the seats")
	})
}
