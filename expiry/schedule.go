package expiry

import (
	"context"
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
// A host does not call it to place orders: cancel.Service.Place schedules
// each order through it (cancel.Config.Scheduler) once the host's
// transaction has committed, and Service.Shorten reschedules through it. A
// Scheduler is safe for concurrent use.
type Scheduler struct {
	sender  DelaySender
	clock   Clock
	obs     Observer
	log     *slog.Logger
	tracer  Tracer
	timeout time.Duration
	warn    time.Duration

	// With SchedulerConfig.Async: the queue, its senders, and Close's state.
	queue   chan queued
	senders sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close: queue waits give up
	abandon chan struct{} // closed when Close's ctx is done: senders drop what is left
	waiting sync.WaitGroup
}

// queued is one order's send, waiting in an Async Scheduler's queue.
type queued struct {
	ctx      context.Context // the placing request's, without its cancellation
	orderNo  string
	expireAt time.Time
	delay    time.Duration // at the time of queueing
	at       time.Time     // when it was queued, by the Clock
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
	// SendTimeout bounds each send (an order's warning and its expiry
	// message each), so a hung broker cannot hold the request that placed
	// the order. Zero means SendTimeoutDefault; negative is an error.
	SendTimeout time.Duration
	// WarnBefore, when positive, also sends each order a warning message
	// (Message.Warning) due this long before its deadline, through the same
	// Sender; the Handler's Warner fires the host's warning hook with it.
	// Whole milliseconds up to MaxWarnLead. A warning that cannot be sent
	// is counted (KindSendFailed, Reason "warning") and lost: warnings are
	// at most once, and nothing repairs them. 0: no warnings.
	WarnBefore time.Duration
	// Async, when positive, takes the send off the placing request's path:
	// Schedule and Reschedule queue the order's messages and return, and
	// Async goroutines send them, each send bounded by SendTimeout as
	// before, its delay shortened by the time it waited in the queue. At
	// most Async orders wait in the queue: when it is full, Schedule waits
	// for a place, SendTimeout at most (back-pressure on the placing
	// requests, as a slow broker gives them without Async). An order that
	// found no place, or that was still queued when Close gave up, is
	// counted (KindSendFailed, Reason "queue_full" or "closed") and left to
	// the reconciler, like an order whose send failed (I3). An order's
	// warning and expiry are sent by one goroutine, in that order. A
	// Scheduler with Async must be closed (Close) to stop its goroutines.
	// 0: each send runs in the caller of Schedule, which waits for it.
	Async int
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
	if c.Async < 0 {
		return nil, fmt.Errorf("expiry: SchedulerConfig.Async is negative (%d)", c.Async)
	}
	rt := c.Runtime.WithDefaults()
	s := &Scheduler{sender: c.Sender, clock: rt.Clock, obs: rt.Observer, log: rt.Logger, tracer: rt.Tracer, timeout: c.SendTimeout, warn: c.WarnBefore}
	if s.timeout == 0 {
		s.timeout = SendTimeoutDefault
	}
	if c.Async > 0 {
		s.queue = make(chan queued, c.Async)
		s.closing, s.abandon = make(chan struct{}), make(chan struct{})
		s.senders.Add(c.Async)
		for range c.Async {
			go s.send()
		}
	}
	return s, nil
}

// send is one of an Async Scheduler's goroutines: it sends what is queued
// until Close has closed the queue and it is empty, or Close gave up.
func (s *Scheduler) send() {
	defer s.senders.Done()
	for q := range s.queue {
		select {
		case <-s.abandon:
			s.dropped(q.ctx, q.orderNo, q.delay, "closed")
			continue
		default:
		}
		s.sendQueued(q)
	}
}

// sendQueued sends a queued order's messages. A panic in the Sender (or
// the Tracer, or the Observer) is contained here: in a goroutine of the
// Scheduler it would end the process, not one request. The order is
// counted (Reason "panic") and left to the reconciler.
func (s *Scheduler) sendQueued(q queued) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("expiry: panic in an Async send: %v", p)
			s.obs.Observe(q.ctx, Event{Kind: KindSendFailed, OrderNo: q.orderNo, Reason: "panic", Hop: 1, Delay: q.delay, Err: err})
			s.log.ErrorContext(q.ctx, "expiry message not sent after commit; the reconciler will cancel the order when due",
				"order", q.orderNo, "err", err)
		}
	}()
	s.sendNow(q.ctx, q.orderNo, q.expireAt, shorten(q.delay, s.clock.Now().Sub(q.at)))
}

// shorten is delay less elapsed, at least 0: a deadline long past (a
// delay near the smallest Duration) does not wrap around to centuries, and
// a clock that stepped back (negative elapsed) adds nothing.
func shorten(delay, elapsed time.Duration) time.Duration {
	delay, elapsed = max(delay, 0), max(elapsed, 0)
	if elapsed >= delay {
		return 0
	}
	return delay - elapsed
}

