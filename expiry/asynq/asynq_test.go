package asynq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	aq "github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	oeasynq "github.com/seatflow/orderexpiry/expiry/asynq"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// newClient returns an asynq client closed at cleanup.
func newClient(t testing.TB, opt aq.RedisConnOpt) *aq.Client {
	c := aq.NewClient(opt)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func newSender(t testing.TB, opt aq.RedisConnOpt, cfg oeasynq.Config) *oeasynq.Sender {
	s, err := oeasynq.NewSender(newClient(t, opt), cfg)
	require.NoError(t, err)
	return s
}

// startConsumer starts a Consumer closed at cleanup (registered after the
// queue's own cleanup, so it runs first).
func startConsumer(t testing.TB, opt aq.RedisConnOpt, cfg oeasynq.Config, p expiry.Processor) *oeasynq.Consumer {
	c, err := oeasynq.StartConsumer(opt, cfg, p)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		assert.NoError(t, c.Close(ctx))
	})
	return c
}

// chanProcessor decodes like the Shell and forwards deliveries, with the
// trace context when it came.
type chanProcessor chan expirytest.Delivery

func (c chanProcessor) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	m, err := expiry.DecodeMessage(d.Body)
	if err == nil {
		m.TraceID, m.Trace = d.TraceID, d.Trace
		c <- expirytest.Delivery{Message: m, At: time.Now()}
	}
	return expiry.Ack
}

// untraced drops the W3C trace context, for the conformance suite, which
// compares the whole message and sends none.
type untraced struct{ c chanProcessor }

func (u untraced) Process(ctx context.Context, d expiry.Delivery) expiry.Verdict {
	return u.c.Process(ctx, expiry.Delivery{Body: d.Body, TraceID: d.TraceID})
}

func TestSenderConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			expirytest.RunSender(t, func(t *testing.T) expirytest.SenderHarness {
				opt := b.opt(t)
				cfg := oeasynq.Config{Queue: queue(t, opt)}
				ch := make(chan expirytest.Delivery, 200)
				startConsumer(t, opt, cfg, untraced{ch})
				// The defaults' worst case is about 2.8 s late (a second of
				// rounding, ForwardInterval, TaskCheckInterval); the rest is
				// room for -race on two busy cores.
				return expirytest.SenderHarness{Sender: newSender(t, opt, cfg), Received: ch, Delay: 2 * time.Second, Tolerance: 5 * time.Second}
			})
		})
	}
}

// The trace id and the W3C trace context reach the Processor in the
// task's headers, as expiry/rocketmq carries them in properties.
func TestTraceHeaders(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			opt := b.opt(t)
			cfg := oeasynq.Config{Queue: queue(t, opt)}
			ch := make(chanProcessor, 10)
			startConsumer(t, opt, cfg, ch)
			s := newSender(t, opt, cfg)
			tc := expiry.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "vendor=1"}
			require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "T1", Hop: 2, TraceID: "req-7", Trace: tc}, 0))
			// A trace context that fails expiry.Trace.Clean is not carried.
			require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "T2", Hop: 1, Trace: expiry.Trace{Parent: "bad\nparent"}}, 0))
			got := map[string]expiry.Message{}
			for len(got) < 2 {
				select {
				case d := <-ch:
					got[d.Message.OrderNo] = d.Message
				case <-time.After(30 * time.Second):
					t.Fatalf("received %d of 2", len(got))
				}
			}
			assert.Equal(t, expiry.Message{OrderNo: "T1", Hop: 2, TraceID: "req-7", Trace: tc}, got["T1"])
			assert.Equal(t, expiry.Message{OrderNo: "T2", Hop: 1}, got["T2"])
		})
	}
}

// Lateness is measured, not asserted: it depends on the polling intervals
// and on the machine. What is asserted is that no message arrives before
// its delay (the Sender rounds due times up to asynq's whole seconds).
func TestLateness(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			opt := b.opt(t)
			cfg := oeasynq.Config{Queue: queue(t, opt)}
			const n = 40
			ch := make(chan expirytest.Delivery, n)
			startConsumer(t, opt, cfg, untraced{ch})
			s := newSender(t, opt, cfg)
			due := map[string]time.Time{}
			for i := range n {
				// Spread over 1..4 s with sub-second parts, so that every
				// phase against asynq's whole seconds and polls occurs.
				delay := time.Second + time.Duration(i)*75*time.Millisecond + time.Duration(i%7)*13*time.Millisecond
				no := fmt.Sprintf("L%d", i)
				due[no] = time.Now().Add(delay)
				require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: no, Hop: 1}, delay))
			}
			var late []time.Duration
			for len(late) < n {
				select {
				case d := <-ch:
					late = append(late, d.At.Sub(due[d.Message.OrderNo]))
				case <-time.After(40 * time.Second):
					t.Fatalf("received %d of %d", len(late), n)
				}
			}
			slices.Sort(late)
			early := 0
			for _, l := range late {
				if l < 0 {
					early++
				}
			}
			assert.Zero(t, early, "messages delivered before their delay: %v", late[:early])
			q := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
			t.Logf("FIGURE asynq lateness on %s (%d messages, 1-4 s delays, default intervals): p50 %v, p99 %v, max %v, min %v, early %d",
				b.name, n, q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), late[n-1].Round(time.Millisecond), late[0].Round(time.Millisecond), early)
		})
	}
}

