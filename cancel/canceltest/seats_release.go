package canceltest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
)

// runSeatReleases is the part of RunSeats on releasing and selling: only an
// order's own lock, the lock judged, sold seats never released, a sale
// reviving a lost lock, concurrent releases.
func runSeatReleases(t *testing.T, newSeats func(t *testing.T) SeatStore) {
	ctx := context.Background()
	t.Run("ReleaseOnlyOwnLocks", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		other := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"3"}}
		require.NoError(t, lockErr(s.Lock(ctx, other, 0)))
		// a's release lists seat 3 too, and a seat that is free: neither moves.
		n, err := s.Release(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u1", Seats: []string{"1", "2", "3", "9"}})
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Release(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 0, n, "I2/I5: a second release frees nothing")
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Equal(t, map[string]cancel.SeatState{"3": show["3"]}, show)
		assert.Equal(t, other.OrderNo, show["3"].OrderNo, "I2: another order's lock is untouched")
		assert.Equal(t, 0, held(t, s, a.ShowID, "u1"), "I8: counter down by exactly the number released")
		assert.Equal(t, 1, held(t, s, a.ShowID, "u2"))
	})
	// I8 for a buyer with several orders in a show: each release lowers the
	// counter by the seats it freed, never to zero while another order of
	// the buyer still holds seats; by Release and by ReleaseAll alike.
	t.Run("CounterOfABuyerWithSeveralOrders", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u1", Seats: []string{"3"}}
		c := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u1", Seats: []string{"4", "5"}}
		for _, h := range []cancel.Hold{a, b, c} {
			require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
		}
		require.Equal(t, 5, held(t, s, a.ShowID, "u1"))
		n, err := s.Release(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u1", Seats: []string{"1"}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 4, held(t, s, a.ShowID, "u1"), "I8: one seat of a released")
		ns, err := s.ReleaseAll(ctx, []cancel.Hold{b})
		require.NoError(t, err)
		assert.Equal(t, []int{1}, ns)
		assert.Equal(t, 3, held(t, s, a.ShowID, "u1"), "I8: b's seat released in a batch")
		n, err = s.Release(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"), "I8: the rest of a")
		ns, err = s.ReleaseAll(ctx, []cancel.Hold{c})
		require.NoError(t, err)
		assert.Equal(t, []int{2}, ns)
		assert.Equal(t, 0, held(t, s, a.ShowID, "u1"))
	})
	// A lock judged stale, freed, then taken again by the same order number
	// (a late payment's reinstatement, a rebuild): a release or sale that
	// names the judged lock acts on it only, never on the newer one (I15).
	t.Run("ReleaseNamesTheJudgedLock", func(t *testing.T) {
		s := newSeats(t)
		h := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
		locks, _ := scanAll(t, s, 100)
		var judged string
		for _, l := range locks {
			if l.OrderNo == h.OrderNo {
				require.NotEmpty(t, l.LockID, "every lock has an id")
				if judged != "" {
					assert.Equal(t, judged, l.LockID, "one Lock call, one lock id")
				}
				judged = l.LockID
			}
		}
		require.NotEmpty(t, judged)
		old := h
		old.LockID = judged
		n, err := s.Release(ctx, old)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the judged lock itself is freed")
		require.NoError(t, lockErr(s.Lock(ctx, h, 0)), "the same order number locks the seats again")
		for i := 0; i < 2; i++ {
			n, err = s.Release(ctx, old)
			require.NoError(t, err)
			assert.Zero(t, n, "I15: a release naming the older lock never frees the newer one")
			n, err = s.Sell(ctx, old)
			require.NoError(t, err)
			assert.Zero(t, n, "nor does a sale naming it sell it")
		}
		show, err := s.Show(ctx, h.ShowID)
		require.NoError(t, err)
		for _, seat := range h.Seats {
			assert.Equal(t, cancel.SeatLocked, show[seat].Status)
			assert.NotEqual(t, judged, show[seat].LockID, "a newer lock has a new id")
		}
		assert.Equal(t, 2, held(t, s, h.ShowID, "u1"), "I8")
		n, err = s.Release(ctx, h)
		require.NoError(t, err)
		assert.Equal(t, 2, n, "a release naming no lock frees the order's lock")
		// A sale naming a lock never sells a free seat: the judged lock is gone.
		n, err = s.Sell(ctx, old)
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.Zero(t, held(t, s, h.ShowID, "u1"))
	})
	t.Run("SoldIsNeverReleased", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		n, err := s.Sell(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Sell(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 0, n, "selling again is a no-op")
		n, err = s.Release(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 0, n, "I2: a sold seat is never released")
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Equal(t, cancel.SeatSold, show["1"].Status)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"), "I8: paid seats still count")
		assert.ErrorIs(t, lockErr(s.Lock(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"1"}}, 0)), cancel.ErrSeatUnavailable, "a sold seat is not free")
		locks, _ := scanAll(t, s, 2)
		for _, l := range locks {
			assert.NotEqual(t, a.OrderNo, l.OrderNo, "sold seats are not locks")
		}
	})
	t.Run("SellRevivesLostLock", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1")
		n, err := s.Sell(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 1, held(t, s, a.ShowID, "u1"))
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"1"}}
		n, err = s.Sell(ctx, b)
		require.NoError(t, err)
		assert.Equal(t, 0, n, "another order's sold seat is left alone")
	})
	t.Run("ConcurrentReleases", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2", "3", "4")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		var total atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := s.Release(ctx, a)
				assert.NoError(t, err)
				total.Add(int64(n))
			}()
		}
		wg.Wait()
		assert.Equal(t, int64(4), total.Load(), "I2: each seat released once")
		assert.Equal(t, 0, held(t, s, a.ShowID, "u1"), "I8: never below zero")
	})
}
