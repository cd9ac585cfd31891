package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// A store's transition hook failing for one order of several: the others
// expire in the same round, that one is skipped and backed off (its seats
// still locked), and it expires once the hook stops failing (I12).
func TestFailingHookSkipsOnlyItsOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var fail atomic.Bool
	fail.Store(true)
	var tries atomic.Int32
	e.store.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if r.Order.No != "bad" {
			return nil
		}
		tries.Add(1)
		if fail.Load() {
			return errors.New("outbox full")
		}
		return nil
	})
	bad := e.place(t, "bad", time.Minute) // oldest: first in every scan
	for i := range 4 {
		e.place(t, fmt.Sprintf("ok%d", i), 2*time.Minute)
	}
	e.advance(3 * time.Minute)
	clock := expirytest.NewFakeClock(e.clock())
	ev := &expirytest.Recorder{}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 2, Grace: time.Minute,
		Runtime: expiry.Runtime{Clock: clock, Observer: ev}})
	require.NoError(t, err)

	rep, err := r.Round(ctx)
	require.NoError(t, err, "a failed hook is counted, not an error of the round")
	assert.Equal(t, 4, rep.Expired, "the other expired orders were cancelled in the same round")
	assert.Equal(t, 1, rep.Skipped)
	assert.Equal(t, 1, ev.Count(expiry.KindSkipped))
	assert.Equal(t, expiry.StatusPending, e.status(t, "bad"))
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Len(t, show, 2, "only the failing order's seats are still locked")
	for _, seat := range bad.Seats {
		assert.Equal(t, "bad", show[seat].OrderNo)
	}

	// Tried in the round's batch (which rolled back whole), then alone.
	triedInRound := tries.Load()
	fail.Store(false)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Skipped, "backing off: not tried again at once")
	assert.Equal(t, triedInRound, tries.Load(), "backing off: its hook did not run again")
	assert.Equal(t, expiry.StatusPending, e.status(t, "bad"))

	clock.Advance(reconcile.BackoffMin)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Expired, "tried again after its backoff, the hook succeeding")
	assert.Zero(t, rep.Skipped)
	assert.Equal(t, expiry.StatusCancelled, e.status(t, "bad"))
	show, err = e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Empty(t, show)
}

// A store's transition hook that panics for one order of several (a host's
// bug): the pass runs its batches and its one-by-one cancels in goroutines
// of its own, where a panic would end the host's process. The round goes
// on: the others expire, that one is skipped and backed off, its seats
// still locked, as for a hook that fails (I12).
func TestPanickingHookSkipsOnlyItsOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var tries atomic.Int32
	e.store.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if r.Order.No == "bad" {
			tries.Add(1)
			panic("the host's hook: nil map")
		}
		return nil
	})
	bad := e.place(t, "bad", time.Minute)
	for i := range 4 {
		e.place(t, fmt.Sprintf("ok%d", i), 2*time.Minute)
	}
	e.advance(3 * time.Minute)
	ev := &expirytest.Recorder{}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 2, Grace: time.Minute,
		Runtime: expiry.Runtime{Clock: expirytest.NewFakeClock(e.clock()), Observer: ev}})
	require.NoError(t, err)

	rep, err := r.Round(ctx)
	require.NoError(t, err, "a panicking hook is counted, not an error of the round")
	assert.Equal(t, 4, rep.Expired, "the other expired orders were cancelled in the same round")
	assert.Equal(t, 1, rep.Skipped)
	assert.Positive(t, tries.Load())
	assert.Equal(t, expiry.StatusPending, e.status(t, "bad"))
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Len(t, show, len(bad.Seats), "only the panicking order's seats are still locked")
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Skipped, "backing off")
}
