// Package river is the River transport of orderexpiry, on
// github.com/riverqueue/river: the expiry message is a River job (Args), a
// Sender inserts it, and a Worker hands each job to the consumer side (an
// *expiry.Shell).
//
// What it adds over the other transports is the transactional send: SendTx
// and ScheduleTx insert the job in the host's own transaction (River's
// InsertTx), the one that inserts the order. The order and its expiry job
// commit together or not at all: no after-commit gap, no message lost when
// the process dies between the commit and a send, and no job for a
// rolled-back order (invariant I6, by construction rather than by the
// Scheduler's after-commit discipline). Send is the plain
// expiry.DelaySender, for the Handler's re-arm and for hosts that schedule
// through expiry.Scheduler.
//
// The job's args carry the body as expiry.EncodeMessage writes it
// ("oe1 <order> <hop>", or a warning), the trace id and the W3C trace
// context beside it, as expiry/rocketmq carries them in properties. A job is
// due at the sender's wall clock plus the delay (InsertOpts.ScheduledAt).
//
// The Worker acknowledges what the Shell acknowledges (nil: the job is
// completed), returns an error for the Shell's Retry (River retries it with
// its retry policy, up to the job's MaxAttempts, then discards it: the
// reconciler covers such an order), and cancels a job whose args or body are
// not an expiry message (river.JobCancel), after the Shell has counted it
// (expiry.KindBadMessage): bad input is dropped, never retried (I7).
//
// River's tables are the host's to create, with River's migrator
// (rivermigrate) for its driver, before any client runs; this package never
// migrates. PostgreSQL through database/sql (riverdatabasesql) and SQLite
// (riversqlite) are tested; Sender is generic over River's transaction type,
// so a pgx client (riverpgxv5) works the same way.
//
// # Names
//
// Sender, NewSender, Worker, NewWorker, Args and Config: the transport and
// its wiring; Args is the job River stores, and Kind its kind. QueueDefault:
// the queue when Config names none. ErrNotAttached (a Worker whose
// processor was never attached) and ErrRetry (a transient failure, retried
// by River) are the errors a host sees in River's job records.
package river

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/seatflow/orderexpiry/expiry"
)

// Kind is the River job kind of an expiry message.
const Kind = "orderexpiry.message"

// QueueDefault is the queue the Sender inserts into when Config.Queue is
// empty. A client that works expiry jobs must list it in river.Config.Queues.
// A queue of its own keeps expiry jobs from waiting behind a host's other
// jobs.
const QueueDefault = "orderexpiry"

// Args is the job of one expiry message.
type Args struct {
	// Body is the message as expiry.EncodeMessage writes it.
	Body string `json:"body"`
	// TraceID is expiry.Message.TraceID.
	TraceID string `json:"trace_id,omitempty"`
	// TraceParent and TraceState are expiry.Message.Trace, the W3C headers.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }

// Config configures a Sender.
type Config struct {
	// Queue is the River queue the jobs go to; "": QueueDefault.
	Queue string
	// MaxAttempts bounds how often River works a job whose handling failed
	// transiently (the Shell's Retry) before it discards it; 0: the River
	// client's own (river.Config.MaxAttempts, 25 by default).
	MaxAttempts int
	// WarnBefore, when positive, makes ScheduleTx also insert the order's
	// warning message this long before its deadline (see
	// expiry.SchedulerConfig.WarnBefore): whole milliseconds up to
	// expiry.MaxWarnLead.
	WarnBefore time.Duration
	// Runtime: the Observer gets a KindSent event for every inserted job
	// (for SendTx and ScheduleTx: inserted in the transaction, which may
	// still roll back); ScheduleTx's sends are traced by the Tracer, as the
	// Scheduler's are.
	expiry.Runtime
}

// Sender inserts expiry jobs with a River client. TTx is the client's
// transaction type (*sql.Tx for riverdatabasesql and riversqlite). The client
// needs no workers to insert (an insert-only client is fine); some client on
// the same database must work the queue with a Worker. Safe for concurrent
// use.
type Sender[TTx any] struct {
	client *river.Client[TTx]
	cfg    Config
}

// NewSender returns a Sender on client, or an error for a nil client or a
// WarnBefore out of range.
func NewSender[TTx any](client *river.Client[TTx], cfg Config) (*Sender[TTx], error) {
	if client == nil {
		return nil, errors.New("river: nil client")
	}
	if cfg.WarnBefore < 0 || cfg.WarnBefore > expiry.MaxWarnLead || cfg.WarnBefore%time.Millisecond != 0 {
		return nil, fmt.Errorf("river: Config.WarnBefore %v is not whole milliseconds in 0..%v", cfg.WarnBefore, expiry.MaxWarnLead)
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("river: Config.MaxAttempts is negative (%d)", cfg.MaxAttempts)
	}
	if cfg.Queue == "" {
		cfg.Queue = QueueDefault
	}
	cfg.Runtime = cfg.Runtime.WithDefaults()
	return &Sender[TTx]{client: client, cfg: cfg}, nil
}

// job turns m into the job's args and options.
func (s *Sender[TTx]) job(m expiry.Message, delay time.Duration) (Args, *river.InsertOpts, error) {
	body, err := expiry.EncodeMessage(m)
	if err != nil {
		return Args{}, nil, fmt.Errorf("river: send: %w", err)
	}
	a := Args{Body: string(body), TraceID: m.TraceID}
	if tc := m.Trace.Clean(); tc.Parent != "" {
		a.TraceParent, a.TraceState = tc.Parent, tc.State
	}
	opts := &river.InsertOpts{Queue: s.cfg.Queue, MaxAttempts: s.cfg.MaxAttempts}
	if delay > 0 {
		// Without ScheduledAt the job is available at once, by the
		// database's clock.
		opts.ScheduledAt = time.Now().Add(delay)
	}
	return a, opts, nil
}

// Send implements expiry.DelaySender: it inserts the job in a transaction
// of its own (river.Client.Insert). Use it for the Handler's re-arm and with
// expiry.Scheduler; use SendTx to insert with the order.
func (s *Sender[TTx]) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	a, opts, err := s.job(m, delay)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("river: send %s: %w", m.OrderNo, err)
	}
	if _, err := s.client.Insert(ctx, a, opts); err != nil {
		return fmt.Errorf("river: send %s: %w", m.OrderNo, err)
	}
	s.sent(ctx, m, delay)
	return nil
}

// SendTx inserts m's job in tx (river.Client.InsertTx): it becomes visible,
// and due, only if tx commits, and vanishes if tx rolls back. An error means
// the job is not in tx: roll tx back (or go on without the job, knowing the
// reconciler is then what cancels the order).
func (s *Sender[TTx]) SendTx(ctx context.Context, tx TTx, m expiry.Message, delay time.Duration) error {
	a, opts, err := s.job(m, delay)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("river: send %s: %w", m.OrderNo, err)
	}
	if _, err := s.client.InsertTx(ctx, tx, a, opts); err != nil {
		return fmt.Errorf("river: send %s in transaction: %w", m.OrderNo, err)
	}
	s.sent(ctx, m, delay)
	return nil
}

// ScheduleTx is the transactional counterpart of expiry.Scheduler.Schedule:
// in tx, the transaction that places orderNo, it inserts the order's first
// expiry message, due at expireAt, and with Config.WarnBefore its warning,
// each carrying the trace id of ctx (expiry.TraceID) and traced by the
// Runtime's Tracer. Unlike Schedule it returns its error, since the caller
// can still roll the order back with it.
func (s *Sender[TTx]) ScheduleTx(ctx context.Context, tx TTx, orderNo string, expireAt time.Time) error {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return fmt.Errorf("river: schedule: %w", err)
	}
	delay := time.Until(expireAt)
	if s.cfg.WarnBefore > 0 {
		// An order with less time than the lead is warned at once; the
		// Warner decides by the store's clock whether it still applies.
		w := expiry.Message{OrderNo: orderNo, Hop: 1, TraceID: expiry.TraceID(ctx), Warning: true, Lead: s.cfg.WarnBefore}
		if err := s.tracedTx(ctx, tx, w, max(delay-s.cfg.WarnBefore, 0)); err != nil {
			return err
		}
	}
	return s.tracedTx(ctx, tx, expiry.Message{OrderNo: orderNo, Hop: 1, TraceID: expiry.TraceID(ctx)}, delay)
}

