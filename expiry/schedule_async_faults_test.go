package expiry_test

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// Review of 3f300aa (SchedulerConfig.Async, Scheduler.Close): failing tests.

// delaySender holds every send until the test lets it go, and records the
// delay each message was sent with.
type delaySender struct {
	gate    chan struct{}
	started chan string
	mu      sync.Mutex
	delays  map[string][]time.Duration // order number → delays, in send order
	onSend  func(m expiry.Message)     // called before the gate, if set
}

func newDelaySender() *delaySender {
	return &delaySender{gate: make(chan struct{}), started: make(chan string, 100), delays: map[string][]time.Duration{}}
}

func (d *delaySender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	if d.onSend != nil {
		d.onSend(m)
	}
	d.started <- m.OrderNo
	select {
	case <-d.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delays[m.OrderNo] = append(d.delays[m.OrderNo], delay)
	return nil
}

func (d *delaySender) of(no string) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.delays[no]...)
}

// A Sender (or a host's Tracer or Observer, called in the same goroutine)
// that panics on one order: without Async the panic is the caller's, and an
// HTTP server's recover contains it to one request; with Async it happens in
// the Scheduler's own goroutine, where nothing can recover it, and ends the
// whole process (every request in flight, every order still queued).
// cancel.Service.contained draws the same line for a batch's goroutine. The
// order should be counted (KindSendFailed) and left to the reconciler, and
// the goroutine should go on sending the others.
//
// The Async half runs in a child process, so that the crash fails this test
// instead of the package's whole test binary.
func TestReviewAsyncSenderPanicIsContained(t *testing.T) {
	const env = "ORDEREXPIRY_REVIEW_ASYNC_PANIC_CHILD"
	if os.Getenv(env) == "1" {
		asyncPanicChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReviewAsyncSenderPanicIsContained$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "a Sender's panic in an Async goroutine ended the process:\n%s", out)
}

func asyncPanicChild(t *testing.T) {
	var mu sync.Mutex
	sent := map[string]bool{}
	snd := senderFunc(func(_ context.Context, m expiry.Message, _ time.Duration) error {
		if m.OrderNo == "boom" {
			panic("sender bug on one order")
		}
		mu.Lock()
		defer mu.Unlock()
		sent[m.OrderNo] = true
		return nil
	})
	rec := &recorder{}
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, Async: 1, Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, s.Schedule(ctx, "boom", time.Now().Add(time.Minute)))
	require.True(t, s.Schedule(ctx, "ok", time.Now().Add(time.Minute)))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, s.Close(cctx), "Close drains the queue")
	mu.Lock()
	defer mu.Unlock()
	assert.True(t, sent["ok"], "the order behind the panicking one is still sent")
	assert.Equal(t, 1, rec.count(expiry.KindSendFailed), "the panicking order is counted, the reconciler's")
}

// Reschedule's delay is the store's (o.Remaining()): "the new messages never
// depend on this host's clock". With Async the queue wait is measured by the
// Runtime Clock and subtracted unclamped, so a Clock that steps back while
// the order waits in the queue adds the step to the delay: the message is
// late by the step (I3 then rests on the reconciler alone). The synchronous
// path's new warning round-trip subtraction clamps the same measurement at
// 0 (max(..., 0)); the queue wait does not.
func TestReviewAsyncQueueWaitClockStepBackDelaysTheMessage(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := newDelaySender()
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: d, Async: 1, SendTimeout: time.Hour, Runtime: expiry.Runtime{Clock: clock}})
	require.NoError(t, err)

	db := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC) // the store's clock: another host's
	o1 := expiry.Order{No: "o1", ExpireAt: db.Add(15 * time.Minute), ReadAt: db}
	o2 := expiry.Order{No: "o2", ExpireAt: db.Add(15 * time.Minute), ReadAt: db}
	require.True(t, s.Reschedule(ctx, o1))
	require.Equal(t, "o1", <-d.started, "o1 in flight")
	require.True(t, s.Reschedule(ctx, o2), "o2 waits in the queue")
	clock.Advance(-time.Hour) // this host's clock steps back while o2 waits
	close(d.gate)
	require.NoError(t, s.Close(ctx))
	got := d.of("o2")
	require.Len(t, got, 1)
	assert.LessOrEqual(t, got[0], 15*time.Minute,
		"o2 had 15 min left by the store's clock when queued; a step back of this host's clock must not send it later")
}

