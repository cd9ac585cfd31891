package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Review of #40 (Run's backlog rounds): what the quiet-time pace promises a
// stale lock, and where the backlog rounds break it.
//
// The outcome judged: a cancelled order whose decider's release was lost (a
// crash between the SQL commit and the seat store) keeps its seats locked
// in the seat store while SQL says cancelled. The lock pass repairs it at
// the first pass after Settle (package doc), and Run's doc says the pass
// starts again at most one interval and one round after it last started,
// backlog or not. So, as in quiet times, the seats are free again at most
// Settle + interval + one round after the cancel (I15: SQL and Redis agree
// after settle; I8 through the buyer's held count).

const (
	rvStep     = time.Second     // one batch of the expired pass, on both clocks
	rvInterval = 5 * time.Second // Run's interval
	rvSettle   = 2 * time.Second
	rvPer      = 4 // Batch and MaxPerRound
)

// staleLock cancels order "lost" with its release lost, so that its seats
// stay locked in the seat store; it returns the store's time of the cancel.
func staleLock(t *testing.T, e *env) time.Time {
	ctx := context.Background()
	e.place(t, "lost", time.Hour)
	e.seats.Fail = func(op string) error {
		if op == "Release" {
			return errors.New("redis down")
		}
		return nil
	}
	_, err := e.svc.UserCancel(ctx, "lost", "u1")
	e.seats.Fail = nil
	require.NoError(t, err)
	require.Equal(t, expiry.StatusCancelled, e.status(t, "lost"))
	require.True(t, lostLocked(t, e), "the release was lost")
	return e.clock()
}

func lostLocked(t *testing.T, e *env) bool {
	show, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	for _, s := range []string{"losta", "lostb"} {
		if st, ok := show[s]; ok && st.Status == cancel.SeatLocked {
			return true
		}
	}
	return false
}

func reviewRun(t *testing.T, e *env, svc *pacedService, fake *expirytest.FakeClock) (*reconcile.Reconciler, func()) {
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc,
		Batch: rvPer, MaxPerRound: rvPer, Workers: 1, Grace: time.Hour, Settle: rvSettle,
		Runtime: expiry.Runtime{Clock: fake}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, rvInterval) }()
	return r, func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	}
}

// HOLE: a backlog that ends on a round run between full rounds, shortly
// before the next full round was due, is followed by a wait of a whole
// interval: the next full round starts nearly two intervals after the last
// one (quiet times: one interval and one round), and a stale lock that the
// skipped full round would have freed stays locked past the quiet-time
// bound.
//
// Timeline (interval 5 s, a batch 1 s, 19 due orders, 4 a round): full round
// at t=0 (its lock pass at t=1 sees "lost" settling), expired-only rounds at
// t=1..4, the last one drains the backlog (More false) at t=5 while the
// next full round was due at t=5; Run waits until t=10.
func TestReviewRunBacklogEndDelaysTheDueFullRound(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 19; i++ {
		e.place(t, fmt.Sprintf("due%02d", i), time.Minute)
	}
	e.advance(2 * time.Minute)
	cancelledAt := staleLock(t, e)
	fake := expirytest.NewFakeClock(e.clock())
	start := fake.Now()
	var clockMu sync.Mutex
	advance := func(d time.Duration) time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		e.advance(d)
		fake.Advance(d)
		return fake.Now()
	}
	svc := &pacedService{Service: e.svc, clock: fake, step: func() time.Time { return advance(rvStep) }}
	_, stop := reviewRun(t, e, svc, fake)
	defer stop()

	require.Eventually(t, func() bool { return fake.Pending() == 1 }, 10*time.Second, time.Millisecond,
		"Run drained the backlog and waits for the interval")
	for i := 0; i < 19; i++ {
		require.Equal(t, expiry.StatusCancelled, e.status(t, fmt.Sprintf("due%02d", i)))
	}
	// The quiet-time bound of the stale lock's repair: the first lock pass
	// after Settle, the pass coming at least every interval and one round.
	bound := cancelledAt.Add(rvSettle + rvInterval + rvStep)
	for e.clock().Before(bound) {
		advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond) // a round the clock woke runs
	}
	require.Eventually(t, func() bool { return fake.Pending() == 1 }, 10*time.Second, time.Millisecond)
	svc.mu.Lock()
	full := append([]time.Time(nil), svc.full...)
	svc.mu.Unlock()
	t.Logf("full rounds (their refunds pass) at %v; now %v", offsets(full, start), fake.Now().Sub(start))
	assert.False(t, lostLocked(t, e),
		"I15/Settle: %v after the cancel (Settle %v, interval %v, a round %v) the cancelled order's seats are still locked: no lock pass since the one at %v",
		e.clock().Sub(cancelledAt), rvSettle, rvInterval, rvStep, offsets(full, start))

	// Run's own words: each full round starts at most one interval and one
	// round after the one before.
	more := func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.full) > len(full)
	}
	for i := 0; i < int(2*rvInterval/(100*time.Millisecond)) && !more(); i++ {
		advance(100 * time.Millisecond)
		// The round the clock woke (if it did) runs before the clock moves on.
		require.Eventually(t, func() bool { return more() || fake.Pending() == 1 }, 10*time.Second, time.Millisecond)
	}
	require.True(t, more(), "a full round within two intervals")
	svc.mu.Lock()
	full = append([]time.Time(nil), svc.full...)
	svc.mu.Unlock()
	for i := 1; i < len(full); i++ {
		assert.LessOrEqual(t, full[i].Sub(full[i-1]), rvInterval+rvStep, "full rounds %d and %d (%v)", i-1, i, offsets(full, start))
	}
}

