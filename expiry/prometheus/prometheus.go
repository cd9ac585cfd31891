// Package prometheus exports orderexpiry's events as Prometheus metrics: an
// expiry.Observer to pass to every component that takes one (the Handler,
// the Shell, the Scheduler, cancel.Service, the Reconciler).
//
// Metrics (the namespace is configurable, "orderexpiry" by default):
//
//	orderexpiry_events_total{kind, detail}      every Event; detail is the
//	    Handler's outcome (kind "handled"), the reason (kinds "cancelled",
//	    "discrepancy", "repaired", "diverged"), or empty; alert on any
//	    "diverged": SQL lost commits the seat store kept (a failover)
//	orderexpiry_seats_total{kind}               seats moved by cancelled,
//	    paid, repaired, release_failed and sell_failed events
//	orderexpiry_handle_seconds{outcome}         how long handling a message took
//	orderexpiry_cancel_hop                      the hop of the message that
//	    cancelled an order: hops per expired order (1 in timer mode; the
//	    level rule's count in levels mode)
//	orderexpiry_rearm_remaining_seconds         the time left when an early
//	    message was re-armed
//	orderexpiry_cancel_lateness_seconds{reason} how long after its deadline
//	    each order was cancelled, by the store's clock (reasons timeout and
//	    reconcile: the expiry path's punctuality; user cancels before the
//	    deadline are not observed)
//	orderexpiry_expired_orders_total{path}      orders cancelled past their
//	    deadline, by path: "message" (their expiry message) or "reconciler"
//	    (its expired-orders pass): the reconciler's share is the message
//	    path's loss rate
//	orderexpiry_discrepancies_total{reason}     payments that could not be
//	    honoured (paid_after_cancelled, paid_after_paid), once per payment id
//	orderexpiry_refunds_total{result}           the refund hook: "refunded"
//	    (succeeded and settled, once per payment id) or "hook_failed" (to be
//	    called again by the reconciler; the warning hook's failures are in
//	    events_total{kind="hook_failed"} only)
//	orderexpiry_reinstated_total                late payments that reinstated
//	    a cancelled order as paid
//	orderexpiry_warnings_total                  expiry warnings fired
//	orderexpiry_deadline_changes_total          deadlines extended or brought
//	    forward
//
// The overdue gauges come from an OverduePoller, which reads the order store
// (its Overdue method) every interval:
//
//	orderexpiry_overdue_orders                  pending orders past their
//	    deadline: the gauge that pages someone when messages are being lost
//	orderexpiry_overdue_oldest_seconds          how long past its deadline
//	    the oldest of them is (0 when none)
//	orderexpiry_overdue_poll_errors_total       failed reads (the gauges keep
//	    the last values read)
//	orderexpiry_overdue_last_poll_timestamp_seconds  when the last read
//	    succeeded (alert when it is stale)
//
// dashboard.json beside this package is a Grafana dashboard of these metrics
// (namespace "orderexpiry"; import it and pick the Prometheus data source).
//
// Labels take only bounded values: kinds, outcomes and reasons are a fixed
// set (cancel reasons are the host's, validated by cancel.Service). Order
// numbers and errors are never labels; log them instead.
//
// # Names
//
// Observer and New: the metrics. OverduePoller, NewOverduePoller and
// PollerConfig: the overdue gauges, read from the order store.
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
	events     *prom.CounterVec
	seats      *prom.CounterVec
	handle     *prom.HistogramVec
	hops       prom.Histogram
	rearmed    prom.Histogram
	lateness   *prom.HistogramVec
	expired    *prom.CounterVec
	discrep    *prom.CounterVec
	refunds    *prom.CounterVec
	reinstated prom.Counter
	warnings   prom.Counter
	deadlines  prom.Counter
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
		lateness: prom.NewHistogramVec(prom.HistogramOpts{Namespace: namespace, Name: "cancel_lateness_seconds",
			Help:    "How long after its deadline an order was cancelled, by the store's clock, by cancel reason.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}}, []string{"reason"}),
		expired: prom.NewCounterVec(prom.CounterOpts{Namespace: namespace, Name: "expired_orders_total",
			Help: "Orders cancelled past their deadline, by path: their message, or the reconciler (the message path's losses)."}, []string{"path"}),
		discrep: prom.NewCounterVec(prom.CounterOpts{Namespace: namespace, Name: "discrepancies_total",
			Help: "Payments that could not be honoured, once per payment id, by reason."}, []string{"reason"}),
		refunds: prom.NewCounterVec(prom.CounterOpts{Namespace: namespace, Name: "refunds_total",
			Help: "Refund hook calls: refunded (succeeded and settled, once per payment id) or hook_failed (retried)."}, []string{"result"}),
		reinstated: prom.NewCounter(prom.CounterOpts{Namespace: namespace, Name: "reinstated_total",
			Help: "Late payments that reinstated a cancelled order as paid."}),
		warnings: prom.NewCounter(prom.CounterOpts{Namespace: namespace, Name: "warnings_total",
			Help: "Expiry warnings fired before an order's deadline."}),
		deadlines: prom.NewCounter(prom.CounterOpts{Namespace: namespace, Name: "deadline_changes_total",
			Help: "Deadlines of pending orders extended or brought forward."}),
	}
	// The series of bounded label sets exist from the start, so a rate or a
	// ratio over them is 0, not absent, before the first event.
	for _, path := range []string{pathMessage, pathReconciler} {
		o.expired.WithLabelValues(path)
	}
	for _, r := range []string{refundRefunded, refundHookFailed} {
		o.refunds.WithLabelValues(r)
	}
	if err := register(reg, namespace, o.events, o.seats, o.handle, o.hops, o.rearmed, o.lateness, o.expired,
		o.discrep, o.refunds, o.reinstated, o.warnings, o.deadlines); err != nil {
		return nil, err
	}
	return o, nil
}

// The label values of expired_orders_total and refunds_total.
const (
	pathMessage      = "message"
	pathReconciler   = "reconciler"
	refundRefunded   = "refunded"
	refundHookFailed = "hook_failed"
)

func register(reg prom.Registerer, namespace string, cs ...prom.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var dup prom.AlreadyRegisteredError
			if errors.As(err, &dup) {
				return fmt.Errorf("prometheus: namespace %q is already registered: %w", namespace, err)
			}
			return fmt.Errorf("prometheus: register: %w", err)
		}
	}
	return nil
}

// Observe implements expiry.Observer.
func (o *Observer) Observe(_ context.Context, e expiry.Event) {
	kind := e.Kind.String()
	detail := ""
	switch e.Kind {
	case expiry.KindHandled:
		detail = e.Outcome.String()
		o.handle.WithLabelValues(detail).Observe(e.Duration.Seconds())
		if e.Outcome == expiry.OutcomeCancelled {
			o.expired.WithLabelValues(pathMessage).Inc()
			if e.Hop > 0 {
				o.hops.Observe(float64(e.Hop))
			}
		}
	case expiry.KindRearmed:
		o.rearmed.Observe(e.Delay.Seconds())
	case expiry.KindCancelled:
		detail = e.Reason
		if late, ok := e.Lateness(); ok && late >= 0 {
			o.lateness.WithLabelValues(e.Reason).Observe(late.Seconds())
		}
	case expiry.KindRepaired:
		detail = e.Reason
		if e.Reason == "expired" {
			o.expired.WithLabelValues(pathReconciler).Inc()
		}
	case expiry.KindDiscrepancy:
		detail = e.Reason
		o.discrep.WithLabelValues(e.Reason).Inc()
	case expiry.KindRefunded:
		o.refunds.WithLabelValues(refundRefunded).Inc()
	case expiry.KindHookFailed:
		if e.Reason != "warning" { // the warning hook's failures are no refund's
			o.refunds.WithLabelValues(refundHookFailed).Inc()
		}
	case expiry.KindReinstated:
		o.reinstated.Inc()
	case expiry.KindWarned:
		o.warnings.Inc()
	case expiry.KindDeadlineChanged:
		o.deadlines.Inc()
	case expiry.KindDiverged:
		detail = e.Reason // what SQL going back in time left: alert on any
	case expiry.KindProviderAnswered:
		detail = e.Reason // four answers: paid, not_paid, open, unknown
	}
	o.events.WithLabelValues(kind, detail).Inc()
	switch e.Kind {
	case expiry.KindCancelled, expiry.KindPaid, expiry.KindRepaired, expiry.KindReleaseFailed, expiry.KindSellFailed:
		if e.Seats > 0 {
			o.seats.WithLabelValues(kind).Add(float64(e.Seats))
		}
	}
}
