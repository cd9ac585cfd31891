// Package otel instruments orderexpiry with OpenTelemetry: an expiry.Tracer
// that makes the handling of an order's expiry message a span of the trace of
// the request that placed the order, and an expiry.Observer (with an
// OverduePoller) that records the measurements expiry/prometheus exports as
// OpenTelemetry metrics.
//
// # Traces
//
// The trace context travels in the message as W3C traceparent/tracestate
// (expiry.Message.Trace; RocketMQ user properties on the broker), written and
// read with an OpenTelemetry propagator (propagation.TraceContext unless
// Config says otherwise). The spans, in one trace:
//
//	POST /orders (the host's span, in the context passed to Schedule)
//	└─ orderexpiry send     producer: the first delayed message (hop 1)
//	   └─ orderexpiry process   consumer: its handling (outcome rearmed)
//	      └─ orderexpiry send       the re-arm (hop 2)
//	         └─ orderexpiry process     outcome cancelled
//
// A redelivered message is a second process span under the same send. A
// message whose trace context is missing, malformed or oversized is handled
// all the same, in a new trace (a root process span): never dropped.
//
// Pass one Tracer to expiry.HandlerConfig and expiry.SchedulerConfig.
//
// # Metrics
//
// Pass one Observer to every component that takes an expiry.Observer (the
// Handler, the Shell, the Scheduler, cancel.Service, the Reconciler), beside
// or instead of expiry/prometheus's (expiry.MultiObserver). Its instruments,
// of instrumentation scope ScopeName, are expiry/prometheus's metrics under
// OpenTelemetry's names; README.md beside this file maps each to its
// Prometheus metric. Attributes (Prometheus's labels) carry the prefix
// "orderexpiry.": kind, detail (left out when empty), outcome, reason, path,
// result.
//
//	orderexpiry.events            counter {event}: every Event, by kind and
//	    detail: the Handler's outcome (kind "handled"), the reason (kinds
//	    "cancelled", "discrepancy", "repaired")
//	orderexpiry.seats             counter {seat}: seats moved by cancelled,
//	    paid, repaired, release_failed and sell_failed events, by kind
//	orderexpiry.handle.duration   histogram s: how long handling a message
//	    took, by outcome
//	orderexpiry.cancel.hop        histogram {hop}: the hop of the message that
//	    cancelled an order (messages per expired order)
//	orderexpiry.rearm.remaining   histogram s: the time left when an early
//	    message was re-armed
//	orderexpiry.cancel.lateness   histogram s: how long after its deadline an
//	    order was cancelled, by the store's clock, by reason (timeout and
//	    reconcile; cancels before the deadline are not recorded)
//	orderexpiry.expired_orders    counter {order}: orders cancelled past their
//	    deadline, by path: "message" or "reconciler" (the message path's
//	    losses)
//	orderexpiry.discrepancies     counter {payment}: payments that could not
//	    be honoured, once per payment id, by reason
//	orderexpiry.refunds           counter {call}: the refund hook, by result:
//	    "refunded" (once per payment id) or "hook_failed" (called again by
//	    the reconciler); the warning hook's failures are not counted here
//	orderexpiry.reinstated        counter {order}: late payments that
//	    reinstated a cancelled order
//	orderexpiry.warnings          counter {warning}: expiry warnings fired
//	orderexpiry.deadline_changes  counter {change}: deadlines extended or
//	    brought forward
//
// The streams of expired_orders and refunds exist from the start, at 0, so
// that a ratio over them is 0 rather than absent. The histograms have
// expiry/prometheus's bucket boundaries.
//
// An OverduePoller reads the order store every interval (the Overdue method
// of cancel/sqlstore's or cancel/memstore's Store) and reports the last read
// through observable gauges; until the first successful read they have no
// data point:
//
//	orderexpiry.overdue.orders       gauge {order}: pending orders past their
//	    deadline, by the store's clock: the gauge that pages someone when
//	    expiry messages are being lost
//	orderexpiry.overdue.oldest       gauge s: how long past its deadline the
//	    oldest of them is (0 when none)
//	orderexpiry.overdue.last_poll    gauge s: Unix time of the last successful
//	    read (alert when it is stale)
//	orderexpiry.overdue.poll_errors  counter {error}: failed reads (the
//	    gauges keep the last values read)
//
// It is a module of its own (github.com/seatflow/orderexpiry/expiry/otel),
// so that a host that does not use OpenTelemetry has none of its modules in
// its graph.
//
// # Names
//
//   - Tracer, NewTracer, Observer, NewObserver, OverduePoller,
//     NewOverduePoller, PollerConfig, Config: the tracer, the metrics and the
//     overdue gauges, and their wiring;
//   - SendSpan, ProcessSpan, AttrOrderNo, AttrHop, AttrDelay, AttrOutcome,
//     ScopeName: the span names, attribute keys and instrumentation scope a
//     host's queries and dashboards match on;
//   - Carrier: the trace context as a propagation.TextMapCarrier, for a
//     transport of the host's own that carries it in its headers.
package otel

