package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	oeotel "github.com/seatflow/orderexpiry/expiry/otel"
	"github.com/seatflow/orderexpiry/levels"
	"github.com/seatflow/orderexpiry/reconcile"
)

// meters is a MeterProvider whose metrics the test collects on demand.
type meters struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newMeters(t *testing.T) meters {
	r := sdkmetric.NewManualReader()
	m := meters{reader: r, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
	t.Cleanup(func() { require.NoError(t, m.mp.Shutdown(context.Background())) })
	return m
}

func newObserver(t *testing.T) (*oeotel.Observer, meters) {
	m := newMeters(t)
	o, err := oeotel.NewObserver(oeotel.Config{MeterProvider: m.mp})
	require.NoError(t, err)
	return o, m
}

// collected is one collection, by instrument name.
type collected map[string]metricdata.Metrics

func (m meters) collect(t *testing.T) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, m.reader.Collect(context.Background(), &rm))
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, oeotel.ScopeName, sm.Scope.Name)
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt
		}
	}
	return out
}

// matches says whether set has every one of kvs.
func matches(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum is the total of counter name over the data points that have kvs.
func (c collected) sum(t *testing.T, name string, kvs ...attribute.KeyValue) int64 {
	t.Helper()
	mt, ok := c[name]
	if !ok {
		return 0
	}
	data, ok := mt.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 counter, not %T", name, mt.Data)
	require.True(t, data.IsMonotonic, name)
	var n int64
	for _, dp := range data.DataPoints {
		if matches(dp.Attributes, kvs) {
			n += dp.Value
		}
	}
	return n
}

// hist is the count and sum of histogram name over the data points that have kvs.
func (c collected) hist(t *testing.T, name string, kvs ...attribute.KeyValue) (count uint64, sum float64) {
	t.Helper()
	mt, ok := c[name]
	if !ok {
		return 0, 0
	}
	switch data := mt.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, dp := range data.DataPoints {
			if matches(dp.Attributes, kvs) {
				count, sum = count+dp.Count, sum+dp.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, dp := range data.DataPoints {
			if matches(dp.Attributes, kvs) {
				count, sum = count+dp.Count, sum+float64(dp.Sum)
			}
		}
	default:
		t.Fatalf("%s is a histogram, not %T", name, mt.Data)
	}
	return count, sum
}

// gauge is the value of gauge name, and whether it has one.
func (c collected) gauge(t *testing.T, name string) (float64, bool) {
	t.Helper()
	mt, ok := c[name]
	if !ok {
		return 0, false
	}
	switch data := mt.Data.(type) {
	case metricdata.Gauge[int64]:
		if len(data.DataPoints) == 1 {
			return float64(data.DataPoints[0].Value), true
		}
	case metricdata.Gauge[float64]:
		if len(data.DataPoints) == 1 {
			return data.DataPoints[0].Value, true
		}
	default:
		t.Fatalf("%s is a gauge, not %T", name, mt.Data)
	}
	return 0, false
}

var (
	kindKey    = attribute.Key("orderexpiry.kind")
	detailKey  = attribute.Key("orderexpiry.detail")
	reasonKey  = attribute.Key("orderexpiry.reason")
	pathKey    = attribute.Key("orderexpiry.path")
	resultKey  = attribute.Key("orderexpiry.result")
	outcomeKey = oeotel.AttrOutcome
)

type processorFunc func(ctx context.Context, d expiry.Delivery) expiry.Verdict

func (f processorFunc) Process(ctx context.Context, d expiry.Delivery) expiry.Verdict {
	return f(ctx, d)
}

// delivered is one message the consumer handled, as the test saw it.
type delivered struct {
	msg expiry.Message
	at  time.Time // the fake clock's, which is also the stores'
}

// TestObserverThroughTheLibrary wires the Observer into the real Handler,
// Shell, Scheduler, cancel.Service and Reconciler (in-memory stores, the
// in-process sender on a fake clock), makes the library do one of each
// thing an operator watches, and checks that the collected data points say
// what the library did, as its calls returned it, its hooks saw it and its
// stores hold it.
func TestObserverThroughTheLibrary(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	o, m := newObserver(t)
	rt := expiry.Runtime{Observer: o, Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	store, seats := memstore.NewStore(clock.Now), memstore.NewSeats(clock.Now)

	var hookCalls, hookFailures, warned atomic.Int32
	sender := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}, Levels: levels.Default, Slack: -1})
	t.Cleanup(func() { require.NoError(t, sender.Close()) })
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: rt, WarnBefore: 2 * time.Second})
	require.NoError(t, err)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: rt, Scheduler: sched,
		AcceptLatePayments: true, DiscrepancyLease: 5 * time.Second, // over before the reconciler retries the hook
		OnDiscrepancy: func(context.Context, cancel.Discrepancy) error {
			if hookCalls.Add(1) == 1 {
				hookFailures.Add(1)
				return errors.New("payment provider down")
			}
			return nil
		},
		OnWarning: func(context.Context, expiry.Order) error { warned.Add(1); return nil },
	})
	require.NoError(t, err)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: sender, Runtime: rt})
	require.NoError(t, err)
	shell := expiry.NewShell(h)
	var mu sync.Mutex
	var deliveries []delivered
	verdicts := map[expiry.Verdict]int{}
	sender.Attach(processorFunc(func(ctx context.Context, d expiry.Delivery) expiry.Verdict {
		msg, err := expiry.DecodeMessage(d.Body)
		require.NoError(t, err)
		v := shell.Process(ctx, d)
		mu.Lock()
		deliveries = append(deliveries, delivered{msg, clock.Now()})
		verdicts[v]++
		mu.Unlock()
		return v
	}))
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: rt})
	require.NoError(t, err)
	// unsent places orders whose message is lost: the same stores, no
	// Scheduler, so Place sends nothing.
	unsent, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: rt})
	require.NoError(t, err)

	deadlines := map[string]time.Time{}
	place := func(no string, ttl time.Duration, schedule bool) {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no + "-a", no + "-b"}, ExpireAt: clock.Now().Add(ttl)}
		placer := svc // schedules the expiry and the warning once the insert committed
		if !schedule {
			placer = unsent
		}
		require.NoError(t, placer.Place(ctx, p, store.Place))
		deadlines[no] = p.ExpireAt
	}
	place("expires", 7*time.Second, true) // default levels: 5 s, then re-armed for the 2 s left
	place("paid", 7*time.Second, true)
	place("lost", 3*time.Second, false) // its message was lost: the reconciler's
	place("user", time.Hour, false)

	ext, err := svc.Extend(ctx, "paid", "u1", time.Minute)
	require.NoError(t, err)
	require.True(t, ext.Changed, "an extension")
	paid, err := svc.Pay(ctx, cancel.Payment{OrderNo: "paid", UserID: "u1", PaymentID: "pay-1"})
	require.NoError(t, err)
	require.True(t, paid.Changed)
	userCancel, err := svc.UserCancel(ctx, "user", "u1")
	require.NoError(t, err)
	require.True(t, userCancel.Changed)
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "user", UserID: "u1", PaymentID: "pay-2"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a payment for an order its user cancelled")
	require.EqualValues(t, 1, hookFailures.Load(), "the refund hook failed once")

	for range 10 {
		clock.Advance(time.Second)
	}
	require.Eventually(t, func() bool {
		o, err := store.Order(ctx, "expires")
		return err == nil && o.Status == expiry.StatusCancelled
	}, 5*time.Second, time.Millisecond, "its message cancels it")
	roundAt := clock.Now()
	rep, err := r.Round(ctx) // the lost order, and the refund's retry
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired)
	require.Equal(t, 1, rep.Refunds)
	late, err := svc.Pay(ctx, cancel.Payment{OrderNo: "expires", UserID: "u1", PaymentID: "pay-3"})
	require.NoError(t, err)
	require.True(t, late.Changed, "a late payment reinstates the order its timeout cancelled")
	for no, want := range map[string]expiry.Status{"expires": expiry.StatusPaid, "paid": expiry.StatusPaid, "lost": expiry.StatusCancelled, "user": expiry.StatusCancelled} {
		o, err := store.Order(ctx, no)
		require.NoError(t, err)
		require.Equal(t, want, o.Status, no)
	}

	c := m.collect(t)
	mu.Lock()
	defer mu.Unlock()
	var total int
	for _, n := range verdicts {
		total += n
	}
	// The consumer's deliveries: every one timed once, by its outcome.
	n, _ := c.hist(t, "orderexpiry.handle.duration")
	assert.EqualValues(t, total, n, "every delivery is timed once")
	assert.EqualValues(t, total, c.sum(t, "orderexpiry.events", kindKey.String("handled")))
	// The order its message cancelled: one cancelling delivery, at the
	// hop of its last message, as late as the clock was past its deadline.
	var last delivered
	for _, d := range deliveries {
		if d.msg.OrderNo == "expires" && !d.msg.Warning && d.msg.Hop > last.msg.Hop {
			last = d
		}
	}
	require.Greater(t, last.msg.Hop, 1, "the 7 s order arrived early at 5 s and was re-armed")
	n, _ = c.hist(t, "orderexpiry.handle.duration", outcomeKey.String("cancelled"))
	assert.EqualValues(t, 1, n)
	n, hops := c.hist(t, "orderexpiry.cancel.hop")
	assert.EqualValues(t, 1, n)
	assert.EqualValues(t, last.msg.Hop, hops)
	n, lateness := c.hist(t, "orderexpiry.cancel.lateness", reasonKey.String("timeout"))
	assert.EqualValues(t, 1, n)
	assert.InDelta(t, last.at.Sub(deadlines["expires"]).Seconds(), lateness, 1e-9, "by the stores' clock")
	rearms := c.sum(t, "orderexpiry.events", kindKey.String("rearmed"))
	assert.EqualValues(t, last.msg.Hop-1, rearms, "one re-arm per hop before the last")
	n, _ = c.hist(t, "orderexpiry.rearm.remaining")
	assert.EqualValues(t, rearms, n)
	assert.EqualValues(t, rearms, c.sum(t, "orderexpiry.events", kindKey.String("handled"), detailKey.String("rearmed")))
	// How the expired orders were caught: one by its message, one by the
	// reconciler (its report), which cancelled it with reason reconcile.
	assert.EqualValues(t, 1, c.sum(t, "orderexpiry.expired_orders", pathKey.String("message")))
	assert.EqualValues(t, rep.Expired, c.sum(t, "orderexpiry.expired_orders", pathKey.String("reconciler")))
	n, lateness = c.hist(t, "orderexpiry.cancel.lateness", reasonKey.String("reconcile"))
	assert.EqualValues(t, 1, n)
	assert.InDelta(t, roundAt.Sub(deadlines["lost"]).Seconds(), lateness, 1e-9, "the lost order, 7 s late by the stores' clock")
	for reason, want := range map[string]int64{"timeout": 1, "reconcile": 1, "user": 1} {
		assert.Equal(t, want, c.sum(t, "orderexpiry.events", kindKey.String("cancelled"), detailKey.String(reason)), reason)
	}
	// Seats: three orders of two seats cancelled, one paid; the late
	// payment's reinstatement is counted as such.
	assert.EqualValues(t, 3*2, c.sum(t, "orderexpiry.seats", kindKey.String("cancelled")))
	assert.EqualValues(t, len(paid.Seats), c.sum(t, "orderexpiry.seats", kindKey.String("paid")))
	assert.EqualValues(t, 1, c.sum(t, "orderexpiry.reinstated"))
	// Payments that could not be honoured, and their refund hook's calls.
	assert.EqualValues(t, 1, c.sum(t, "orderexpiry.discrepancies", reasonKey.String("paid_after_cancelled")))
	assert.EqualValues(t, hookFailures.Load(), c.sum(t, "orderexpiry.refunds", resultKey.String("hook_failed")))
	assert.EqualValues(t, hookCalls.Load()-hookFailures.Load(), c.sum(t, "orderexpiry.refunds", resultKey.String("refunded")))
	// The warning hook's calls and the deadline the extension moved.
	assert.Positive(t, warned.Load(), "the order that expired was warned")
	assert.EqualValues(t, warned.Load(), c.sum(t, "orderexpiry.warnings"))
	assert.EqualValues(t, 1, c.sum(t, "orderexpiry.deadline_changes"))
	// Nothing failed.
	for _, kind := range []string{"send_failed", "release_failed", "sell_failed", "bad_message", "skipped"} {
		assert.Zero(t, c.sum(t, "orderexpiry.events", kindKey.String(kind)), kind)
	}
	assert.Equal(t, 0, verdicts[expiry.Retry])
}

// The instruments have OpenTelemetry's names, units and descriptions, and
// the bounded streams exist before their first event, at 0.
func TestObserverInstruments(t *testing.T) {
	o, m := newObserver(t)
	c := m.collect(t)
	for _, name := range []string{"orderexpiry.expired_orders", "orderexpiry.refunds"} {
		require.Contains(t, c, name)
		assert.Len(t, c[name].Data.(metricdata.Sum[int64]).DataPoints, 2, "%s: its two streams, at 0", name)
		assert.Zero(t, c.sum(t, name))
	}

	// One event of each kind reaches every instrument.
	now := time.Now()
	for k := expiry.Kind(1); k.String() != "unknown"; k++ {
		o.Observe(context.Background(), expiry.Event{Kind: k, Outcome: expiry.OutcomeCancelled, Reason: "timeout", Hop: 1, Seats: 1,
			Delay: time.Second, Deadline: now.Add(-time.Second), At: now})
	}
	o.Observe(context.Background(), expiry.Event{Kind: expiry.KindRepaired, Reason: "expired"})
	c = m.collect(t)
	units := map[string]string{}
	for name, mt := range c {
		units[name] = mt.Unit
		assert.NotEmpty(t, mt.Description, name)
	}
	assert.Equal(t, map[string]string{
		"orderexpiry.events":           "{event}",
		"orderexpiry.seats":            "{seat}",
		"orderexpiry.handle.duration":  "s",
		"orderexpiry.cancel.hop":       "{hop}",
		"orderexpiry.rearm.remaining":  "s",
		"orderexpiry.cancel.lateness":  "s",
		"orderexpiry.expired_orders":   "{order}",
		"orderexpiry.discrepancies":    "{payment}",
		"orderexpiry.refunds":          "{call}",
		"orderexpiry.reinstated":       "{order}",
		"orderexpiry.warnings":         "{warning}",
		"orderexpiry.deadline_changes": "{change}",
	}, units)
	for k := expiry.Kind(1); k.String() != "unknown"; k++ {
		assert.Positive(t, c.sum(t, "orderexpiry.events", kindKey.String(k.String())), "every kind is counted: %s", k)
	}
	// The histograms have expiry/prometheus's buckets.
	bounds := func(name string) []float64 {
		switch data := c[name].Data.(type) {
		case metricdata.Histogram[float64]:
			return data.DataPoints[0].Bounds
		case metricdata.Histogram[int64]:
			return data.DataPoints[0].Bounds
		}
		t.Fatalf("%s is no histogram", name)
		return nil
	}
	assert.Equal(t, []float64{1, 2, 3, 4, 6, 8, 12, 16}, bounds("orderexpiry.cancel.hop"))
	assert.Equal(t, []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}, bounds("orderexpiry.cancel.lateness"))
}

