package rocketmq_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// broker returns the name server and the broker address of the test broker.
func broker(t *testing.T) ([]string, string) {
	ns := testenv.RocketMQ(t)
	addr := os.Getenv("OE_ROCKETMQ_BROKER")
	if addr == "" {
		addr = "127.0.0.1:20911"
	}
	return []string{ns}, addr
}

// topic creates a fresh topic for one test.
func topic(t *testing.T) (rocketmq.Config, string) {
	ns, addr := broker(t)
	name := "oe_t_" + testenv.Unique()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rocketmq.EnsureTopic(ctx, ns, addr, name))
	// A new topic's route reaches the name server a moment later; wait
	// until a send gets through (consumers drop the probe as not ours).
	raw, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(ns)), producer.WithGroupName(name+"_probe"), producer.WithInstanceName(name+"_probe"))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	defer raw.Shutdown()
	require.Eventually(t, func() bool {
		_, err := raw.SendSync(ctx, primitive.NewMessage(name, []byte("probe")))
		return err == nil
	}, 20*time.Second, 200*time.Millisecond, "topic %s never got a route", name)
	return rocketmq.Config{NameServers: ns, Topic: name, Group: name + "_g"}, addr
}

func startConsumer(t *testing.T, cfg rocketmq.Config, p expiry.Processor) *rocketmq.Consumer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rocketmq.StartConsumer(ctx, cfg, p)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, c.Close(ctx))
	})
	return c
}

func newSender(t *testing.T, cfg rocketmq.Config) *rocketmq.Sender {
	s, err := rocketmq.NewSender(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// chanProcessor decodes like the Shell and forwards deliveries.
type chanProcessor chan expirytest.Delivery

func (c chanProcessor) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	m, err := expiry.DecodeMessage(d.Body)
	if err == nil {
		m.TraceID = d.TraceID
		c <- expirytest.Delivery{Message: m, At: time.Now()}
	}
	return expiry.Ack
}

func TestSenderConformance(t *testing.T) {
	for _, mode := range []rocketmq.Mode{rocketmq.ModeLevels, rocketmq.ModeTimer} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			expirytest.RunSender(t, func(t *testing.T) expirytest.SenderHarness {
				cfg, _ := topic(t)
				cfg.Mode = mode
				ch := make(chan expirytest.Delivery, 200)
				startConsumer(t, cfg, chanProcessor(ch))
				// 5s is a level and a whole number of timer ticks.
				return expirytest.SenderHarness{Sender: newSender(t, cfg), Received: ch, Delay: 5 * time.Second, Tolerance: 2 * time.Second}
			})
		})
	}
}

// chain wires the whole library on MariaDB and Redis with a RocketMQ
// transport, counting hops.
type chain struct {
	w      *e2e.World
	svc    *cancel.Service // places and schedules through sender
	sender *rocketmq.Sender
	mu     sync.Mutex
	hops   map[string]int
	shell  *expiry.Shell
	cfg    rocketmq.Config
}

func newChain(t *testing.T, mode rocketmq.Mode) *chain {
	cfg, _ := topic(t)
	cfg.Mode = mode
	cfg.Slack = time.Second
	c := &chain{hops: map[string]int{}, cfg: cfg}
	c.w = e2e.NewWorld(t, testenv.MySQL(t), sqlstore.MySQL, testenv.Redis(t), "rmq-"+testenv.Unique())
	sendCfg := cfg
	sendCfg.Observer = expiry.ObserverFunc(func(_ context.Context, e expiry.Event) {
		if e.Kind == expiry.KindSent {
			c.mu.Lock()
			c.hops[e.OrderNo]++
			c.mu.Unlock()
		}
	})
	c.sender = newSender(t, sendCfg)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: c.w.Service, Sender: c.sender, Runtime: expiry.Runtime{Observer: c.w.Ledger}})
	require.NoError(t, err)
	c.shell = expiry.NewShell(h)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: c.sender, Runtime: expiry.Runtime{Observer: c.w.Ledger}})
	require.NoError(t, err)
	c.svc = c.w.Scheduling(t, sched)
	startConsumer(t, cfg, c.shell)
	return c
}

// place places the order through the library (seats locked, the order
// committed, its message scheduled after commit), expiring ttl after the
// database's now.
func (c *chain) place(t *testing.T, no string, ttl time.Duration) cancel.Placement {
	ctx := context.Background()
	now, err := c.w.Store.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: c.w.ShowID + "-" + no, UserID: "u1", ShowID: c.w.ShowID, Seats: []string{no + "-1", no + "-2"}, ExpireAt: now.Add(ttl)}
	require.NoError(t, c.svc.Place(ctx, p, c.w.Store.Insert(c.w.DB, nil)))
	return p
}

// waitFinal polls until the order leaves pending; it returns when that was
// seen and the order.
func (c *chain) waitFinal(t *testing.T, no string, within time.Duration) (time.Time, expiry.Order) {
	deadline := time.Now().Add(within)
	for {
		o, err := c.w.Store.Order(context.Background(), no)
		require.NoError(t, err)
		if o.Status != expiry.StatusPending {
			return time.Now(), o
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s still pending after %v", no, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *chain) hopsOf(no string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hops[no]
}

func (c *chain) assertReleased(t *testing.T, p cancel.Placement) {
	ctx := context.Background()
	// The seats go back after the cancel commits (the second boundary), so
	// "cancelled" may be seen a moment before they are free.
	require.Eventually(t, func() bool {
		show, err := c.w.Seats.Show(ctx, p.ShowID)
		require.NoError(t, err)
		for _, s := range p.Seats {
			if _, locked := show[s]; locked {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the seats of %s are available again", p.OrderNo)
	var n int
	require.NoError(t, c.w.DB.QueryRow("SELECT COUNT(*) FROM oe_order_seat WHERE order_no = ?", p.OrderNo).Scan(&n))
	assert.Zero(t, n, "order_seat rows are gone")
}

// The smoke test: a 10-second order, not paid, is cancelled by the
// broker's delayed delivery.
func TestSmokeTenSeconds(t *testing.T) {
	for _, mode := range []rocketmq.Mode{rocketmq.ModeLevels, rocketmq.ModeTimer} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := newChain(t, mode)
			p := c.place(t, "smoke", 10*time.Second)
			at, o := c.waitFinal(t, p.OrderNo, 40*time.Second)
			assert.Equal(t, expiry.StatusCancelled, o.Status)
			assert.False(t, at.Before(p.ExpireAt), "I4: not before expire_at")
			c.assertReleased(t, p)
			assert.Equal(t, 1, c.hopsOf(p.OrderNo), "10s is one level and one timer")
			t.Logf("%s: cancelled %v after expiry, %d hop(s)", mode, at.Sub(p.ExpireAt).Round(time.Millisecond), c.hopsOf(p.OrderNo))
		})
	}
}

// 7 seconds with the default levels: the 5s level arrives early, is re-armed
// for the rest, and the order is cancelled on time. A paid order's message
// arrives and is ignored.
func TestRearmAndPaid(t *testing.T) {
	t.Parallel()
	c := newChain(t, rocketmq.ModeLevels)
	p := c.place(t, "seven", 7*time.Second)
	paid := c.place(t, "paid", 5*time.Second)
	_, err := c.w.Service.Pay(context.Background(), cancel.Payment{OrderNo: paid.OrderNo, UserID: "u1", PaymentID: "pay-1"})
	require.NoError(t, err)
	at, o := c.waitFinal(t, p.OrderNo, 40*time.Second)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	assert.False(t, at.Before(p.ExpireAt))
	assert.Less(t, at.Sub(p.ExpireAt), 3*time.Second, "on time: within slack plus transit")
	assert.GreaterOrEqual(t, c.hopsOf(p.OrderNo), 2, "re-armed at least once")
	assert.GreaterOrEqual(t, c.w.Ledger.Kind(expiry.KindRearmed), 1)
	c.assertReleased(t, p)
	// The paid order's message comes and goes.
	require.Eventually(t, func() bool { return c.w.Ledger.Kind(expiry.KindHandled) >= c.hopsOf(p.OrderNo)+1 }, 20*time.Second, 100*time.Millisecond)
	o, err = c.w.Store.Order(context.Background(), paid.OrderNo)
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPaid, o.Status)
	t.Logf("7s in levels mode: %d hops, cancelled %v after expiry", c.hopsOf(p.OrderNo), at.Sub(p.ExpireAt).Round(time.Millisecond))
}

// Timer mode: one hop, cancelled no earlier than expiry and within the
// broker's precision (1s) plus a margin.
func TestTimerOneHop(t *testing.T) {
	t.Parallel()
	c := newChain(t, rocketmq.ModeTimer)
	p := c.place(t, "timer", 4*time.Second)
	at, o := c.waitFinal(t, p.OrderNo, 30*time.Second)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	assert.False(t, at.Before(p.ExpireAt), "I4")
	assert.Less(t, at.Sub(p.ExpireAt), 2500*time.Millisecond, "precision 1s + margin")
	assert.Equal(t, 1, c.hopsOf(p.OrderNo), "one message")
	t.Logf("timer: %d hop(s) (%d re-arms), cancelled %v after expiry", c.hopsOf(p.OrderNo), c.w.Ledger.Kind(expiry.KindRearmed), at.Sub(p.ExpireAt).Round(time.Millisecond))
}

// A message delivered twice changes nothing the second time; a malformed
// message is acknowledged and does not hold up the next good one.
func TestDuplicateAndMalformed(t *testing.T) {
	t.Parallel()
	c := newChain(t, rocketmq.ModeLevels)
	ctx := context.Background()
	p := c.place(t, "dup", time.Second)
	raw, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(c.cfg.NameServers)), producer.WithGroupName(c.cfg.Group+"_raw"))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	defer raw.Shutdown()
	for _, body := range [][]byte{[]byte("not ours"), []byte(" "), []byte("oe1 a{b} 1"), make([]byte, 4096)} { // the broker refuses empty bodies itself
		_, err := raw.SendSync(ctx, primitive.NewMessage(c.cfg.Topic, body))
		require.NoError(t, err)
	}
	// The same message, twice, right away.
	for i := 0; i < 2; i++ {
		require.NoError(t, c.sender.Send(ctx, expiry.Message{OrderNo: p.OrderNo, Hop: 1}, time.Second))
	}
	_, o := c.waitFinal(t, p.OrderNo, 30*time.Second)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	require.Eventually(t, func() bool { return c.w.Ledger.Kind(expiry.KindBadMessage) >= 3 }, 20*time.Second, 100*time.Millisecond, "bad messages are counted")
	require.Eventually(t, func() bool { return c.w.Ledger.Kind(expiry.KindHandled) >= 3 }, 20*time.Second, 100*time.Millisecond)
	bad, err := c.w.Check(ctx, []cancel.Placement{p}, true)
	require.NoError(t, err)
	assert.Empty(t, bad, "I5: duplicates change nothing")
}

// The broker is unreachable when the order commits: the order is placed, the
// failure counted, and the reconciler cancels it once it is due.
func TestBrokerDownAtCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := e2e.NewWorld(t, testenv.MySQL(t), sqlstore.MySQL, testenv.Redis(t), "down-"+testenv.Unique())
	dead, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{"127.0.0.1:1"}, Topic: "nowhere", Group: "g", SendTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer dead.Close()
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: dead, Runtime: expiry.Runtime{Observer: w.Ledger}})
	require.NoError(t, err)
	now, err := w.Store.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: w.ShowID + "-1", UserID: "u1", ShowID: w.ShowID, Seats: []string{"a"}, ExpireAt: now.Add(time.Second)}
	err = w.Scheduling(t, sched).Place(ctx, p, w.Store.Insert(w.DB, nil))
	require.NoError(t, err, "the buyer's order is placed")
	assert.Equal(t, 1, w.Ledger.Kind(expiry.KindSendFailed))
	time.Sleep(time.Until(p.ExpireAt) + 100*time.Millisecond)
	rep, err := w.Reconciler(t).Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Expired)
	bad, err := w.Check(ctx, []cancel.Placement{p}, true)
	require.NoError(t, err)
	assert.Empty(t, bad)
}

// blockingProcessor takes its time over the first message.
type blockingProcessor struct {
	started  chan struct{}
	finished chan struct{}
	once     sync.Once
}

