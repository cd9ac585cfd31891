package canceltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// SeatStore is what the seat suite tests: the lock taken at placement, the
// releaser and seller (cancel.SeatStore), the reconciler's scan and rebuild
// (reconcile.Seats), the host's retirement of a finished show, and three
// reads for checking.
type SeatStore interface {
	cancel.SeatStore
	ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error)
	Lost(ctx context.Context) (token string, lost bool, err error)
	Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error)
	Restore(ctx context.Context, claims []cancel.Claim) (int, error)
	MarkRestored(ctx context.Context, token string) error
	// RetireShow deletes a show's seats and counters; it must refuse (an
	// error, nothing changed) while the show holds locks.
	RetireShow(ctx context.Context, show string) error
	// Show returns the locked and sold seats of a show.
	Show(ctx context.Context, show string) (map[string]cancel.SeatState, error)
	// Held returns a user's purchase-limit counter in a show.
	Held(ctx context.Context, show, user string) (int, error)
	// ListedShows returns the shows the lock scan walks: every show that
	// holds a lock must be among them once the calls in flight returned; a
	// show without locks must be gone after a complete scan pass.
	ListedShows(ctx context.Context) ([]string, error)
}

// SeatsHarness is one fresh, empty seat store and what the suite needs
// around it.
type SeatsHarness struct {
	Seats SeatStore
	// Now reads the store's own clock, the one lock times and ages must come
	// from (Redis TIME for redisseat). The suite then checks lock times
	// against it; a store whose clock runs apart from the host's (a fake's
	// set back, a skewed Redis) shows that no host clock is used (invariant
	// I11). Nil: lock times are checked loosely.
	Now func(ctx context.Context) (time.Time, error)
	// Wipe loses all the store's data at once, as a Redis restart without
	// persistence does: every seat, counter and marker is gone. Nil: the
	// data-loss cases are skipped.
	Wipe func()
}

