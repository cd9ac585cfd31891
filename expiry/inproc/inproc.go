// Package inproc is an in-process expiry.DelaySender: timers in memory that
// hand each message to a consumer (an *expiry.Shell) in the same process.
//
// It loses every pending message when the process exits; the reconciler is
// then the only thing that cancels those orders. Use it for tests, the
// embedded demo, and single-process tools, not as a production transport.
//
// With a level table it behaves like RocketMQ in levels mode: each message is
// delayed by the level levels.Table.Plan picks, and the consumer re-arms early
// arrivals, so the demo exercises the same re-arm path as the broker.
//
// # Names
//
// Sender, New and Config: the in-process sender and its wiring. ErrClosed:
// a Send after Close, refused.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/levels"
)

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("inproc: sender closed")

// Config configures a Sender. The zero Config delays messages exactly, on the
// system clock.
type Config struct {
	// Runtime: the Clock the delays run on, and the Observer that gets a
	// KindSent event for every message accepted (before it can fire).
	expiry.Runtime
	// Levels, when it has levels, makes the sender round each delay to a
	// level with Levels.Plan(delay, Slack), as RocketMQ's levels mode does.
	// As there, Slack 0 means one second and a negative Slack none.
	Levels levels.Table
	Slack  time.Duration
	// RetryDelay is how long a message the consumer asked to retry waits
	// before it is delivered again; 0: one second.
	RetryDelay time.Duration
}

// Sender is the in-process DelaySender. Safe for concurrent use.
type Sender struct {
	cfg      Config
	mu       sync.Mutex
	consumer expiry.Processor
	held     []*expiry.Delivery     // fell due before Attach
	timers   map[uint64]func() bool // each timer's stop
	next     uint64
	closed   bool
	wg       sync.WaitGroup
}

// New returns a Sender; Attach a consumer before messages fall due (earlier
// ones are held until then).
func New(c Config) *Sender {
	c.Runtime = c.Runtime.WithDefaults()
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.Slack == 0 {
		c.Slack = time.Second
	}
	return &Sender{cfg: c, timers: map[uint64]func() bool{}}
}

// Attach sets the consumer and releases deliveries that were held for it.
func (s *Sender) Attach(c expiry.Processor) {
	s.mu.Lock()
	s.consumer = c
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, d := range held {
		s.deliver(c, d)
	}
}

// Send implements expiry.DelaySender.
func (s *Sender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inproc: send %s: %w", m.OrderNo, err)
	}
	body, err := expiry.EncodeMessage(m)
	if err != nil {
		return fmt.Errorf("inproc: send: %w", err)
	}
	level := 0
	if s.cfg.Levels.Len() > 0 {
		level = s.cfg.Levels.Plan(delay, s.cfg.Slack)
		delay = s.cfg.Levels.Delay(level)
	}
	delay = max(delay, 0)
	return s.schedule(&expiry.Delivery{Body: body, TraceID: m.TraceID, Trace: m.Trace}, delay, func() {
		s.cfg.Observer.Observe(ctx, expiry.Event{Kind: expiry.KindSent, OrderNo: m.OrderNo, Hop: m.Hop, Level: level, Delay: delay})
	})
}

// schedule starts a message's timer, then calls sent (nil for a redelivery,
// which is not a send) under the lock: fire takes the lock too, so even a
// zero delay is delivered after its send was observed.
func (s *Sender) schedule(d *expiry.Delivery, delay time.Duration, sent func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.next++
	id := s.next
	s.wg.Add(1)
	s.timers[id] = s.cfg.Clock.AfterFunc(delay, func() { s.fire(id, d) })
	if sent != nil {
		sent()
	}
	return nil
}

func (s *Sender) fire(id uint64, d *expiry.Delivery) {
	s.mu.Lock()
	delete(s.timers, id)
	c := s.consumer
	if c == nil && !s.closed {
		s.held = append(s.held, d)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.deliver(c, d)
}

func (s *Sender) deliver(c expiry.Processor, d *expiry.Delivery) {
	defer s.wg.Done()
	if c == nil {
		return // closed before a consumer was attached
	}
	v := c.Process(context.Background(), *d)
	if v == expiry.Retry {
		_ = s.schedule(d, s.cfg.RetryDelay, nil) // after Close the message is dropped, as documented
	}
}

// Pending returns how many messages wait for their time.
func (s *Sender) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers) + len(s.held)
}

// Close drops every pending message and waits for deliveries in progress to
// finish. Send fails with ErrClosed afterwards.
func (s *Sender) Close() error {
	s.mu.Lock()
	s.closed = true
	for id, stop := range s.timers {
		if stop() {
			s.wg.Done()
		}
		delete(s.timers, id)
	}
	held := len(s.held)
	s.held = nil
	s.mu.Unlock()
	for i := 0; i < held; i++ {
		s.wg.Done()
	}
	s.wg.Wait()
	return nil
}
