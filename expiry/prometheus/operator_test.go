package prometheus_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/prometheus"
	"github.com/seatflow/orderexpiry/reconcile"
)

func gauge(t *testing.T, reg *prom.Registry, metric string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == metric {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", metric)
	return 0
}

func TestOperatorMetrics(t *testing.T) {
	ctx := context.Background()
	deadline := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		event  expiry.Event
		metric string
		labels map[string]string
		want   float64
	}{
		{"a timeout's lateness", expiry.Event{Kind: expiry.KindCancelled, Reason: "timeout", Deadline: deadline, At: deadline.Add(time.Second)},
			"orderexpiry_cancel_lateness_seconds", map[string]string{"reason": "timeout"}, 1},
		{"a user's cancel before the deadline is not late", expiry.Event{Kind: expiry.KindCancelled, Reason: "user", Deadline: deadline, At: deadline.Add(-time.Minute)},
			"orderexpiry_cancel_lateness_seconds", nil, 0},
		{"no lateness without the store's clock", expiry.Event{Kind: expiry.KindCancelled, Reason: "timeout"},
			"orderexpiry_cancel_lateness_seconds", nil, 0},
		{"expired by its message", expiry.Event{Kind: expiry.KindHandled, Outcome: expiry.OutcomeCancelled, Hop: 1},
			"orderexpiry_expired_orders_total", map[string]string{"path": "message"}, 1},
		{"caught by the reconciler", expiry.Event{Kind: expiry.KindRepaired, Reason: "expired", Seats: 1},
			"orderexpiry_expired_orders_total", map[string]string{"path": "reconciler"}, 1},
		{"other repairs are not expiries", expiry.Event{Kind: expiry.KindRepaired, Reason: "released", Seats: 1},
			"orderexpiry_expired_orders_total", map[string]string{"path": "reconciler"}, 0},
		{"discrepancies by reason", expiry.Event{Kind: expiry.KindDiscrepancy, Reason: "paid_after_cancelled"},
			"orderexpiry_discrepancies_total", map[string]string{"reason": "paid_after_cancelled"}, 1},
		{"refunded", expiry.Event{Kind: expiry.KindRefunded},
			"orderexpiry_refunds_total", map[string]string{"result": "refunded"}, 1},
		{"refund hook failed", expiry.Event{Kind: expiry.KindHookFailed, Err: errors.New("provider down")},
			"orderexpiry_refunds_total", map[string]string{"result": "hook_failed"}, 1},
		{"a failed warning hook is no refund's", expiry.Event{Kind: expiry.KindHookFailed, Reason: "warning", Err: errors.New("mailer down")},
			"orderexpiry_refunds_total", map[string]string{"result": "hook_failed"}, 0},
		{"reinstated", expiry.Event{Kind: expiry.KindReinstated, Seats: 2}, "orderexpiry_reinstated_total", nil, 1},
		{"warned", expiry.Event{Kind: expiry.KindWarned}, "orderexpiry_warnings_total", nil, 1},
		{"deadline changed", expiry.Event{Kind: expiry.KindDeadlineChanged, Reason: "extended"}, "orderexpiry_deadline_changes_total", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, reg := newObserver(t)
			o.Observe(ctx, tc.event)
			assert.Equal(t, tc.want, count(t, reg, tc.metric, tc.labels))
			problems, err := testutil.GatherAndLint(reg)
			require.NoError(t, err)
			assert.Empty(t, problems)
		})
	}
	// The bounded series exist before their first event, so a ratio of
	// them is 0 rather than absent.
	_, reg := newObserver(t)
	for _, path := range []string{"message", "reconciler"} {
		assert.Equal(t, 0.0, count(t, reg, "orderexpiry_expired_orders_total", map[string]string{"path": path}))
	}
	n, err := testutil.GatherAndCount(reg, "orderexpiry_expired_orders_total", "orderexpiry_refunds_total")
	require.NoError(t, err)
	assert.Equal(t, 4, n)
}

func TestOverduePollerOnMemstore(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	store := memstore.NewStore(clock.Now)
	reg := prom.NewPedanticRegistry()
	p, err := prometheus.NewOverduePoller(reg, "", store.Overdue, prometheus.PollerConfig{})
	require.NoError(t, err)
	require.NoError(t, p.Poll(ctx))
	assert.Equal(t, 0.0, gauge(t, reg, "orderexpiry_overdue_orders"))
	assert.Equal(t, 0.0, gauge(t, reg, "orderexpiry_overdue_oldest_seconds"))

	for no, ttl := range map[string]time.Duration{"a": time.Second, "b": 10 * time.Second, "c": time.Hour} {
		require.NoError(t, store.Place(ctx, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: clock.Now().Add(ttl)}))
	}
	clock.Advance(70 * time.Second)
	require.NoError(t, p.Poll(ctx))
	assert.Equal(t, 2.0, gauge(t, reg, "orderexpiry_overdue_orders"), "a and b are past their deadline, c is not")
	assert.Equal(t, 69.0, gauge(t, reg, "orderexpiry_overdue_oldest_seconds"), "a, by the store's clock")
	assert.Positive(t, gauge(t, reg, "orderexpiry_overdue_last_poll_timestamp_seconds"))

	// A failed read is counted and leaves the last values.
	store.Fail = func(op string) error {
		if op == "Overdue" {
			return errors.New("database down")
		}
		return nil
	}
	assert.Error(t, p.Poll(ctx))
	assert.Equal(t, 2.0, gauge(t, reg, "orderexpiry_overdue_orders"))
	assert.Equal(t, 1.0, count(t, reg, "orderexpiry_overdue_poll_errors_total", nil))
	store.Fail = nil

	// The reconciler cancels them: nothing overdue at the next read.
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(clock.Now)})
	require.NoError(t, err)
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: memstore.NewSeats(clock.Now), Service: svc, Runtime: expiry.Runtime{Clock: clock}})
	require.NoError(t, err)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Expired)
	require.NoError(t, p.Poll(ctx))
	assert.Equal(t, 0.0, gauge(t, reg, "orderexpiry_overdue_orders"))
	assert.Equal(t, 0.0, gauge(t, reg, "orderexpiry_overdue_oldest_seconds"))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

type countingOverdue struct{ n atomic.Int32 }

func (c *countingOverdue) Overdue(context.Context) (int, time.Duration, error) {
	c.n.Add(1)
	return 1, time.Second, nil
}

func TestOverduePollerRun(t *testing.T) {
	src := &countingOverdue{}
	p, err := prometheus.NewOverduePoller(prom.NewRegistry(), "", src.Overdue, prometheus.PollerConfig{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	require.Eventually(t, func() bool { return src.n.Load() >= 3 }, 5*time.Second, time.Millisecond, "reads at once, then every interval")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)

	_, err = prometheus.NewOverduePoller(prom.NewRegistry(), "", nil, prometheus.PollerConfig{})
	assert.Error(t, err)
	_, err = prometheus.NewOverduePoller(prom.NewRegistry(), "", src.Overdue, prometheus.PollerConfig{Interval: -1})
	assert.Error(t, err)
	reg := prom.NewRegistry()
	_, err = prometheus.NewOverduePoller(reg, "shop", src.Overdue, prometheus.PollerConfig{})
	require.NoError(t, err)
	_, err = prometheus.NewOverduePoller(reg, "shop", src.Overdue, prometheus.PollerConfig{})
	assert.ErrorContains(t, err, `namespace "shop" is already registered`)
}

// exported gathers every metric family the package exports (an Observer
// after one event of each kind, and an OverduePoller after one read), with
// its type.
func exported(t *testing.T) map[string]string {
	reg := prom.NewPedanticRegistry()
	o, err := prometheus.New(reg, "")
	require.NoError(t, err)
	p, err := prometheus.NewOverduePoller(reg, "", memstore.NewStore(nil).Overdue, prometheus.PollerConfig{})
	require.NoError(t, err)
	require.NoError(t, p.Poll(context.Background()))
	now := time.Now()
	for k := expiry.Kind(1); k.String() != "unknown"; k++ {
		o.Observe(context.Background(), expiry.Event{Kind: k, Outcome: expiry.OutcomeCancelled, Reason: "timeout", Hop: 1, Seats: 1,
			Delay: time.Second, Deadline: now.Add(-time.Second), At: now})
	}
	o.Observe(context.Background(), expiry.Event{Kind: expiry.KindRepaired, Reason: "expired"})
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]string{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetType().String()
	}
	return out
}

var (
	metricRef   = regexp.MustCompile(`\borderexpiry_[a-z0-9_]+`)
	selectorRef = regexp.MustCompile(`\borderexpiry_[a-z0-9_]+\{([^}]*)\}`)
)

// The dashboard an operator imports (dashboard.json) references only
// metrics this package exports, and shows every one of them.
func TestDashboardReferencesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	require.NoError(t, err)
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Name  string `json:"name"`
				Query any    `json:"query"`
				Multi bool   `json:"multi"`
				All   bool   `json:"includeAll"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash), "valid JSON")
	require.NotEmpty(t, dash.UID)
	// An operator picks the data source, and narrows every panel to some
	// jobs and instances, from the dashboard's own variables.
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" {
			assert.True(t, v.Multi && v.All, "variable %s takes several values and All", v.Name)
		}
	}
	assert.Equal(t, map[string]string{"datasource": "datasource", "job": "query", "instance": "query"}, vars)

	have := exported(t)
	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		assert.Equal(t, "${datasource}", p.Datasource.UID, "panel %q uses the chosen data source", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, tg := range p.Targets {
			refs := metricRef.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, refs, "panel %q %s: %s", p.Title, tg.RefID, tg.Expr)
			for _, sel := range selectorRef.FindAllStringSubmatch(tg.Expr, -1) {
				assert.Contains(t, sel[1], `job=~"$job"`, "panel %q %s: %s", p.Title, tg.RefID, sel[0])
				assert.Contains(t, sel[1], `instance=~"$instance"`, "panel %q %s: %s", p.Title, tg.RefID, sel[0])
			}
			assert.Len(t, selectorRef.FindAllString(tg.Expr, -1), len(refs), "panel %q %s: every metric has a selector: %s", p.Title, tg.RefID, tg.Expr)
			for _, ref := range refs {
				name := ref
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(ref, suffix); ok && have[base] == "HISTOGRAM" {
						name = base
					}
				}
				_, ok := have[name]
				assert.True(t, ok, "panel %q references %s, which the adapter does not export", p.Title, ref)
				used[name] = true
			}
		}
	}
	var unused []string
	for name := range have {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "every exported metric is on the dashboard")
	for _, name := range []string{"orderexpiry_overdue_orders", "orderexpiry_overdue_oldest_seconds", "orderexpiry_cancel_lateness_seconds",
		"orderexpiry_expired_orders_total", "orderexpiry_discrepancies_total", "orderexpiry_refunds_total",
		"orderexpiry_reinstated_total", "orderexpiry_warnings_total"} {
		assert.Contains(t, have, name, "the operator's metrics are all exported")
	}
}