// RunSeats runs the seat-store suite, with the cases of the optional
// interfaces for when SQL goes back in time (cancel.SeatReader,
// cancel.RefundLedger, and ScanSold of reconcile.SoldScanner) for a store
// that implements them. newHarness must return an empty store
// (for Redis, a fresh namespace): some cases count the calls of a scan pass.
func RunSeats(t *testing.T, newHarness func(t *testing.T) SeatsHarness) {
	ctx := context.Background()
	newSeats := func(t *testing.T) SeatStore { return newHarness(t).Seats }
	hold := func(user string, seats ...string) cancel.Hold {
		return cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: user, Seats: seats}
	}
	held := func(t *testing.T, s SeatStore, show, user string) int {
		t.Helper()
		n, err := s.Held(ctx, show, user)
		require.NoError(t, err)
		return n
	}
	listed := func(t *testing.T, s SeatStore, show string) bool {
		t.Helper()
		shows, err := s.ListedShows(ctx)
		require.NoError(t, err)
		return slices.Contains(shows, show)
	}

	runBatchSeats(t, newSeats)
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

	t.Run("Restore", func(t *testing.T) {
		s := newSeats(t)
		token, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "a store never rebuilt counts as lost")
		assert.NotEmpty(t, token)
		show := id("show")
		other := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u9", Seats: []string{"x"}}
		require.NoError(t, lockErr(s.Lock(ctx, other, 0)))
		lockedA := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"a2"}}
		require.NoError(t, lockErr(s.Lock(ctx, lockedA, 0)))
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "a1", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // lost lock
			{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // still there
			{ShowID: show, SeatID: "p1", OrderNo: "paid-1", UserID: "u2", Status: expiry.StatusPaid},           // lost sale
			{ShowID: show, SeatID: "x", OrderNo: "paid-2", UserID: "u3", Status: expiry.StatusPaid},            // held by another order: left alone
			{ShowID: show, SeatID: "c1", OrderNo: "gone-1", UserID: "u4", Status: expiry.StatusCancelled},      // no claim to restore
		}
		n, err := s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Zero(t, n, "idempotent")
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, cancel.SeatLocked, st["a1"].Status)
		assert.Equal(t, lockedA.OrderNo, st["a1"].OrderNo)
		assert.Equal(t, cancel.SeatSold, st["p1"].Status)
		assert.Equal(t, other.OrderNo, st["x"].OrderNo)
		assert.NotContains(t, st, "c1")
		assert.Equal(t, 2, held(t, s, show, "u1"), "I8: the restored lock counts")
		assert.Equal(t, 1, held(t, s, show, "u2"))
		assert.Equal(t, 0, held(t, s, show, "u3"))
		locks, _ := scanAll(t, s, 100)
		seen := map[string]bool{}
		for _, l := range locks {
			seen[l.SeatID] = true
		}
		assert.True(t, seen["a1"], "a restored lock is seen by the scan")
		// A paid claim turns the order's own lock into a sale; the same
		// order number's lock for another user is left alone.
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u7", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Zero(t, n, "not the lock's user")
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 2, held(t, s, show, "u1"), "a sale of a counted lock does not count twice")
		locks, _ = scanAll(t, s, 100)
		for _, l := range locks {
			assert.NotEqual(t, "a2", l.SeatID, "a sold seat leaves the lock scan")
		}
		paidOnly := id("show")
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: paidOnly, SeatID: "1", OrderNo: "paid-3", UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.False(t, listed(t, s, paidOnly), "restoring sales lists no show: the scan has nothing to do there")
		require.NoError(t, s.MarkRestored(ctx, token))
		token2, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.False(t, lost)
		assert.Empty(t, token2)
		_, err = s.Restore(ctx, []cancel.Claim{{ShowID: "a{b}", SeatID: "1", OrderNo: "o", UserID: "u", Status: expiry.StatusPaid}})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	// Missing names exactly the claims Restore would change, and changes
	// nothing: the reconciler reads SQL again for them before it restores,
	// so a seat a cancel has just released is never locked again.
	t.Run("Missing", func(t *testing.T) {
		s := newSeats(t)
		show := id("show")
		mine := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"l1", "l2"}}
		require.NoError(t, lockErr(s.Lock(ctx, mine, 0)))
		sold := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u2", Seats: []string{"s1"}}
		require.NoError(t, lockErr(s.Lock(ctx, sold, 0)))
		_, err := s.Sell(ctx, sold)
		require.NoError(t, err)
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "l1", OrderNo: mine.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // held as claimed
			{ShowID: show, SeatID: "l2", OrderNo: mine.OrderNo, UserID: "u1", Status: expiry.StatusPaid},    // paid, still only locked
			{ShowID: show, SeatID: "s1", OrderNo: sold.OrderNo, UserID: "u2", Status: expiry.StatusPaid},    // sold as claimed
			{ShowID: show, SeatID: "f1", OrderNo: id("o"), UserID: "u3", Status: expiry.StatusPending},      // free: lost
			{ShowID: show, SeatID: "f2", OrderNo: id("o"), UserID: "u3", Status: expiry.StatusPaid},         // free: lost sale
			{ShowID: show, SeatID: "l1", OrderNo: id("o"), UserID: "u4", Status: expiry.StatusPending},      // another order's seat
		}
		before, err := s.Show(ctx, show)
		require.NoError(t, err)
		missing, err := s.Missing(ctx, claims)
		require.NoError(t, err)
		var got []string
		for _, c := range missing {
			got = append(got, c.SeatID+"/"+c.Status.String())
		}
		assert.ElementsMatch(t, []string{"l2/paid", "f1/pending", "f2/paid"}, got)
		after, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, before, after, "Missing changes nothing")
		n, err := s.Restore(ctx, missing)
		require.NoError(t, err)
		assert.Equal(t, 3, n, "what Missing names, Restore changes")
		missing, err = s.Missing(ctx, claims)
		require.NoError(t, err)
		assert.Empty(t, missing, "nothing left to restore")
		_, err = s.Missing(ctx, []cancel.Claim{{ShowID: "a{b}", SeatID: "1", OrderNo: "o", UserID: "u", Status: expiry.StatusPaid}})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	// A rebuild is named by a token; every caller gets the
	// same one until it is marked restored.
	t.Run("RebuildToken", func(t *testing.T) {
		s := newSeats(t)
		tokens := make([]string, 8)
		var wg sync.WaitGroup
		for i := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				token, lost, err := s.Lost(ctx)
				assert.NoError(t, err)
				assert.True(t, lost)
				tokens[i] = token
			}()
		}
		wg.Wait()
		require.NotEmpty(t, tokens[0])
		for _, tok := range tokens {
			assert.Equal(t, tokens[0], tok, "concurrent callers share one rebuild")
		}
		assert.ErrorIs(t, s.MarkRestored(ctx, "not-the-token"), cancel.ErrRestoreInterrupted)
		assert.ErrorIs(t, s.MarkRestored(ctx, ""), cancel.ErrRestoreInterrupted)
		_, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "a wrong token marks nothing")
		require.NoError(t, s.MarkRestored(ctx, tokens[0]))
		require.NoError(t, s.MarkRestored(ctx, tokens[0]), "the second caller of the same rebuild")
		_, lost, err = s.Lost(ctx)
		require.NoError(t, err)
		assert.False(t, lost)
	})

	// The store loses its data again while a rebuild is
	// under way. The rebuild must not end by marking a half-empty store as
	// restored: MarkRestored fails and Lost still reports the loss, under a
	// new token.
	t.Run("RebuildInterruptedByDataLoss", func(t *testing.T) {
		h := newHarness(t)
		s := h.Seats
		if h.Wipe == nil {
			t.Skip("the harness has no Wipe")
		}
		show := id("show")
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "s1", OrderNo: "paid-1", UserID: "u1", Status: expiry.StatusPaid},
			{ShowID: show, SeatID: "s2", OrderNo: "paid-2", UserID: "u2", Status: expiry.StatusPaid},
		}
		token, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		require.True(t, lost)
		_, err = s.Restore(ctx, claims[:1]) // the first page of the rebuild
		require.NoError(t, err)
		h.Wipe()                            // the store loses its data again, mid-rebuild
		_, err = s.Restore(ctx, claims[1:]) // the rest of the (now useless) pass
		require.NoError(t, err)
		assert.ErrorIs(t, s.MarkRestored(ctx, token), cancel.ErrRestoreInterrupted)
		token2, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "the second loss must not be hidden: seat s1 is free again though sold in SQL")
		assert.NotEqual(t, token, token2, "a new rebuild")
		assert.ErrorIs(t, s.MarkRestored(ctx, token), cancel.ErrRestoreInterrupted, "the old token stays dead")
		_, err = s.Restore(ctx, claims)
		require.NoError(t, err)
		require.NoError(t, s.MarkRestored(ctx, token2))
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Len(t, st, 2)
	})

	t.Run("HostileIDs", func(t *testing.T) {
		s := newSeats(t)
		for _, h := range []cancel.Hold{
			{ShowID: "a}{b", OrderNo: "o1", UserID: "u1", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o|1", UserID: "u1", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o1", UserID: "u\x00", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o1", UserID: "u1", Seats: []string{"1' OR 1=1"}},
			{ShowID: "", OrderNo: "o1", UserID: "u1", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o1", UserID: "u1", Seats: make([]string, cancel.MaxSeats+1)},
		} {
			assert.ErrorIs(t, lockErr(s.Lock(ctx, h, 0)), expiry.ErrInvalidID, "lock %+v", h)
			_, err := s.Release(ctx, h)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "release %+v", h)
			_, err = s.Sell(ctx, h)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "sell %+v", h)
		}
		shows, err := s.ListedShows(ctx)
		require.NoError(t, err)
		assert.Empty(t, shows, "a refused hold lists no show")
	})

	runBackInTime(t, newSeats)
}

// scanAll runs one full ScanLocks pass with the given count per call and
// returns the locks and the number of calls.
func scanAll(t *testing.T, s SeatStore, count int) ([]cancel.SeatLock, int) {
	t.Helper()
	var all []cancel.SeatLock
	cursor, calls := "", 0
	for {
		locks, next, err := s.ScanLocks(context.Background(), cursor, count)
		require.NoError(t, err)
		all = append(all, locks...)
		calls++
		if next == "" || calls > 100000 {
			return all, calls
		}
		cursor = next
	}
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }
