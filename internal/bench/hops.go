package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/levels"
)

// ---- the model ----
//
// Levels mode (RocketMQ 4.x / 5.x with levels): the sender picks
// Plan(remaining, slack); the broker stores the message and its level's
// timer delivers it Delay(level) after it was stored (the schedule service
// re-arms its per-level timer to the exact countdown, so there is no tick);
// add the hop's transit (producer→broker, broker→consumer, consumer's
// database read), drawn uniformly from [tmin, tmax] per hop.
//
// Timer mode (5.x, timerWheelEnable, timerPrecisionMs=1000): the broker
// computes deliverMs = arrival-at-broker + TIMER_DELAY_MS on its own clock,
// then floors it to the precision (HookUtils.transformTimerMessage: a value
// already on a tick goes one tick back). The timer wheel dequeues slot T only
// once floor(now) > T (TimerMessageStore.dequeue: currReadTimeMs <
// currWriteTimeMs), polling every 100 ms when idle. So the message reaches
// the consumer at ceil-to-the-second(target) + U(0,100ms) + the delivery half
// of the transit: never early by the broker's own clock, up to ~1.1 s plus
// transit late. The phase of the order's deadline against the broker's
// second boundaries is drawn uniformly.

type simMode struct {
	name  string
	timer bool
	slack time.Duration
}

var simModes = []simMode{
	{"rule, slack 0 (greedy)", false, 0},
	{"rule, slack 1s", false, time.Second},
	{"timer (5.x)", true, 0},
}

type simParams struct {
	tbl        levels.Table
	tmin, tmax time.Duration
	placeMax   time.Duration // first send: expire_at − now is short by U(0, placeMax)
	precision  time.Duration
	poll       time.Duration
}

func (p simParams) transit(r *rand.Rand) time.Duration {
	return p.tmin + time.Duration(r.Int64N(int64(p.tmax-p.tmin)+1))
}

// simulateOrder plays one order's chain; it returns the hops and how late
// the cancelling arrival was (never negative: an early arrival re-arms).
func simulateOrder(p simParams, m simMode, expiry time.Duration, r *rand.Rand) (int, time.Duration) {
	// The host stamps expire_at before its INSERT and sends after COMMIT, so
	// the first message asks for a little less than the full expiry.
	now := time.Duration(r.Int64N(int64(p.placeMax) + 1))
	phase := time.Duration(r.Int64N(int64(p.precision)))
	for hop := 1; hop < 100_000; hop++ {
		remaining := expiry - now
		tr := p.transit(r)
		if m.timer {
			send := tr / 2
			target := phase + now + send + max(remaining, 0) // broker clock
			slot := target / p.precision * p.precision
			if target%p.precision == 0 {
				slot -= p.precision
			}
			deliver := slot + p.precision + time.Duration(r.Int64N(int64(p.poll)+1))
			if deliver < target-p.precision { // (cannot happen; documents the floor)
				deliver = target
			}
			now = deliver - phase + (tr - send)
		} else {
			level := p.tbl.Plan(remaining, m.slack)
			now += p.tbl.Delay(level) + tr
		}
		if now >= expiry {
			return hop, now - expiry
		}
	}
	return -1, 0
}

type simResult struct {
	hopsMean  float64
	hopsMax   int
	late      []time.Duration
	fixedHops int // levels.Simulate with a fixed 50 ms transit (levels modes)
	fixedLate time.Duration
}

func runSim(p simParams, m simMode, expiry time.Duration, n int, seed int64) simResult {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(expiry)))
	var res simResult
	total := 0
	for i := 0; i < n; i++ {
		h, late := simulateOrder(p, m, expiry, r)
		total += h
		res.hopsMax = max(res.hopsMax, h)
		res.late = append(res.late, late)
	}
	res.hopsMean = float64(total) / float64(n)
	if !m.timer {
		c := levels.Simulate(p.tbl, expiry, m.slack, func(int) time.Duration { return 50 * time.Millisecond })
		res.fixedHops, res.fixedLate = c.Hops(), c.Late
	}
	return res
}

