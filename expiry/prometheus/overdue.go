package prometheus

import (
	"context"
	"errors"
	"fmt"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
)

// PollerConfig configures an OverduePoller.
type PollerConfig struct {
	// Interval between reads in Run; 0: 30 seconds.
	Interval time.Duration
	// Timeout bounds each read; 0: 5 seconds.
	Timeout time.Duration
}

// OverduePoller exports the overdue gauges (see the package documentation)
// from the order store, read every interval rather than on each scrape, so
// that neither a scrape nor several Prometheus servers load the database.
// Every instance of a service may run one: they read the same orders. Safe
// for concurrent use.
type OverduePoller struct {
	overdue  func(context.Context) (n int, oldest time.Duration, err error)
	cfg      PollerConfig
	count    prom.Gauge
	oldest   prom.Gauge
	errs     prom.Counter
	lastPoll prom.Gauge
	now      func() time.Time
}

// NewOverduePoller registers the overdue metrics with reg
// (prometheus.DefaultRegisterer if nil) under namespace ("orderexpiry" if
// empty), beside an Observer's, and returns the poller; Run starts it.
//
// overdue reads how far the expiry path is behind: pass the Overdue method
// of cancel/sqlstore's or cancel/memstore's Store (one indexed query). It
// returns n, the pending orders whose expire_at is at or before the
// store's clock, and oldest, how long past its expire_at the earliest of
// them is by the store's clock (0 when n is 0). Orders are overdue for a
// moment in normal running (a message lands up to its slack late); many, or
// an old one, mean messages are being lost and the reconciler is the only
// thing cancelling. An error means the read failed and says nothing of the
// orders. It must be safe for concurrent use.
func NewOverduePoller(reg prom.Registerer, namespace string, overdue func(context.Context) (n int, oldest time.Duration, err error), c PollerConfig) (*OverduePoller, error) {
	switch {
	case overdue == nil:
		return nil, errors.New("prometheus: nil overdue function")
	case c.Interval < 0 || c.Timeout < 0:
		return nil, fmt.Errorf("prometheus: negative PollerConfig (%+v)", c)
	}
	if reg == nil {
		reg = prom.DefaultRegisterer
	}
	if namespace == "" {
		namespace = "orderexpiry"
	}
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	p := &OverduePoller{overdue: overdue, cfg: c, now: time.Now,
		count: prom.NewGauge(prom.GaugeOpts{Namespace: namespace, Name: "overdue_orders",
			Help: "Pending orders past their deadline by the store's clock, at the last successful read."}),
		oldest: prom.NewGauge(prom.GaugeOpts{Namespace: namespace, Name: "overdue_oldest_seconds",
			Help: "How long past its deadline the oldest overdue pending order is (0 when none), at the last successful read."}),
		errs: prom.NewCounter(prom.CounterOpts{Namespace: namespace, Name: "overdue_poll_errors_total",
			Help: "Failed reads of the overdue orders; the gauges keep the last values read."}),
		lastPoll: prom.NewGauge(prom.GaugeOpts{Namespace: namespace, Name: "overdue_last_poll_timestamp_seconds",
			Help: "Unix time of the last successful read of the overdue orders."}),
	}
	if err := register(reg, namespace, p.count, p.oldest, p.errs, p.lastPoll); err != nil {
		return nil, err
	}
	return p, nil
}

// Poll reads the store once and updates the gauges; on an error it counts
// it, leaves the gauges as they were and returns it.
func (p *OverduePoller) Poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	n, oldest, err := p.overdue(ctx)
	if err != nil {
		p.errs.Inc()
		return fmt.Errorf("prometheus: read overdue orders: %w", err)
	}
	p.count.Set(float64(n))
	p.oldest.Set(max(oldest, 0).Seconds())
	p.lastPoll.Set(float64(p.now().UnixMilli()) / 1e3)
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