import (
	"context"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seatflow/orderexpiry/expiry"
)

// ScopeName is the instrumentation scope of the spans and of the metrics:
// the name the Tracer asks its TracerProvider for, and the Observer and the
// OverduePoller their MeterProvider.
const ScopeName = "github.com/seatflow/orderexpiry/expiry/otel"

// The span names.
const (
	SendSpan    = "orderexpiry send"
	ProcessSpan = "orderexpiry process"
)

// The span attributes. Order numbers are attributes of spans (one span per
// message), never labels of metrics.
const (
	AttrOrderNo = attribute.Key("orderexpiry.order_no")
	AttrHop     = attribute.Key("orderexpiry.hop")
	AttrDelay   = attribute.Key("orderexpiry.delay_ms") // send: the delay asked for
	AttrOutcome = attribute.Key("orderexpiry.outcome")  // process: expiry.Outcome's name
)

// Config configures a Tracer, an Observer and an OverduePoller. The zero
// Config uses the global TracerProvider and MeterProvider and the W3C trace
// context propagator.
type Config struct {
	// TracerProvider makes the spans; nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in the message; nil:
	// propagation.TraceContext{}. (Not the global propagator: its default
	// carries nothing.) Only the traceparent and tracestate keys travel
	// (see Carrier); a propagator's other keys, baggage say, are dropped.
	Propagator propagation.TextMapPropagator
	// MeterProvider makes the metric instruments of an Observer and an
	// OverduePoller; nil: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Tracer is an expiry.Tracer on OpenTelemetry. Safe for concurrent use.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

var _ expiry.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer.
func NewTracer(c Config) *Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otelapi.GetTracerProvider()
	}
	prop := c.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{t: tp.Tracer(ScopeName), prop: prop}
}

// StartSend implements expiry.Tracer: a producer span, child of the span in
// ctx (the placing request's, or the handling of the message being
// re-armed), whose context the message carries.
func (t *Tracer) StartSend(ctx context.Context, m expiry.Message, delay time.Duration) (context.Context, expiry.Trace, func(error)) {
	ctx, span := t.t.Start(ctx, SendSpan, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(AttrOrderNo.String(m.OrderNo), AttrHop.Int(m.Hop), AttrDelay.Int64(delay.Milliseconds())))
	var tc expiry.Trace
	t.prop.Inject(ctx, Carrier{Trace: &tc})
	return ctx, tc, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "send failed")
		}
		span.End()
	}
}

// StartHandle implements expiry.Tracer: a consumer span, child of the send
// span the message's trace context names, or a new root when it names none
// that the propagator can read.
func (t *Tracer) StartHandle(ctx context.Context, m expiry.Message) (context.Context, func(expiry.Outcome, error)) {
	tc := m.Trace
	extracted := t.prop.Extract(ctx, Carrier{Trace: &tc})
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrOrderNo.String(m.OrderNo), AttrHop.Int(m.Hop))}
	if !trace.SpanContextFromContext(extracted).IsValid() {
		// Nothing readable in the message: a trace of its own, not a child
		// of whatever the transport's context happens to hold.
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := t.t.Start(extracted, ProcessSpan, opts...)
	return ctx, func(o expiry.Outcome, err error) {
		span.SetAttributes(AttrOutcome.String(o.String()))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "handling failed; the message will be redelivered")
		}
		span.End()
	}
}

// Carrier is a propagation.TextMapCarrier over an expiry.Trace: the keys
// traceparent and tracestate map to its fields, and any other key is not
// carried (Get returns "", Set does nothing), so a message carries only the
// W3C trace context, bounded by expiry.Trace.Clean.
type Carrier struct {
	Trace *expiry.Trace
}

var _ propagation.TextMapCarrier = Carrier{}

// Get implements propagation.TextMapCarrier.
func (c Carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.Trace.Parent
	case "tracestate":
		return c.Trace.State
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c Carrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.Trace.Parent = value
	case "tracestate":
		c.Trace.State = value
	}
}

// Keys implements propagation.TextMapCarrier.
func (c Carrier) Keys() []string { return []string{"traceparent", "tracestate"} }
