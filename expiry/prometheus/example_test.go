package prometheus_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/prometheus"
)

// Create one Observer per process and pass it to every component that takes
// an expiry.Observer (HandlerConfig, NewShell, SchedulerConfig, cancel.Config,
// reconcile.Config); serve the registry with promhttp as usual.
func Example() {
	reg := prom.NewRegistry()
	obs, err := prometheus.New(reg, "")
	if err != nil {
		log.Fatal(err)
	}
	// What the library reports when a message cancels an order with 2 seats:
	ctx := context.Background()
	obs.Observe(ctx, expiry.Event{Kind: expiry.KindCancelled, OrderNo: "A1", Reason: "timeout", Seats: 2})
	obs.Observe(ctx, expiry.Event{Kind: expiry.KindHandled, OrderNo: "A1", Outcome: expiry.OutcomeCancelled, Hop: 2})

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP orderexpiry_seats_total Seats released, sold, repaired or left for repair, by event kind.
# TYPE orderexpiry_seats_total counter
orderexpiry_seats_total{kind="cancelled"} 2
`), "orderexpiry_seats_total")
	fmt.Println("seats:", err == nil)
	n, _ := testutil.GatherAndCount(reg, "orderexpiry_events_total")
	fmt.Println("event series:", n)
	// Output:
	// seats: true
	// event series: 2
}
