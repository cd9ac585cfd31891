// Command rmqbench measures the RocketMQ transport on a real broker: send
// latency against client-go's own SendSync, and messages per expired order
// (hops) and lateness for the whole expiry chain (Handler, cancel, re-arm)
// in levels and timer mode. It prints markdown tables; expiry/rocketmq's
// README holds the results and the command.
//
// The "15 minutes" case needs a level table scaled down by 60 (a minute per
// second), which only a broker configured with it can honour: start one with
// internal/testenv/rocketmq.sh and RMQ_DELAY_LEVELS (see the README).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/levels"
)

type broker struct {
	ns, addr string
	table    levels.Table
}

func main() {
	var def, scaled broker
	var scaledSpec string
	sends := flag.Int("sends", 300, "sends per latency series")
	orders := flag.Int("orders", 20, "orders per chain case")
	flag.StringVar(&def.ns, "namesrv", "127.0.0.1:19876", "name server of the broker with the default levels")
	flag.StringVar(&def.addr, "broker", "127.0.0.1:20911", "that broker")
	flag.StringVar(&scaled.ns, "scaled-namesrv", "", "name server of a broker whose messageDelayLevel is -scaled-levels (empty: skip the scaled cases)")
	flag.StringVar(&scaled.addr, "scaled-broker", "", "that broker")
	flag.StringVar(&scaledSpec, "scaled-levels", "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 20s 30s 60s 120s", "the scaled broker's messageDelayLevel (the default table's minute levels, a minute per second)")
	flag.Parse()
	def.table = levels.Default
	rocketmq.UseLogger(slog.New(slog.DiscardHandler))
	ctx := context.Background()

	fmt.Printf("## Send latency (%d sends each, sequential)\n\n", *sends)
	if err := latency(ctx, def, *sends); err != nil {
		fail(err)
	}

	cases := []chainCase{
		{name: "10s", b: def, mode: rocketmq.ModeLevels, slack: time.Second, expiry: 10 * time.Second},
		{name: "7s", b: def, mode: rocketmq.ModeLevels, slack: time.Second, expiry: 7 * time.Second},
		{name: "7s", b: def, mode: rocketmq.ModeLevels, slack: -1, expiry: 7 * time.Second},
		{name: "10s", b: def, mode: rocketmq.ModeTimer, expiry: 10 * time.Second},
		{name: "7s", b: def, mode: rocketmq.ModeTimer, expiry: 7 * time.Second},
	}
	if scaled.ns != "" {
		t, err := levels.Parse(scaledSpec)
		if err != nil {
			fail(err)
		}
		scaled.table = t
		cases = append(cases,
			chainCase{name: "15 min as 15s (scaled table)", b: scaled, mode: rocketmq.ModeLevels, slack: -1, expiry: 15 * time.Second},
			chainCase{name: "15 min as 15s (scaled table)", b: scaled, mode: rocketmq.ModeLevels, slack: time.Second, expiry: 15 * time.Second},
			chainCase{name: "15s", b: def, mode: rocketmq.ModeTimer, expiry: 15 * time.Second},
		)
	}
	fmt.Printf("\n## Hops and lateness per expired order (%d orders per case, real broker, all cases at once)\n\n", *orders)
	fmt.Println("| expiry | mode | slack | hops mean | hops max | simulated hops (50 ms transit) | late p50 | late p99 | late max | early cancels |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	results := make([]string, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row, err := c.run(ctx, *orders)
			if err != nil {
				row = fmt.Sprintf("| %s | %s | %v | error: %v |", c.name, c.mode, c.slack, err)
			}
			results[i] = row
		}()
	}
	wg.Wait()
	for _, r := range results {
		fmt.Println(r)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rmqbench:", err)
	os.Exit(1)
}

