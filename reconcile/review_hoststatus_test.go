package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// An outside review of 40ac3e1 (I19, statuses the host owns) from the
// reconciler's side, on the in-memory stores, judged by seats and counters.

// flippingStatuses is hostStatuses whose host set can change while the
// passes run (the host's code writing its own status, then the mapping's
// again).
type flippingStatuses struct {
	hostStatuses
	mu sync.Mutex
}

func (f *flippingStatuses) set(no string, host bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if host {
		f.host[no] = true
	} else {
		delete(f.host, no)
	}
}

func (f *flippingStatuses) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hostStatuses.Statuses(ctx, nos)
}

func (f *flippingStatuses) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hostStatuses.Claims(ctx, cursor, limit)
}

// placeLimited places order no for user with a purchase limit.
func (e *env) placeLimited(t *testing.T, no, user string, limit int, ttl time.Duration, seats ...string) error {
	t.Helper()
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "s", Seats: seats, ExpireAt: e.clock().Add(ttl), Limit: limit}
	return e.svc.Place(context.Background(), p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) })
}

// The host flips one order between a status of its own and pending while
// reconcile rounds and lock-pass repairs run in a loop (an operator putting
// the order on hold and taking it off again). Whatever the interleaving,
// the order's seats are never freed, sold, or given to anyone else: it is
// pending or the host's at every moment (I2, I15, I19), and its buyer's
// counter stays 2 (I8). Beside it a crashed canceller's seats are freed and
// a due order is expired (I12).
func TestReviewHostStatusFlipsWhileRoundsRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, e.placeLimited(t, "flip", "buyer", 2, 3*time.Hour, "f1", "f2"))
	orders := &flippingStatuses{hostStatuses: hostStatuses{Store: e.store, host: map[string]bool{}}}
	r, err := reconcile.New(reconcile.Config{Orders: orders, Seats: e.seats, Service: e.svc, Grace: time.Minute, Settle: time.Second})
	require.NoError(t, err)
	e.advance(2 * time.Minute)

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			orders.set("flip", i%2 == 0)
		}
	}()
	for round := 0; round < 200; round++ {
		if round%20 == 0 {
			// Every so often an order beside it falls due, and another is
			// cancelled by a canceller that crashed before its release.
			no := fmt.Sprintf("d%03d", round)
			require.NoError(t, e.placeLimited(t, no, "u"+no, 0, time.Second, no+"a"))
			e.cancelledInSQLOnly(t, fmt.Sprintf("c%03d", round))
			e.advance(2 * time.Second)
		}
		_, err := r.Round(ctx)
		require.NoError(t, err)
		show, err := e.seats.Show(ctx, "s")
		require.NoError(t, err)
		for _, seat := range []string{"f1", "f2"} {
			st, ok := show[seat]
			if assert.True(t, ok, "round %d: %s of the pending/host order was freed", round, seat) {
				assert.Equal(t, cancel.SeatLocked, st.Status, "round %d", round)
				assert.Equal(t, "flip", st.OrderNo, "round %d", round)
			}
		}
		n, err := e.seats.Held(ctx, "s", "buyer")
		require.NoError(t, err)
		assert.Equal(t, 2, n, "round %d: I8", round)
		if t.Failed() {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	for round := 0; round < 200; round += 20 {
		no := fmt.Sprintf("d%03d", round)
		assert.Equal(t, expiry.StatusCancelled, e.status(t, no), "I3, I12: %s expired beside the flipping order", no)
	}
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Len(t, show, 2, "I12: every other seat freed (the due orders', the crashed cancels'); only the flipping order's stay")
}
