// Package asynq is the asynq transport of orderexpiry, on
// github.com/hibiken/asynq and the Redis the host already runs (a single
// server, or a Redis Cluster through asynq.RedisClusterClientOpt): a Sender
// (expiry.DelaySender) on an *asynq.Client and a Consumer on an
// *asynq.Server that feeds an *expiry.Shell.
//
// It is a module of its own, so a host that does not import it has no asynq
// in its module graph.
//
// Each message is one asynq task of type Config.TaskType in queue
// Config.Queue. Its payload is expiry's versioned encoding
// (expiry.EncodeMessage); the trace id travels in the task header "oe_trace"
// and the W3C trace context (expiry.Trace) in the headers "traceparent" and
// "tracestate", the names expiry/rocketmq gives its properties.
//
// Precision: asynq keeps a scheduled task's due time in whole seconds and
// moves due tasks to the queue by polling, so the Sender rounds every due
// time up to the next whole second (a task is never delivered before it was
// due, as long as the clocks of the sending and the consuming hosts agree)
// and a task arrives up to about one second plus Config.ForwardInterval plus
// Config.TaskCheckInterval late. See README.md for what the tests measured.
//
// Verdicts map onto asynq's semantics: expiry.Ack is success; expiry.Retry
// (a transient failure, the database is down) is an error, so asynq retries
// the task after Config.RetryDelay, up to Config.MaxRetry times, and then
// archives it (the reconciler cancels the order); a task that is not ours
// (another task type, or a payload expiry.DecodeMessage refuses) is counted
// and dropped with asynq.SkipRetry, so it is archived at once and never
// retried (invariant I7).
//
// # Names
//
//   - Sender, NewSender, Consumer, NewConsumer, StartConsumer (NewConsumer
//     then Start), Config: the transport and its wiring;
//   - DefaultTaskType, DefaultQueue, DefaultSendTimeout, DefaultMaxRetry,
//     DefaultTaskTimeout, DefaultConcurrency, DefaultForwardInterval,
//     DefaultTaskCheckInterval, DefaultShutdownTimeout, DefaultRetryDelay,
//     DefaultMaxRetryDelay, MaxNameLen: Config's defaults and bounds, exported
//     so a host can see and derive from them;
//   - TraceHeader, TraceParentHeader, TraceStateHeader: the task headers that
//     carry the trace context, for a host that reads tasks with its own tools;
//   - DueAt: when asynq will hand a task over (whole seconds), for a host that
//     checks a schedule; ErrPoison: the error of a task dropped as not ours.
package asynq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	aq "github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/expiry"
)

// Defaults a zero field of Config gets.
const (
	DefaultTaskType          = "orderexpiry:expire"
	DefaultQueue             = "orderexpiry"
	DefaultSendTimeout       = 3 * time.Second
	DefaultMaxRetry          = 25
	DefaultTaskTimeout       = time.Minute
	DefaultConcurrency       = 20
	DefaultForwardInterval   = time.Second
	DefaultTaskCheckInterval = 500 * time.Millisecond
	DefaultShutdownTimeout   = 8 * time.Second
	DefaultRetryDelay        = time.Second
	DefaultMaxRetryDelay     = time.Minute
)

// MaxNameLen bounds Config.TaskType and Config.Queue.
const MaxNameLen = 64

// The task headers that carry a message's trace id and W3C trace context.
// The Sender sets the trace context only when it passes expiry.Trace.Clean;
// the Consumer hands whatever a producer put there to the Processor, whose
// Shell bounds it again.
const (
	TraceHeader       = "oe_trace"
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// ErrPoison is wrapped, with asynq.SkipRetry, by the error the Consumer
// returns for a task it drops: one of another type, or whose payload is not
// an orderexpiry message.
var ErrPoison = errors.New("expiry/asynq: poison task")

// errInterrupted is what the Consumer returns for a task whose handling was
// cut short by the server's shutdown: asynq retries it without counting it
// as a failure (see isFailure).
var errInterrupted = errors.New("expiry/asynq: handling interrupted by shutdown")

// Config configures a Sender or a Consumer. Give both the same TaskType and
// Queue. Zero fields get the defaults above; negative durations and counts
// are refused.
type Config struct {
	// TaskType is the asynq task type of expiry messages; "":
	// DefaultTaskType. 1..MaxNameLen bytes of letters, digits and "_-.:".
	TaskType string
	// Queue is the asynq queue the tasks go to and the Consumer reads; "":
	// DefaultQueue. The same characters as TaskType. On a Redis Cluster all
	// of a queue's keys share one hash slot, so one queue lives on one
	// master.
	Queue string
	// SendTimeout bounds one enqueue (Sender) and the ping of Start
	// (Consumer); 0: DefaultSendTimeout.
	SendTimeout time.Duration
	// MaxRetry is how many times a task whose handling failed transiently
	// is tried again before asynq archives it (Sender: it is stored with
	// the task); 0: DefaultMaxRetry.
	MaxRetry int
	// TaskTimeout bounds the handling of one task, after which asynq
	// cancels its context and retries it (Sender: stored with the task);
	// 0: DefaultTaskTimeout.
	TaskTimeout time.Duration
	// Concurrency is how many tasks the Consumer handles at once; 0:
	// DefaultConcurrency.
	Concurrency int
	// ForwardInterval is how often the Consumer's server moves due tasks to
	// the queue (asynq's DelayedTaskCheckInterval, whose own default is 5
	// s); 0: DefaultForwardInterval.
	ForwardInterval time.Duration
	// TaskCheckInterval is how long an idle worker waits before it looks
	// at the queue again (asynq sleeps between half and one and a half of
	// it); 0: DefaultTaskCheckInterval. Lower is more precise and costs a
	// Redis script per idle worker slot and interval.
	TaskCheckInterval time.Duration
	// ShutdownTimeout is how long Close lets tasks in progress finish once
	// the server shuts down, before their contexts are cancelled and the
	// tasks go back to the queue; 0: DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// RetryDelay is the wait before the first retry of a failed task,
	// doubled at each retry up to MaxRetryDelay; 0: DefaultRetryDelay and
	// DefaultMaxRetryDelay.
	RetryDelay, MaxRetryDelay time.Duration
	// Runtime: the Logger receives this package's logs and asynq's (its
	// errors and warnings as such, the rest at debug); the Observer gets a
	// KindSent event for every task Redis accepted (Sender) and a
	// KindBadMessage event for every task of another type (Consumer; a
	// payload that is not ours is the Shell's to count).
	expiry.Runtime
}

// check validates c and fills in the defaults.
func (c *Config) check() error {
	if c.TaskType == "" {
		c.TaskType = DefaultTaskType
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if err := checkName("TaskType", c.TaskType); err != nil {
		return err
	}
	if err := checkName("Queue", c.Queue); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"SendTimeout", &c.SendTimeout, DefaultSendTimeout},
		{"TaskTimeout", &c.TaskTimeout, DefaultTaskTimeout},
		{"ForwardInterval", &c.ForwardInterval, DefaultForwardInterval},
		{"TaskCheckInterval", &c.TaskCheckInterval, DefaultTaskCheckInterval},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout},
		{"RetryDelay", &c.RetryDelay, DefaultRetryDelay},
		{"MaxRetryDelay", &c.MaxRetryDelay, DefaultMaxRetryDelay},
	} {
		switch {
		case *d.v < 0:
			return fmt.Errorf("expiry/asynq: Config.%s is negative (%v)", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	// asynq stores a task's timeout in whole seconds; less would be none.
	if c.TaskTimeout < time.Second {
		return fmt.Errorf("expiry/asynq: Config.TaskTimeout %v is under a second, asynq's unit", c.TaskTimeout)
	}
	if c.MaxRetryDelay < c.RetryDelay {
		return fmt.Errorf("expiry/asynq: Config.MaxRetryDelay %v is shorter than RetryDelay %v", c.MaxRetryDelay, c.RetryDelay)
	}
	switch {
	case c.MaxRetry < 0:
		return fmt.Errorf("expiry/asynq: Config.MaxRetry is negative (%d)", c.MaxRetry)
	case c.MaxRetry == 0:
		c.MaxRetry = DefaultMaxRetry
	}
	switch {
	case c.Concurrency < 0:
		return fmt.Errorf("expiry/asynq: Config.Concurrency is negative (%d)", c.Concurrency)
	case c.Concurrency == 0:
		c.Concurrency = DefaultConcurrency
	}
	c.Runtime = c.Runtime.WithDefaults()
	return nil
}

// checkName refuses what asynq would silently mishandle: its server ignores
// a blank queue name and reads the "default" queue instead, and a brace
// would break the {queue} hash tag that keeps a queue's keys in one slot of
// a Redis Cluster.
func checkName(field, s string) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("expiry/asynq: Config.%s is %d bytes, longer than %d", field, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-' || b == '.' || b == ':') {
			return fmt.Errorf("expiry/asynq: Config.%s %q has %q; use letters, digits and _-.:", field, s, b)
		}
	}
	return nil
}

