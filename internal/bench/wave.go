package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/onebyone"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Part 12: the onsale wave end to end. An onsale's unpaid orders fall due
// within one minute. Per database two equal copies, one after the other in
// one run: each copy's orders get their expiry message through RocketMQ
// timer mode (expiry.Scheduler → rocketmq.Sender) ahead of the wave, and a
// consumer (rocketmq.Consumer → expiry.Shell → Handler → cancel.Service)
// and a reconciler (reconcile.Run) work the wave together, as a host runs
// them. One copy runs the Service as it is (concurrent Timeout calls in
// batches, the reconciler's expired pass through ExpireDue); the other the
// one-order path (the store without CancelDue, the reconciler without
// ExpireDue). Measured: drain time, lateness by the store's clock, who
// cancelled, and the CPU time of each server process per order.

func runWave(c *common, args []string) error {
	fs := flag.NewFlagSet("wave", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	var o waveOpts
	fs.IntVar(&o.n, "n", 50_000, "orders due in the wave (2 seats each, locked in Redis), in each copy")
	fs.IntVar(&o.history, "history", 20_000, "history orders beside the wave in each copy (5 % pending not yet due, 60 % paid, 35 % cancelled)")
	fs.DurationVar(&o.window, "window", time.Minute, "the wave's deadlines are spread evenly over this span")
	fs.DurationVar(&o.lead, "lead", time.Minute, "from the first send to the first deadline (the sends must end before it; a copy whose sends overran says so)")
	fs.DurationVar(&o.interval, "interval", 10*time.Second, "reconcile.Run's interval (a host tightens it for an onsale; the examples use 5 min)")
	fs.IntVar(&o.consumers, "consumers", 20, "rocketmq Config.Consumers (the push consumer's goroutines)")
	fs.IntVar(&o.schedConc, "sched-conc", 8, "goroutines calling expiry.Scheduler.Schedule")
	fs.DurationVar(&o.cap, "cap", 5*time.Minute, "give up on a copy still not drained this long after its last deadline")
	fs.Float64Var(&o.lose, "lose", 0, "the fraction of expiry messages lost after the scheduler's send returned nil (a broker that acked and lost them, a crash): the reconciler's to cancel")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	if o.n <= 0 || o.history < 0 || o.window <= 0 || o.lead <= 0 || o.interval <= 0 || o.consumers <= 0 || o.schedConc <= 0 || o.lose < 0 || o.lose > 1 {
		return errors.New("wave: -n, -window, -lead, -interval, -consumers and -sched-conc must be positive, -history not negative, -lose within 0..1")
	}
	if !brokerUp(c.namesrv, c.broker) {
		return fmt.Errorf("wave: the RocketMQ broker (%s, name server %s) does not answer", c.broker, c.namesrv)
	}
	fmt.Printf("Load average at start: %s. Per database two equal copies (each its own database/schema and Redis logical database, RocketMQ topic and consumer group), "+
		"run one after the other: %d pending orders (2 seats each, over %d shows) whose deadlines are spread evenly over %v, beside %d history orders, bulk-loaded, claims restored into Redis, ANALYZE. "+
		"Each order's expiry message is sent through `expiry.Scheduler.Schedule` → `rocketmq.Sender` (timer mode) by %d goroutines, starting %v before the first deadline; "+
		"a `rocketmq.Consumer` (%d goroutines) → `expiry.Shell` → `Handler` → `cancel.Service` and `reconcile.Reconciler.Run` (interval %v, default Config) work the wave together. "+
		"Lateness = the cancel's time − the order's deadline, both by the database's clock (`expiry.Event.Lateness`). "+
		"CPU = user+system time of each process (/proc/<pid>/stat, by its port; this process by getrusage) from the first send to the last cancel, divided by the orders.\n\n"+
		"- **batched**: the Service as it is: concurrent `Timeout` calls cancel together (one `CancelDue` transaction and one `ReleaseAll` per batch), the reconciler's expired pass through `ExpireDue`.\n"+
		"- **one order**: the store without `CancelDue` and the reconciler's Service without `ExpireDue`: one transaction and one EVALSHA per order.\n\n",
		loadAvg(), o.n, backlogShows, o.window, o.history, o.schedConc, o.lead, o.consumers, o.interval)
	summary := newTable("database", "copy", "sends: time", "ended before the first deadline", "**drain: last cancel − first deadline**", "late p50", "late p99", "**late max**",
		"cancelled by consumer / reconciler", "**DB CPU µs/order**", "Redis", "broker + name server", "bench process")
	checks := newTable("database", "copy", "cancelled rows (reason timeout or reconcile) / wave", "KindCancelled per order: once / twice+ / never", "seats freed (2 per order)",
		"wave seats held in Redis", "Redis seats = SQL claims", "wave users' counters ≠ 0", "counters = SQL seats per user", "history unchanged", "skipped / release failed")
	lostT := newTable("database", "copy", "messages lost", "reconcile interval", "lost: late p50", "lost: late p99", "**lost: late max**", "sent: late p50", "sent: late p99", "sent: late max")
	var failed []string
	for i, e := range engines {
		if err := c.waveEngine(e, i, o, summary, checks, lostT, &failed); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	fmt.Printf("\n### Wave summary\n\n")
	summary.print(os.Stdout)
	if o.lose > 0 {
		fmt.Printf("\n### Orders whose message was lost (-lose %g)\n\n", o.lose)
		lostT.print(os.Stdout)
	}
	fmt.Printf("\n### Correctness\n\n")
	checks.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

type waveOpts struct {
	n, history, consumers, schedConc int
	window, lead, interval, cap      time.Duration
	lose                             float64
}

// losingSender loses a fraction of the messages it is given (every
// lose-th by a counter, so the lost ones spread over the wave): Send
// returns nil without sending, as a broker that acknowledged and then lost
// them. It records which orders' messages it lost.
type losingSender struct {
	expiry.DelaySender
	every int64 // lose one message in every; 0: none
	mu    sync.Mutex
	n     int64
	lost  map[string]bool
}

func (l *losingSender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	l.mu.Lock()
	l.n++
	lose := l.every > 0 && l.n%l.every == 0
	if lose {
		l.lost[m.OrderNo] = true
	}
	l.mu.Unlock()
	if lose {
		return nil
	}
	return l.DelaySender.Send(ctx, m, delay)
}

// waveClock records, per wave order, when and how late (by the store's
// clock) it was cancelled, and closes done when every one was.
type waveClock struct {
	mu     sync.Mutex
	at     map[string]time.Time
	late   []time.Duration
	lateOf map[string]time.Duration
	want   map[string]bool
	done   chan struct{}
}

func (w *waveClock) Observe(_ context.Context, e expiry.Event) {
	if e.Kind != expiry.KindCancelled {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.at[e.OrderNo]; seen || !w.want[e.OrderNo] {
		return // the backlog checks count repeats from the cancelCounter
	}
	w.at[e.OrderNo] = now
	if l, ok := e.Lateness(); ok {
		w.late = append(w.late, l)
		w.lateOf[e.OrderNo] = l
	}
	if len(w.at) == len(w.want) {
		close(w.done)
	}
}

func (c *common) waveEngine(engine string, idx int, o waveOpts, summary, checks, lostT *table, failed *[]string) error {
	ctx := context.Background()
	sets := []*backlogSet{{label: "batched"}, {label: "one order"}}
	defer closeSets(sets)
	// Loaded with the wave far in the future; each copy's deadlines are
	// moved to just ahead of its own sends.
	far := time.Now().Add(24 * time.Hour)
	gen := backlogRows(o.n, o.window, far.Add(o.window+time.Second))
	for i, s := range sets {
		if err := c.loadSet(ctx, s, engine, "wave", i, o.consumers+8, o.consumers+o.schedConc+8, o.n+o.history, gen); err != nil {
			return err
		}
	}
	fmt.Printf("### %s\n\n", engineName(engine))
	for _, s := range sets {
		fmt.Printf("- %s copy: %d orders, %d seat claims restored into Redis, loaded in %v\n", s.label, o.n+o.history, s.claims, s.load.Round(100*time.Millisecond))
	}
	servers := map[string]string{"Redis": c.redisAddr, "RocketMQ broker": c.broker, "RocketMQ name server": c.namesrv}
	if engine == engMySQL {
		servers["MariaDB"] = dsnAddr(c.mysqlDSN, "127.0.0.1:13306")
	} else {
		servers["PostgreSQL"] = "127.0.0.1:" + fmt.Sprint(pgPort(c.pgDSN))
	}
	order := []int{0, 1}
	if idx%2 == 1 {
		order = []int{1, 0} // which copy goes first alternates by database
	}
	for _, i := range order {
		s := sets[i]
		fmt.Printf("- %s copy: load average before its wave %s\n", s.label, loadAvg())
		res, err := c.waveCopy(ctx, s, i == 1, gen, far, o, c.newCPUMeter(servers))
		if err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
		fmt.Printf("- %s copy: %s\n", s.label, res.note)
		if res.missing > 0 {
			*failed = append(*failed, fmt.Sprintf("%s %s: %d orders not cancelled %v after the last deadline", engineName(engine), s.label, res.missing, o.cap))
		}
		cpu := map[string]time.Duration{}
		for k, name := range res.cpuNames {
			cpu[name] = res.cpu[k]
		}
		per := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/float64(o.n)) }
		summary.add(engineName(engine), s.label, fmtDur(res.sends), res.sendsInTime, fmtDur(res.drain), pct(res.late, 50), pct(res.late, 99), maxDur(res.late),
			fmt.Sprintf("%d / %d", res.byConsumer, res.byReconciler), per(cpu["MariaDB"]+cpu["PostgreSQL"]), per(cpu["Redis"]),
			per(cpu["RocketMQ broker"]+cpu["RocketMQ name server"]), per(cpu["bench process"]))
		if o.lose > 0 {
			lostT.add(engineName(engine), s.label, res.lost, o.interval, pct(res.lateLost, 50), pct(res.lateLost, 99), maxDur(res.lateLost),
				pct(res.lateSent, 50), pct(res.lateSent, 99), maxDur(res.lateSent))
		}
	}
	fmt.Println()
	for _, s := range sets {
		row, bad, err := checkBacklog(ctx, s, o.n, o.history, gen, cancel.ReasonTimeout, cancel.ReasonReconcile)
		if err != nil {
			return fmt.Errorf("check %s: %w", s.label, err)
		}
		checks.add(append([]any{engineName(engine), s.label}, row...)...)
		for _, b := range bad {
			*failed = append(*failed, engineName(engine)+" "+s.label+": "+b)
		}
	}
	return nil
}

type waveResult struct {
	sends, drain             time.Duration
	sendsInTime              string
	late                     []time.Duration
	lateLost, lateSent       []time.Duration // -lose: the lateness of orders whose message was lost, and of the others
	byConsumer, byReconciler int
	missing, lost            int
	cpu                      []time.Duration
	cpuNames                 []string
	note                     string
}

// waveCopy runs one copy's wave: it moves the copy's deadlines to start
// o.lead from now, sends every order's message, and lets a consumer and a
// reconciler cancel them until every order is cancelled or o.cap has passed
// after the last deadline.
func (c *common) waveCopy(ctx context.Context, s *backlogSet, oneOrderPath bool, gen func(int) orderRow, far time.Time, o waveOpts, meter *cpuMeter) (*waveResult, error) {
	res := &waveResult{cpuNames: meter.names}
	var stop []func()
	defer func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}()
	cfg, drop, err := c.rmqTopic(ctx, "wave")
	if err != nil {
		return nil, err
	}
	stop = append(stop, drop)
	cfg.Mode, cfg.Consumers = rocketmq.ModeTimer, o.consumers
	sender, err := rocketmq.NewSender(cfg)
	if err != nil {
		return nil, err
	}
	stop = append(stop, func() { _ = sender.Close() })

	clock := &waveClock{at: make(map[string]time.Time, o.n), lateOf: make(map[string]time.Duration, o.n), want: make(map[string]bool, o.n), done: make(chan struct{})}
	for k := range o.n {
		clock.want[gen(k).no] = true
	}
	s.obs = newCancelCounter(o.n)
	rt := expiry.Runtime{Observer: expiry.MultiObserver(s.obs, clock), Logger: c.log}
	if s.svc, err = cancel.New(cancel.Config{Store: s.store, Seats: s.seats, Runtime: rt}); err != nil {
		return nil, err
	}
	var canceller expiry.Canceller = s.svc
	if oneOrderPath {
		canceller = oneOrderTimeouts{s.svc}
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: canceller, Sender: sender, Runtime: rt})
	if err != nil {
		return nil, err
	}
	losing := &losingSender{DelaySender: sender, lost: map[string]bool{}}
	if o.lose > 0 {
		losing.every = max(1, int64(1/o.lose+0.5))
	}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: losing, Runtime: rt})
	if err != nil {
		return nil, err
	}
	var rsvc reconcile.Service = s.svc
	if oneOrderPath {
		rsvc = onebyone.Service{Canceller: s.svc}
	}
	rec, err := reconcile.New(reconcile.Config{Orders: s.store, Seats: s.seats, Service: rsvc, Runtime: rt})
	if err != nil {
		return nil, err
	}
	cons, err := rmqConsumer(cfg, expiry.NewShell(h))
	if err != nil {
		return nil, err
	}
	stop = append(stop, func() { closeConsumer(cons) })

	// The wave: deadlines from first to first+window, o.lead from now.
	first := time.Now().Add(o.lead)
	shift := first.Sub(time.UnixMilli(gen(0).expireMS)).Milliseconds()
	if _, err := s.bd.ExecContext(ctx, rebindBench(s.bd.dialect, "UPDATE oe_order SET expire_at_ms = expire_at_ms + ? WHERE order_no LIKE 'B%'"), shift); err != nil {
		return nil, fmt.Errorf("move the deadlines: %w", err)
	}
	if err := analyze(ctx, s.bd); err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() { rdone <- rec.Run(rctx, o.interval) }()
	stopRec := sync.OnceValue(func() error { rcancel(); return <-rdone })
	stop = append(stop, func() { _ = stopRec() })

	cpu0 := meter.sample()
	wall, nfailed, err := runWorkers(o.schedConc, o.n, func(k int) error {
		r := gen(k)
		if !sched.Schedule(ctx, r.no, time.UnixMilli(r.expireMS+shift)) {
			return errors.New("send failed")
		}
		return nil
	})
	res.sends = wall
	res.sendsInTime = "yes"
	if over := time.Since(first); over > 0 {
		res.sendsInTime = fmt.Sprintf("**no: %v after**", over.Round(100*time.Millisecond))
	}
	if err != nil {
		// The reconciler cancels what was not sent: the checks still hold.
		c.log.Warn("wave: sends failed", "failed", nfailed, "err", err)
	}
	last := first.Add(o.window)
	select {
	case <-clock.done:
	case <-time.After(time.Until(last.Add(o.cap))):
	}
	res.cpu = sub(meter.sample(), cpu0)
	if err := stopRec(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("reconciler: %w", err)
	}

	clock.mu.Lock()
	var lastAt time.Time
	for _, at := range clock.at {
		if at.After(lastAt) {
			lastAt = at
		}
	}
	res.late = slices.Clone(clock.late)
	res.missing = o.n - len(clock.at)
	losing.mu.Lock()
	for no, l := range clock.lateOf {
		if losing.lost[no] {
			res.lateLost = append(res.lateLost, l)
		} else {
			res.lateSent = append(res.lateSent, l)
		}
	}
	res.lost = len(losing.lost)
	losing.mu.Unlock()
	clock.mu.Unlock()
	res.drain = lastAt.Sub(first)
	q := rebindBench(s.bd.dialect, "SELECT cancel_reason, COUNT(*) FROM oe_order WHERE order_no LIKE 'B%' AND status = ? GROUP BY cancel_reason")
	rows, err := s.bd.QueryContext(ctx, q, int(expiry.StatusCancelled))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var why string
		var n int
		if err := rows.Scan(&why, &n); err != nil {
			return nil, err
		}
		switch cancel.Reason(why) {
		case cancel.ReasonTimeout:
			res.byConsumer += n
		case cancel.ReasonReconcile:
			res.byReconciler += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res.note = fmt.Sprintf("%d sends in %v (%d failed), %d of %d cancelled, last cancel %v after the last deadline; load average after %s",
		o.n, fmtDur(wall), nfailed, o.n-res.missing, o.n, fmtDur(lastAt.Sub(last)), loadAvg())
	return res, nil
}
