package prometheus_test

import (
	"context"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/prometheus"
)

// BenchmarkObserve: the cost the Observer adds to each event on the hot path
// (a handled message, a cancel), beside the no-op default.
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	o, err := prometheus.New(prom.NewRegistry(), "")
	if err != nil {
		b.Fatal(err)
	}
	events := []struct {
		name string
		e    expiry.Event
	}{
		{"handled", expiry.Event{Kind: expiry.KindHandled, OrderNo: "A1", Outcome: expiry.OutcomeCancelled, Hop: 2, Duration: time.Millisecond}},
		{"cancelled", expiry.Event{Kind: expiry.KindCancelled, OrderNo: "A1", Reason: "timeout", Seats: 2}},
	}
	for _, ev := range events {
		b.Run(ev.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.Observe(ctx, ev.e)
			}
		})
		b.Run(ev.name+"/nop", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				expiry.NopObserver.Observe(ctx, ev.e)
			}
		})
	}
}
