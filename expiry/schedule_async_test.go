package expiry_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// gateSender holds every send until the test lets it go (or the send's
// context ends), and records what was sent and when, by the test's clock.
type gateSender struct {
	clock   expiry.Clock
	gate    chan struct{}
	started chan string // the order number of each send as it starts

	mu   sync.Mutex
	sent map[string]time.Time // order number → when its expiry message is due (the send's start + delay)
	kind map[string][]bool    // order number → Warning flags, in send order
}

func newGate(clock expiry.Clock) *gateSender {
	return &gateSender{clock: clock, gate: make(chan struct{}), started: make(chan string, 100),
		sent: map[string]time.Time{}, kind: map[string][]bool{}}
}

func (g *gateSender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	at := g.clock.Now() // the broker counts the delay from the send it received
	g.started <- m.OrderNo
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kind[m.OrderNo] = append(g.kind[m.OrderNo], m.Warning)
	if !m.Warning {
		g.sent[m.OrderNo] = at.Add(delay)
	}
	return nil
}

func (g *gateSender) due(no string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.sent[no]
	return t, ok
}

type senderFunc func(context.Context, expiry.Message, time.Duration) error

func (f senderFunc) Send(ctx context.Context, m expiry.Message, d time.Duration) error {
	return f(ctx, m, d)
}

func dropped(rec *recorder, reason string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := 0
	for _, e := range rec.events {
		if e.Kind == expiry.KindSendFailed && e.Reason == reason {
			n++
		}
	}
	return n
}

// With Async, Schedule returns while the broker is still answering, and
// the message is due at the order's deadline however long it waited in the
// queue: its delay is shortened by the wait.
func TestScheduleAsyncReturnsBeforeTheSend(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newGate(clock)
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: g, Async: 1, WarnBefore: time.Minute, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
	require.NoError(t, err)

	deadline := clock.Now().Add(15 * time.Minute)
	require.True(t, s.Schedule(ctx, "o1", deadline), "queued")
	require.Equal(t, "o1", <-g.started, "the sender took o1 (its warning) and waits on the broker")
	require.True(t, s.Schedule(ctx, "o2", deadline), "queued behind o1, without waiting for its send")
	clock.Advance(5 * time.Second) // o2 waits in the queue meanwhile
	close(g.gate)
	require.NoError(t, s.Close(ctx))
	for _, no := range []string{"o1", "o2"} {
		due, ok := g.due(no)
		require.True(t, ok, "%s sent", no)
		assert.Equal(t, deadline, due, "%s's message is due at its deadline, not 5 s after it", no)
		assert.Equal(t, []bool{true, false}, g.kind[no], "%s: its warning, then its expiry", no)
	}
	assert.Zero(t, rec.count(expiry.KindSendFailed))
}

// A full queue holds the placing request back SendTimeout at most, then the
// order is the reconciler's (counted); nothing grows without bound.
func TestScheduleAsyncFullQueueDropsAfterTheTimeout(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newGate(clock)
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: g, Async: 1, SendTimeout: time.Hour, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
	require.NoError(t, err)
	require.True(t, s.Schedule(ctx, "o1", clock.Now().Add(time.Minute)))
	<-g.started // o1 in flight
	require.True(t, s.Schedule(ctx, "o2", clock.Now().Add(time.Minute)), "o2 fills the queue")
	done := make(chan bool)
	go func() { done <- s.Schedule(ctx, "o3", clock.Now().Add(time.Minute)) }()
	require.Eventually(t, func() bool { return clock.Pending() == 1 }, 5*time.Second, time.Millisecond, "o3 waits for a place")
	select {
	case <-done:
		t.Fatal("o3 did not wait for a place")
	default:
	}
	clock.Advance(time.Hour)
	assert.False(t, <-done, "no place within SendTimeout: dropped")
	assert.Equal(t, 1, dropped(rec, "queue_full"))
	close(g.gate)
	require.NoError(t, s.Close(ctx))
	_, sent3 := g.due("o3")
	assert.False(t, sent3)
	for _, no := range []string{"o1", "o2"} {
		_, ok := g.due(no)
		assert.True(t, ok, "%s sent", no)
	}
}

// Close with a broker that does not answer: it gives up when its context
// ends, counts what was still queued, and returns once the send in flight
// timed out; no goroutine outlives it (TestMain checks). An order scheduled
// after Close is counted too.
func TestScheduleAsyncCloseGivesUp(t *testing.T) {
	ctx := context.Background()
	g := newGate(expiry.SystemClock)
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: g, Async: 1, SendTimeout: 200 * time.Millisecond, Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	require.True(t, s.Schedule(ctx, "o1", time.Now().Add(time.Minute)))
	<-g.started
	require.True(t, s.Schedule(ctx, "o2", time.Now().Add(time.Minute)))
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, s.Close(cctx), context.DeadlineExceeded)
	assert.Equal(t, 1, dropped(rec, "closed"), "o2, still queued")
	assert.Equal(t, 2, rec.count(expiry.KindSendFailed), "o1's send timed out, o2 never went")
	assert.False(t, s.Schedule(ctx, "o3", time.Now().Add(time.Minute)))
	assert.Equal(t, 2, dropped(rec, "closed"), "o3, after Close")
	require.NoError(t, s.Close(ctx), "Close again")
}

// Orders scheduled from many goroutines while Close runs: each is either
// sent or counted as dropped, exactly once; none is lost, none sent twice.
func TestScheduleAsyncRacingClose(t *testing.T) {
	for round := 0; round < 20; round++ {
		ctx := context.Background()
		var sentN atomic.Int64
		seen := sync.Map{}
		snd := senderFunc(func(_ context.Context, m expiry.Message, _ time.Duration) error {
			if _, dup := seen.LoadOrStore(m.OrderNo, true); dup {
				t.Errorf("%s sent twice", m.OrderNo)
			}
			sentN.Add(1)
			return nil
		})
		rec := &recorder{}
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, Async: 2, Runtime: expiry.Runtime{Observer: rec}})
		require.NoError(t, err)
		const n = 200
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Schedule(ctx, fmt.Sprintf("o%d", i), time.Now().Add(time.Minute))
			}()
		}
		require.NoError(t, s.Close(ctx))
		wg.Wait()
		assert.Equal(t, int64(n), sentN.Load()+int64(dropped(rec, "closed")), "round %d: every order sent or counted", round)
	}
}

func TestSchedulerConfigAsync(t *testing.T) {
	_, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: &recorder{}, Async: -1})
	assert.ErrorContains(t, err, "Async")
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: &recorder{}})
	require.NoError(t, err)
	assert.NoError(t, s.Close(context.Background()), "a no-op without Async")
}