func (s *Sender[TTx]) tracedTx(ctx context.Context, tx TTx, m expiry.Message, delay time.Duration) error {
	ctx, tc, end := s.cfg.Tracer.StartSend(ctx, m, delay)
	m.Trace = tc
	err := s.SendTx(ctx, tx, m, delay)
	end(err)
	return err
}

func (s *Sender[TTx]) sent(ctx context.Context, m expiry.Message, delay time.Duration) {
	s.cfg.Observer.Observe(ctx, expiry.Event{Kind: expiry.KindSent, OrderNo: m.OrderNo, Hop: m.Hop, Delay: max(delay, 0)})
}

// ErrNotAttached is what a Worker returns for a job it got before Attach:
// River retries the job.
var ErrNotAttached = errors.New("river: worker has no processor attached")

// ErrRetry is wrapped by the error a Worker returns when the Processor asks
// for a retry (a transient failure: the store is down, a re-arm failed).
var ErrRetry = errors.New("river: expiry message failed transiently")

// Worker is the river.Worker of expiry jobs: register it with
// river.AddWorker on the client that works the queue. It hands each job to
// its Processor; see the package documentation for what it returns to River.
// Safe for concurrent use.
type Worker struct {
	river.WorkerDefaults[Args]
	p atomic.Pointer[processor]
}

type processor struct{ p expiry.Processor }

// NewWorker returns a Worker handing jobs to p. p may be nil when the
// Processor needs a Sender that needs the client this Worker is registered
// on (the usual wiring): Attach it before starting the client.
func NewWorker(p expiry.Processor) *Worker {
	w := &Worker{}
	if p != nil {
		w.Attach(p)
	}
	return w
}

// Attach sets the Processor that jobs are handed to.
func (w *Worker) Attach(p expiry.Processor) { w.p.Store(&processor{p}) }

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	pp := w.p.Load()
	if pp == nil {
		return ErrNotAttached
	}
	a := job.Args
	v := pp.p.Process(ctx, expiry.Delivery{Body: []byte(a.Body), TraceID: a.TraceID, Trace: expiry.Trace{Parent: a.TraceParent, State: a.TraceState}})
	if _, err := expiry.DecodeMessage([]byte(a.Body)); err != nil {
		// The Shell has counted and logged it; cancelling records the
		// job as dropped, where completing it would say it was handled.
		return river.JobCancel(err)
	}
	if v == expiry.Retry {
		return fmt.Errorf("%w: order message %q", ErrRetry, a.Body)
	}
	return nil
}

// Middleware implements river.Worker. It checks the job's args before River
// decodes them: args that do not decode into Args would fail River's
// decoding on every attempt until the job is discarded, so they are handed to
// the Processor as the body (which counts them as bad) and the job is
// cancelled at once. (Args that decode but carry no valid body reach Work,
// which does the same.)
func (w *Worker) Middleware(*rivertype.JobRow) []rivertype.WorkerMiddleware {
	return []rivertype.WorkerMiddleware{&argsCheck{w: w}}
}

type argsCheck struct {
	river.MiddlewareDefaults
	w *Worker
}

func (c *argsCheck) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var a Args
	if err := json.Unmarshal(job.EncodedArgs, &a); err == nil {
		return doInner(ctx)
	} else if pp := c.w.p.Load(); pp != nil {
		// The raw args are no expiry body: the Shell counts and logs them.
		pp.p.Process(ctx, expiry.Delivery{Body: job.EncodedArgs})
		return river.JobCancel(fmt.Errorf("%w: job args: %w", expiry.ErrBadMessage, err))
	}
	return ErrNotAttached
}
