package canceltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runSeatScan is the part of RunSeats on the reconciler's lock scan: what it
// finds, lock times by the store's clock, its cost, racing locks, and
// retiring a show.
func runSeatScan(t *testing.T, newHarness func(t *testing.T) SeatsHarness) {
	ctx := context.Background()
	newSeats := func(t *testing.T) SeatStore { return newHarness(t).Seats }
	t.Run("ScanLocks", func(t *testing.T) {
		s := newSeats(t)
		var mine []cancel.Hold
		for i := 0; i < 3; i++ {
			h := hold("u1", "a", "b", "c", "d", "e")
			require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
			mine = append(mine, h)
		}
		_, err := s.Sell(ctx, mine[2])
		require.NoError(t, err)
		locks, calls := scanAll(t, s, 2)
		assert.Greater(t, calls, 1, "a small count takes several calls")
		found := map[string]int{}
		for _, l := range locks {
			found[l.OrderNo]++
			if l.OrderNo == mine[0].OrderNo {
				assert.Equal(t, mine[0].ShowID, l.ShowID)
				assert.Equal(t, "u1", l.UserID)
				assert.False(t, l.LockedAt.IsZero())
			}
		}
		assert.GreaterOrEqual(t, found[mine[0].OrderNo], 5)
		assert.GreaterOrEqual(t, found[mine[1].OrderNo], 5)
		assert.Zero(t, found[mine[2].OrderNo], "sold seats are not listed")
	})
	// I11: a lock's time and age are the store's clock, at
	// the lock and at the scan, never a host's.
	t.Run("LockTimeByStoreClock", func(t *testing.T) {
		h := newHarness(t)
		s, ok := h.Seats, h.Now != nil
		now := func() time.Time {
			if !ok {
				return time.Time{}
			}
			n, err := h.Now(ctx)
			require.NoError(t, err)
			return n
		}
		before := now()
		a := hold("u1", "1")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		locked := now()
		time.Sleep(30 * time.Millisecond)
		scanned := now()
		locks, _ := scanAll(t, s, 10)
		after := now()
		require.Len(t, locks, 1)
		l := locks[0]
		if !ok {
			assert.True(t, l.Age >= 25*time.Millisecond && l.Age < time.Minute, "age %v of a lock taken 30 ms ago", l.Age)
			t.Log("the harness has no Now: lock times checked loosely")
			return
		}
		const slack = 2 * time.Millisecond // lock times are in ms; a cluster's nodes
		assert.False(t, l.LockedAt.Before(before.Add(-slack)) || l.LockedAt.After(locked.Add(slack)),
			"the lock's time %v is the store's clock (between %v and %v)", l.LockedAt, before, locked)
		assert.True(t, l.Age >= scanned.Sub(locked)-slack && l.Age <= after.Sub(before)+slack,
			"the age %v is the store's clock at the scan minus the lock's time (between %v and %v)", l.Age, scanned.Sub(locked), after.Sub(before))
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.True(t, show["1"].LockedAt.Equal(l.LockedAt))
	})
	// A scan pass costs the live locks, not every seat ever
	// sold, and a show without locks leaves the listing.
	t.Run("ScanCostFollowsLocks", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "L1", "L2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		for i := 0; i < 6; i++ { // 300 sold seats in the same show
			var seats []string
			for j := 0; j < cancel.MaxSeats; j++ {
				seats = append(seats, fmt.Sprintf("S%d", i*cancel.MaxSeats+j))
			}
			_, err := s.Sell(ctx, cancel.Hold{ShowID: a.ShowID, OrderNo: id("paid"), UserID: "u9", Seats: seats})
			require.NoError(t, err)
		}
		locks, calls := scanAll(t, s, 10)
		assert.Len(t, locks, 2)
		assert.LessOrEqual(t, calls, 2, "a pass reads the 2 locks, not the 300 sold seats")

		// Releasing the last lock: the next pass unlists the show, a lock
		// lists it again, selling the last lock unlists it too.
		assert.True(t, listed(t, s, a.ShowID))
		_, err := s.Release(ctx, a)
		require.NoError(t, err)
		scanAll(t, s, 10)
		assert.False(t, listed(t, s, a.ShowID), "a show without locks leaves the listing")
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u1", Seats: []string{"L1"}}
		require.NoError(t, lockErr(s.Lock(ctx, b, 0)))
		assert.True(t, listed(t, s, a.ShowID), "a lock lists its show")
		locks, _ = scanAll(t, s, 10)
		assert.Len(t, locks, 1)
		assert.True(t, listed(t, s, a.ShowID), "a show with a lock stays listed")
		_, err = s.Sell(ctx, b)
		require.NoError(t, err)
		scanAll(t, s, 10)
		assert.False(t, listed(t, s, a.ShowID), "sold seats keep no show listed")
	})
	// The scan unlists empty shows while Locks run: once everything
	// returned, every show holding a lock must be listed. (Rounds for up to
	// a second: slow stores, such as an emulated Redis, run fewer.)
	t.Run("LockScanRace", func(t *testing.T) {
		s := newSeats(t)
		shows := []string{id("show"), id("show"), id("show")}
		start := time.Now()
		for round := 0; round < 60 && (round < 5 || time.Since(start) < time.Second); round++ {
			var wg sync.WaitGroup
			done := make(chan struct{})
			for _, show := range shows {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 8; i++ {
						h := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{fmt.Sprintf("r%d-%d", round, i)}}
						assert.NoError(t, lockErr(s.Lock(ctx, h, 0)))
						if i < 7 || rand.IntN(2) == 0 { // toggle the index between empty and not
							_, err := s.Release(ctx, h)
							assert.NoError(t, err)
						}
					}
				}()
			}
			var scans sync.WaitGroup
			for range 2 {
				scans.Add(1)
				go func() {
					defer scans.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						cursor := ""
						for {
							_, next, err := s.ScanLocks(ctx, cursor, 1)
							if !assert.NoError(t, err) {
								return
							}
							if cursor = next; cursor == "" {
								break
							}
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			scans.Wait()
			for _, show := range shows {
				st, err := s.Show(ctx, show)
				require.NoError(t, err)
				locked := 0
				for _, v := range st {
					if v.Status == cancel.SeatLocked {
						locked++
					}
				}
				if locked > 0 {
					require.True(t, listed(t, s, show), "round %d: show %s holds %d locks but is not listed: the scan would never see them", round, show, locked)
				}
			}
		}
	})
	t.Run("RetireShow", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		assert.Error(t, s.RetireShow(ctx, a.ShowID), "a show with locks is not retired")
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Len(t, show, 2, "nothing deleted")
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"))
		_, err = s.Sell(ctx, a)
		require.NoError(t, err)
		require.NoError(t, s.RetireShow(ctx, a.ShowID))
		show, err = s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Empty(t, show, "the sold seats are gone")
		assert.Zero(t, held(t, s, a.ShowID, "u1"), "the counters are gone")
		assert.False(t, listed(t, s, a.ShowID))
		require.NoError(t, s.RetireShow(ctx, a.ShowID), "idempotent")
		require.NoError(t, s.RetireShow(ctx, id("show")), "an unknown show")
		assert.ErrorIs(t, s.RetireShow(ctx, "a}{b"), expiry.ErrInvalidID)
	})
}
