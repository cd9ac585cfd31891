// Package e2e wires the whole library on real (or embedded) servers for the
// end-to-end tests: the race test here, the storm and crash tests, and the
// benchmarks. It also holds the invariant checker those tests share.
package e2e

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Ledger counts, per order, what the library reports: how many times it was
// cancelled or paid (I1 wants exactly one of the two, once), and how many
// seats were released for it (I2 wants at most its seat count, in total).
type Ledger struct {
	mu        sync.Mutex
	Cancelled map[string]int
	Paid      map[string]int
	Released  map[string]int
	Kinds     map[expiry.Kind]int
	// Refunded counts the refund hook's calls per payment id (I9 wants one).
	Refunded map[string]int
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger {
	return &Ledger{Cancelled: map[string]int{}, Paid: map[string]int{}, Released: map[string]int{}, Kinds: map[expiry.Kind]int{},
		Refunded: map[string]int{}}
}

// refund is the worlds' refund hook: it counts.
func (l *Ledger) refund(_ context.Context, d cancel.Discrepancy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Refunded[d.PaymentID]++
	return nil
}

// Observe implements expiry.Observer.
func (l *Ledger) Observe(_ context.Context, e expiry.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Kinds[e.Kind]++
	switch e.Kind {
	case expiry.KindCancelled:
		l.Cancelled[e.OrderNo]++
	case expiry.KindPaid:
		l.Paid[e.OrderNo]++
	}
}

// Kind returns how many events of kind k were seen.
func (l *Ledger) Kind(k expiry.Kind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Kinds[k]
}

// countingReleaser records every seat a release actually freed.
type countingReleaser struct {
	*redisseat.Seats
	l *Ledger
}

func (c countingReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := c.Seats.Release(ctx, h)
	if n > 0 {
		c.l.mu.Lock()
		c.l.Released[h.OrderNo] += n
		c.l.mu.Unlock()
	}
	return n, err
}

// ReleaseAll records what a batch's release freed, per hold, as Release.
func (c countingReleaser) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := c.Seats.ReleaseAll(ctx, holds)
	c.l.mu.Lock()
	for i, n := range ns {
		c.l.Released[holds[i].OrderNo] += max(n, 0) // -1: its show's step failed
	}
	c.l.mu.Unlock()
	return ns, err
}

// World is the library wired on one database and one Redis.
type World struct {
	DB       *sql.DB
	Store    *sqlstore.Store
	Seats    *redisseat.Seats
	Service  *cancel.Service
	Handler  *expiry.Handler
	Ledger   *Ledger
	Rearms   *Rearms
	ShowID   string
	Limit    int
	config   cancel.Config
	reconfig reconcile.Config
}

// Rearms is a DelaySender that only records re-arms (the race tests drive
// deliveries themselves).
type Rearms struct {
	mu   sync.Mutex
	Sent []expiry.Message
}

// Send implements expiry.DelaySender.
func (r *Rearms) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	r.mu.Lock()
	r.Sent = append(r.Sent, m)
	r.mu.Unlock()
	return nil
}

// NewWorld migrates db and wires everything. show should be unique per test.
func NewWorld(t testing.TB, db *sql.DB, d sqlstore.Dialect, rdb redis.UniversalClient, show string) *World {
	ctx := context.Background()
	store, err := sqlstore.New(db, d)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	// Each world has its own Redis namespace, so its reconcilers never see
	// (and release) the locks of other tests sharing the server.
	seats, err := redisseat.New(rdb, "oe-"+show)
	require.NoError(t, err)
	w := &World{DB: db, Store: store, Seats: seats, Ledger: NewLedger(), Rearms: &Rearms{}, ShowID: show, Limit: 0}
	w.config = cancel.Config{Store: store, Seats: countingReleaser{w.Seats, w.Ledger}, Runtime: expiry.Runtime{Observer: w.Ledger},
		OnDiscrepancy: w.Ledger.refund}
	w.Service, err = cancel.New(w.config)
	require.NoError(t, err)
	w.Handler, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: w.Service, Sender: w.Rearms, Runtime: expiry.Runtime{Observer: w.Ledger}})
	require.NoError(t, err)
	w.reconfig = reconcile.Config{Orders: store, Seats: countingReleaser{w.Seats, w.Ledger}, Service: w.Service,
		Batch: 100, Grace: time.Minute, Runtime: expiry.Runtime{Observer: w.Ledger}}
	// A new namespace is complete by definition: no rebuild from SQL unless
	// a test makes Redis lose it.
	token, lost, err := w.Seats.Lost(ctx)
	require.NoError(t, err)
	if lost {
		require.NoError(t, w.Seats.MarkRestored(ctx, token))
	}
	return w
}

// Scheduling returns a Service like w.Service that sends each order it
// places through sched once its transaction committed
// (cancel.Config.Scheduler): the world's own Service sends nothing, since
// most tests deliver themselves.
func (w *World) Scheduling(t testing.TB, sched *expiry.Scheduler) *cancel.Service {
	c := w.config
	c.Scheduler = sched
	svc, err := cancel.New(c)
	require.NoError(t, err)
	return svc
}

// Reconciler returns a new reconciler over the world (one per simulated host).
func (w *World) Reconciler(t testing.TB) *reconcile.Reconciler {
	r, err := reconcile.New(w.reconfig)
	require.NoError(t, err)
	return r
}

// Place places p the way a host does, through the library's placing call
// (cancel.Service.Place with the SQL store's transaction, no message: the
// tests deliver themselves).
func (w *World) Place(ctx context.Context, p cancel.Placement) error {
	p.Limit = w.Limit
	return w.Service.Place(ctx, p, w.Store.Insert(w.DB, nil))
}