// A delay near the bottom of time.Duration (a deadline far in the past: an
// Order whose ExpireAt is the zero time, a Placement whose ExpireAt was
// never set, both of which Place and Reschedule accept; time.Time.Sub
// saturates there) wraps around when the commit's new subtractions take
// the queue wait or the warning's round trip off it: the message due at
// once is sent ~292 years late, never to arrive. (Late, never early: the
// reconciler still cancels it; but one saturating subtraction keeps the
// message.) The warning's own max(delay-s.warn, 0) wrapped before this
// commit too (harmless: a never-due order's warning); the expiry's
// `delay -= rtt` and the queue's `q.delay - wait` are new.
func TestReviewScheduleDelaySubtractionOverflows(t *testing.T) {
	ctx := context.Background()
	t.Run("async queue wait", func(t *testing.T) {
		clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		d := newDelaySender()
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: d, Async: 1, SendTimeout: time.Hour, Runtime: expiry.Runtime{Clock: clock}})
		require.NoError(t, err)
		require.True(t, s.Schedule(ctx, "o1", clock.Now().Add(time.Minute)))
		<-d.started
		require.True(t, s.Schedule(ctx, "past", time.Time{}), "a deadline long past: due at once")
		clock.Advance(time.Millisecond) // it waits a moment in the queue
		close(d.gate)
		require.NoError(t, s.Close(ctx))
		got := d.of("past")
		require.Len(t, got, 1)
		assert.LessOrEqual(t, got[0], time.Duration(0), "due at once, sent with %v", got[0])
	})
	t.Run("sync warning round trip", func(t *testing.T) {
		clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		d := newDelaySender()
		close(d.gate)
		d.onSend = func(m expiry.Message) {
			if m.Warning {
				clock.Advance(time.Millisecond) // the warning's round trip
			}
		}
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: d, WarnBefore: time.Minute, Runtime: expiry.Runtime{Clock: clock}})
		require.NoError(t, err)
		require.True(t, s.Schedule(ctx, "past", time.Time{}))
		got := d.of("past")
		require.Len(t, got, 2, "warning, then expiry")
		assert.LessOrEqual(t, got[0], time.Duration(0), "the warning is due at once, sent with %v", got[0])
		assert.LessOrEqual(t, got[1], time.Duration(0), "the expiry is due at once, sent with %v", got[1])
	})
}

// Pre-existing, made visible by Async's "each send bounded by SendTimeout":
// an order's warning and expiry share one SendTimeout (sendNow's ctx), so a
// warning send that hangs until the timeout leaves the expiry message an
// expired context: the expiry is never sent, though the broker might take
// it at once. SchedulerConfig.WarnBefore says a lost warning is only the
// warning's loss; here it takes the expiry message with it (the reconciler
// then cancels the order, up to one interval late).
func TestReviewWarningTimeoutLosesTheExpiry(t *testing.T) {
	var mu sync.Mutex
	var expirySent bool
	snd := senderFunc(func(ctx context.Context, m expiry.Message, _ time.Duration) error {
		if m.Warning {
			<-ctx.Done() // the broker hangs on this one send
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		mu.Lock()
		expirySent = true
		mu.Unlock()
		return nil
	})
	s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, WarnBefore: time.Minute, SendTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, s.Schedule(context.Background(), "o1", time.Now().Add(time.Hour)), "the expiry message is sent")
	mu.Lock()
	defer mu.Unlock()
	assert.True(t, expirySent)
}