// Sender sends delayed expiry messages as asynq tasks. Safe for concurrent
// use.
type Sender struct {
	cfg    Config
	client *aq.Client
}

// NewSender returns a Sender on client, which stays the caller's: close it
// after the last Send. It does not contact Redis; a Send that cannot reach it
// fails.
func NewSender(client *aq.Client, cfg Config) (*Sender, error) {
	if client == nil {
		return nil, errors.New("expiry/asynq: nil *asynq.Client")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Sender{cfg: cfg, client: client}, nil
}

// DueAt returns when a message sent at now with delay is processed: now plus
// delay rounded up to a whole second, since asynq stores scheduled tasks
// with whole-second due times and forwards a task once its second has
// begun; a delay of zero or less is due at once (now).
func DueAt(now time.Time, delay time.Duration) time.Time {
	if delay <= 0 {
		return now
	}
	due := now.Add(delay)
	at := due.Truncate(time.Second)
	if at.Before(due) {
		at = at.Add(time.Second)
	}
	return at
}

// Send implements expiry.DelaySender: it enqueues one task due at
// DueAt(now, delay).
func (s *Sender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	body, err := expiry.EncodeMessage(m)
	if err != nil {
		return fmt.Errorf("expiry/asynq: send: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("expiry/asynq: send %s: %w", m.OrderNo, err)
	}
	var headers map[string]string
	if m.TraceID != "" {
		headers = map[string]string{TraceHeader: m.TraceID}
	}
	if tc := m.Trace.Clean(); tc.Parent != "" {
		if headers == nil {
			headers = make(map[string]string, 2)
		}
		headers[TraceParentHeader] = tc.Parent
		if tc.State != "" {
			headers[TraceStateHeader] = tc.State
		}
	}
	opts := []aq.Option{aq.Queue(s.cfg.Queue), aq.MaxRetry(s.cfg.MaxRetry), aq.Timeout(s.cfg.TaskTimeout)}
	// asynq compares due times with the wall clock of its servers, so the
	// due time is taken from the wall clock too, not from Runtime.Clock.
	now := time.Now()
	at := DueAt(now, delay)
	if at.After(now) {
		opts = append(opts, aq.ProcessAt(at))
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	if _, err := s.client.EnqueueContext(ctx, aq.NewTaskWithHeaders(s.cfg.TaskType, body, headers), opts...); err != nil {
		return fmt.Errorf("expiry/asynq: send %s: %w", m.OrderNo, err)
	}
	s.cfg.Observer.Observe(ctx, expiry.Event{Kind: expiry.KindSent, OrderNo: m.OrderNo, Hop: m.Hop, Delay: at.Sub(now)})
	return nil
}

// Consumer runs an asynq server on Config.Queue that hands every task to a
// expiry.Processor. It is also an asynq.Handler (ProcessTask), for a host that
// would rather mount it on a server of its own (then that server must read
// Config.Queue, and its configuration is the host's).
type Consumer struct {
	cfg Config
	p   expiry.Processor
	rdb redis.UniversalClient
	srv *aq.Server

	mu      sync.Mutex
	started bool
	closed  bool
	running sync.WaitGroup

	poisoned atomic.Uint64
}

// NewConsumer returns a Consumer whose server reads Config.Queue on the
// Redis that redis names (asynq.RedisClientOpt, asynq.RedisClusterClientOpt,
// ...); Start begins consuming, Close stops. The Consumer opens its own
// connections and Close closes them, started or not.
func NewConsumer(opt aq.RedisConnOpt, cfg Config, p expiry.Processor) (*Consumer, error) {
	if opt == nil {
		return nil, errors.New("expiry/asynq: nil asynq.RedisConnOpt")
	}
	c, err := newConsumer(cfg, p)
	if err != nil {
		return nil, err
	}
	// The client is made here rather than by asynq.NewServer so that Close
	// can close it even when the server never started (asynq's Shutdown
	// returns at once then, leaving its connections open).
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, fmt.Errorf("expiry/asynq: unsupported asynq.RedisConnOpt %T", opt)
	}
	c.rdb = rdb
	c.srv = aq.NewServerFromRedisClient(rdb, c.serverConfig())
	return c, nil
}

func newConsumer(cfg Config, p expiry.Processor) (*Consumer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("expiry/asynq: nil Processor")
	}
	return &Consumer{cfg: cfg, p: p}, nil
}

func (c *Consumer) serverConfig() aq.Config {
	logger, level := newLogger(c.cfg.Logger)
	return aq.Config{
		Concurrency:              c.cfg.Concurrency,
		Queues:                   map[string]int{c.cfg.Queue: 1},
		TaskCheckInterval:        c.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: c.cfg.ForwardInterval,
		ShutdownTimeout:          c.cfg.ShutdownTimeout,
		RetryDelayFunc:           c.retryDelay,
		IsFailure:                isFailure,
		Logger:                   logger,
		LogLevel:                 level,
	}
}

// retryDelay doubles Config.RetryDelay at each retry (n is the number of
// retries so far), up to Config.MaxRetryDelay.
func (c *Consumer) retryDelay(n int, _ error, _ *aq.Task) time.Duration {
	d := c.cfg.RetryDelay
	for i := 0; i < n && d < c.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxRetryDelay)
}

// isFailure keeps a shutdown's interruptions from using up a task's retries.
func isFailure(err error) bool { return err != nil && !errors.Is(err, errInterrupted) }

// Start pings Redis, then starts the server. It fails if Redis does not
// answer, or if the Consumer was started or closed before.
func (c *Consumer) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return errors.New("expiry/asynq: Start after Close")
	case c.started:
		return errors.New("expiry/asynq: Consumer already started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SendTimeout)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("expiry/asynq: Redis does not answer: %w", err)
	}
	if err := c.srv.Start(c); err != nil {
		return fmt.Errorf("expiry/asynq: start server on queue %s: %w", c.cfg.Queue, err)
	}
	c.started = true
	return nil
}

// StartConsumer is NewConsumer then Start.
func StartConsumer(redis aq.RedisConnOpt, cfg Config, p expiry.Processor) (*Consumer, error) {
	c, err := NewConsumer(redis, cfg, p)
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		_ = c.Close(context.Background()) // closes the connections NewConsumer opened
		return nil, err
	}
	return c, nil
}

// Poisoned returns how many tasks this Consumer dropped as poison (another
// task type, or a payload that is not an orderexpiry message) since it was
// created.
func (c *Consumer) Poisoned() uint64 { return c.poisoned.Load() }

// ProcessTask implements asynq.Handler: it hands the task to the Processor
// and maps its verdict (see the package documentation).
func (c *Consumer) ProcessTask(ctx context.Context, t *aq.Task) error {
	if !c.enter() {
		// Dequeued as Close began: back to the queue, its retries intact.
		return errInterrupted
	}
	defer c.running.Done()
	if t.Type() != c.cfg.TaskType {
		// Not the Shell's to see: a payload of another task type could even
		// decode as ours.
		err := fmt.Errorf("%w: task type %q is not %q", ErrPoison, t.Type(), c.cfg.TaskType)
		c.poisoned.Add(1)
		c.cfg.Observer.Observe(ctx, expiry.Event{Kind: expiry.KindBadMessage, Err: err})
		c.cfg.Logger.WarnContext(ctx, "dropping a task of another type", "queue", c.cfg.Queue, "type", t.Type())
		return fmt.Errorf("%w (%w)", err, aq.SkipRetry)
	}
	body, h := t.Payload(), t.Headers()
	_, bad := expiry.DecodeMessage(body)
	// Handed over even when it does not decode: the Shell counts and logs
	// bad input (KindBadMessage), as it does for every transport.
	v := c.p.Process(ctx, expiry.Delivery{
		Body:    body,
		TraceID: h[TraceHeader],
		Trace:   expiry.Trace{Parent: h[TraceParentHeader], State: h[TraceStateHeader]},
	})
	switch {
	case bad != nil:
		c.poisoned.Add(1)
		return fmt.Errorf("%w: %w (%w)", ErrPoison, bad, aq.SkipRetry)
	case v == expiry.Retry && errors.Is(ctx.Err(), context.Canceled):
		// The server's shutdown cancelled it. A TaskTimeout is a deadline,
		// not this, and uses up a retry like any failure: a handler that
		// always hangs must not be retried for ever.
		return errInterrupted
	case v == expiry.Retry:
		return errors.New("expiry/asynq: the processor asked for a retry")
	}
	return nil
}

