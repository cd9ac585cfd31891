package prometheus_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
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
	n, err := testutil.GatherAndCount(reg, "orderexpiry_events_total")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("event series:", n)
	// Output:
	// seats: true
	// event series: 2
}

// The overdue gauges: an OverduePoller reads the order store (sqlstore's or,
// here, memstore's Store) every interval; run it beside the reconciler.
func ExampleOverduePoller() {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	store := memstore.NewStore(func() time.Time { return now })
	ctx := context.Background()
	if err := store.Place(ctx, cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: now.Add(-90 * time.Second)}); err != nil {
		log.Fatal(err)
	}

	reg := prom.NewRegistry()
	poller, err := prometheus.NewOverduePoller(reg, "", store.Overdue, prometheus.PollerConfig{Interval: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := poller.Poll(ctx); err != nil { // in a host: go poller.Run(ctx)
		log.Fatal(err)
	}

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP orderexpiry_overdue_orders Pending orders past their deadline by the store's clock, at the last successful read.
# TYPE orderexpiry_overdue_orders gauge
orderexpiry_overdue_orders 1
# HELP orderexpiry_overdue_oldest_seconds How long past its deadline the oldest overdue pending order is (0 when none), at the last successful read.
# TYPE orderexpiry_overdue_oldest_seconds gauge
orderexpiry_overdue_oldest_seconds 90
`), "orderexpiry_overdue_orders", "orderexpiry_overdue_oldest_seconds")
	fmt.Println("overdue:", err == nil)
	// Output:
	// overdue: true
}
