// Command soakinstance is one instance of an order service built on the
// library's public API, as a host would wire it: the SQL store, the Redis seat
// store, the cancel service, the RocketMQ timer-mode sender and push consumer
// (one consumer group shared by every instance), and the reconciler running on
// every instance. The soak (internal/soak) and the bench's cluster parts start
// several of them as OS processes, kill them and read what they did.
//
// It serves a small HTTP API on -addr (POST /place, /pay, /cancel with JSON;
// GET /ready) and appends one JSON line per event to -events: every message
// handled or dropped as bad (with the broker, queue and offset it came from),
// every cancel, release, repair, refund and failure. The file is written
// unbuffered, so a SIGKILL loses at most the line being written.
//
// Modes: the default is the whole service; -consumer=false runs no consumer
// (the brokers are down: the reconciler alone); -raw-parts N -raw-part K
// cancels the orders numbered -raw-format of 0 .. -raw-n - 1 whose index is K
// mod N directly through the cancel path and exits: the cancel path's raw rate.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/reconcile"
)

type config struct {
	id, addr, dialect, dsn, redis, ns, namesrv, topic, group, events string
	reconcile                                                        time.Duration
	limit, consumers, workers                                        int
	consumer                                                         bool
	rawFormat                                                        string
	redisDB                                                          int
	rawN, rawPart, rawParts                                          int
}

func main() {
	var c config
	flag.StringVar(&c.id, "id", "i1", "instance id (in every event line)")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:0", "HTTP listen address; the chosen one is printed as 'listening ADDR'")
	flag.StringVar(&c.dialect, "dialect", "mysql", "mysql or postgres")
	flag.StringVar(&c.dsn, "dsn", "", "database DSN")
	flag.StringVar(&c.redis, "redis", "", "Redis host:port")
	flag.StringVar(&c.ns, "ns", "", "redisseat namespace")
	flag.StringVar(&c.namesrv, "namesrv", "", "RocketMQ name server")
	flag.StringVar(&c.topic, "topic", "", "topic (created on every broker beforehand)")
	flag.StringVar(&c.group, "group", "", "consumer group, shared by the instances")
	flag.StringVar(&c.events, "events", "", "file the event lines are appended to")
	flag.DurationVar(&c.reconcile, "reconcile", 5*time.Second, "interval of the reconciler's rounds (0: no reconciler)")
	flag.IntVar(&c.limit, "limit", 6, "seats one user may hold in one show")
	flag.IntVar(&c.consumers, "consumers", 20, "messages handled at once (rocketmq.Config.Consumers)")
	flag.IntVar(&c.workers, "workers", 0, "reconcile.Config.Workers (0: the default), and the raw mode's goroutines")
	flag.BoolVar(&c.consumer, "consumer", true, "run the push consumer")
	flag.StringVar(&c.rawFormat, "raw-format", "B%08d", "raw mode: the order numbers, as a fmt format of their index")
	flag.IntVar(&c.redisDB, "redis-db", 0, "Redis logical database")
	flag.IntVar(&c.rawN, "raw-n", 0, "raw mode: how many orders")
	flag.IntVar(&c.rawPart, "raw-part", 0, "raw mode: this process's part")
	flag.IntVar(&c.rawParts, "raw-parts", 0, "raw mode: the number of parts (0: not raw)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "soakinstance %s: %v\n", c.id, err)
		os.Exit(1)
	}
}

// events appends JSON lines to a file, one write per line.
type events struct {
	id string
	mu sync.Mutex
	f  *os.File
}

// Line is one event line. Fields are set by kind.
type Line struct {
	T      int64  `json:"t"` // unix ms, this host's clock: used for phases and figures only
	I      string `json:"i"`
	K      string `json:"k"`
	O      string `json:"o,omitempty"`
	Out    string `json:"out,omitempty"`
	R      string `json:"r,omitempty"`
	N      int    `json:"n,omitempty"`
	B      string `json:"b,omitempty"`
	Q      int    `json:"q,omitempty"`
	Tp     string `json:"tp,omitempty"` // the queue's topic: the topic, or the group's retry topic (%RETRY%group) for a message handed back
	Off    int64  `json:"off,omitempty"`
	RC     int32  `json:"rc,omitempty"`
	Hop    int    `json:"hop,omitempty"`
	Pay    string `json:"pay,omitempty"`
	Err    string `json:"err,omitempty"`
	PID    int    `json:"pid,omitempty"`
	Extra  string `json:"x,omitempty"`
	Millis int64  `json:"ms,omitempty"`
}

func (e *events) put(l Line) {
	l.T, l.I = time.Now().UnixMilli(), e.id
	b, _ := json.Marshal(l)
	b = append(b, '\n')
	e.mu.Lock()
	_, _ = e.f.Write(b)
	e.mu.Unlock()
}

// Observe records the library's events; a handled or bad message also names
// the queue and offset it came from (client-go puts them in the context).
func (e *events) Observe(ctx context.Context, ev expiry.Event) {
	l := Line{K: ev.Kind.String(), O: ev.OrderNo, R: ev.Reason, N: ev.Seats, Hop: ev.Hop}
	if ev.Err != nil {
		l.Err = ev.Err.Error()
	}
	if ev.Kind == expiry.KindHandled || ev.Kind == expiry.KindBadMessage {
		if mc, ok := primitive.GetConsumerCtx(ctx); ok && mc.MQ != nil {
			l.B, l.Q, l.Tp = mc.MQ.BrokerName, mc.MQ.QueueId, mc.MQ.Topic
			if len(mc.Msgs) == 1 {
				l.Off, l.RC = mc.Msgs[0].QueueOffset, mc.Msgs[0].ReconsumeTimes
			}
		}
	}
	switch ev.Kind {
	case expiry.KindHandled:
		l.Out = ev.Outcome.String()
	case expiry.KindRearmed:
		l.Millis = ev.Delay.Milliseconds()
	}
	e.put(l)
}

// seats is the Redis seat store with every Lock and Release recorded: how
// many seats each call took or gave back, per order and instance, and the
// lock's id (Line.Extra), so that a failed try's release of its own lock is
// told from a release of the lock the order holds.
type seats struct {
	*redisseat.Seats
	ev *events
}

// Lock records the seats a placement or a late payment's reinstatement
// locked: an order whose reinstatement locked its seats again, then failed,
// releases them a second time.
func (s seats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	id, err := s.Seats.Lock(ctx, h, limit)
	if err == nil {
		s.ev.put(Line{K: "lock", O: h.OrderNo, N: len(h.Seats), Extra: id})
	}
	return id, err
}

func (s seats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := s.Seats.Release(ctx, h)
	if err == nil && n > 0 {
		s.ev.put(Line{K: "release", O: h.OrderNo, N: n, Extra: h.LockID})
	}
	return n, err
}

// ReleaseAll records a batch's release per hold, as Release does.
func (s seats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := s.Seats.ReleaseAll(ctx, holds)
	for i, n := range ns {
		if n > 0 {
			s.ev.put(Line{K: "release", O: holds[i].OrderNo, N: n, Extra: holds[i].LockID})
		}
	}
	return ns, err
}

func run(ctx context.Context, c config) error {
	f, err := os.OpenFile(c.events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	ev := &events{id: c.id, f: f}
	ev.put(Line{K: "start", PID: os.Getpid()})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	driver, dialect := "mysql", sqlstore.MySQL
	if c.dialect == "postgres" {
		driver, dialect = "pgx", sqlstore.Postgres
	}
	db, err := sql.Open(driver, c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	store, err := sqlstore.New(db, dialect)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.redis, DB: c.redisDB, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, MaxRetries: 1, PoolSize: 64})
	defer rdb.Close()
	rs, err := redisseat.New(rdb, c.ns)
	if err != nil {
		return err
	}
	st := seats{Seats: rs, ev: ev}
	var sender expiry.DelaySender = noSender{}
	var rc rocketmq.Config
	if c.consumer {
		rc = rocketmq.Config{NameServers: []string{c.namesrv}, Topic: c.topic, Group: c.group + "_p", Mode: rocketmq.ModeTimer,
			Consumers: c.consumers, Runtime: expiry.Runtime{Logger: logger}, SendTimeout: 2 * time.Second}
		s, err := rocketmq.NewSender(rc)
		if err != nil {
			return err
		}
		defer s.Close()
		sender = s
	}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Observer: ev, Logger: logger}})
	if err != nil {
		return err
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: st, Scheduler: sched, Runtime: expiry.Runtime{Observer: ev, Logger: logger},
		OnDiscrepancy: func(ctx context.Context, d cancel.Discrepancy) error {
			ev.put(Line{K: "refund", O: d.OrderNo, Pay: d.PaymentID})
			return nil
		}})
	if err != nil {
		return err
	}
	if c.rawParts > 0 {
		return raw(ctx, c, svc, ev)
	}
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: st, Service: svc, Runtime: expiry.Runtime{Observer: ev, Logger: logger}, Workers: c.workers})
	if err != nil {
		return err
	}
	var consumer *rocketmq.Consumer
	if c.consumer {
		h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: ev, Logger: logger}})
		if err != nil {
			return err
		}
		rc.Group = c.group
		sctx, cancelStart := context.WithTimeout(ctx, 30*time.Second)
		consumer, err = rocketmq.StartConsumer(sctx, rc, expiry.NewShell(h))
		cancelStart()
		if err != nil {
			return err
		}
	}

	var wg sync.WaitGroup
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRec()
	if c.reconcile > 0 {
		wg.Go(func() { // on every instance, as the README asks
			if err := rec.Run(recCtx, c.reconcile); err != nil && recCtx.Err() == nil {
				ev.put(Line{K: "reconciler_stopped", Err: err.Error()})
			}
		})
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /place", func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			No, User, Show string
			Seats          []string
			ExpireMs       int64
		}
		if json.NewDecoder(r.Body).Decode(&p) != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		pl := cancel.Placement{OrderNo: p.No, UserID: p.User, ShowID: p.Show, Seats: p.Seats, ExpireAt: time.UnixMilli(p.ExpireMs), Limit: c.limit}
		err := svc.Place(r.Context(), pl, store.Insert(db, nil))
		answer(w, err)
	})
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		var p struct{ No, Payment string }
		if json.NewDecoder(r.Body).Decode(&p) != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		res, err := svc.Pay(r.Context(), cancel.Payment{OrderNo: p.No, PaymentID: p.Payment})
		if err == nil {
			ev.put(Line{K: "pay_ok", O: p.No, Pay: res.PaymentID})
		}
		answer(w, err)
	})
	mux.HandleFunc("POST /cancel", func(w http.ResponseWriter, r *http.Request) {
		var p struct{ No, User string }
		if json.NewDecoder(r.Body).Decode(&p) != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		res, err := svc.UserCancel(r.Context(), p.No, p.User)
		if err == nil && res.Order.Status == expiry.StatusPaid {
			err = errors.New("paid")
		}
		answer(w, err)
	})
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ev.put(Line{K: "ready", Extra: ln.Addr().String()})
	<-ctx.Done()
	sctx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	_ = srv.Shutdown(sctx)
	stopRec()
	wg.Wait()
	if consumer != nil {
		_ = consumer.Close(sctx)
	}
	ev.put(Line{K: "stop"})
	return nil
}

// answer maps the library's sentinels to statuses the load generator reads.
func answer(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, cancel.ErrOrderExists):
		http.Error(w, "exists", http.StatusConflict)
	case errors.Is(err, cancel.ErrSeatUnavailable):
		http.Error(w, "seat", 460)
	case errors.Is(err, cancel.ErrLimitExceeded):
		http.Error(w, "limit", 461)
	case errors.Is(err, cancel.ErrDiscrepancy):
		http.Error(w, "discrepancy", 462)
	case errors.Is(err, expiry.ErrInvalidID):
		http.Error(w, "invalid", http.StatusBadRequest)
	case errors.Is(err, cancel.ErrNotOwner), errors.Is(err, expiry.ErrNotFound):
		http.Error(w, "not found", http.StatusNotFound)
	case err.Error() == "paid":
		http.Error(w, "paid", 463)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// noSender is the sender of an instance without a consumer (the brokers are
// down): every send fails, as it would, and the reconciler takes the order.
type noSender struct{}

func (noSender) Send(context.Context, expiry.Message, time.Duration) error {
	return errors.New("soakinstance: no broker")
}

// raw cancels this process's part of an equal backlog through the cancel
// path itself (Service.Cancel, as the reconciler calls it), with -workers
// goroutines, and prints the elapsed time.
func raw(ctx context.Context, c config, svc *cancel.Service, ev *events) error {
	workers := max(c.workers, 1)
	var next atomic.Int64
	next.Store(int64(c.rawPart))
	t0 := time.Now()
	var wg sync.WaitGroup
	var fails atomic.Int64
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(int64(c.rawParts)) - int64(c.rawParts)
				if i >= int64(c.rawN) {
					return
				}
				no := fmt.Sprintf(c.rawFormat, i)
				if _, err := svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonReconcile, OnlyIfDue: true}); err != nil {
					fails.Add(1)
				}
			}
		})
	}
	wg.Wait()
	ev.put(Line{K: "raw_done", Millis: time.Since(t0).Milliseconds(), N: int(fails.Load())})
	fmt.Printf("raw %d ms, %d failed\n", time.Since(t0).Milliseconds(), fails.Load())
	return nil
}
