package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// asynqSender is an expiry.DelaySender on asynq: the body travels as the
// task payload, the delay as asynq.ProcessIn. It lets asynq drive the very
// same Handler (lookup, re-arm, cancel) as the library's own transports.
type asynqSender struct {
	client *asynq.Client
	queue  string
}

const asynqTaskType = "oe:expire"

func (s *asynqSender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	body, err := expiry.EncodeMessage(m)
	if err != nil {
		return err
	}
	_, err = s.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, body), asynq.ProcessIn(max(delay, 0)), asynq.Queue(s.queue), asynq.MaxRetry(25))
	return err
}

// cancelClock records when each order was cancelled.
type cancelClock struct {
	mu   sync.Mutex
	at   map[string]time.Time
	done chan struct{}
	want int
	bad  int
}

func (c *cancelClock) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindCancelled:
		now := time.Now()
		c.mu.Lock()
		c.at[e.OrderNo] = now
		if len(c.at) == c.want {
			close(c.done)
		}
		c.mu.Unlock()
	case expiry.KindSendFailed, expiry.KindReleaseFailed, expiry.KindBadMessage:
		c.mu.Lock()
		c.bad++
		c.mu.Unlock()
	}
}

type transportRun struct {
	name      string
	sched     time.Duration // wall time to schedule all orders
	late      []time.Duration
	cancelled int
	cpu       []time.Duration
	cpuNames  []string
	note      string
}

