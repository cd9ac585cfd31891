package canceltest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// SeatStore is what the seat suite tests: the releaser and seller, the lock
// taken at placement, the reconciler's scan, and two reads for checking.
type SeatStore interface {
	cancel.SeatReleaser
	cancel.SeatSeller
	Lock(ctx context.Context, h cancel.Hold, limit int) (int, error)
	ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error)
	Show(ctx context.Context, show string) (map[string]cancel.SeatState, error)
	Held(ctx context.Context, show, user string) (int, error)
	Lost(ctx context.Context) (bool, error)
	Restore(ctx context.Context, claims []cancel.Claim) (int, error)
	MarkRestored(ctx context.Context) error
}

// RunSeats runs the seat-store suite; newSeats must return a store in which
// the suite's (random) show ids are unused.
func RunSeats(t *testing.T, newSeats func(t *testing.T) SeatStore) {
	ctx := context.Background()
	hold := func(user string, seats ...string) cancel.Hold {
		return cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: user, Seats: seats}
	}
	held := func(t *testing.T, s SeatStore, show, user string) int {
		n, err := s.Held(ctx, show, user)
		require.NoError(t, err)
		return n
	}

	t.Run("LockAllOrNothing", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		n, err := s.Lock(ctx, a, 0)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Lock(ctx, a, 0)
		require.NoError(t, err)
		assert.Equal(t, 0, n, "locking again is a no-op")
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"3", "2"}}
		_, err = s.Lock(ctx, b, 0)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable)
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Len(t, show, 2, "seat 3 was not locked: all or nothing")
		assert.Equal(t, a.OrderNo, show["2"].OrderNo)
		assert.Equal(t, expiry.StatusPending, show["2"].Status)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"))
		assert.Equal(t, 0, held(t, s, a.ShowID, "u2"))
	})

	t.Run("Limit", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		_, err := s.Lock(ctx, a, 3)
		require.NoError(t, err)
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u1", Seats: []string{"3", "4"}}
		_, err = s.Lock(ctx, b, 3)
		assert.ErrorIs(t, err, cancel.ErrLimitExceeded)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"))
		b.Seats = b.Seats[:1]
		_, err = s.Lock(ctx, b, 3)
		assert.NoError(t, err)
		assert.Equal(t, 3, held(t, s, a.ShowID, "u1"))
	})

	t.Run("ReleaseOnlyOwnLocks", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		_, err := s.Lock(ctx, a, 0)
		require.NoError(t, err)
		other := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"3"}}
		_, err = s.Lock(ctx, other, 0)
		require.NoError(t, err)
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

	t.Run("SoldIsNeverReleased", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2")
		_, err := s.Lock(ctx, a, 0)
		require.NoError(t, err)
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
		assert.Equal(t, expiry.StatusPaid, show["1"].Status)
		assert.Equal(t, 2, held(t, s, a.ShowID, "u1"), "I8: paid seats still count")
		locks, _ := scanAll(t, s)
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
			_, err := s.Lock(ctx, h, 0)
			require.NoError(t, err)
			mine = append(mine, h)
		}
		_, err := s.Sell(ctx, mine[2])
		require.NoError(t, err)
		locks, calls := scanAll(t, s)
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

	t.Run("ConcurrentReleases", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1", "2", "3", "4")
		_, err := s.Lock(ctx, a, 0)
		require.NoError(t, err)
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

	t.Run("Restore", func(t *testing.T) {
		s := newSeats(t)
		lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "a store never rebuilt counts as lost")
		show := id("show")
		other := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u9", Seats: []string{"x"}}
		_, err = s.Lock(ctx, other, 0)
		require.NoError(t, err)
		lockedA := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"a2"}}
		_, err = s.Lock(ctx, lockedA, 0)
		require.NoError(t, err)
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "a1", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // lost lock
			{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // still there
			{ShowID: show, SeatID: "p1", OrderNo: "paid-1", UserID: "u2", Status: expiry.StatusPaid},           // lost sale
			{ShowID: show, SeatID: "x", OrderNo: "paid-2", UserID: "u3", Status: expiry.StatusPaid},            // held by another order: left alone
		}
		n, err := s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Zero(t, n, "idempotent")
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, st["a1"].Status)
		assert.Equal(t, lockedA.OrderNo, st["a1"].OrderNo)
		assert.Equal(t, expiry.StatusPaid, st["p1"].Status)
		assert.Equal(t, other.OrderNo, st["x"].OrderNo)
		assert.Equal(t, 2, held(t, s, show, "u1"), "I8: the restored lock counts")
		assert.Equal(t, 1, held(t, s, show, "u2"))
		assert.Equal(t, 0, held(t, s, show, "u3"))
		// A paid claim turns the order's own lock into a sale.
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 2, held(t, s, show, "u1"), "a sale of a counted lock does not count twice")
		require.NoError(t, s.MarkRestored(ctx))
		lost, err = s.Lost(ctx)
		require.NoError(t, err)
		assert.False(t, lost)
		_, err = s.Restore(ctx, []cancel.Claim{{ShowID: "a{b}", SeatID: "1", OrderNo: "o", UserID: "u", Status: expiry.StatusPaid}})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	// Issue 9 item 1 (I8, I13): a seat listed twice in one Lock must not
	// count twice. A store may refuse the hold (expiry.ErrInvalidID) or lock
	// the seat once; either way the counter ends at zero after the release.
	t.Run("SeatListedTwice", func(t *testing.T) {
		for _, limit := range []int{0, 1} {
			s := newSeats(t)
			a := hold("u1", "A1", "A1")
			n, err := s.Lock(ctx, a, limit)
			if err != nil {
				require.ErrorIs(t, err, expiry.ErrInvalidID, "limit %d: refused as invalid, or locked once", limit)
				show, err := s.Show(ctx, a.ShowID)
				require.NoError(t, err)
				assert.Empty(t, show, "a refused hold locks nothing")
				assert.Zero(t, held(t, s, a.ShowID, "u1"))
				continue
			}
			assert.Equal(t, 1, n, "a seat listed twice is locked once")
			assert.Equal(t, 1, held(t, s, a.ShowID, "u1"), "I8: one seat held, one counted")
			n, err = s.Release(ctx, a)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			assert.Zero(t, held(t, s, a.ShowID, "u1"), "I8: nothing held, the counter is back at zero")
		}
	})

	// A seat locked by order X for one user is not "already mine" for a Lock
	// of the same order number by another user (a client-chosen order number
	// placed twice, issue 9 item 2): that Lock must fail and change nothing.
	t.Run("SameOrderOtherUser", func(t *testing.T) {
		s := newSeats(t)
		a := hold("u1", "1")
		_, err := s.Lock(ctx, a, 0)
		require.NoError(t, err)
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: a.OrderNo, UserID: "u2", Seats: []string{"2", "1"}}
		_, err = s.Lock(ctx, b, 0)
		assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "same order number, other user: not mine")
		show, err := s.Show(ctx, a.ShowID)
		require.NoError(t, err)
		assert.Len(t, show, 1, "seat 2 stays free: all or nothing")
		assert.Equal(t, "u1", show["1"].UserID)
		assert.Equal(t, 1, held(t, s, a.ShowID, "u1"))
		assert.Zero(t, held(t, s, a.ShowID, "u2"), "I8: u2 holds nothing")
	})

	// Issue 9 item 7: the store loses its data again while a rebuild is
	// under way. The rebuild must not end by marking a half-empty store as
	// restored: Lost must still report the loss.
	t.Run("RebuildInterruptedByDataLoss", func(t *testing.T) {
		s := newSeats(t)
		w, ok := s.(Wiper)
		if !ok {
			t.Skip("the store does not implement canceltest.Wiper")
		}
		show := id("show")
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "s1", OrderNo: "paid-1", UserID: "u1", Status: expiry.StatusPaid},
			{ShowID: show, SeatID: "s2", OrderNo: "paid-2", UserID: "u2", Status: expiry.StatusPaid},
		}
		lost, err := s.Lost(ctx)
		require.NoError(t, err)
		require.True(t, lost)
		_, err = s.Restore(ctx, claims[:1]) // the first page of the rebuild
		require.NoError(t, err)
		w.Wipe()                            // the store loses its data again, mid-rebuild
		_, err = s.Restore(ctx, claims[1:]) // the rest of the (now useless) pass
		require.NoError(t, err)
		_ = s.MarkRestored(ctx)
		lost, err = s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "the second loss must not be hidden: seat s1 is free again though sold in SQL")
	})

	t.Run("HostileIDs", func(t *testing.T) {
		s := newSeats(t)
		for _, h := range []cancel.Hold{
			{ShowID: "a}{b", OrderNo: "o1", UserID: "u1", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o|1", UserID: "u1", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o1", UserID: "u\x00", Seats: []string{"1"}},
			{ShowID: "show", OrderNo: "o1", UserID: "u1", Seats: []string{"1' OR 1=1"}},
			{ShowID: "", OrderNo: "o1", UserID: "u1", Seats: []string{"1"}},
		} {
			_, err := s.Lock(ctx, h, 0)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "lock %+v", h)
			_, err = s.Release(ctx, h)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "release %+v", h)
			_, err = s.Sell(ctx, h)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "sell %+v", h)
		}
	})
}

// Wiper is implemented by a store (or a test's wrapper of one) that can
// lose all its data on demand, as a Redis restart without persistence does:
// every seat, counter and marker of the store is gone. The suite's data-loss
// cases are skipped for stores that do not implement it.
type Wiper interface {
	Wipe()
}

// scanAll runs one full ScanLocks pass with a small count.
func scanAll(t *testing.T, s SeatStore) ([]cancel.SeatLock, int) {
	var all []cancel.SeatLock
	cursor, calls := "", 0
	for {
		locks, next, err := s.ScanLocks(context.Background(), cursor, 2)
		require.NoError(t, err)
		all = append(all, locks...)
		calls++
		if next == "" || calls > 100000 {
			return all, calls
		}
		cursor = next
	}
}