func TestObserverMeasurements(t *testing.T) {
	ctx := context.Background()
	deadline := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		event  expiry.Event
		metric string
		attrs  []attribute.KeyValue
		want   int64
	}{
		{"a final delivery is no hop", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeFinal, Hop: 2},
			"orderexpiry.cancel.hop", nil, 0},
		{"a user's cancel before the deadline is not late", expiry.Event{Kind: expiry.KindCancelled, Reason: "user", Deadline: deadline, At: deadline.Add(-time.Minute)},
			"orderexpiry.cancel.lateness", nil, 0},
		{"no lateness without the store's clock", expiry.Event{Kind: expiry.KindCancelled, Reason: "timeout"},
			"orderexpiry.cancel.lateness", nil, 0},
		{"other repairs are no expiries", expiry.Event{Kind: expiry.KindRepaired, Reason: "released", Seats: 1},
			"orderexpiry.expired_orders", []attribute.KeyValue{pathKey.String("reconciler")}, 0},
		{"repairs count their seats", expiry.Event{Kind: expiry.KindRepaired, Reason: "restored", Seats: 4},
			"orderexpiry.seats", []attribute.KeyValue{kindKey.String("repaired")}, 4},
		{"release failures count their seats", expiry.Event{Kind: expiry.KindReleaseFailed, Seats: 2, Err: errors.New("down")},
			"orderexpiry.seats", []attribute.KeyValue{kindKey.String("release_failed")}, 2},
		{"a failed warning hook is no refund's", expiry.Event{Kind: expiry.KindHookFailed, Reason: "warning", Err: errors.New("mailer down")},
			"orderexpiry.refunds", nil, 0},
		{"but it is an event", expiry.Event{Kind: expiry.KindHookFailed, Reason: "warning", Err: errors.New("mailer down")},
			"orderexpiry.events", []attribute.KeyValue{kindKey.String("hook_failed")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, m := newObserver(t)
			o.Observe(ctx, tc.event)
			c := m.collect(t)
			var got int64
			if _, ok := c[tc.metric].Data.(metricdata.Sum[int64]); ok {
				got = c.sum(t, tc.metric, tc.attrs...)
			} else {
				n, _ := c.hist(t, tc.metric, tc.attrs...)
				got = int64(n)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestNoOrderNumberOrErrorInAttributes(t *testing.T) {
	o, m := newObserver(t)
	for k := expiry.Kind(1); k.String() != "unknown"; k++ {
		o.Observe(context.Background(), expiry.Event{Kind: k, OrderNo: "SECRET-ORDER", Err: errors.New("SECRET-ERROR"), Seats: 1, Hop: 1})
	}
	for name, mt := range m.collect(t) {
		var sets []attribute.Set
		switch data := mt.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		case metricdata.Histogram[int64]:
			for _, dp := range data.DataPoints {
				sets = append(sets, dp.Attributes)
			}
		}
		for _, s := range sets {
			for _, kv := range s.ToSlice() {
				assert.NotContains(t, kv.Value.Emit(), "SECRET", "%s{%s}: unbounded values must not become attributes", name, kv.Key)
			}
		}
	}
}

func TestOverduePollerOnMemstore(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	store := memstore.NewStore(clock.Now)
	m := newMeters(t)
	p, err := oeotel.NewOverduePoller(oeotel.Config{MeterProvider: m.mp}, store.Overdue, oeotel.PollerConfig{})
	require.NoError(t, err)
	c := m.collect(t)
	_, ok := c.gauge(t, "orderexpiry.overdue.orders")
	assert.False(t, ok, "no data point before the first read")
	assert.Zero(t, c.sum(t, "orderexpiry.overdue.poll_errors"))

	require.NoError(t, p.Poll(ctx))
	c = m.collect(t)
	for _, name := range []string{"orderexpiry.overdue.orders", "orderexpiry.overdue.oldest"} {
		v, ok := c.gauge(t, name)
		assert.True(t, ok, name)
		assert.Zero(t, v, name)
	}

	for no, ttl := range map[string]time.Duration{"a": time.Second, "b": 10 * time.Second, "c": time.Hour} {
		require.NoError(t, store.Place(ctx, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: clock.Now().Add(ttl)}))
	}
	clock.Advance(70 * time.Second)
	before := time.Now()
	require.NoError(t, p.Poll(ctx))
	c = m.collect(t)
	v, _ := c.gauge(t, "orderexpiry.overdue.orders")
	assert.Equal(t, 2.0, v, "a and b are past their deadline, c is not")
	v, _ = c.gauge(t, "orderexpiry.overdue.oldest")
	assert.Equal(t, 69.0, v, "a, by the store's clock")
	v, _ = c.gauge(t, "orderexpiry.overdue.last_poll")
	assert.InDelta(t, float64(before.UnixMilli())/1e3, v, 5, "the time of the read")
	assert.Equal(t, "s", c["orderexpiry.overdue.oldest"].Unit)

	// A failed read is counted and leaves the last values.
	store.Fail = func(op string) error {
		if op == "Overdue" {
			return errors.New("database down")
		}
		return nil
	}
	assert.Error(t, p.Poll(ctx))
	c = m.collect(t)
	v, _ = c.gauge(t, "orderexpiry.overdue.orders")
	assert.Equal(t, 2.0, v)
	assert.EqualValues(t, 1, c.sum(t, "orderexpiry.overdue.poll_errors"))
	store.Fail = nil

	// The reconciler cancels them: nothing overdue at the next read.
	seats := memstore.NewSeats(clock.Now)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: expiry.Runtime{Clock: clock, Logger: quiet}})
	require.NoError(t, err)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Expired)
	require.NoError(t, p.Poll(ctx))
	c = m.collect(t)
	for _, name := range []string{"orderexpiry.overdue.orders", "orderexpiry.overdue.oldest"} {
		v, _ := c.gauge(t, name)
		assert.Zero(t, v, name)
	}

	require.NoError(t, p.Close())
	_, ok = m.collect(t).gauge(t, "orderexpiry.overdue.orders")
	assert.False(t, ok, "closed: no longer reported")
}