func runHops(c *common, args []string) error {
	fs := flag.NewFlagSet("hops", flag.ContinueOnError)
	expiriesF := fs.String("expiries", "1s,7s,10s,1m,15m,1h,3h", "order expiries to simulate")
	n := fs.Int("n", 10000, "simulated orders per expiry and mode")
	tmin := fs.Duration("transit-min", 5*time.Millisecond, "shortest per-hop transit")
	tmax := fs.Duration("transit-max", 50*time.Millisecond, "longest per-hop transit")
	place := fs.Duration("place-max", 10*time.Millisecond, "longest time from stamping expire_at to the first send (INSERT + COMMIT)")
	spec := fs.String("levels", levels.DefaultSpec, "the broker's messageDelayLevel")
	brokerF := fs.String("broker-run", "auto", "real-broker sub-part: auto (if the broker answers), on, off")
	brokerN := fs.Int("broker-orders", 10, "orders per case in the real-broker run")
	brokerExp := fs.String("broker-expiries", "7s,10s", "expiries of the real-broker run")
	chart := fs.String("chart", "", "also draw the simulated lateness distributions (CDF) of the 10s and 15m orders into this SVG file (.png: a PNG)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	expiries, err := parseDurs(*expiriesF)
	if err != nil {
		return err
	}
	tbl, err := levels.Parse(*spec)
	if err != nil {
		return err
	}
	p := simParams{tbl: tbl, tmin: *tmin, tmax: *tmax, placeMax: *place, precision: time.Second, poll: 100 * time.Millisecond}

	fmt.Printf("### 1a. Simulation: hops and lateness per expired order\n\n")
	fmt.Printf("%d orders per cell, per-hop transit uniform in [%v, %v], first send U(0, %v) after expire_at was stamped (seed %d), levels `%s`. "+
		"Lateness = cancelling arrival − deadline (an early arrival re-arms, so it is never negative). "+
		"Last column: `levels.Simulate` with a fixed 50 ms transit, the model behind the design's hop counts. "+
		"Timer mode: broker floors deliverMs to its 1 s tick and dequeues a slot once the wall clock has passed it (polled every 100 ms), see `hops.go`.\n\n",
		*n, *tmin, *tmax, *place, c.seed, tbl)
	t := newTable("expiry", "mode", "hops mean", "hops max", "late p50", "late p99", "late max", "fixed 50 ms: hops / late")
	results := map[string]simResult{}
	for _, e := range expiries {
		for _, m := range simModes {
			res := runSim(p, m, e, *n, c.seed)
			results[fmt.Sprint(e, m.name)] = res
			fixed := "—"
			if !m.timer {
				fixed = fmt.Sprintf("%d / %s", res.fixedHops, fmtDur(res.fixedLate))
			}
			t.add(fmtDur(e), m.name, fmt.Sprintf("%.2f", res.hopsMean), res.hopsMax, pct(res.late, 50), pct(res.late, 99), maxDur(res.late), fixed)
		}
	}
	t.print(os.Stdout)
	if *chart != "" {
		var panels []chartPanel
		for _, e := range []time.Duration{10 * time.Second, 15 * time.Minute} {
			pn := chartPanel{title: fmtDur(e) + " expiry, simulated"}
			for _, m := range simModes {
				pn.series = append(pn.series, chartSeries{name: m.name, late: results[fmt.Sprint(e, m.name)].late})
			}
			panels = append(panels, pn)
		}
		if err := writeLatenessChart(*chart, panels); err != nil {
			return err
		}
		fmt.Printf("\nLateness distributions of the 10s and 15m rows: `%s`.\n", *chart)
	}

	// Goals.
	fmt.Printf("\n**Goals** (from the same simulation):\n\n")
	g := newTable("goal", "measured", "met")
	if r, ok := results[fmt.Sprint(15*time.Minute, simModes[1].name)]; ok {
		g.add("15m with slack 1s: ≤ 2 hops", fmt.Sprintf("max %d hops", r.hopsMax), yes(r.hopsMax <= 2))
		lim := time.Second + *tmax
		g.add(fmt.Sprintf("15m with slack 1s: lateness ≤ slack + max transit (%v)", lim), "max "+fmtDur(maxDur(r.late)), yes(maxDur(r.late) <= lim))
	}
	if r, ok := results[fmt.Sprint(15*time.Minute, simModes[0].name)]; ok {
		g.add("15m, the greedy rule: 11 hops (50 ms fixed transit)", fmt.Sprintf("%d hops fixed-50ms; %.2f mean / %d max with jitter", r.fixedHops, r.hopsMean, r.hopsMax), yes(r.fixedHops == 11))
	}
	worstSlack := time.Duration(0)
	for _, e := range expiries {
		if r, ok := results[fmt.Sprint(e, simModes[1].name)]; ok {
			worstSlack = max(worstSlack, maxDur(r.late))
		}
	}
	g.add("every expiry with slack 1s: lateness ≤ max(slack, Delay(1)) + max transit", "max "+fmtDur(worstSlack), yes(worstSlack <= max(time.Second, tbl.Delay(1))+*tmax))
	g.print(os.Stdout)

	fmt.Printf("\n### 1b. Real broker: hops and lateness through `expiry/rocketmq`\n\n")
	run := *brokerF == "on" || (*brokerF == "auto" && brokerUp(c.namesrv, c.broker))
	if !run {
		fmt.Printf("Skipped: the RocketMQ name server %s / broker %s did not answer (or -broker-run=off).\n", c.namesrv, c.broker)
		return nil
	}
	bexp, err := parseDurs(*brokerExp)
	if err != nil {
		return err
	}
	return c.hopsBroker(tbl, bexp, *brokerN)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// ---- the real-broker run ----

type hopRecorder struct {
	mu        sync.Mutex
	expireAt  map[string]time.Time
	cancelled map[string]time.Time
	maxHop    map[string]int
	expected  map[string]time.Time // order/hop → when the broker should deliver
	lag       []time.Duration      // arrival − (send + broker delay), per hop
	early     int                  // arrivals before the order was due
	rearms    int
}

func newHopRecorder() *hopRecorder {
	return &hopRecorder{expireAt: map[string]time.Time{}, cancelled: map[string]time.Time{}, maxHop: map[string]int{}, expected: map[string]time.Time{}}
}

func (h *hopRecorder) Observe(_ context.Context, e expiry.Event) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Kind {
	case expiry.KindSent:
		h.expected[fmt.Sprintf("%s/%d", e.OrderNo, e.Hop)] = now.Add(e.Delay)
	case expiry.KindHandled:
		arrived := now.Add(-e.Duration)
		h.maxHop[e.OrderNo] = max(h.maxHop[e.OrderNo], e.Hop)
		if exp, ok := h.expected[fmt.Sprintf("%s/%d", e.OrderNo, e.Hop)]; ok {
			h.lag = append(h.lag, arrived.Sub(exp))
		}
		if e.Outcome == expiry.OutcomeRearmed {
			h.rearms++
			if arrived.Before(h.expireAt[e.OrderNo]) {
				h.early++
			}
		}
	case expiry.KindCancelled:
		h.cancelled[e.OrderNo] = now
	}
}

type brokerCase struct {
	mode  rocketmq.Mode
	slack time.Duration
	name  string
}

func (c *common) hopsBroker(tbl levels.Table, expiries []time.Duration, n int) error {
	cases := []brokerCase{
		{rocketmq.ModeLevels, -1, "rule, slack 0"},
		{rocketmq.ModeLevels, time.Second, "rule, slack 1s"},
		{rocketmq.ModeTimer, 0, "timer"},
	}
	ctx := context.Background()
	type running struct {
		bc     brokerCase
		rec    *hopRecorder
		store  *memstore.Store
		svc    *cancel.Service
		sched  *expiry.Scheduler
		orders map[time.Duration][]string
	}
	var runs []*running
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	for i, bc := range cases {
		cfg, drop, err := c.rmqTopic(ctx, fmt.Sprintf("hops%d", i))
		if err != nil {
			return fmt.Errorf("create topic: %w", err)
		}
		cleanups = append(cleanups, drop)
		cfg.Mode, cfg.Slack, cfg.Levels = bc.mode, bc.slack, tbl
		rec := newHopRecorder()
		store := memstore.NewStore(nil)
		seats := memstore.NewSeats(nil)
		svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: rec, Logger: c.log}})
		if err != nil {
			return err
		}
		sendCfg := cfg
		sendCfg.Observer = rec // KindSent: when the broker should deliver
		sender, err := rocketmq.NewSender(sendCfg)
		if err != nil {
			return fmt.Errorf("sender: %w", err)
		}
		cleanups = append(cleanups, func() { _ = sender.Close() })
		h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: rec, Logger: c.log}})
		if err != nil {
			return err
		}
		shell := expiry.NewShell(h)
		cons, err := rmqConsumer(cfg, shell)
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { closeConsumer(cons) })
		sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Observer: rec, Logger: c.log}})
		if err != nil {
			return err
		}
		runs = append(runs, &running{bc: bc, rec: rec, store: store, svc: svc, sched: sched, orders: map[time.Duration][]string{}})
	}
	// Place every order of every case at once, then wait.
	longest := time.Duration(0)
	for ri, r := range runs {
		for ei, e := range expiries {
			longest = max(longest, e)
			for k := 0; k < n; k++ {
				no := fmt.Sprintf("h%d-%d-%d", ri, ei, k)
				at := time.Now().Add(e)
				p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "show", Seats: []string{no + "-s"}, ExpireAt: at}
				// The in-memory store has no transaction: its insert is the
				// commit, and the message is sent after it.
				if err := r.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return r.store.Place(ctx, p) }); err != nil {
					return err
				}
				r.rec.mu.Lock()
				r.rec.expireAt[no] = p.ExpireAt.Truncate(time.Millisecond)
				r.rec.mu.Unlock()
				if !r.sched.Schedule(ctx, no, p.ExpireAt) {
					return errors.New("schedule failed (see log)")
				}
				r.orders[e] = append(r.orders[e], no)
			}
		}
	}
	deadline := time.Now().Add(longest + 40*time.Second)
	for time.Now().Before(deadline) {
		done := 0
		for _, r := range runs {
			r.rec.mu.Lock()
			done += len(r.rec.cancelled)
			r.rec.mu.Unlock()
		}
		if done == len(runs)*len(expiries)*n {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("%d orders per row, all placed at once on one broker (topics created for the run and deleted after); in-memory order and seat stores, so the numbers are the transport's and the Handler's. "+
		"Hops = highest hop number handled; lateness = cancel − expire_at (application clock); "+
		"broker lag = arrival − (send + delay asked of the broker), per hop.\n\n", n)
	t := newTable("expiry", "mode", "cancelled", "hops mean", "hops max", "late p50", "late max", "re-arms (early arrivals)", "broker lag p50", "broker lag max")
	for _, e := range expiries {
		for _, r := range runs {
			r.rec.mu.Lock()
			var late []time.Duration
			hops, hmax := 0, 0
			for _, no := range r.orders[e] {
				if at, ok := r.rec.cancelled[no]; ok {
					late = append(late, at.Sub(r.rec.expireAt[no]))
				}
				hops += r.rec.maxHop[no]
				hmax = max(hmax, r.rec.maxHop[no])
			}
			t.add(fmtDur(e), r.bc.name, fmt.Sprintf("%d/%d", len(late), len(r.orders[e])), fmt.Sprintf("%.2f", float64(hops)/float64(len(r.orders[e]))), hmax,
				pct(late, 50), maxDur(late), fmt.Sprintf("%d (%d)", r.rec.rearms, r.rec.early), pct(r.rec.lag, 50), maxDur(r.rec.lag))
			r.rec.mu.Unlock()
		}
	}
	t.print(os.Stdout)
	fmt.Printf("\n(re-arm and broker-lag columns count every hop of the mode's run, all expiries together.)\n")
	return nil
}
