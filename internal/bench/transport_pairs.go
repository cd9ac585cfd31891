package main

// Each transport of part 8 as a pair: the library's adapter and the
// transport's own client doing the same work by hand.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // "sqlite" database/sql driver, for River on SQLite

	"github.com/seatflow/orderexpiry/expiry"
	oeasynq "github.com/seatflow/orderexpiry/expiry/asynq"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// ---- RocketMQ, timer mode ----

const rmqTimerDelay = "TIMER_DELAY_MS" // the broker's relative timer property

func (c *common) rocketmqPair(ctx context.Context, consumers int) (p *trPair, err error) {
	p = &trPair{name: "RocketMQ 5.x, timer mode", needs: "a RocketMQ 5 broker (name server + broker, `timerWheelEnable`)"}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// ours
	cfg, drop, err := c.rmqTopic(ctx, "tr_ours")
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, drop)
	cfg.Mode, cfg.Consumers = rocketmq.ModeTimer, consumers
	sender, err := rocketmq.NewSender(cfg)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() { _ = sender.Close() })
	rec := newArrivals()
	ours, shell, err := c.oursSide(sender, rec)
	if err != nil {
		return p, err
	}
	ours.desc = "`rocketmq.Sender` (ModeTimer) + `rocketmq.Consumer` → Shell → Handler → cancel.Service"
	cons, err := rmqConsumer(cfg, shell)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() { closeConsumer(cons) })
	p.ours = ours

	// raw: client-go's producer and push consumer, configured as ours.
	rcfg, rdrop, err := c.rmqTopic(ctx, "tr_raw")
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, rdrop)
	ns := primitive.NewPassthroughResolver(rcfg.NameServers)
	prod, err := rmq.NewProducer(rmqproducer.WithNsResolver(ns), rmqproducer.WithGroupName(rcfg.Group),
		rmqproducer.WithInstanceName(fmt.Sprintf("oebench-raw-p-%d", os.Getpid())),
		rmqproducer.WithSendMsgTimeout(3*time.Second), rmqproducer.WithRetry(1))
	if err != nil {
		return p, err
	}
	if err := prod.Start(); err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() { _ = prod.Shutdown() })
	rrec := newArrivals()
	pc, err := rawRMQConsumer(rcfg.NameServers, rcfg.Topic, rcfg.Group, consumers, rrec)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() { _ = pc.Shutdown() })
	p.raw = &trVariant{rec: rrec, desc: "client-go `Producer.SendSync` with `TIMER_DELAY_MS` + `PushConsumer`",
		send: func(ctx context.Context, no string, due time.Time) error {
			msg := primitive.NewMessage(rcfg.Topic, []byte(no)).WithKeys([]string{no})
			if d := time.Until(due).Milliseconds(); d > 0 {
				msg.WithProperty(rmqTimerDelay, strconv.FormatInt(d, 10))
			}
			res, err := prod.SendSync(ctx, msg)
			if err == nil && res.Status != primitive.SendOK {
				err = fmt.Errorf("send status %d", res.Status)
			}
			return err
		}}
	return p, nil
}

// rawRMQConsumer starts a push consumer that records each body, retrying
// while the new topic's route propagates.
func rawRMQConsumer(ns []string, topic, group string, consumers int, rec *arrivals) (rmq.PushConsumer, error) {
	deadline := time.Now().Add(40 * time.Second)
	for i := 0; ; i++ {
		pc, err := rmq.NewPushConsumer(
			rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
			rmqconsumer.WithGroupName(group),
			rmqconsumer.WithInstance(fmt.Sprintf("oebench-raw-c-%d-%d", os.Getpid(), i)),
			rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
			rmqconsumer.WithConsumeGoroutineNums(consumers),
			rmqconsumer.WithConsumeMessageBatchMaxSize(1),
		)
		if err != nil {
			return nil, err
		}
		err = pc.Subscribe(topic, rmqconsumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			for _, m := range msgs {
				rec.hit(string(m.Body))
			}
			return rmqconsumer.ConsumeSuccess, nil
		})
		if err != nil {
			return nil, err
		}
		if err = pc.Start(); err == nil {
			return pc, nil
		}
		_ = pc.Shutdown()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("raw consumer did not start: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---- asynq ----

func (c *common) asynqPair(ctx context.Context, consumers int) (p *trPair, err error) {
	p = &trPair{name: "asynq v0.26.0", needs: "Redis (one server or a Cluster), `noeviction`; AOF to survive a Redis restart"}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	const idx = 3
	rdb, rclose, err := c.redisClient(ctx, idx, 2*consumers+16)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, rclose)
	opt := asynq.RedisClientOpt{Addr: c.redisAddr, DB: c.redisDB + idx, PoolSize: consumers + 8}
	client := asynq.NewClientFromRedisClient(rdb)

	// ours: the package's defaults but the queue and the concurrency.
	cfg := oeasynq.Config{Queue: "oebench_tr_ours", Concurrency: consumers, Runtime: expiry.Runtime{Logger: quietLogger(c)}}
	sender, err := oeasynq.NewSender(client, cfg)
	if err != nil {
		return p, err
	}
	rec := newArrivals()
	ours, shell, err := c.oursSide(sender, rec)
	if err != nil {
		return p, err
	}
	ours.desc = fmt.Sprintf("`asynq.Sender` + `asynq.Consumer` (ForwardInterval %v, TaskCheckInterval %v) → Shell → Handler → cancel.Service", oeasynq.DefaultForwardInterval, oeasynq.DefaultTaskCheckInterval)
	cons, err := oeasynq.StartConsumer(opt, cfg, shell)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cons.Close(ctx)
	})
	p.ours = ours

	// raw: Enqueue with ProcessIn, a server with the same intervals.
	const rawQueue, rawType = "oebench_tr_raw", "oebench:raw"
	rrec := newArrivals()
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: consumers, Queues: map[string]int{rawQueue: 1},
		DelayedTaskCheckInterval: oeasynq.DefaultForwardInterval, TaskCheckInterval: oeasynq.DefaultTaskCheckInterval, LogLevel: asynq.ErrorLevel})
	if err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		rrec.hit(string(t.Payload()))
		return nil
	})); err != nil {
		return p, err
	}
	p.stop = append(p.stop, srv.Shutdown)
	p.raw = &trVariant{rec: rrec, desc: "`Client.Enqueue` with `ProcessIn` + `Server` with the same intervals",
		send: func(ctx context.Context, no string, due time.Time) error {
			opts := []asynq.Option{asynq.Queue(rawQueue), asynq.MaxRetry(oeasynq.DefaultMaxRetry)}
			if d := time.Until(due); d > 0 {
				opts = append(opts, asynq.ProcessIn(d))
			}
			_, err := client.EnqueueContext(ctx, asynq.NewTask(rawType, []byte(no)), opts...)
			return err
		}}
	return p, nil
}

