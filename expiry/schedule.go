package expiry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Scheduler sends the first delayed message of an order, after the
// transaction that placed the order has committed.
//
// Sending before commit would let a rolled-back order be cancelled by a ghost
// message (invariant I6); failing the order because the broker hiccupped
// would make the buyer place it again. So the send happens after commit, and
// a failure is logged and counted (KindSendFailed), never returned: the order
// stays placed and the reconciler cancels it once it is past due.
//
// With database/sql use InTx. With another transaction manager, call Schedule
// from its after-commit hook, or collect with an AfterCommit and Flush it
// there. A Scheduler is safe for concurrent use.
type Scheduler struct {
	sender  DelaySender
	clock   Clock
	obs     Observer
	log     *slog.Logger
	tracer  Tracer
	timeout time.Duration
	warn    time.Duration
}

// SchedulerConfig wires a Scheduler. Sender is required.
type SchedulerConfig struct {
	Sender DelaySender
	// Runtime: the Clock gives the delay of the first message
	// (expireAt - now); a skewed clock makes the message early or late,
	// never the cancel (the Handler re-arms by the store's clock).
	// The Tracer traces the send and gives the message the trace context
	// of the placing request (the context passed to Schedule).
	Runtime
	// SendTimeout bounds each send, so a hung broker cannot hold the request
	// that placed the order. Zero means SendTimeoutDefault; negative is an
	// error.
	SendTimeout time.Duration
	// WarnBefore, when positive, also sends each order a warning message
	// (Message.Warning) due this long before its deadline, through the same
	// Sender; the Handler's Warner fires the host's warning hook with it.
	// Whole milliseconds up to MaxWarnLead. A warning that cannot be sent
	// is counted (KindSendFailed, Reason "warning") and lost: warnings are
	// at most once, and nothing repairs them. 0: no warnings.
	WarnBefore time.Duration
}

// SendTimeoutDefault is SchedulerConfig.SendTimeout's default.
const SendTimeoutDefault = 3 * time.Second

// NewScheduler returns a Scheduler, or an error naming the field that is
// missing or out of range.
func NewScheduler(c SchedulerConfig) (*Scheduler, error) {
	if c.Sender == nil {
		return nil, errors.New("expiry: SchedulerConfig.Sender is nil")
	}
	if c.SendTimeout < 0 {
		return nil, fmt.Errorf("expiry: SchedulerConfig.SendTimeout is negative (%v)", c.SendTimeout)
	}
	if c.WarnBefore < 0 || c.WarnBefore > MaxWarnLead || c.WarnBefore%time.Millisecond != 0 {
		return nil, fmt.Errorf("expiry: SchedulerConfig.WarnBefore %v is not whole milliseconds in 0..%v", c.WarnBefore, MaxWarnLead)
	}
	rt := c.Runtime.WithDefaults()
	s := &Scheduler{sender: c.Sender, clock: rt.Clock, obs: rt.Observer, log: rt.Logger, tracer: rt.Tracer, timeout: c.SendTimeout, warn: c.WarnBefore}
	if s.timeout == 0 {
		s.timeout = SendTimeoutDefault
	}
	return s, nil
}

// Schedule sends the first message for an order due at expireAt (and, with
// SchedulerConfig.WarnBefore, its warning first). It does not return the
// error, by design: it logs and counts it, and reports whether the expiry
// message's send was accepted. Call it only after the order has committed.
func (s *Scheduler) Schedule(ctx context.Context, orderNo string, expireAt time.Time) bool {
	return s.schedule(ctx, orderNo, expireAt, expireAt.Sub(s.clock.Now()))
}

// Reschedule is Schedule for a deadline moved earlier (cancel.Service's
// Shorten): o as the store read it, the delay measured by the store's clock
// (o.Remaining()), so the new messages never depend on this host's clock.
// The messages sent before still arrive; the Handler re-arms or ends them by
// the stored deadline.
func (s *Scheduler) Reschedule(ctx context.Context, o Order) bool {
	return s.schedule(ctx, o.No, o.ExpireAt, o.Remaining())
}

func (s *Scheduler) schedule(ctx context.Context, orderNo string, expireAt time.Time, delay time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	err := ValidateID("order number", orderNo)
	if err == nil && s.warn > 0 {
		// An order with less time than the lead is warned at once: the
		// Warner decides by the store's clock whether it is still pending
		// and not due.
		wdelay := max(delay-s.warn, 0)
		if werr := send(ctx, s.tracer, s.sender, Message{OrderNo: orderNo, Hop: 1, TraceID: TraceID(ctx), Warning: true, Lead: s.warn}, wdelay); werr != nil {
			s.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: orderNo, Reason: "warning", Hop: 1, Delay: wdelay, Err: werr})
			s.log.WarnContext(ctx, "expiry warning not sent; the order will not be warned", "order", orderNo, "err", werr)
		}
	}
	if err == nil {
		err = send(ctx, s.tracer, s.sender, Message{OrderNo: orderNo, Hop: 1, TraceID: TraceID(ctx)}, delay)
	}
	if err != nil {
		s.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: orderNo, Hop: 1, Delay: delay, Err: err})
		s.log.ErrorContext(ctx, "expiry message not sent after commit; the reconciler will cancel the order when due",
			"order", orderNo, "expire_at", expireAt, "err", err)
		return false
	}
	return true
}

// ErrCommitUnknown wraps the error of a failed COMMIT in InTx. The outcome
// is unknown: the connection may have broken after the database committed,
// so the order may exist. Do not give its seats back on this error (that
// would be "released in Redis, pending in SQL"); the reconciler releases the
// seats of an order that does not exist once its grace period is over. No
// message was sent, so if the order does exist, the reconciler cancels it
// when due.
var ErrCommitUnknown = errors.New("orderexpiry: commit failed, outcome unknown")

// AfterCommit collects the orders a transaction placed, to be scheduled only
// once it commits. The zero value is ready to use; it is safe for concurrent
// use. Use one per transaction.
type AfterCommit struct {
	mu     sync.Mutex
	orders []pendingOrder
}

type pendingOrder struct {
	no       string
	expireAt time.Time
}

// Add records that the transaction placed orderNo, due at expireAt.
func (a *AfterCommit) Add(orderNo string, expireAt time.Time) {
	a.mu.Lock()
	a.orders = append(a.orders, pendingOrder{orderNo, expireAt})
	a.mu.Unlock()
}

// Flush schedules every recorded order with s and forgets them; it returns
// how many sends were accepted. Call it after commit only; after a rollback,
// drop the AfterCommit instead.
func (a *AfterCommit) Flush(ctx context.Context, s *Scheduler) int {
	a.mu.Lock()
	orders := a.orders
	a.orders = nil
	a.mu.Unlock()
	sent := 0
	for _, o := range orders {
		if s.Schedule(ctx, o.no, o.expireAt) {
			sent++
		}
	}
	return sent
}

// InTx runs fn in a database/sql transaction. Orders fn records in after are
// scheduled once the transaction commits, and never if fn returns an error,
// panics, or the commit fails (the transaction is rolled back). The error is
// fn's (nothing was committed) or, wrapping ErrCommitUnknown, the commit's
// (the outcome is unknown); send failures are not errors (see Schedule).
func (s *Scheduler) InTx(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(tx *sql.Tx, after *AfterCommit) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("expiry: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // the error that matters is fn's (or the panic)
		}
	}()
	var after AfterCommit
	if err := fn(tx, &after); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		committed = true // database/sql has already ended the transaction
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	}
	committed = true
	after.Flush(ctx, s)
	return nil
}