// Close stops an Async Scheduler: it refuses new orders (counted, Reason
// "closed"), sends those queued, and returns once its goroutines have
// ended; or, when ctx is done first, counts the orders still queued as
// dropped (the reconciler's) and returns ctx's error once the sends in
// flight have ended (SendTimeout at most). Close is idempotent, and a
// no-op without Async.
func (s *Scheduler) Close(ctx context.Context) error {
	if s.queue == nil {
		return nil
	}
	s.mu.Lock()
	first := !s.closed
	if first {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	if first {
		s.waiting.Wait() // Schedules waiting for a place give up at once
		close(s.queue)
	}
	done := make(chan struct{})
	go func() { s.senders.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-s.abandon:
	default:
		close(s.abandon)
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// enqueue puts an order's send in an Async Scheduler's queue, waiting for
// a place SendTimeout at most; false: it was dropped (counted).
func (s *Scheduler) enqueue(ctx context.Context, orderNo string, expireAt time.Time, delay time.Duration) bool {
	q := queued{ctx: context.WithoutCancel(ctx), orderNo: orderNo, expireAt: expireAt, delay: delay, at: s.clock.Now()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.dropped(q.ctx, orderNo, delay, "closed")
		return false
	}
	s.waiting.Add(1)
	s.mu.Unlock()
	defer s.waiting.Done()
	select {
	case s.queue <- q:
		return true
	default:
	}
	timeout := make(chan struct{})
	stop := s.clock.AfterFunc(s.timeout, func() { close(timeout) })
	defer stop()
	select {
	case s.queue <- q:
		return true
	case <-timeout:
		s.dropped(q.ctx, orderNo, delay, "queue_full")
	case <-s.closing:
		s.dropped(q.ctx, orderNo, delay, "closed")
	}
	return false
}

// dropped counts an order whose messages an Async Scheduler never sent.
func (s *Scheduler) dropped(ctx context.Context, orderNo string, delay time.Duration, reason string) {
	s.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: orderNo, Reason: reason, Hop: 1, Delay: delay})
	s.log.ErrorContext(ctx, "expiry message not sent after commit; the reconciler will cancel the order when due",
		"order", orderNo, "reason", reason)
}

// Schedule sends the first message for an order due at expireAt (and, with
// SchedulerConfig.WarnBefore, its warning first). It does not return the
// error, by design: it logs and counts it, and reports whether the expiry
// message's send was accepted (with SchedulerConfig.Async: whether it was
// queued). Call it only after the order has committed.
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
	if s.queue != nil && ValidateID("order number", orderNo) == nil {
		return s.enqueue(ctx, orderNo, expireAt, delay)
	}
	return s.sendNow(ctx, orderNo, expireAt, delay)
}

// sendNow sends an order's messages (its warning first) and waits for them.
func (s *Scheduler) sendNow(ctx context.Context, orderNo string, expireAt time.Time, delay time.Duration) bool {
	ctx = context.WithoutCancel(ctx)
	delay = max(delay, 0) // a deadline past: due at once
	err := ValidateID("order number", orderNo)
	if err == nil && s.warn > 0 {
		// An order with less time than the lead is warned at once: the
		// Warner decides by the store's clock whether it is still pending
		// and not due.
		wdelay := shorten(delay, s.warn)
		start := s.clock.Now()
		wctx, done := context.WithTimeout(ctx, s.timeout) // a hung warning costs its own timeout, not the expiry's
		werr := send(wctx, s.tracer, s.sender, Message{OrderNo: orderNo, Hop: 1, TraceID: TraceID(ctx), Warning: true, Lead: s.warn}, wdelay)
		done()
		if werr != nil {
			s.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: orderNo, Reason: "warning", Hop: 1, Delay: wdelay, Err: werr})
			s.log.WarnContext(ctx, "expiry warning not sent; the order will not be warned", "order", orderNo, "err", werr)
		}
		// The broker counts the expiry's delay from its own send: the
		// warning's round trip is not added to the deadline.
		delay = shorten(delay, s.clock.Now().Sub(start))
	}
	if err == nil {
		sctx, done := context.WithTimeout(ctx, s.timeout)
		err = send(sctx, s.tracer, s.sender, Message{OrderNo: orderNo, Hop: 1, TraceID: TraceID(ctx)}, delay)
		done()
	}
	if err != nil {
		s.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: orderNo, Hop: 1, Delay: delay, Err: err})
		s.log.ErrorContext(ctx, "expiry message not sent after commit; the reconciler will cancel the order when due",
			"order", orderNo, "expire_at", expireAt, "err", err)
		return false
	}
	return true
}

// ErrCommitUnknown is what a placing transaction's error wraps when its
// COMMIT failed (cancel/sqlstore's Insert wraps it; a host's own transaction
// must too). The outcome is unknown: the connection may have broken after
// the database committed, so the order may exist. cancel.Service.Place then
// keeps the seats locked (giving them back would be "released in Redis,
// pending in SQL") and schedules the order only if the store shows it
// committed; the reconciler releases the seats of an order that never
// appears once its grace period is over, and cancels one that appears
// unscheduled when it is due.
var ErrCommitUnknown = errors.New("orderexpiry: commit failed, outcome unknown")
