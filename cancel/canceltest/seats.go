package canceltest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// SeatStore is what the seat suite tests: cancel.SeatStore, the host's
// retirement of a finished show, and three reads for checking.
type SeatStore interface {
	cancel.SeatStore
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

// RunSeats runs the seat-store suite, with the cases for when SQL goes back
// in time (SeatStates, Refunded and MarkRefunded, ScanSold). newHarness must return an empty store
// (for Redis, a fresh namespace): some cases count the calls of a scan pass.
func RunSeats(t *testing.T, newHarness func(t *testing.T) SeatsHarness) {
	ctx := context.Background()
	newSeats := func(t *testing.T) SeatStore { return newHarness(t).Seats }
	runBatchSeats(t, newSeats)
	runSeatLocks(t, newSeats)
	runSeatReleases(t, newSeats)
	runSeatScan(t, newHarness)
	runSeatRebuild(t, newHarness)

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

// hold is a hold of seats by user, on a show and order of their own.
func hold(user string, seats ...string) cancel.Hold {
	return cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: user, Seats: seats}
}

// held is user's purchase-limit counter in show.
func held(t *testing.T, s SeatStore, show, user string) int {
	t.Helper()
	n, err := s.Held(context.Background(), show, user)
	require.NoError(t, err)
	return n
}

// listed reports whether the lock scan walks show.
func listed(t *testing.T, s SeatStore, show string) bool {
	t.Helper()
	shows, err := s.ListedShows(context.Background())
	require.NoError(t, err)
	return slices.Contains(shows, show)
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }
