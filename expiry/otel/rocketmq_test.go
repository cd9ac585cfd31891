package otel_test

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	oeotel "github.com/seatflow/orderexpiry/expiry/otel"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// rocketTopic creates a fresh topic on the test broker and waits until it
// has a route.
func rocketTopic(t *testing.T) rocketmq.Config {
	ns := []string{testenv.RocketMQ(t)}
	addr := os.Getenv("OE_ROCKETMQ_BROKER")
	if addr == "" {
		addr = "127.0.0.1:20911"
	}
	name := "oe_otel_" + testenv.Unique()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, rocketmq.EnsureTopic(ctx, ns, addr, name))
	raw, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(ns)), producer.WithGroupName(name+"_probe"), producer.WithInstanceName(name+"_probe"))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	defer raw.Shutdown()
	require.Eventually(t, func() bool {
		_, err := raw.SendSync(ctx, primitive.NewMessage(name, []byte("probe")))
		return err == nil
	}, 20*time.Second, 200*time.Millisecond, "topic %s never got a route", name)
	return rocketmq.Config{NameServers: ns, Topic: name, Group: name + "_g", Slack: -1}
}

// One trace from place to cancel through the real broker: the trace context
// travels as the message's traceparent/tracestate properties, over a
// re-armed chain (levels mode without slack: 3 s is a 1 s hop and a 2 s one).
func TestOneTraceThroughRocketMQ(t *testing.T) {
	cfg := rocketTopic(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := oeotel.NewTracer(oeotel.Config{TracerProvider: tp})

	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	sender, err := rocketmq.NewSender(cfg)
	require.NoError(t, err)
	defer sender.Close()
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Tracer: tracer}})
	require.NoError(t, err)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Tracer: tracer}})
	require.NoError(t, err)
	sctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	consumer, err := rocketmq.StartConsumer(sctx, cfg, expiry.NewShell(h))
	require.NoError(t, err)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, consumer.Close(ctx))
	}()

	ctx, span := tp.Tracer("host").Start(context.Background(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	p := cancel.Placement{OrderNo: "rmq-" + testenv.Unique(), UserID: "u1", ShowID: "s1", Seats: []string{"a"}, ExpireAt: time.Now().Add(3 * time.Second)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		if err := store.Place(ctx, p); err != nil {
			return err
		}
		sched.Schedule(ctx, p.OrderNo, p.ExpireAt)
		return nil
	}))
	span.End()
	place := span.SpanContext()

	require.Eventually(t, func() bool {
		o, err := store.Order(context.Background(), p.OrderNo)
		return err == nil && o.Status == expiry.StatusCancelled
	}, 40*time.Second, 50*time.Millisecond, "cancelled by its message")
	var handles, sends []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool { // the last span ends just after the cancel
		handles, sends = byName(spans.Ended(), oeotel.ProcessSpan), byName(spans.Ended(), oeotel.SendSpan)
		return len(handles) > 0 && attr(handles[len(handles)-1], oeotel.AttrOutcome).AsString() == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, len(handles), 2, "re-armed at least once")
	require.Len(t, sends, len(handles))
	parentOf := map[trace.SpanID]trace.SpanID{}
	for _, s := range append(sends, handles...) {
		assert.Equal(t, place.TraceID(), s.SpanContext().TraceID(), "%s (hop %d) is in the placing request's trace", s.Name(), attr(s, oeotel.AttrHop).AsInt64())
		parentOf[s.SpanContext().SpanID()] = s.Parent().SpanID()
	}
	// Walk from the cancelling handling span up to the placing request.
	id, depth := handles[len(handles)-1].SpanContext().SpanID(), 0
	for id != place.SpanID() {
		next, ok := parentOf[id]
		require.True(t, ok, "span %s has a parent in the chain", id)
		id, depth = next, depth+1
	}
	assert.Equal(t, 2*len(handles), depth, "send and process alternate up to the placing request")
}
