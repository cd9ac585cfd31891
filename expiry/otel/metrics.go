package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/seatflow/orderexpiry/expiry"
)

// The metric attributes. Like expiry/prometheus's labels they take only
// bounded values (kinds, outcomes, reasons, paths, results); order numbers
// and errors are never attributes of a metric.
const (
	attrKind   = attribute.Key("orderexpiry.kind")
	attrDetail = attribute.Key("orderexpiry.detail")
	attrReason = attribute.Key("orderexpiry.reason")
	attrPath   = attribute.Key("orderexpiry.path")
	attrResult = attribute.Key("orderexpiry.result")
)

// The histograms' bucket boundaries: expiry/prometheus's, so that both
// adapters' histograms answer the same quantile queries alike.
var (
	handleBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	hopBuckets      = []float64{1, 2, 3, 4, 6, 8, 12, 16}
	rearmBuckets    = []float64{.1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 7200}
	latenessBuckets = []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// Observer is an expiry.Observer that records orderexpiry's events as
// OpenTelemetry metrics, the measurements expiry/prometheus exports under
// OpenTelemetry's names (see the package documentation's table). Pass one
// to every component that takes an expiry.Observer: the Handler, the Shell,
// the Scheduler, cancel.Service, the Reconciler. Safe for concurrent use;
// Observe only adds to counters and records in histograms, with the
// event's context (so an exemplar can name the span that caused it).
type Observer struct {
	events     metric.Int64Counter
	seats      metric.Int64Counter
	handle     metric.Float64Histogram
	hops       metric.Int64Histogram
	rearmed    metric.Float64Histogram
	lateness   metric.Float64Histogram
	expired    metric.Int64Counter
	discrep    metric.Int64Counter
	refunds    metric.Int64Counter
	reinstated metric.Int64Counter
	warnings   metric.Int64Counter
	deadlines  metric.Int64Counter

	// attrs caches one attribute set per attribute and value pair seen
	// (bounded, like the values): an event then allocates nothing for it.
	attrs sync.Map // attrKey -> metric.MeasurementOption
}

type attrKey struct {
	k1, v1, k2, v2 string
}

var _ expiry.Observer = (*Observer)(nil)

// NewObserver creates the instruments on c.MeterProvider's Meter (the
// global MeterProvider if nil) of instrumentation scope ScopeName. The same
// provider may give several Observers: they record into the same
// instruments.
func NewObserver(c Config) (*Observer, error) {
	m := meter(c)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		i, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	seconds := func(name, desc string, buckets []float64) metric.Float64Histogram {
		i, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return i
	}
	o := &Observer{
		events: counter("orderexpiry.events", "{event}",
			"Events of the order expiry path, by kind and outcome or reason."),
		seats: counter("orderexpiry.seats", "{seat}",
			"Seats released, sold, repaired or left for repair, by event kind."),
		handle: seconds("orderexpiry.handle.duration",
			"Time to handle one expiry message, by outcome.", handleBuckets),
		rearmed: seconds("orderexpiry.rearm.remaining",
			"Time left before the deadline when an early message was re-armed.", rearmBuckets),
		lateness: seconds("orderexpiry.cancel.lateness",
			"How long after its deadline an order was cancelled, by the store's clock, by cancel reason.", latenessBuckets),
		expired: counter("orderexpiry.expired_orders", "{order}",
			"Orders cancelled past their deadline, by path: their message, or the reconciler (the message path's losses)."),
		discrep: counter("orderexpiry.discrepancies", "{payment}",
			"Payments that could not be honoured, once per payment id, by reason."),
		refunds: counter("orderexpiry.refunds", "{call}",
			"Refund hook calls: refunded (succeeded and settled, once per payment id) or hook_failed (retried)."),
		reinstated: counter("orderexpiry.reinstated", "{order}",
			"Late payments that reinstated a cancelled order as paid."),
		warnings: counter("orderexpiry.warnings", "{warning}",
			"Expiry warnings fired before an order's deadline."),
		deadlines: counter("orderexpiry.deadline_changes", "{change}",
			"Deadlines of pending orders extended or brought forward."),
	}
	var err error
	o.hops, err = m.Int64Histogram("orderexpiry.cancel.hop", metric.WithUnit("{hop}"),
		metric.WithDescription("Hop number of the message that cancelled an order (messages per expired order)."),
		metric.WithExplicitBucketBoundaries(hopBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel: create the metric instruments: %w", err)
	}
	// The streams of bounded attribute sets exist from the start, so a rate
	// or a ratio over them is 0, not absent, before the first event.
	ctx := context.Background()
	for _, path := range []string{pathMessage, pathReconciler} {
		o.expired.Add(ctx, 0, o.attr(attrPath, path))
	}
	for _, r := range []string{refundRefunded, refundHookFailed} {
		o.refunds.Add(ctx, 0, o.attr(attrResult, r))
	}
	return o, nil
}

// The values of orderexpiry.expired_orders's path and orderexpiry.refunds's
// result: expiry/prometheus's label values.
const (
	pathMessage      = "message"
	pathReconciler   = "reconciler"
	refundRefunded   = "refunded"
	refundHookFailed = "hook_failed"
)

// meter returns the Meter of c's MeterProvider, or of the global one.
func meter(c Config) metric.Meter {
	mp := c.MeterProvider
	if mp == nil {
		mp = otelapi.GetMeterProvider()
	}
	return mp.Meter(ScopeName)
}

// attr returns the measurement option of one attribute.
func (o *Observer) attr(k attribute.Key, v string) metric.MeasurementOption {
	return o.attrs2(k, v, "", "")
}

// attrs2 returns the measurement option of two attributes (one when k2 is
// empty), cached.
func (o *Observer) attrs2(k1 attribute.Key, v1 string, k2 attribute.Key, v2 string) metric.MeasurementOption {
	key := attrKey{string(k1), v1, string(k2), v2}
	if opt, ok := o.attrs.Load(key); ok {
		return opt.(metric.MeasurementOption)
	}
	kvs := []attribute.KeyValue{k1.String(v1)}
	if k2 != "" {
		kvs = append(kvs, k2.String(v2))
	}
	opt, _ := o.attrs.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(kvs...)))
	return opt.(metric.MeasurementOption)
}

// Observe implements expiry.Observer: the same measurements as
// expiry/prometheus's Observer, event by event.
func (o *Observer) Observe(ctx context.Context, e expiry.Event) {
	kind := e.Kind.String()
	detail := ""
	switch e.Kind {
	case expiry.KindHandled:
		detail = e.Outcome.String()
		o.handle.Record(ctx, e.Duration.Seconds(), o.attr(AttrOutcome, detail))
		if e.Outcome == expiry.OutcomeCancelled {
			o.expired.Add(ctx, 1, o.attr(attrPath, pathMessage))
			if e.Hop > 0 {
				o.hops.Record(ctx, int64(e.Hop))
			}
		}
	case expiry.KindRearmed:
		o.rearmed.Record(ctx, e.Delay.Seconds())
	case expiry.KindCancelled:
		detail = e.Reason
		if late, ok := e.Lateness(); ok && late >= 0 {
			o.lateness.Record(ctx, late.Seconds(), o.attr(attrReason, e.Reason))
		}
	case expiry.KindRepaired:
		detail = e.Reason
		if e.Reason == "expired" {
			o.expired.Add(ctx, 1, o.attr(attrPath, pathReconciler))
		}
	case expiry.KindDiscrepancy:
		detail = e.Reason
		o.discrep.Add(ctx, 1, o.attr(attrReason, e.Reason))
	case expiry.KindRefunded:
		o.refunds.Add(ctx, 1, o.attr(attrResult, refundRefunded))
	case expiry.KindHookFailed:
		if e.Reason != "warning" { // the warning hook's failures are no refund's
			o.refunds.Add(ctx, 1, o.attr(attrResult, refundHookFailed))
		}
	case expiry.KindReinstated:
		o.reinstated.Add(ctx, 1)
	case expiry.KindWarned:
		o.warnings.Add(ctx, 1)
	case expiry.KindDeadlineChanged:
		o.deadlines.Add(ctx, 1)
	}
	if detail == "" {
		o.events.Add(ctx, 1, o.attr(attrKind, kind))
	} else {
		o.events.Add(ctx, 1, o.attrs2(attrKind, kind, attrDetail, detail))
	}
	switch e.Kind {
	case expiry.KindCancelled, expiry.KindPaid, expiry.KindRepaired, expiry.KindReleaseFailed, expiry.KindSellFailed:
		if e.Seats > 0 {
			o.seats.Add(ctx, int64(e.Seats), o.attr(attrKind, kind))
		}
	}
}

// PollerConfig configures an OverduePoller.
type PollerConfig struct {
	// Interval between reads in Run; 0: 30 seconds.
	Interval time.Duration
	// Timeout bounds each read; 0: 5 seconds.
	Timeout time.Duration
}

