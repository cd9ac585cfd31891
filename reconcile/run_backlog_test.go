package reconcile_test

import (
	"context"
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

// pacedService lets every batch of the expired pass take one step of time, on
// the Runtime's clock and the stores' clock alike, and notes when each full
// round reached its last pass (the refunds'), by the Runtime's clock.
type pacedService struct {
	reconcile.Service
	step  func() time.Time // advances both clocks, returns the Runtime's now
	clock expiry.Clock     // the Runtime's

	mu      sync.Mutex
	batches int
	full    []time.Time
}

func (s *pacedService) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	res, err := s.Service.ExpireDue(ctx, nos, reason)
	s.step()
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
	return res, err
}

func (s *pacedService) now() time.Time { return s.clock.Now() }

func (s *pacedService) RetryDiscrepancies(ctx context.Context, limit int) (int, error) {
	s.mu.Lock()
	s.full = append(s.full, s.now())
	s.mu.Unlock()
	return s.Service.RetryDiscrepancies(ctx, limit)
}

// While Run drains a backlog the other passes keep the pace they have in quiet
// times: each full round (locks, claims, sold seats, refunds) starts at most
// one interval and one round after the one before, by the Runtime's clock,
// so each repair comes within the bound it has without a backlog. The rounds
// between give their time to the expired pass: the backlog needs fewer full
// rounds than rounds, and it is gone before Run first waits for the
// interval (I3, I12).
//
// (A repair's own bound is that pace times the rounds its pass needs to
// reach it, MaxPerRound entries per round: the lock pass's cursor follows
// the locks the backlog's cancels free, which is why no single lock is
// watched here.)
func TestRunKeepsRepairingWhileABacklogDrains(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	e := newEnv(t)
	const backlog, per = 80, 4
	for i := 0; i < backlog; i++ {
		e.place(t, fmt.Sprintf("due%02d", i), time.Minute)
	}
	e.advance(2 * time.Minute)
	fake := expirytest.NewFakeClock(e.clock())
	const step, interval = time.Second, 5 * time.Second
	var clockMu sync.Mutex
	svc := &pacedService{Service: e.svc, clock: fake}
	svc.step = func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		e.advance(step)
		fake.Advance(step)
		return fake.Now()
	}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc,
		Batch: per, MaxPerRound: per, Workers: 1, Grace: time.Hour,
		Runtime: expiry.Runtime{Clock: fake}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, interval) }()

	// The backlog drains without Run waiting for the interval (the fake
	// clock moves only with the batches).
	require.Eventually(t, func() bool { return fake.Pending() == 1 }, 10*time.Second, time.Millisecond,
		"Run drained the backlog and waits for the interval")
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	for i := 0; i < backlog; i++ {
		o, err := e.store.Order(context.Background(), fmt.Sprintf("due%02d", i))
		require.NoError(t, err)
		require.Equal(t, expiry.StatusCancelled, o.Status, "due%02d", i)
	}

	svc.mu.Lock()
	full, batches := append([]time.Time(nil), svc.full...), svc.batches
	svc.mu.Unlock()
	rounds := batches // one batch per round: Workers 1, a page of per orders
	require.GreaterOrEqual(t, rounds, backlog/per, "every due order went through a batch")
	t.Logf("FIGURE backlog of %d orders, %d per round: %d rounds, %d of them full (interval %v, a round %v)",
		backlog, per, rounds, len(full), interval, step)
	assert.Less(t, len(full), rounds/2, "the rounds between full ones ran the expired pass alone")
	// Each full round starts within one interval and one round of the one before.
	for i := 1; i < len(full); i++ {
		assert.LessOrEqual(t, full[i].Sub(full[i-1]), interval+step, "full rounds %d and %d", i-1, i)
	}
	assert.LessOrEqual(t, fake.Now().Sub(full[len(full)-1]), interval+step, "the last full round during the drain")

}