func runAsynq(c *common, args []string) error {
	fs := flag.NewFlagSet("asynq", flag.ContinueOnError)
	dbF := fs.String("db", "mysql", "database of the cancel path")
	n := fs.Int("n", 1500, "orders per transport")
	emin := fs.Duration("expiry-min", 5*time.Second, "shortest expiry")
	emax := fs.Duration("expiry-max", 15*time.Second, "longest expiry (expiries are uniform in [min, max], the same list for every transport)")
	schedConc := fs.Int("sched-conc", 8, "goroutines placing orders (scheduling their messages)")
	consumers := fs.Int("consumers", 20, "consumer concurrency (RocketMQ consumer goroutines, asynq Concurrency)")
	transportsF := fs.String("transports", "auto", "comma list of inproc, rocketmq, asynq, asynq-tuned (auto: all, rocketmq only if the broker answers)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbF)
	if err != nil || len(engines) != 1 {
		return fmt.Errorf("-db: one database: %v", err)
	}
	engine := engines[0]
	transports := strings.Split(*transportsF, ",")
	rmqUp := brokerUp(c.namesrv, c.broker)
	if *transportsF == "auto" {
		transports = []string{"inproc", "asynq", "asynq-tuned"}
		if rmqUp {
			transports = []string{"inproc", "rocketmq", "asynq", "asynq-tuned"}
		}
	}
	r := rand.New(rand.NewPCG(uint64(c.seed), 42))
	expiries := make([]time.Duration, *n)
	for i := range expiries {
		expiries[i] = *emin + time.Duration(r.Int64N(int64(*emax-*emin)+1))
	}
	fmt.Printf("%d orders per transport, expiries uniform in [%v, %v] (the same seeded list for each), 2 seats each locked in Redis, cancel path on %s. "+
		"Orders are inserted first; then %d goroutines call `expiry.Scheduler.Schedule` for each (the after-commit send), which is timed as the scheduling rate. "+
		"Every transport delivers to the same `expiry.Shell` → `Handler` → `cancel.Service` → `sqlstore` → `redisseat` (asynq through a 15-line `expiry.DelaySender` + `asynq.HandlerFunc` adapter in `asynqcmp.go`), with %d consumers. "+
		"Lateness = time the cancel committed (Observer event) − expire_at. "+
		"CPU = user+system time from the first send to the last cancel, of this process (getrusage) and of each server process (/proc/<pid>/stat, found by its port), divided by the orders; "+
		"server processes are shared with other users of this machine, so their columns include whatever else hit them meanwhile.\n\n",
		*n, *emin, *emax, engineName(engine), *schedConc, *consumers)
	if !rmqUp {
		fmt.Printf("RocketMQ broker not reachable: the library is measured with its in-process sender only (`expiry/inproc`, timers in memory, no broker), which is a lower bound, not a transport.\n\n")
	}

	ctx := context.Background()
	bd, err := c.openDB(ctx, engine, "asynq", *consumers+8)
	if err != nil {
		return err
	}
	defer bd.drop()
	rdb, rclose, err := c.redisClient(ctx, 3, *consumers+*schedConc+8)
	if err != nil {
		return err
	}
	defer rclose()
	store, err := sqlstore.New(bd.DB, bd.dialect)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	seats := newSeats(rdb)

	servers := map[string]string{"Redis": c.redisAddr}
	if engine == engMySQL {
		servers["MariaDB"] = dsnAddr(c.mysqlDSN, "127.0.0.1:13306")
	} else {
		servers["PostgreSQL"] = "127.0.0.1:" + fmt.Sprint(pgPort(c.pgDSN))
	}
	var results []*transportRun
	for ti, tr := range transports {
		srv := servers
		if tr == "rocketmq" {
			srv = map[string]string{"RocketMQ broker": c.broker, "RocketMQ name server": c.namesrv}
			for k, v := range servers {
				srv[k] = v
			}
		}
		res, err := c.transportRun(ctx, tr, ti, bd, store, seats, rdb, expiries, *schedConc, *consumers, c.newCPUMeter(srv))
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		results = append(results, res)
	}

	t := newTable("transport", "scheduled/s", "cancelled", "late p50", "late p99", "late max", "CPU µs/order: bench process", "Redis", "DB", "broker + name server")
	base := map[string]float64{}
	for _, res := range results {
		cpu := map[string]time.Duration{}
		for i, name := range res.cpuNames {
			cpu[name] = res.cpu[i]
		}
		per := func(d time.Duration) string {
			return fmt.Sprintf("%.0f", float64(d.Microseconds())/float64(len(expiries)))
		}
		db := cpu["MariaDB"] + cpu["PostgreSQL"]
		broker := "—"
		if res.name == "rocketmq (timer mode)" {
			broker = per(cpu["RocketMQ broker"] + cpu["RocketMQ name server"])
		}
		rate := float64(len(expiries)) / res.sched.Seconds()
		base[res.name] = rate
		t.add(res.name, fmt.Sprintf("%.0f", rate), fmt.Sprintf("%d/%d", res.cancelled, len(expiries)), pct(res.late, 50), pct(res.late, 99), maxDur(res.late),
			per(cpu["bench process"]), per(cpu["Redis"]), per(db), broker)
	}
	t.print(os.Stdout)
	for _, res := range results {
		if res.note != "" {
			fmt.Printf("\n- %s: %s", res.name, res.note)
		}
	}
	fmt.Println()
	return nil
}

func (c *common) transportRun(ctx context.Context, tr string, idx int, bd *benchDB, store *sqlstore.Store, seats *redisseat.Seats, rdb *redis.Client, expiries []time.Duration, schedConc, consumers int, meter *cpuMeter) (*transportRun, error) {
	res := &transportRun{name: tr, cpuNames: meter.names}
	clock := &cancelClock{at: map[string]time.Time{}, done: make(chan struct{}), want: len(expiries)}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: clock, Logger: c.log}})
	if err != nil {
		return nil, err
	}
	var sender expiry.DelaySender
	var stop []func()
	defer func() {
		for i := len(stop) - 1; i >= 0; i-- {
			stop[i]()
		}
	}()
	var start func(shell *expiry.Shell) error
	switch tr {
	case "inproc":
		res.name = "library, in-process sender (no broker)"
		s := inproc.New(inproc.Config{})
		sender = s
		stop = append(stop, func() { _ = s.Close() })
		start = func(shell *expiry.Shell) error { s.Attach(shell); return nil }
	case "rocketmq":
		res.name = "rocketmq (timer mode)"
		cfg, drop, err := c.rmqTopic(ctx, "cmp")
		if err != nil {
			return nil, err
		}
		stop = append(stop, drop)
		cfg.Mode, cfg.Consumers = rocketmq.ModeTimer, consumers
		s, err := rocketmq.NewSender(cfg)
		if err != nil {
			return nil, err
		}
		stop = append(stop, func() { _ = s.Close() })
		sender = s
		start = func(shell *expiry.Shell) error {
			cons, err := rmqConsumer(cfg, shell)
			if err != nil {
				return err
			}
			stop = append(stop, func() { closeConsumer(cons) })
			return nil
		}
	case "asynq", "asynq-tuned":
		queue := "oebench" + fmt.Sprint(idx)
		client := asynq.NewClientFromRedisClient(rdb)
		sender = &asynqSender{client: client, queue: queue}
		cfg := asynq.Config{Concurrency: consumers, Queues: map[string]int{queue: 1}, LogLevel: asynq.WarnLevel}
		res.name = "asynq (defaults: DelayedTaskCheckInterval 5s, TaskCheckInterval 1s)"
		if tr == "asynq-tuned" {
			cfg.DelayedTaskCheckInterval, cfg.TaskCheckInterval = time.Second, 100*time.Millisecond
			res.name = "asynq (DelayedTaskCheckInterval 1s, TaskCheckInterval 100ms)"
		}
		start = func(shell *expiry.Shell) error {
			srv := asynq.NewServerFromRedisClient(rdb, cfg)
			err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
				if shell.Process(ctx, expiry.Delivery{Body: t.Payload()}) == expiry.Retry {
					return errors.New("transient failure; asynq retries")
				}
				return nil
			}))
			if err != nil {
				return err
			}
			stop = append(stop, srv.Shutdown)
			return nil
		}
	default:
		return nil, fmt.Errorf("unknown transport %q", tr)
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: clock, Logger: c.log}})
	if err != nil {
		return nil, err
	}
	shell := expiry.NewShell(h)
	if err := start(shell); err != nil {
		return nil, err
	}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Observer: clock, Logger: c.log}})
	if err != nil {
		return nil, err
	}

	// Insert the orders (due relative to t0), lock their seats, then schedule.
	t0 := time.Now().Add(500 * time.Millisecond)
	rows := make([]orderRow, len(expiries))
	holds := make([]cancel.Hold, len(expiries))
	for i, e := range expiries {
		no := fmt.Sprintf("A%d-%06d", idx, i)
		rows[i] = orderRow{no: no, user: fmt.Sprintf("u%d", i%500), show: fmt.Sprintf("cmp%d-%d", idx, i%10), status: expiry.StatusPending,
			expireMS: t0.Add(e).UnixMilli(), seats: []string{no + "-a", no + "-b"}}
		holds[i] = rows[i].hold()
	}
	if err := bulkLoad(ctx, bd, len(rows), func(i int) orderRow { return rows[i] }); err != nil {
		return nil, err
	}
	if err := lockAll(ctx, seats, holds, 16); err != nil {
		return nil, err
	}
	time.Sleep(time.Until(t0))
	cpu0 := meter.sample()
	wall, failed, err := runWorkers(schedConc, len(rows), func(i int) error {
		if !sched.Schedule(ctx, rows[i].no, time.UnixMilli(rows[i].expireMS)) {
			return errors.New("send failed")
		}
		return nil
	})
	res.sched = wall
	if err != nil {
		return nil, fmt.Errorf("%d sends failed: %w", failed, err)
	}
	var longest time.Duration
	for _, e := range expiries {
		longest = max(longest, e)
	}
	select {
	case <-clock.done:
	case <-time.After(time.Until(t0.Add(longest + 60*time.Second))):
	}
	res.cpu = sub(meter.sample(), cpu0)
	clock.mu.Lock()
	for _, r := range rows {
		if at, ok := clock.at[r.no]; ok {
			res.late = append(res.late, at.Sub(time.UnixMilli(r.expireMS)))
		}
	}
	res.cancelled = len(res.late)
	if clock.bad > 0 {
		res.note = fmt.Sprintf("%d failure events (send, release or bad message)", clock.bad)
	}
	clock.mu.Unlock()
	return res, nil
}

func dsnAddr(dsn, def string) string {
	i := strings.Index(dsn, "tcp(")
	if i < 0 {
		return def
	}
	rest := dsn[i+4:]
	j := strings.IndexByte(rest, ')')
	if j < 0 {
		return def
	}
	return rest[:j]
}

func pgPort(dsn string) int {
	i := strings.LastIndex(dsn, "@")
	if i < 0 {
		return 5432
	}
	host := dsn[i+1:]
	if j := strings.IndexAny(host, "/?"); j >= 0 {
		host = host[:j]
	}
	if p := portOf(host); p != 0 {
		return p
	}
	return 5432
}