// enter counts a handler in, unless Close has begun: under the lock, so that
// no Add races the Wait of Close.
func (c *Consumer) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.running.Add(1)
	return true
}

// Close stops taking tasks, waits (until ctx is done) for the ones in
// progress, then shuts the server down: a task still running after
// Config.ShutdownTimeout has its context cancelled and goes back to the
// queue, so Close can take up to ShutdownTimeout past ctx. It waits for
// those handlers too, until ctx is done, and closes the Redis client.
// Closing a Consumer again does nothing.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.srv.Stop() // no new tasks; a server never started ignores it
	err := c.wait(ctx)
	c.srv.Shutdown()
	if werr := c.wait(ctx); werr != nil && err == nil {
		err = werr
	}
	if cerr := c.rdb.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("expiry/asynq: close Redis client: %w", cerr)
	}
	return err
}

// wait waits for the handlers in progress, until ctx is done.
func (c *Consumer) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { c.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("expiry/asynq: handlers still running at shutdown: %w", ctx.Err())
	}
}

// logger routes asynq's logs to a *slog.Logger.
type logger struct{ l *slog.Logger }

// newLogger returns the adapter and the level asynq should log at: its
// info lines (start, stop, every shutdown step) go to debug, so asynq's
// formatting is skipped unless l shows debug.
func newLogger(l *slog.Logger) (aq.Logger, aq.LogLevel) {
	level := aq.WarnLevel
	if l.Enabled(context.Background(), slog.LevelDebug) {
		level = aq.DebugLevel
	}
	return logger{l.With("component", "asynq")}, level
}

func (a logger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a logger) Info(args ...any)  { a.l.Debug(fmt.Sprint(args...)) }
func (a logger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a logger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// Fatal logs at error level; it does not exit the host's process.
func (a logger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }
