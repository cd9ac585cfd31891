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

// Process handles one delivered body. traceID is the trace id the transport
// carried beside the body ("" if none). It is ProcessTraced without a trace
// context.
func (s *Shell) Process(ctx context.Context, body []byte, traceID string) Verdict {
	return s.ProcessTraced(ctx, body, traceID, Trace{})
}

// ProcessTraced handles one delivered body that came with the W3C trace
// context t (zero if none). t is bounded with Trace.Clean and handed to the
// Handler's Tracer, which continues its trace or starts a new one: whatever
// t holds, the message is handled as Process would, never dropped for it.
// It implements TracedProcessor.
func (s *Shell) ProcessTraced(ctx context.Context, body []byte, traceID string, t Trace) Verdict {
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
