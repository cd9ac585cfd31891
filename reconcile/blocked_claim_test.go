package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// After a loss, a placement whose commit outcome is unknown (it never
// committed: SQL's claim of the seat is another order's) may lock a seat that
// SQL gives a pending order. The rebuild passes that claim while the stale
// lock holds the seat, and completes; the lock pass releases the stale lock
// once it is past the grace period. The seat is then free, and the pending
// order gets it back from the claims pass that next reaches its claim: with
// bounded passes that is not the round of the release, but it does come (I2,
// I8). This is the minimal form of the model run
// TestModelFake -rapid.seed=123012670150230690 (order o15; there the stale
// lock is o181's, a lock whose answer was lost, and the lock pass is behind
// the claims pass by its cursor), whose Check expected the seat back in the
// round that freed it.
func TestBlockedClaimIsRestoredByTheNextClaimsPass(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	place := func(no, user, show, seat string) {
		p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: []string{seat}, ExpireAt: e.clock().Add(time.Hour)}
		require.NoError(t, e.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
	}
	// Paid orders in show A: claims that come before show B's in the claims
	// pass, but sold seats, which the lock pass does not walk. So the lock
	// pass reaches s5 rounds before the claims pass does.
	for _, seat := range []string{"a1", "a2", "a3", "a4", "a5", "a6"} {
		place("paid-"+seat, "u1", "A", seat)
		_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "paid-" + seat, UserID: "u1", PaymentID: "pay-" + seat})
		require.NoError(t, err)
	}
	place("held", "u2", "B", "s5")

	e.seats.Wipe()
	// A placement of s5 whose commit answer was lost: its lock stays, its
	// order never appears (SQL's claim of s5 is held's).
	ghost := cancel.Placement{OrderNo: "ghost", UserID: "u3", ShowID: "B", Seats: []string{"s5"}, ExpireAt: e.clock().Add(time.Hour)}
	err := e.svc.Place(ctx, ghost, func(context.Context, cancel.Placement) error { return expiry.ErrCommitUnknown })
	require.ErrorIs(t, err, expiry.ErrCommitUnknown)

	seat := func() cancel.SeatState {
		show, err := e.seats.Show(ctx, "B")
		require.NoError(t, err)
		return show["s5"]
	}
	held := func() int {
		n, err := e.seats.Held(ctx, "B", "u2")
		require.NoError(t, err)
		return n
	}

	r := e.reconciler(t, 1, 2) // two claims and about two lock entries per round
	rebuilt := false
	for i := 0; i < 10 && !rebuilt; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		rebuilt = rep.Rebuilt
	}
	require.True(t, rebuilt, "the rebuild completes")
	assert.Equal(t, "ghost", seat().OrderNo, "the rebuild passed held's claim while the stale lock (within the grace period) held s5")

	e.advance(2 * time.Minute) // past the grace period: the ghost's lock is stale
	var released bool
	for i := 0; i < 10 && !released; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		if seat().OrderNo == "" {
			released = true
			assert.False(t, rep.ClaimsComplete, "the claims pass of the releasing round did not reach held's claim")
		}
	}
	require.True(t, released, "the lock pass releases the stale lock")
	assert.Equal(t, 0, held(), "for now s5 is free and held's user holds nothing in show B")

	// A claims pass that begins after the release restores the claim.
	passes := 0
	for i := 0; i < 10 && passes < 2; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		if rep.ClaimsComplete {
			passes++
		}
	}
	require.Equal(t, 2, passes)
	st := seat()
	assert.Equal(t, cancel.SeatLocked, st.Status, "I2: the pending order holds its seat again")
	assert.Equal(t, "held", st.OrderNo)
	assert.Equal(t, 1, held(), "I8")
	o, err := e.store.Order(ctx, "held")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
}
