package prometheus_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/expiry/prometheus"
	"github.com/seatflow/orderexpiry/levels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newObserver(t *testing.T) (*prometheus.Observer, *prom.Registry) {
	reg := prom.NewPedanticRegistry()
	o, err := prometheus.New(reg, "")
	require.NoError(t, err)
	return o, reg
}

func count(t *testing.T, reg *prom.Registry, metric string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

func TestEventsBecomeMetrics(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		event  expiry.Event
		metric string
		labels map[string]string
		want   float64
	}{
		{"handled counts by outcome", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeFinal, Duration: time.Millisecond, Hop: 3},
			"orderexpiry_events_total", map[string]string{"kind": "handled", "detail": "final"}, 1},
		{"handled is timed", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeRearmed, Duration: time.Millisecond},
			"orderexpiry_handle_seconds", map[string]string{"outcome": "rearmed"}, 1},
		{"a cancelling delivery records its hop", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeCancelled, Hop: 2},
			"orderexpiry_cancel_hop", nil, 1},
		{"a final delivery does not count as a hop", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeFinal, Hop: 2},
			"orderexpiry_cancel_hop", nil, 0},
		{"re-arms record the time left", expiry.Event{Kind: expiry.KindRearmed, Delay: 5 * time.Second, Hop: 2},
			"orderexpiry_rearm_remaining_seconds", nil, 1},
		{"cancels count by reason", expiry.Event{Kind: expiry.KindCancelled, Reason: "timeout", Seats: 3},
			"orderexpiry_events_total", map[string]string{"kind": "cancelled", "detail": "timeout"}, 1},
		{"cancels count their seats", expiry.Event{Kind: expiry.KindCancelled, Reason: "user", Seats: 3},
			"orderexpiry_seats_total", map[string]string{"kind": "cancelled"}, 3},
		{"release failures count their seats", expiry.Event{Kind: expiry.KindReleaseFailed, Seats: 2, Err: errors.New("down")},
			"orderexpiry_seats_total", map[string]string{"kind": "release_failed"}, 2},
		{"repairs count by reason", expiry.Event{Kind: expiry.KindRepaired, Reason: "restored", Seats: 4},
			"orderexpiry_events_total", map[string]string{"kind": "repaired", "detail": "restored"}, 1},
		{"discrepancies count by reason", expiry.Event{Kind: expiry.KindDiscrepancy, Reason: "paid_after_cancelled"},
			"orderexpiry_events_total", map[string]string{"kind": "discrepancy", "detail": "paid_after_cancelled"}, 1},
		{"send failures have no detail", expiry.Event{Kind: expiry.KindSendFailed, Err: errors.New("broker down")},
			"orderexpiry_events_total", map[string]string{"kind": "send_failed", "detail": ""}, 1},
		{"bad messages", expiry.Event{Kind: expiry.KindBadMessage, Err: expiry.ErrBadMessage},
			"orderexpiry_events_total", map[string]string{"kind": "bad_message"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, reg := newObserver(t)
			o.Observe(ctx, tc.event)
			assert.Equal(t, tc.want, count(t, reg, tc.metric, tc.labels))
			problems, err := testutil.GatherAndLint(reg)
			require.NoError(t, err)
			assert.Empty(t, problems, "metric names and help follow Prometheus conventions")
		})
	}
}

func TestNoOrderNumberOrErrorInLabels(t *testing.T) {
	o, reg := newObserver(t)
	for i, k := range []expiry.Kind{expiry.KindHandled, expiry.KindRearmed, expiry.KindSendFailed, expiry.KindCancelled,
		expiry.KindReleaseFailed, expiry.KindPaid, expiry.KindDiscrepancy, expiry.KindBadMessage, expiry.KindRepaired, expiry.KindSellFailed} {
		o.Observe(context.Background(), expiry.Event{Kind: k, OrderNo: "SECRET-ORDER", Err: errors.New("SECRET-ERROR"), Seats: i, Hop: 1})
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.NotContains(t, lp.GetValue(), "SECRET", "%s{%s}: unbounded values must not become labels", mf.GetName(), lp.GetName())
			}
		}
	}
}