func newTopic(ctx context.Context, b broker, prefix string) (string, error) {
	topic := fmt.Sprintf("oe_bench_%s_%d", prefix, time.Now().UnixNano())
	if err := rocketmq.EnsureTopic(ctx, []string{b.ns}, b.addr, topic); err != nil {
		return "", err
	}
	p, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.ns})), producer.WithGroupName(topic+"_probe"), producer.WithInstanceName(topic+"_probe"))
	if err != nil {
		return "", err
	}
	if err := p.Start(); err != nil {
		return "", err
	}
	defer p.Shutdown()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("probe")))
		if err == nil {
			return topic, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("topic %s never got a route: %w", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// latency compares our Sender.Send with client-go's SendSync of the same
// message, interleaved so both see the same broker and machine load.
func latency(ctx context.Context, b broker, n int) error {
	topic, err := newTopic(ctx, b, "lat")
	if err != nil {
		return err
	}
	raw, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.ns})), producer.WithGroupName(topic+"_raw"), producer.WithInstanceName(topic+"_raw"))
	if err != nil {
		return err
	}
	if err := raw.Start(); err != nil {
		return err
	}
	defer raw.Shutdown()
	fmt.Println("| mode | client-go SendSync p50 | ours p50 | ratio p50 | client-go p99 | ours p99 | ratio p99 |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, mode := range []rocketmq.Mode{rocketmq.ModeLevels, rocketmq.ModeTimer} {
		s, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{b.ns}, Topic: topic, Group: topic + "_" + mode.String(), Mode: mode, Slack: time.Second})
		if err != nil {
			return err
		}
		var rawD, ourD []time.Duration
		for i := 0; i < n; i++ {
			m := expiry.Message{OrderNo: fmt.Sprintf("lat-%d", i), Hop: 1}
			body, _ := expiry.EncodeMessage(m)
			msg := primitive.NewMessage(topic, body).WithKeys([]string{m.OrderNo})
			level, d := s.Plan(time.Hour)
			if mode == rocketmq.ModeTimer {
				msg.WithProperty("TIMER_DELAY_MS", fmt.Sprint(d.Milliseconds()))
			} else {
				msg.WithDelayTimeLevel(level)
			}
			t0 := time.Now()
			if _, err := raw.SendSync(ctx, msg); err != nil {
				return err
			}
			rawD = append(rawD, time.Since(t0))
			t0 = time.Now()
			if err := s.Send(ctx, m, time.Hour); err != nil {
				return err
			}
			ourD = append(ourD, time.Since(t0))
		}
		_ = s.Close()
		r50, o50, r99, o99 := pct(rawD, .5), pct(ourD, .5), pct(rawD, .99), pct(ourD, .99)
		fmt.Printf("| %s | %s | %s | %.2f | %s | %s | %.2f |\n", mode, ms(r50), ms(o50), float64(o50)/float64(r50), ms(r99), ms(o99), float64(o99)/float64(r99))
	}
	return nil
}

type chainCase struct {
	name   string
	b      broker
	mode   rocketmq.Mode
	slack  time.Duration
	expiry time.Duration
}

// run places orders with the case's expiry and lets the real chain
// (Sender → broker → Consumer → Shell → Handler → cancel or re-arm) cancel
// them, on in-memory stores with the real clock.
func (c chainCase) run(ctx context.Context, orders int) (string, error) {
	topic, err := newTopic(ctx, c.b, c.mode.String())
	if err != nil {
		return "", err
	}
	cfg := rocketmq.Config{NameServers: []string{c.b.ns}, Topic: topic, Group: topic + "_p", Mode: c.mode, Levels: c.b.table, Slack: c.slack}
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	var mu sync.Mutex
	hops := map[string]int{}
	done := map[string]time.Time{}
	obs := expiry.ObserverFunc(func(_ context.Context, e expiry.Event) {
		switch e.Kind {
		case expiry.KindCancelled:
			mu.Lock()
			done[e.OrderNo] = time.Now()
			mu.Unlock()
		case expiry.KindSent:
			mu.Lock()
			hops[e.OrderNo]++
			mu.Unlock()
		}
	})
	cfg.Observer = obs // KindSent counts the hops
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: obs, Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return "", err
	}
	s, err := rocketmq.NewSender(cfg)
	if err != nil {
		return "", err
	}
	defer s.Close()
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: s, Runtime: expiry.Runtime{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return "", err
	}
	cfg.Group = topic + "_c"
	sctx, cancelStart := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStart()
	cons, err := rocketmq.StartConsumer(sctx, cfg, expiry.NewShell(h))
	if err != nil {
		return "", err
	}
	defer cons.Close(context.Background())
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: s, Runtime: expiry.Runtime{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return "", err
	}
	expireAt := map[string]time.Time{}
	for i := 0; i < orders; i++ {
		no := fmt.Sprintf("%s-%d", strings.ReplaceAll(topic, "_", "-"), i)
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: time.Now().Add(c.expiry)}
		// The in-memory store has no transaction: its insert is the commit,
		// and the message is sent after it.
		if err := svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }); err != nil {
			return "", err
		}
		expireAt[no] = p.ExpireAt
		if !sched.Schedule(ctx, no, p.ExpireAt) {
			return "", fmt.Errorf("order %s: the expiry message was not sent (see the log)", no)
		}
		time.Sleep(50 * time.Millisecond) // spread over timer ticks
	}
	deadline := time.Now().Add(c.expiry + 60*time.Second)
	for {
		mu.Lock()
		n := len(done)
		mu.Unlock()
		if n == orders {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%d of %d orders cancelled", n, orders)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var late []time.Duration
	total, maxHops, early := 0, 0, 0
	for no, at := range done {
		d := at.Sub(expireAt[no])
		if d < 0 {
			early++
		}
		late = append(late, d)
		total += hops[no]
		maxHops = max(maxHops, hops[no])
	}
	sim := "1"
	if c.mode == rocketmq.ModeLevels {
		sim = fmt.Sprint(levels.Simulate(c.b.table, c.expiry, max(c.slack, 0), func(int) time.Duration { return 50 * time.Millisecond }).Hops())
	}
	slack := "-"
	if c.mode == rocketmq.ModeLevels {
		slack = max(c.slack, 0).String() // -1 asks for none
	}
	return fmt.Sprintf("| %s | %s | %s | %.2f | %d | %s | %s | %s | %s | %d |", c.name, c.mode, slack, float64(total)/float64(orders), maxHops, sim,
		ms(pct(late, .5)), ms(pct(late, .99)), ms(pct(late, 1)), early), nil
}