func TestOverduePollerRun(t *testing.T) {
	var reads atomic.Int32
	overdue := func(context.Context) (int, time.Duration, error) { reads.Add(1); return 1, time.Second, nil }
	m := newMeters(t)
	p, err := oeotel.NewOverduePoller(oeotel.Config{MeterProvider: m.mp}, overdue, oeotel.PollerConfig{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	require.Eventually(t, func() bool { return reads.Load() >= 3 }, 5*time.Second, time.Millisecond, "reads at once, then every interval")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	v, ok := m.collect(t).gauge(t, "orderexpiry.overdue.orders")
	assert.True(t, ok)
	assert.Equal(t, 1.0, v)

	_, err = oeotel.NewOverduePoller(oeotel.Config{MeterProvider: m.mp}, nil, oeotel.PollerConfig{})
	assert.Error(t, err)
	_, err = oeotel.NewOverduePoller(oeotel.Config{MeterProvider: m.mp}, overdue, oeotel.PollerConfig{Interval: -1})
	assert.Error(t, err)
}

// The package documentation's table (README.md) names every instrument the
// package creates, each beside the Prometheus metric it matches.
func TestREADMETableNamesEveryInstrument(t *testing.T) {
	o, m := newObserver(t)
	p, err := oeotel.NewOverduePoller(oeotel.Config{MeterProvider: m.mp}, memstore.NewStore(nil).Overdue, oeotel.PollerConfig{})
	require.NoError(t, err)
	require.NoError(t, p.Poll(context.Background()))
	for k := expiry.Kind(1); k.String() != "unknown"; k++ {
		o.Observe(context.Background(), expiry.Event{Kind: k, Outcome: expiry.OutcomeCancelled, Reason: "timeout", Hop: 1, Seats: 1,
			Delay: time.Second, Deadline: time.Now().Add(-time.Second), At: time.Now()})
	}
	var have []string
	for name := range m.collect(t) {
		have = append(have, name)
	}
	slices.Sort(have)
	table := readmeTable(t)
	var documented []string
	for name := range table {
		documented = append(documented, name)
	}
	slices.Sort(documented)
	assert.Equal(t, have, documented)
}

var tableRow = regexp.MustCompile("^\\| `(orderexpiry\\.[a-z_.]+)` \\|.*\\| `(orderexpiry_[a-z_]+)(\\{[a-z, ]*\\})?` \\|$")

// readmeTable returns README.md's table of instruments: each OpenTelemetry
// name with its Prometheus metric. The package documentation lists the same
// names.
func readmeTable(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	require.NoError(t, err)
	doc, err := os.ReadFile("otel.go")
	require.NoError(t, err)
	out := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if m := tableRow.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[2]
			assert.Contains(t, string(doc), m[1]+" ", "the package documentation lists %s", m[1])
		}
	}
	require.NotEmpty(t, out, "README.md has the table")
	return out
}