// HOLE (with a Runtime clock that can step back: a fake, or a host's Clock
// without a monotonic reading, e.g. one returning time.Now().UTC()): Run
// paces the full rounds of a backlog by comparing two readings of the
// clock; after a step back, now.Sub(lastFull) stays below the interval
// until the clock has caught up with the step, so no lock, claims, sold or
// refunds pass runs for the whole step (an hour here) while the backlog
// lasts. In quiet times Run is paced by Clock.AfterFunc(interval), which a
// step back does not lengthen; nor did it before #40 (every backlog round
// was full). Judged by I9: a refund whose hook failed is handed to the
// hook again by the refunds pass, which comes (Run's doc) at most one
// interval and one round after it last came; here the backlog's 50 rounds
// (50 s by the stores' clock, interval 5 s) pass without one.
func TestReviewRunClockStepBackStarvesFullRounds(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var (
		hookMu    sync.Mutex
		hookCalls []time.Time // by the stores' clock
	)
	hook := func(context.Context, cancel.Discrepancy) error {
		hookMu.Lock()
		defer hookMu.Unlock()
		hookCalls = append(hookCalls, e.clock())
		if len(hookCalls) <= 2 { // in Pay, and in the first full round
			return errors.New("provider down")
		}
		return nil
	}
	const lease = time.Millisecond
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, OnDiscrepancy: hook, DiscrepancyLease: lease})
	require.NoError(t, err)
	const backlog = 200
	for i := 0; i < backlog; i++ {
		e.place(t, fmt.Sprintf("due%03d", i), time.Minute)
	}
	e.advance(2 * time.Minute)
	// A payment for a cancelled order: a discrepancy, its refund hook fails.
	e.place(t, "late", time.Hour)
	_, err = e.svc.UserCancel(ctx, "late", "u1")
	require.NoError(t, err)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "late", UserID: "u1", PaymentID: "pay-late"})
	require.Error(t, err)
	e.advance(lease)

	fake := expirytest.NewFakeClock(e.clock())
	var (
		clockMu sync.Mutex
		batches int
	)
	svc := &pacedService{Service: e.svc, clock: fake}
	svc.step = func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		batches++
		e.advance(rvStep)
		fake.Advance(rvStep)
		if batches == 1 {
			// The host's clock steps back an hour (NTP, a VM's restore)
			// during the first full round; the stores' clocks go on.
			fake.Advance(-time.Hour)
		}
		return fake.Now()
	}
	_, stop := reviewRun(t, e, svc, fake)
	require.Eventually(t, func() bool { return fake.Pending() == 1 }, 20*time.Second, time.Millisecond,
		"Run drained the backlog and waits for the interval")
	stop()
	for i := 0; i < backlog; i++ {
		require.Equal(t, expiry.StatusCancelled, e.status(t, fmt.Sprintf("due%03d", i)))
	}
	svc.mu.Lock()
	nfull := len(svc.full)
	svc.mu.Unlock()
	clockMu.Lock()
	defer clockMu.Unlock()
	hookMu.Lock()
	defer hookMu.Unlock()
	t.Logf("%d rounds of the backlog (%v by the stores' clock), %d of them full; refund hook calls at %v",
		batches, time.Duration(batches)*rvStep, nfull, offsets(hookCalls, hookCalls[0]))
	require.GreaterOrEqual(t, len(hookCalls), 2, "the first full round retried the refund")
	bound := hookCalls[1].Add(lease + rvInterval + rvStep)
	require.GreaterOrEqual(t, len(hookCalls), 3,
		"I9: the refund hook that failed at %v was never retried during the backlog", hookCalls[1].Sub(hookCalls[0]))
	assert.False(t, hookCalls[2].After(bound),
		"I9: the refund whose hook failed was retried %v after its last try (lease %v, interval %v, a round %v): no refunds pass after the clock stepped back",
		hookCalls[2].Sub(hookCalls[1]), lease, rvInterval, rvStep)
}

func offsets(ts []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}
