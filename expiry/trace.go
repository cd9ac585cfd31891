package expiry

import (
	"context"
	"time"
)

// Trace is a W3C trace context (https://www.w3.org/TR/trace-context/) as it
// travels beside a message's body: the traceparent and tracestate headers,
// verbatim. Transports carry it (expiry/rocketmq as the user properties
// traceparent and tracestate, expiry/inproc in memory); a Tracer writes and
// reads it. The zero Trace carries nothing.
type Trace struct {
	Parent string // the traceparent header: "00-<trace-id>-<parent-id>-<flags>"
	State  string // the tracestate header: vendor entries, "" for none
}

// Bounds on what a message carries as its trace context (see Trace.Clean).
// A version-00 traceparent is 55 bytes; the spec lets a later version grow,
// so the bound leaves room. A tracestate has at most 32 entries and a
// propagator may truncate it at 512 bytes.
const (
	MaxTraceParentLen = 128
	MaxTraceStateLen  = 512
)

// Clean returns t bounded for carrying and handing to a Tracer: a Parent
// longer than MaxTraceParentLen or holding a byte outside printable ASCII
// drops the whole context (a tracestate means nothing without its parent);
// such a State drops the State alone. Clean does not parse: a bounded,
// printable but malformed traceparent is the Tracer's to refuse (it then
// starts a new trace). A message is never refused for its trace context.
func (t Trace) Clean() Trace {
	if !printable(t.Parent, MaxTraceParentLen) || t.Parent == "" {
		return Trace{}
	}
	if !printable(t.State, MaxTraceStateLen) {
		t.State = ""
	}
	return t
}

func printable(s string, limit int) bool {
	if len(s) > limit {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Tracer connects the expiry path to a host's distributed tracing, so that
// the handling of an order's expiry message is part of the trace of the
// request that placed the order. Package expiry/otel implements it with
// OpenTelemetry; this package imports no tracing library, and the default,
// NopTracer, costs nothing.
//
// The library calls StartSend around every delayed send (the Scheduler's
// first message, from the placing request's context; the Handler's re-arm,
// from the handling's context) and StartHandle around the handling of every
// decoded message (in the Shell). Each returns the function that ends what
// it started; the library calls it exactly once. A Tracer is called from many
// goroutines at once: it must be safe for concurrent use and quick, and it
// must never fail a message: a trace context it cannot read starts a new
// trace.
type Tracer interface {
	// StartSend is called before m is sent with delay. It returns the
	// context to send from (carrying a span for the send, say), the trace
	// context m is to carry (m.Trace is what the message it re-arms
	// carried, zero for a first message), and the function to call with the
	// send's outcome (nil: accepted by the transport).
	StartSend(ctx context.Context, m Message, delay time.Duration) (context.Context, Trace, func(err error))
	// StartHandle is called before the Handler handles m, with m.Trace
	// cleaned (Trace.Clean). It returns the context to handle m in,
	// continuing the trace m.Trace names (a new one when it names none or
	// cannot be read), and the function to call with the Handler's outcome
	// and error.
	StartHandle(ctx context.Context, m Message) (context.Context, func(Outcome, error))
}

type nopTracer struct{}

func nopEndSend(error)            {}
func nopEndHandle(Outcome, error) {}

func (nopTracer) StartSend(ctx context.Context, m Message, _ time.Duration) (context.Context, Trace, func(error)) {
	return ctx, m.Trace, nopEndSend
}

func (nopTracer) StartHandle(ctx context.Context, _ Message) (context.Context, func(Outcome, error)) {
	return ctx, nopEndHandle
}

// NopTracer is the default Tracer: it starts nothing and carries a
// message's trace context on unchanged, so a re-arm on an instance without a
// tracer keeps the trace that a traced instance started.
var NopTracer Tracer = nopTracer{}

// send sends m through sender inside tracer's send span, carrying the trace
// context the tracer gives.
func send(ctx context.Context, tracer Tracer, sender DelaySender, m Message, delay time.Duration) error {
	ctx, tc, end := tracer.StartSend(ctx, m, delay)
	m.Trace = tc
	err := sender.Send(ctx, m, delay)
	end(err)
	return err
}
