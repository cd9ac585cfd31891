package otel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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
	sender := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}})
	defer sender.Close()
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Clock: clock, Tracer: tracer}})
	if err != nil {
		panic(err)
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
	if err != nil {
		panic(err)
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Tracer: tracer}})
	if err != nil {
		panic(err)
	}
	sender.Attach(expiry.NewShell(h))

	// The placing request's span (an instrumented HTTP handler's, in a host).
	ctx, req := tp.Tracer("host").Start(context.Background(), "POST /orders")
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: clock.Now().Add(time.Minute)}
	err = svc.Place(ctx, p, store.Place) // in a host: its SQL transaction; the message after commit
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

// One Observer goes to every component that takes an expiry.Observer (the
// Handler, its Shell, the Scheduler, cancel.Service, the Reconciler); an
// OverduePoller beside the reconciler reads the order store. A host passes
// its own MeterProvider (with a periodic OTLP reader, say); this one is read
// by hand.
func ExampleObserver() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := oeotel.NewObserver(oeotel.Config{MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}

	clock := expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	store, seats := memstore.NewStore(clock.Now), memstore.NewSeats(clock.Now)
	rt := expiry.Runtime{Observer: obs, Clock: clock}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: rt})
	if err != nil {
		log.Fatal(err)
	}
	sender := inproc.New(inproc.Config{Runtime: rt})
	defer sender.Close()
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: rt})
	if err != nil {
		log.Fatal(err)
	}
	sender.Attach(expiry.NewShell(h))
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: rt})
	if err != nil {
		log.Fatal(err)
	}
	poller, err := oeotel.NewOverduePoller(oeotel.Config{MeterProvider: mp}, store.Overdue, oeotel.PollerConfig{Interval: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer poller.Close()

	ctx := context.Background()
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1", "r1c2"}, ExpireAt: clock.Now().Add(time.Minute)}
	err = svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		return store.Place(ctx, p) // in a host: its SQL transaction
	})
	if err != nil {
		log.Fatal(err)
	}
	sched.Schedule(ctx, p.OrderNo, p.ExpireAt) // after commit
	clock.Advance(time.Minute)                 // its message cancels it
	if err := poller.Poll(ctx); err != nil {   // in a host: go poller.Run(ctx)
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			if m.Name == "orderexpiry.expired_orders" || m.Name == "orderexpiry.seats" {
				for _, dp := range data.DataPoints {
					fmt.Printf("%s %s %s: %d\n", m.Name, m.Unit, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
				}
			}
		case metricdata.Gauge[int64]:
			fmt.Printf("%s %s: %d\n", m.Name, m.Unit, data.DataPoints[0].Value)
		}
	}
	// Unordered output:
	// orderexpiry.seats {seat} orderexpiry.kind=cancelled: 2
	// orderexpiry.expired_orders {order} orderexpiry.path=message: 1
	// orderexpiry.expired_orders {order} orderexpiry.path=reconciler: 0
	// orderexpiry.overdue.orders {order}: 0
}
