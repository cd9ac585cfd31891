package otel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	oeotel "github.com/seatflow/orderexpiry/expiry/otel"
)

// One Tracer goes to the Handler (the handling and the re-arm) and to the
// Scheduler (the first send, in the placing request's context). A host
// passes its own TracerProvider (with an OTLP exporter, say); this one
// records in memory.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	tracer := oeotel.NewTracer(oeotel.Config{TracerProvider: tp})

	clock := expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	store, seats := memstore.NewStore(clock.Now), memstore.NewSeats(clock.Now)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	if err != nil {
		panic(err)
	}
	sender := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}})
	defer sender.Close()
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Tracer: tracer}})
	if err != nil {
		panic(err)
	}
	sender.Attach(expiry.NewShell(h))
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Clock: clock, Tracer: tracer}})
	if err != nil {
		panic(err)
	}

	// The placing request's span (an instrumented HTTP handler's, in a host).
	ctx, req := tp.Tracer("host").Start(context.Background(), "POST /orders")
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: clock.Now().Add(time.Minute)}
	err = svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		if err := store.Place(ctx, p); err != nil { // in a host: its SQL transaction
			return err
		}
		sched.Schedule(ctx, p.OrderNo, p.ExpireAt) // after commit
		return nil
	})
	if err != nil {
		panic(err)
	}
	req.End()

	clock.Advance(time.Minute)
	for _, s := range spans.Ended() {
		fmt.Printf("%-20s same trace: %v\n", s.Name(), s.SpanContext().TraceID() == req.SpanContext().TraceID())
	}
	// Output:
	// orderexpiry send     same trace: true
	// POST /orders         same trace: true
	// orderexpiry process  same trace: true
}
