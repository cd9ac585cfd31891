package otel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	oeotel "github.com/seatflow/orderexpiry/expiry/otel"
	"github.com/seatflow/orderexpiry/levels"
)

// client-go leaves goroutines behind after Shutdown (the same list as
// expiry/rocketmq's tests); ours must not.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func4"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func5"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func6"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*pushConsumer).Start.func1.2"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.1"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.2"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.3"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.4"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*remotingClient).receiveResponse"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*ResponseFuture).waitResponse"),
	)
}

// world is the whole library in memory with a fake clock, traced into an
// in-memory span recorder.
type world struct {
	clock  *expirytest.FakeClock
	store  *memstore.Store
	seats  *memstore.Seats
	svc    *cancel.Service
	sender *inproc.Sender
	sched  *expiry.Scheduler
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

// newWorld wires it with RocketMQ's default delay levels and no slack, so a
// 45 s order takes three hops: 30 s, 10 s, 5 s.
func newWorld(t *testing.T) *world {
	w := &world{clock: expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)), spans: tracetest.NewSpanRecorder()}
	w.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.spans))
	t.Cleanup(func() { _ = w.tp.Shutdown(context.Background()) })
	tracer := oeotel.NewTracer(oeotel.Config{TracerProvider: w.tp})
	w.store, w.seats = memstore.NewStore(w.clock.Now), memstore.NewSeats(w.clock.Now)
	var err error
	w.svc, err = cancel.New(cancel.Config{Store: w.store, Seats: w.seats})
	require.NoError(t, err)
	w.sender = inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: w.clock}, Levels: levels.Default, Slack: -1, RetryDelay: time.Second})
	t.Cleanup(func() { _ = w.sender.Close() })
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.sender, Runtime: expiry.Runtime{Tracer: tracer}})
	require.NoError(t, err)
	w.sender.Attach(expiry.NewShell(h))
	w.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: w.sender, Runtime: expiry.Runtime{Clock: w.clock, Tracer: tracer}})
	require.NoError(t, err)
	return w
}

// place places an order in the span of a placing request, as an HTTP
// handler instrumented with OpenTelemetry would, and returns that span.
func (w *world) place(t *testing.T, no string, ttl time.Duration) trace.SpanContext {
	ctx, span := w.tp.Tracer("host").Start(context.Background(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-a"}, ExpireAt: w.clock.Now().Add(ttl)}
	require.NoError(t, w.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		if err := w.store.Place(ctx, p); err != nil {
			return err
		}
		w.sched.Schedule(ctx, p.OrderNo, p.ExpireAt) // after commit
		return nil
	}))
	return span.SpanContext()
}

func (w *world) status(t *testing.T, no string) expiry.Status {
	o, err := w.store.Order(context.Background(), no)
	require.NoError(t, err)
	return o.Status
}

// byName returns the ended spans called name, in the order they started.
func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// One trace from place to cancel, across a re-armed chain of three hops:
// POST /orders → send (hop 1) → process (hop 1, re-armed) → send (hop 2) →
// process (hop 2, re-armed) → send (hop 3) → process (hop 3, cancelled).
func TestOneTraceFromPlaceToCancel(t *testing.T) {
	w := newWorld(t)
	place := w.place(t, "A1", 45*time.Second)
	w.clock.Advance(45 * time.Second)
	require.Equal(t, expiry.StatusCancelled, w.status(t, "A1"))

	spans := w.spans.Ended()
	for _, s := range spans {
		assert.Equal(t, place.TraceID(), s.SpanContext().TraceID(), "span %s is in the placing request's trace", s.Name())
	}
	sends, handles := byName(spans, oeotel.SendSpan), byName(spans, oeotel.ProcessSpan)
	require.Len(t, sends, 3)
	require.Len(t, handles, 3)
	parent := place.SpanID()
	for i := range 3 {
		assert.Equal(t, parent, sends[i].Parent().SpanID(), "send %d's parent", i+1)
		assert.Equal(t, trace.SpanKindProducer, sends[i].SpanKind())
		assert.Equal(t, int64(i+1), attr(sends[i], oeotel.AttrHop).AsInt64())
		assert.Equal(t, sends[i].SpanContext().SpanID(), handles[i].Parent().SpanID(), "hop %d is handled in its send's span", i+1)
		assert.True(t, handles[i].Parent().IsRemote(), "the parent came through the message")
		assert.Equal(t, trace.SpanKindConsumer, handles[i].SpanKind())
		assert.Equal(t, "A1", attr(handles[i], oeotel.AttrOrderNo).AsString())
		parent = handles[i].SpanContext().SpanID()
	}
	assert.Equal(t, "rearmed", attr(handles[0], oeotel.AttrOutcome).AsString())
	assert.Equal(t, "rearmed", attr(handles[1], oeotel.AttrOutcome).AsString())
	assert.Equal(t, "cancelled", attr(handles[2], oeotel.AttrOutcome).AsString())
}

