package expiry

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Verdict tells a transport what to do with a delivered message.
type Verdict uint8

const (
	// Ack: done with it (handled, or dropped as bad input).
	Ack Verdict = iota
	// Retry: a transient failure; deliver it again later.
	Retry
)

// Shell is the thin consumer every transport calls: it decodes and validates
// the body, restores the trace id into the context, continues the message's
// trace context through the Handler's Tracer, times the work, calls the
// Handler and turns the result into a Verdict.
//
// Bad input (a body that is empty, oversized, not ours, or names an invalid
// order) is counted (KindBadMessage), logged and acknowledged, so it neither
// crashes the consumer nor blocks the messages behind it (invariant I7). Only
// transient failures are retried. A Shell is safe for concurrent use.
type Shell struct {
	h   *Handler
	obs Observer
	log *slog.Logger
	now func() time.Time
}

// NewShell returns a Shell around h, reporting to h's Observer and logging
// to h's Logger (HandlerConfig.Runtime).
func NewShell(h *Handler) *Shell {
	return &Shell{h: h, obs: h.obs, log: h.log, now: h.rt.Clock.Now}
}

// Delivery is one message as a transport received it: the body and what
// the transport carried beside it.
type Delivery struct {
	// Body is the encoded Message (EncodeMessage).
	Body []byte
	// TraceID is the trace id carried beside the body ("" if none).
	TraceID string
	// Trace is the W3C trace context carried beside the body (zero if
	// none). The Shell bounds it with Trace.Clean: whatever it holds, the
	// message is handled, never dropped for it.
	Trace Trace
}

// Processor is what every transport hands its deliveries to; *Shell is the
// one a host gives them. Process is called concurrently, once per delivery
// (a delivery may be a redelivery: the Handler is idempotent). Its Verdict
// is the whole answer: Ack (done, or dropped as bad input and counted) or
// Retry (deliver it again later). It never panics on bad input.
type Processor interface {
	Process(ctx context.Context, d Delivery) Verdict
}

// Process handles one delivered message. It implements Processor.
func (s *Shell) Process(ctx context.Context, d Delivery) Verdict {
	body, traceID, t := d.Body, d.TraceID, d.Trace
	start := s.now()
	m, err := DecodeMessage(body)
	if err != nil {
		s.obs.Observe(ctx, Event{Kind: KindBadMessage, Err: err})
		s.log.WarnContext(ctx, "dropping bad expiry message", "err", err, "len", len(body))
		return Ack
	}
	m.TraceID, m.Trace = traceID, t.Clean()
	ctx = WithTraceID(ctx, traceID)
	ctx, end := s.h.tracer.StartHandle(ctx, m)
	outcome, err := s.h.Handle(ctx, m)
	s.obs.Observe(ctx, Event{Kind: KindHandled, OrderNo: m.OrderNo, Outcome: outcome, Hop: m.Hop, Duration: s.now().Sub(start), Err: err})
	end(outcome, err)
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return Retry // shutting down: quietly leave it to the next delivery
		}
		s.log.ErrorContext(ctx, "expiry message failed; it will be redelivered", "order", m.OrderNo, "hop", m.Hop, "trace", traceID, "err", err)
		return Retry
	}
	if s.log.Enabled(ctx, slog.LevelDebug) { // spares the hot path the attribute allocations
		s.log.DebugContext(ctx, "expiry message handled", "order", m.OrderNo, "hop", m.Hop, "outcome", outcome, "trace", traceID)
	}
	return Ack
}