func (b *blockingProcessor) Process(context.Context, expiry.Delivery) expiry.Verdict {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.started)
		time.Sleep(1500 * time.Millisecond)
		close(b.finished)
	}
	return expiry.Ack
}

// Close waits for the handler in progress; client-go's Shutdown alone would not.
func TestCloseDrains(t *testing.T) {
	t.Parallel()
	cfg, _ := topic(t)
	p := &blockingProcessor{started: make(chan struct{}), finished: make(chan struct{})}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rocketmq.StartConsumer(sctx, cfg, p)
	require.NoError(t, err)
	s := newSender(t, cfg)
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "drain-1", Hop: 1}, time.Second))
	select {
	case <-p.started:
	case <-time.After(30 * time.Second):
		t.Fatal("message not delivered")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	require.NoError(t, c.Close(cctx))
	select {
	case <-p.finished:
	default:
		t.Fatal("Close returned while the handler was still running")
	}
}

// tracedProcessor records the trace context each delivery carried, as the
// Shell receives it.
type tracedProcessor chan [2]any

func (c tracedProcessor) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	c <- [2]any{string(d.Body), d.Trace}
	return expiry.Ack
}

// The W3C trace context travels as the user properties traceparent and
// tracestate; whatever a foreign producer put there (malformed, oversized)
// reaches the processor to judge, and a message without one has none.
func TestTraceProperties(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, _ := topic(t)
	got := make(tracedProcessor, 20)
	startConsumer(t, cfg, got)
	s := newSender(t, cfg)
	tc := expiry.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}
	require.NoError(t, s.Send(ctx, expiry.Message{OrderNo: "traced", Hop: 1, Trace: tc}, 0))
	require.NoError(t, s.Send(ctx, expiry.Message{OrderNo: "untraced", Hop: 1}, 0))
	// A property value with the client's own separators would corrupt the
	// message's properties: the Sender drops it rather than sending it.
	require.NoError(t, s.Send(ctx, expiry.Message{OrderNo: "hostile", Hop: 1, Trace: expiry.Trace{Parent: "00-\x01x\x02y"}}, 0))
	raw, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)), producer.WithGroupName(cfg.Group+"_raw"), producer.WithInstanceName(cfg.Group+"_raw"))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	defer raw.Shutdown()
	huge := strings.Repeat("f", 8192)
	for no, parent := range map[string]string{"malformed": "00-zz-yy-01", "oversized": huge} {
		m := primitive.NewMessage(cfg.Topic, []byte("oe1 "+no+" 1"))
		m.WithProperty(rocketmq.TraceParentProperty, parent)
		_, err := raw.SendSync(ctx, m)
		require.NoError(t, err)
	}
	want := map[string]expiry.Trace{
		"oe1 traced 1":    tc,
		"oe1 untraced 1":  {},
		"oe1 hostile 1":   {},
		"oe1 malformed 1": {Parent: "00-zz-yy-01"},
		"oe1 oversized 1": {Parent: huge},
	}
	seen := map[string]expiry.Trace{}
	deadline := time.After(30 * time.Second)
	for len(seen) < len(want) {
		select {
		case d := <-got:
			if body := d[0].(string); body != "probe" {
				seen[body] = d[1].(expiry.Trace)
			}
		case <-deadline:
			t.Fatalf("delivered %d of %d: %v", len(seen), len(want), seen)
		}
	}
	assert.Equal(t, want, seen)
}