// canceller is a Canceller that fails the first failures calls for each
// order, then cancels it.
type canceller struct {
	mu       sync.Mutex
	failures int
	calls    map[string]int
	done     chan string
}

func newCanceller(failures int) *canceller {
	return &canceller{failures: failures, calls: map[string]int{}, done: make(chan string, 100)}
}

func (c *canceller) Timeout(_ context.Context, no string) (bool, expiry.Order, error) {
	c.mu.Lock()
	c.calls[no]++
	n := c.calls[no]
	c.mu.Unlock()
	if n <= c.failures {
		return false, expiry.Order{}, errors.New("database down (test)")
	}
	c.done <- no
	return true, expiry.Order{No: no, Status: expiry.StatusCancelled}, nil
}

func (c *canceller) callsOf(no string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[no]
}

// shell is the library's consumer side on a canceller: a real Handler and
// Shell reporting to obs.
func shell(t testing.TB, c *canceller, obs expiry.Observer) *expiry.Shell {
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: c, Sender: nopSender{}, Runtime: expiry.Runtime{Observer: obs}})
	require.NoError(t, err)
	return expiry.NewShell(h)
}

type nopSender struct{}

func (nopSender) Send(context.Context, expiry.Message, time.Duration) error { return nil }

// Poison is counted (the Consumer's Poisoned, and KindBadMessage from the
// Shell or, for a task of another type, from the Consumer's Observer) and
// archived at once, never retried; it does not hold back the good message
// enqueued behind it.
func TestPoisonIsCountedAndDropped(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			opt := b.opt(t)
			obs := &expirytest.Recorder{}
			cfg := oeasynq.Config{Queue: queue(t, opt), Runtime: expiry.Runtime{Observer: obs}}
			can := newCanceller(0)
			c := startConsumer(t, opt, cfg, shell(t, can, obs))
			client := newClient(t, opt)
			in := aq.NewInspector(opt)
			defer in.Close()

			cases := []struct {
				name, typ string
				payload   []byte
			}{
				{"empty payload", oeasynq.DefaultTaskType, nil},
				{"another format", oeasynq.DefaultTaskType, []byte(`{"order":"A1"}`)},
				{"a later version", oeasynq.DefaultTaskType, []byte("oe2 A1 1")},
				{"invalid order number", oeasynq.DefaultTaskType, []byte("oe1 a{b} 1")},
				{"hop zero", oeasynq.DefaultTaskType, []byte("oe1 A1 0")},
				{"oversized", oeasynq.DefaultTaskType, []byte("oe1 " + strings.Repeat("A", expiry.MaxMessageLen) + " 1")},
				// Never shown to the Shell: the Consumer counts it itself.
				{"another task type with our payload", "email:send", []byte("oe1 A1 1")},
			}
			ids := make([]string, len(cases))
			for i, tc := range cases {
				info, err := client.Enqueue(aq.NewTask(tc.typ, tc.payload), aq.Queue(cfg.Queue), aq.MaxRetry(25))
				require.NoError(t, err, tc.name)
				ids[i] = info.ID
			}
			require.NoError(t, newSenderOn(t, client, cfg).Send(context.Background(), expiry.Message{OrderNo: "GOOD1", Hop: 1}, 0))
			select {
			case no := <-can.done:
				assert.Equal(t, "GOOD1", no)
			case <-time.After(30 * time.Second):
				t.Fatal("the good message behind the poison was not handled")
			}
			for i, tc := range cases {
				var info *aq.TaskInfo
				require.Eventually(t, func() bool {
					var err error
					info, err = in.GetTaskInfo(cfg.Queue, ids[i])
					return err == nil && info.State == aq.TaskStateArchived
				}, 20*time.Second, 50*time.Millisecond, "%s: archived", tc.name)
				assert.Zero(t, info.Retried, "%s: never retried", tc.name)
				assert.Contains(t, info.LastErr, "poison task", tc.name)
			}
			assert.EqualValues(t, len(cases), c.Poisoned())
			// One observer serves the Shell and the Consumer here, as it
			// would in a host: each bad task is counted once.
			assert.Equal(t, len(cases), obs.Count(expiry.KindBadMessage))
			assert.Equal(t, 1, can.callsOf("GOOD1"))
			assert.Zero(t, can.callsOf("A1"), "a task of another type never reaches the Handler")
		})
	}
}

func newSenderOn(t testing.TB, client *aq.Client, cfg oeasynq.Config) *oeasynq.Sender {
	s, err := oeasynq.NewSender(client, cfg)
	require.NoError(t, err)
	return s
}

// A transient failure (the Shell's Retry) makes asynq deliver the task
// again after RetryDelay; a task that keeps failing is archived after
// MaxRetry retries, for the reconciler to finish.
func TestRetryVerdict(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name     string
				failures int // the canceller's failing calls
				maxRetry int
				calls    int  // calls in the end
				archived bool // else handled and gone
			}{
				{"recovers on the third delivery", 2, 5, 3, false},
				{"archived after MaxRetry", 100, 1, 2, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					opt := b.opt(t)
					obs := &expirytest.Recorder{}
					cfg := oeasynq.Config{Queue: queue(t, opt), MaxRetry: tc.maxRetry, RetryDelay: 500 * time.Millisecond, MaxRetryDelay: time.Second}
					can := newCanceller(tc.failures)
					c := startConsumer(t, opt, cfg, shell(t, can, obs))
					client := newClient(t, opt)
					s := newSenderOn(t, client, cfg)
					in := aq.NewInspector(opt)
					defer in.Close()
					require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "R1", Hop: 1}, 0))
					require.Eventually(t, func() bool { return can.callsOf("R1") >= tc.calls }, 30*time.Second, 50*time.Millisecond)
					if tc.archived {
						require.Eventually(t, func() bool {
							tasks, err := in.ListArchivedTasks(cfg.Queue)
							return err == nil && len(tasks) == 1
						}, 20*time.Second, 50*time.Millisecond, "archived once its retries are used up")
					} else {
						select {
						case <-can.done:
						case <-time.After(10 * time.Second):
							t.Fatal("not cancelled")
						}
					}
					// No further delivery once handled or archived.
					time.Sleep(2 * time.Second)
					assert.Equal(t, tc.calls, can.callsOf("R1"))
					assert.Zero(t, c.Poisoned(), "a transient failure is not poison")
					assert.Zero(t, obs.Count(expiry.KindBadMessage))
				})
			}
		})
	}
}

// blocking processes every message only once it is released.
type blocking struct {
	started  chan struct{}
	release  chan struct{}
	finished atomic.Int32
}

func (b *blocking) Process(context.Context, expiry.Delivery) expiry.Verdict {
	b.started <- struct{}{}
	<-b.release
	b.finished.Add(1)
	return expiry.Ack
}

// Close waits for the tasks in progress: a handler that finishes within
// ShutdownTimeout completes its task, which is not delivered again.
func TestCloseWaitsForHandlers(t *testing.T) {
	opt := redisOpt(t)
	cfg := oeasynq.Config{Queue: queue(t, opt)}
	p := &blocking{started: make(chan struct{}, 1), release: make(chan struct{})}
	c, err := oeasynq.StartConsumer(opt, cfg, p)
	require.NoError(t, err)
	require.NoError(t, newSender(t, opt, cfg).Send(context.Background(), expiry.Message{OrderNo: "C1", Hop: 1}, 0))
	select {
	case <-p.started:
	case <-time.After(30 * time.Second):
		t.Fatal("not delivered")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a handler was running", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(p.release)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return after the handler finished")
	}
	assert.EqualValues(t, 1, p.finished.Load())
	assert.NoError(t, c.Close(context.Background()), "closing twice is harmless")
	in := aq.NewInspector(opt)
	defer in.Close()
	q, err := in.GetQueueInfo(cfg.Queue)
	require.NoError(t, err)
	assert.Zero(t, q.Size, "the task completed: nothing left to redeliver")
}

// A Consumer built but never started still closes cleanly (its Redis client
// is closed; goleak checks that nothing is left running).
func TestCloseUnstarted(t *testing.T) {
	opt := redisOpt(t)
	c, err := oeasynq.NewConsumer(opt, oeasynq.Config{Queue: queue(t, opt)}, nopProcessor{})
	require.NoError(t, err)
	require.NoError(t, c.Close(context.Background()))
	assert.ErrorContains(t, c.Start(), "Start after Close")
}

// hanging never finishes on its own: it waits for its context, then asks
// for a retry, as the Shell does when the store call is cancelled.
type hanging struct{ calls atomic.Int32 }

func (h *hanging) Process(ctx context.Context, _ expiry.Delivery) expiry.Verdict {
	h.calls.Add(1)
	<-ctx.Done()
	return expiry.Retry
}

// A handler that outlives TaskTimeout uses up a retry like any failure (only
// a shutdown's cancel does not), so a hanging store cannot keep a task
// going for ever: after MaxRetry it is archived.
func TestTaskTimeoutUsesRetries(t *testing.T) {
	opt := redisOpt(t)
	cfg := oeasynq.Config{Queue: queue(t, opt), TaskTimeout: time.Second, MaxRetry: 1, RetryDelay: 500 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond}
	p := &hanging{}
	startConsumer(t, opt, cfg, p)
	require.NoError(t, newSender(t, opt, cfg).Send(context.Background(), expiry.Message{OrderNo: "H1", Hop: 1}, 0))
	in := aq.NewInspector(opt)
	defer in.Close()
	var tasks []*aq.TaskInfo
	require.Eventually(t, func() bool {
		var err error
		tasks, err = in.ListArchivedTasks(cfg.Queue)
		return err == nil && len(tasks) == 1
	}, 30*time.Second, 100*time.Millisecond, "archived after its one retry")
	assert.Equal(t, 1, tasks[0].Retried)
	assert.EqualValues(t, 2, p.calls.Load())
}