func TestRegistration(t *testing.T) {
	reg := prom.NewRegistry()
	_, err := prometheus.New(reg, "shop")
	require.NoError(t, err)
	_, err = prometheus.New(reg, "shop")
	require.Error(t, err, "the same namespace twice on one registry")
	assert.Contains(t, err.Error(), `namespace "shop" is already registered`)
	_, err = prometheus.New(reg, "other")
	require.NoError(t, err, "another namespace is independent")
}

type processorFunc func(ctx context.Context, d expiry.Delivery) expiry.Verdict

func (f processorFunc) Process(ctx context.Context, d expiry.Delivery) expiry.Verdict {
	return f(ctx, d)
}

// TestThroughTheLibrary wires the Observer into the real Handler, Shell,
// Scheduler and cancel.Service (in-memory stores, in-process sender) and
// checks that what the library did is what the metrics say.
func TestThroughTheLibrary(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	o, reg := newObserver(t)
	store, seats := memstore.NewStore(clock.Now), memstore.NewSeats(clock.Now)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: o}})
	require.NoError(t, err)
	sender := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}, Levels: levels.Default, Slack: -1})
	defer sender.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender, Runtime: expiry.Runtime{Observer: o, Logger: quiet}})
	require.NoError(t, err)
	shell := expiry.NewShell(h)
	var mu sync.Mutex
	var verdicts []expiry.Verdict
	sender.Attach(processorFunc(func(ctx context.Context, d expiry.Delivery) expiry.Verdict {
		v := shell.Process(ctx, d)
		mu.Lock()
		verdicts = append(verdicts, v)
		mu.Unlock()
		return v
	}))
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Observer: o, Clock: clock}})
	require.NoError(t, err)

	place := func(no string, ttl time.Duration) {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no + "-a", no + "-b"}, ExpireAt: clock.Now().Add(ttl)}
		_, err := seats.Lock(ctx, p.Hold(), 0)
		require.NoError(t, err)
		require.NoError(t, store.Place(ctx, p))
		require.True(t, sched.Schedule(ctx, p.OrderNo, p.ExpireAt))
	}
	place("expires", 7*time.Second) // default levels: 5 s, then re-armed for 2 s (1 s + 1 s)
	place("paid", 7*time.Second)
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "paid", UserID: "u1", PaymentID: "pay-1"})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		clock.Advance(time.Second)
	}
	require.Eventually(t, func() bool {
		return count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "cancelled", "detail": "timeout"}) == 1
	}, 5*time.Second, 10*time.Millisecond)

	assert.Equal(t, 1.0, count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "paid"}))
	assert.Equal(t, 2.0, count(t, reg, "orderexpiry_seats_total", map[string]string{"kind": "paid"}))
	assert.Equal(t, 2.0, count(t, reg, "orderexpiry_seats_total", map[string]string{"kind": "cancelled"}))
	assert.Equal(t, 1.0, count(t, reg, "orderexpiry_cancel_hop", nil), "one cancelling delivery")
	assert.Equal(t, 1.0, count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "handled", "detail": "final"}), "the paid order's message")
	rearms := count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "rearmed"})
	assert.Equal(t, rearms, count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "handled", "detail": "rearmed"}))
	assert.Equal(t, rearms, count(t, reg, "orderexpiry_rearm_remaining_seconds", nil))
	assert.Positive(t, rearms, "7 s on the default levels arrives early at 5 s")
	mu.Lock()
	handled := len(verdicts)
	mu.Unlock()
	var total float64
	for _, outcome := range []string{"cancelled", "final", "rearmed", "missing", "failed"} {
		total += count(t, reg, "orderexpiry_handle_seconds", map[string]string{"outcome": outcome})
	}
	assert.Equal(t, float64(handled), total, "every delivery is timed once")
	assert.Equal(t, 0.0, count(t, reg, "orderexpiry_events_total", map[string]string{"kind": "send_failed"}))
}
