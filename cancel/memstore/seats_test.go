package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
)

// The seat suite again with the fake's clock three minutes behind the host's,
// as a Redis server's may be: lock times and ages must follow the store's
// clock (SeatsHarness.Now), never the host's (invariant I11).
func TestSeatsConformanceSkewedClock(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness {
		return harness(memstore.NewSeats(func() time.Time { return time.Now().Add(-3 * time.Minute) }))
	})
}

// harness is s with its clock and its data loss, for the seat suite.
func harness(s *memstore.Seats) canceltest.SeatsHarness {
	return canceltest.SeatsHarness{Seats: s, Now: s.Now, Wipe: s.Wipe}
}

// The age of a lock is the fake clock's, at the scan.
func TestSeatsAgeByTheFakeClock(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memstore.NewSeats(func() time.Time { return now })
	require.NoError(t, lockErr(s.Lock(ctx, cancel.Hold{ShowID: "s", OrderNo: "o", UserID: "u", Seats: []string{"1"}}, 0)))
	now = now.Add(90 * time.Second)
	locks, next, err := s.ScanLocks(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, locks, 1)
	assert.Equal(t, 90*time.Second, locks[0].Age)
	assert.Equal(t, now.Add(-90*time.Second), locks[0].LockedAt)
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }
