// Package e2e wires the whole library on real (or embedded) servers for the
// end-to-end tests: the race test here, the storm and crash tests, and the
// benchmarks. It also holds the invariant checker those tests share.
package e2e

import (
	"context"
	"database/sql"
	"fmt"
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
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger {
	return &Ledger{Cancelled: map[string]int{}, Paid: map[string]int{}, Released: map[string]int{}, Kinds: map[expiry.Kind]int{}}
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
	cancel.SeatReleaser
	l *Ledger
}

func (c countingReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := c.SeatReleaser.Release(ctx, h)
	if n > 0 {
		c.l.mu.Lock()
		c.l.Released[h.OrderNo] += n
		c.l.mu.Unlock()
	}
	return n, err
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
	w.Service, err = cancel.New(cancel.Config{Store: store, Seats: countingReleaser{w.Seats, w.Ledger}, Seller: w.Seats, Observer: w.Ledger})
	require.NoError(t, err)
	w.Handler, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: w.Service, Sender: w.Rearms, Observer: w.Ledger})
	require.NoError(t, err)
	w.reconfig = reconcile.Config{Expired: store, Canceller: w.Service, Locks: w.Seats, Orders: store,
		Seats: countingReleaser{w.Seats, w.Ledger}, Seller: w.Seats, Claims: store, Restorer: w.Seats,
		Batch: 100, Grace: time.Minute, Observer: w.Ledger}
	// A new namespace is complete by definition: no rebuild from SQL unless
	// a test makes Redis lose it.
	require.NoError(t, w.Seats.MarkRestored(ctx))
	return w
}

// Reconciler returns a new reconciler over the world (one per simulated host).
func (w *World) Reconciler(t testing.TB) *reconcile.Reconciler {
	r, err := reconcile.New(w.reconfig)
	require.NoError(t, err)
	return r
}

// Place does what a host does: lock the seats in Redis, then insert the
// order in one SQL transaction; if that fails, give the seats back.
func (w *World) Place(ctx context.Context, p cancel.Placement) error {
	return Place(ctx, w.DB, w.Store, w.Seats, w.Limit, p)
}

// Place is the host's placing sequence on any store and seat store: lock the
// seats (limit: the purchase limit, 0 none), insert the order in one
// transaction, and give the seats back if that fails, except after a failed
// COMMIT, whose outcome is unknown (the reconciler decides).
func Place(ctx context.Context, db *sql.DB, store *sqlstore.Store, seats *redisseat.Seats, limit int, p cancel.Placement) error {
	if _, err := seats.Lock(ctx, p.Hold(), limit); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	commitUnknown := false
	if err == nil {
		if err = store.Place(ctx, tx, p); err == nil {
			err = tx.Commit()
			commitUnknown = err != nil
		} else {
			_ = tx.Rollback()
		}
	}
	if err != nil && !commitUnknown {
		if _, rerr := seats.Release(ctx, p.Hold()); rerr != nil {
			return fmt.Errorf("%w (and releasing its seats: %v)", err, rerr)
		}
		return err
	}
	return err
}
