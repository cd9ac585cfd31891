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
)

// Review of 3f300aa: attacks that did not break it (regression guards).

// stuckClock's AfterFunc never fires: a Schedule waiting for a place is
// held until Close, then counted "closed"; it never outlives Close.
type stuckClock struct{ expiry.Clock }

func (stuckClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

func TestReviewAsyncStuckClockReleasedByClose(t *testing.T) {
	ctx := context.Background()
	d := newDelaySender()
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: d, Async: 1, SendTimeout: 50 * time.Millisecond,
		Runtime: expiry.Runtime{Clock: stuckClock{expiry.SystemClock}, Observer: rec}})
	require.NoError(t, err)
	require.True(t, s.Schedule(ctx, "o1", time.Now().Add(time.Minute)))
	<-d.started
	require.True(t, s.Schedule(ctx, "o2", time.Now().Add(time.Minute)))
	done := make(chan bool)
	go func() { done <- s.Schedule(ctx, "o3", time.Now().Add(time.Minute)) }()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, s.Close(ctx) /* o1 times out by its ctx (real time), o2 then too */)
	assert.False(t, <-done)
	assert.Equal(t, 1, dropped(rec, "closed"))
}

// A request context already cancelled when Place schedules (the client
// left after the commit): the order is still sent, with its trace id.
func TestReviewAsyncCancelledRequestStillSent(t *testing.T) {
	var got atomic.Value
	snd := senderFunc(func(ctx context.Context, m expiry.Message, _ time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		got.Store(m.TraceID)
		return nil
	})
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, Async: 1})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(expiry.WithTraceID(context.Background(), "trace-1"))
	cancel()
	require.True(t, s.Schedule(rctx, "o1", time.Now().Add(time.Minute)))
	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, "trace-1", got.Load())
}

// Two Closes at once (one with a cancelled context) while orders are
// scheduled from many goroutines: no panic, every order sent or counted
// exactly once, both Closes return.
func TestReviewAsyncTwoClosesRacingSchedules(t *testing.T) {
	for round := 0; round < 30; round++ {
		var sentN atomic.Int64
		snd := senderFunc(func(context.Context, expiry.Message, time.Duration) error { sentN.Add(1); return nil })
		rec := &recorder{}
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, Async: 2, SendTimeout: time.Second, Runtime: expiry.Runtime{Observer: rec}})
		require.NoError(t, err)
		const n = 100
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Schedule(context.Background(), fmt.Sprintf("o%d", i), time.Now().Add(time.Minute))
			}()
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		var cw sync.WaitGroup
		cw.Add(2)
		go func() { defer cw.Done(); _ = s.Close(cancelled) }()
		go func() { defer cw.Done(); _ = s.Close(context.Background()) }()
		cw.Wait()
		wg.Wait()
		assert.Equal(t, int64(n), sentN.Load()+int64(dropped(rec, "closed"))+int64(dropped(rec, "queue_full")), "round %d", round)
	}
}