// A redelivered message (the store was down the first time) is handled
// twice in the same trace, each a child of the one send.
func TestRedeliveryStaysInTheTrace(t *testing.T) {
	w := newWorld(t)
	var failed atomic.Bool
	w.store.Fail = func(op string) error {
		if op == "CancelPending" && failed.CompareAndSwap(false, true) {
			return errors.New("database down")
		}
		return nil
	}
	place := w.place(t, "R1", 30*time.Second)
	w.clock.Advance(30 * time.Second) // fails: redelivered after a second
	w.clock.Advance(time.Second)
	require.Equal(t, expiry.StatusCancelled, w.status(t, "R1"))
	spans := w.spans.Ended()
	sends, handles := byName(spans, oeotel.SendSpan), byName(spans, oeotel.ProcessSpan)
	require.Len(t, sends, 1)
	require.Len(t, handles, 2)
	for _, h := range handles {
		assert.Equal(t, place.TraceID(), h.SpanContext().TraceID())
		assert.Equal(t, sends[0].SpanContext().SpanID(), h.Parent().SpanID())
	}
	assert.Equal(t, "failed", attr(handles[0], oeotel.AttrOutcome).AsString())
	assert.Equal(t, "Error", handles[0].Status().Code.String(), "a failed handling is an error span")
	assert.Equal(t, "cancelled", attr(handles[1], oeotel.AttrOutcome).AsString())
}

// A message whose trace context is malformed, oversized or missing is
// handled all the same, in a new trace of its own: never dropped.
func TestBadTraceContextStartsANewRoot(t *testing.T) {
	for name, tc := range map[string]expiry.Trace{
		"missing":            {},
		"malformed":          {Parent: "00-not-a-trace-01", State: "k=v"},
		"all-zero trace id":  {Parent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		"unknown version ff": {Parent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"oversized":          {Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + strings.Repeat("-0", 4096)},
		"control bytes":      {Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			p := cancel.Placement{OrderNo: "B1", UserID: "u1", ShowID: "s1", Seats: []string{"b"}, ExpireAt: w.clock.Now().Add(5 * time.Second)}
			_, err := w.seats.Lock(context.Background(), p.Hold(), 0)
			require.NoError(t, err)
			require.NoError(t, w.store.Place(context.Background(), p))
			// Sent as a foreign or older producer would: the trace context
			// is the message's, not this process's.
			require.NoError(t, w.sender.Send(context.Background(), expiry.Message{OrderNo: "B1", Hop: 1, Trace: tc}, 5*time.Second))
			w.clock.Advance(5 * time.Second)
			assert.Equal(t, expiry.StatusCancelled, w.status(t, "B1"), "handled whatever its trace context")
			handles := byName(w.spans.Ended(), oeotel.ProcessSpan)
			require.Len(t, handles, 1)
			assert.False(t, handles[0].Parent().IsValid(), "a new root")
			assert.True(t, handles[0].SpanContext().IsValid())
			assert.Equal(t, "cancelled", attr(handles[0], oeotel.AttrOutcome).AsString())
		})
	}
}

// The carrier carries only the W3C fields: a propagator that writes other
// keys (baggage, say) cannot grow the message.
func TestCarrierKeys(t *testing.T) {
	var tc expiry.Trace
	c := oeotel.Carrier{Trace: &tc}
	c.Set("traceparent", "p")
	c.Set("tracestate", "s")
	c.Set("baggage", "b")
	assert.Equal(t, expiry.Trace{Parent: "p", State: "s"}, tc)
	assert.Equal(t, "p", c.Get("traceparent"))
	assert.Equal(t, "", c.Get("baggage"))
	assert.Equal(t, []string{"traceparent", "tracestate"}, c.Keys())
}