// OverduePoller records the overdue gauges (see the package documentation)
// from the order store, read every interval rather than at each collection,
// so that neither a collection nor several exporters load the database.
// The gauges report the last successful read; until the first one they have
// no data point. Every instance of a service may run one: they read the
// same orders. Safe for concurrent use.
type OverduePoller struct {
	overdue func(context.Context) (int, time.Duration, error)
	cfg     PollerConfig
	errs    metric.Int64Counter
	reg     metric.Registration
	now     func() time.Time

	mu       sync.Mutex
	read     bool // a read has succeeded
	n        int64
	oldest   time.Duration
	lastRead time.Time
}

// NewOverduePoller creates the overdue instruments on c.MeterProvider's
// Meter (the global MeterProvider if nil), beside an Observer's, and
// returns the poller; Run starts it.
//
// overdue reads the order store: pass the Overdue method of
// cancel/sqlstore's or cancel/memstore's Store. It returns the pending
// orders whose deadline is at or before the store's clock, and how long
// past its deadline the earliest of them is (0 when there is none), as
// for expiry/prometheus's OverduePoller; an error means the read failed
// and says nothing of the orders. It must be safe for concurrent use.
func NewOverduePoller(c Config, overdue func(context.Context) (n int, oldest time.Duration, err error), pc PollerConfig) (*OverduePoller, error) {
	switch {
	case overdue == nil:
		return nil, errors.New("otel: nil overdue function")
	case pc.Interval < 0 || pc.Timeout < 0:
		return nil, fmt.Errorf("otel: negative PollerConfig (%+v)", pc)
	}
	if pc.Interval == 0 {
		pc.Interval = 30 * time.Second
	}
	if pc.Timeout == 0 {
		pc.Timeout = 5 * time.Second
	}
	m := meter(c)
	p := &OverduePoller{overdue: overdue, cfg: pc, now: time.Now}
	count, err1 := m.Int64ObservableGauge("orderexpiry.overdue.orders", metric.WithUnit("{order}"),
		metric.WithDescription("Pending orders past their deadline by the store's clock, at the last successful read."))
	oldest, err2 := m.Float64ObservableGauge("orderexpiry.overdue.oldest", metric.WithUnit("s"),
		metric.WithDescription("How long past its deadline the oldest overdue pending order is (0 when none), at the last successful read."))
	last, err3 := m.Float64ObservableGauge("orderexpiry.overdue.last_poll", metric.WithUnit("s"),
		metric.WithDescription("Unix time of the last successful read of the overdue orders."))
	errs, err4 := m.Int64Counter("orderexpiry.overdue.poll_errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed reads of the overdue orders; the gauges keep the last values read."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("otel: create the overdue instruments: %w", err)
	}
	p.errs = errs
	reg, err := m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.read {
			return nil
		}
		obs.ObserveInt64(count, p.n)
		obs.ObserveFloat64(oldest, p.oldest.Seconds())
		obs.ObserveFloat64(last, float64(p.lastRead.UnixMilli())/1e3)
		return nil
	}, count, oldest, last)
	if err != nil {
		return nil, fmt.Errorf("otel: register the overdue callback: %w", err)
	}
	p.reg = reg
	// The error counter exists from the start, at 0.
	errs.Add(context.Background(), 0)
	return p, nil
}

// Poll reads the store once and updates the gauges; on an error it counts
// it, leaves the gauges as they were and returns it.
func (p *OverduePoller) Poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	n, oldest, err := p.overdue(ctx)
	if err != nil {
		p.errs.Add(ctx, 1)
		return fmt.Errorf("otel: read overdue orders: %w", err)
	}
	now := p.now()
	p.mu.Lock()
	p.read, p.n, p.oldest, p.lastRead = true, int64(n), max(oldest, 0), now
	p.mu.Unlock()
	return nil
}

// Run polls at once and then every interval until ctx is done, and returns
// ctx's error. A failed read is counted and the next one is tried at its
// time.
func (p *OverduePoller) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		_ = p.Poll(ctx) // counted; the gauge of the last success tells its age
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close unregisters the gauges' callback: the provider stops reporting
// them. The poller must not be used after.
func (p *OverduePoller) Close() error {
	if err := p.reg.Unregister(); err != nil {
		return fmt.Errorf("otel: unregister the overdue callback: %w", err)
	}
	return nil
}