// ---- River ----

// rawJob is the raw River side's job: the order number.
type rawJob struct {
	No string `json:"no"`
}

func (rawJob) Kind() string { return "oebench_raw" }

type rawJobWorker struct {
	river.WorkerDefaults[rawJob]
	rec *arrivals
}

func (w *rawJobWorker) Work(_ context.Context, j *river.Job[rawJob]) error {
	w.rec.hit(j.Args.No)
	return nil
}

// riverDB opens one fresh database for one side of the River pair (a
// PostgreSQL schema of the bench's own, or a SQLite file in dir), with
// River's tables.
func (c *common) riverDB(ctx context.Context, backend, side, dir string, conns int) (riverdriver.Driver[*sql.Tx], func(), error) {
	var db *sql.DB
	var drop func()
	switch backend {
	case "postgres":
		bd, err := c.openDB(ctx, engPG, "river_"+side, conns)
		if err != nil {
			return nil, nil, err
		}
		db, drop = bd.DB, bd.drop
	case "sqlite":
		var err error
		db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, side+".db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(1) // SQLite's one writer; River's goroutines share it
		drop = func() { _ = db.Close() }
	}
	var d riverdriver.Driver[*sql.Tx]
	if backend == "postgres" {
		d = riverdatabasesql.New(db)
	} else {
		d = riversqlite.New(db)
	}
	m, err := rivermigrate.New(d, &rivermigrate.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("river migrate (%s): %w", backend, err)
	}
	return d, drop, nil
}

func (c *common) riverPair(ctx context.Context, backend string, consumers int, poll time.Duration) (p *trPair, err error) {
	p = &trPair{name: "River v0.51.2, PostgreSQL (riverdatabasesql)", needs: "PostgreSQL (the order's database); River's tables, migrated by the host"}
	if backend == "sqlite" {
		p.name = "River v0.51.2, SQLite (riversqlite)"
		p.needs = "nothing but a file (SQLite, one connection); River's tables, migrated by the host"
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	dir, err := os.MkdirTemp("", "oebench-river-")
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, func() { _ = os.RemoveAll(dir) })
	client := func(d riverdriver.Driver[*sql.Tx], workers *river.Workers, queue string) (*river.Client[*sql.Tx], error) {
		cl, err := river.NewClient(d, &river.Config{Workers: workers, Logger: quietLogger(c),
			Queues: map[string]river.QueueConfig{queue: {MaxWorkers: consumers}}, FetchPollInterval: poll})
		if err != nil {
			return nil, err
		}
		if err := cl.Start(ctx); err != nil {
			return nil, err
		}
		p.stop = append(p.stop, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = cl.Stop(ctx)
		})
		return cl, nil
	}

	// ours
	d, drop, err := c.riverDB(ctx, backend, "ours", dir, consumers+8)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, drop)
	worker := oeriver.NewWorker(nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	cl, err := client(d, workers, oeriver.QueueDefault)
	if err != nil {
		return p, err
	}
	sender, err := oeriver.NewSender(cl, oeriver.Config{})
	if err != nil {
		return p, err
	}
	rec := newArrivals()
	ours, shell, err := c.oursSide(sender, rec)
	if err != nil {
		return p, err
	}
	worker.Attach(shell)
	ours.desc = "`river.Sender` (`Client.Insert`, ScheduledAt) + `river.Worker` → Shell → Handler → cancel.Service"
	p.ours = ours

	// raw: Insert with ScheduledAt, a worker of its own.
	rd, rdrop, err := c.riverDB(ctx, backend, "raw", dir, consumers+8)
	if err != nil {
		return p, err
	}
	p.stop = append(p.stop, rdrop)
	rrec := newArrivals()
	rworkers := river.NewWorkers()
	river.AddWorker(rworkers, &rawJobWorker{rec: rrec})
	const rawQueue = "oebench_raw"
	rcl, err := client(rd, rworkers, rawQueue)
	if err != nil {
		return p, err
	}
	p.raw = &trVariant{rec: rrec, desc: "`Client.Insert` with `ScheduledAt` + a `river.Worker`",
		send: func(ctx context.Context, no string, due time.Time) error {
			_, err := rcl.Insert(ctx, rawJob{No: no}, &river.InsertOpts{Queue: rawQueue, ScheduledAt: due})
			return err
		}}
	return p, nil
}

func quietLogger(c *common) *slog.Logger {
	if c.verbose {
		return c.log
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
