// Package prometheus exports orderexpiry's events as Prometheus metrics: an
// expiry.Observer to pass to every component that takes one (the Handler,
// the Shell, the Scheduler, cancel.Service, the Reconciler).
//
// Metrics (the namespace is configurable, "orderexpiry" by default):
//
//	orderexpiry_events_total{kind, detail}      every Event; detail is the
//	    Handler's outcome (kind "handled"), the reason (kinds "cancelled",
//	    "discrepancy", "repaired"), or empty
//	orderexpiry_seats_total{kind}               seats moved by cancelled,
//	    paid, repaired, release_failed and sell_failed events
//	orderexpiry_handle_seconds{outcome}         how long handling a message took
//	orderexpiry_cancel_hop                      the hop of the message that
//	    cancelled an order: hops per expired order (1 in timer mode; the
//	    level rule's count in levels mode)
//	orderexpiry_rearm_remaining_seconds         the time left when an early
//	    message was re-armed
//
// Labels take only bounded values: kinds, outcomes and reasons are a fixed
// set (cancel reasons are the host's, validated by cancel.Service). Order
// numbers and errors are never labels; log them instead.
package prometheus

import (
	"context"
	"errors"
	"fmt"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/seatflow/orderexpiry/expiry"
)

// Observer is an expiry.Observer that updates Prometheus metrics. It is safe
// for concurrent use; Observe only increments counters and observes
// histograms.
type Observer struct {
	events  *prom.CounterVec
	seats   *prom.CounterVec
	handle  *prom.HistogramVec
	hops    prom.Histogram
	rearmed prom.Histogram
}

// New registers the metrics with reg (prometheus.DefaultRegisterer if nil)
// under namespace ("orderexpiry" if empty) and returns the Observer. It fails
// if the metrics are already registered there, for example by a second New
// with the same namespace.
func New(reg prom.Registerer, namespace string) (*Observer, error) {
	if reg == nil {
		reg = prom.DefaultRegisterer
	}
	if namespace == "" {
		namespace = "orderexpiry"
	}
	o := &Observer{
		events: prom.NewCounterVec(prom.CounterOpts{Namespace: namespace, Name: "events_total",
			Help: "Events of the order expiry path, by kind and outcome or reason."}, []string{"kind", "detail"}),
		seats: prom.NewCounterVec(prom.CounterOpts{Namespace: namespace, Name: "seats_total",
			Help: "Seats released, sold, repaired or left for repair, by event kind."}, []string{"kind"}),
		handle: prom.NewHistogramVec(prom.HistogramOpts{Namespace: namespace, Name: "handle_seconds",
			Help:    "Time to handle one expiry message, by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"outcome"}),
		hops: prom.NewHistogram(prom.HistogramOpts{Namespace: namespace, Name: "cancel_hop",
			Help:    "Hop number of the message that cancelled an order (messages per expired order).",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16}}),
		rearmed: prom.NewHistogram(prom.HistogramOpts{Namespace: namespace, Name: "rearm_remaining_seconds",
			Help:    "Time left before the deadline when an early message was re-armed.",
			Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 7200}}),
	}
	for _, c := range []prom.Collector{o.events, o.seats, o.handle, o.hops, o.rearmed} {
		if err := reg.Register(c); err != nil {
			var dup prom.AlreadyRegisteredError
			if errors.As(err, &dup) {
				return nil, fmt.Errorf("prometheus: namespace %q is already registered: %w", namespace, err)
			}
			return nil, fmt.Errorf("prometheus: register: %w", err)
		}
	}
	return o, nil
}

// Observe implements expiry.Observer.
func (o *Observer) Observe(_ context.Context, e expiry.Event) {
	kind := e.Kind.String()
	detail := ""
	switch e.Kind {
	case expiry.KindHandled:
		detail = e.Outcome.String()
		o.handle.WithLabelValues(detail).Observe(e.Duration.Seconds())
		if e.Outcome == expiry.OutcomeCancelled && e.Hop > 0 {
			o.hops.Observe(float64(e.Hop))
		}
	case expiry.KindRearmed:
		o.rearmed.Observe(e.Delay.Seconds())
	case expiry.KindCancelled, expiry.KindDiscrepancy, expiry.KindRepaired:
		detail = e.Reason
	}
	o.events.WithLabelValues(kind, detail).Inc()
	switch e.Kind {
	case expiry.KindCancelled, expiry.KindPaid, expiry.KindRepaired, expiry.KindReleaseFailed, expiry.KindSellFailed:
		if e.Seats > 0 {
			o.seats.WithLabelValues(kind).Add(float64(e.Seats))
		}
	}
}
