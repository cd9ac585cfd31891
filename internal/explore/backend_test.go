package explore

import (
	"context"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// A world runs on a backend: the in-memory stores (the exploration), or
// cancel/sqlstore on SQLite, MariaDB or PostgreSQL with cancel/redisseat or
// memstore's seats (the replays, replay_test.go). The world, the gates and
// the ledgers see the stores through these interfaces only.

// orderStore is what a world needs of a tenant's order store: the
// library's cancel.OrderStore (a reconcile round expires a tenant's due
// orders in one batch), and the store's clock for the host (a placement's
// deadline is the store's now plus the window).
type orderStore interface {
	cancel.OrderStore
	Now(ctx context.Context) (time.Time, error)
}

// seatStore is what a world needs of the seat store: the library's
// interfaces, and the observer's reads (Show, Held).
type seatStore interface {
	cancel.SeatStore
	Show(ctx context.Context, show string) (map[string]cancel.SeatState, error)
	Held(ctx context.Context, show, user string) (int, error)
}

var (
	_ orderStore = (*memstore.Store)(nil)
	_ seatStore  = (*memstore.Seats)(nil)
)

// insertFunc is the host's insert of a placement (its own transaction).
type insertFunc func(ctx context.Context, p cancel.Placement) error

// hostRows is the host's own part on a tenant's rows (the host steps).
type hostRows interface {
	// delete deletes order no: soft (the row stays, outside the store's
	// Where) or hard.
	delete(ctx context.Context, no string, soft bool) error
	// hold holds order no's row in a transaction of the host's (SELECT …
	// FOR UPDATE) until letGo is called.
	hold(ctx context.Context, no string) (letGo func(), err error)
}

// orderSide makes a fresh world's order stores, one per tenant.
type orderSide interface {
	// open returns tenant stores (n of them), empty, on clk (the stores
	// that keep no clock of their own use it), with the host's inserts and
	// rows.
	open(clk *fakeClock, n int) ([]orderStore, []insertFunc, []hostRows, error)
	// shift makes every store look as if its clock had moved forward by d,
	// or back for a negative d (nothing to do for stores on clk).
	shift(ctx context.Context, d time.Duration) error
}

// seatSide makes a fresh world's seat store.
type seatSide interface {
	// open returns the seat store, empty, on clk (if it keeps no clock of
	// its own).
	open(clk *fakeClock) (seats, error)
	// shift: as orderSide's.
	shift(ctx context.Context, d time.Duration) error
}

// seats is one world's seat store.
type seats struct {
	root seatStore
	// scoped returns the store's scope of a tenant.
	scoped func(scope string) seatStore
	// now is the seat store's clock, for the observer only (which locks
	// are younger than the grace; the state hash's buckets).
	now func(ctx context.Context) (time.Time, error)
}

// backend is a world's pair of store sides.
type backend struct {
	name   string
	orders orderSide
	seats  seatSide
}

// memory is the exploration's backend: memstore's Store and Seats on the
// world's fake clock.
var memory = backend{name: "memstore", orders: memOrders{}, seats: memSeats{}}

type memOrders struct{}

// open runs the stores on the database's clock (clk.orderNow), which
// steps back alone (world.stepBack).
func (memOrders) open(clk *fakeClock, n int) ([]orderStore, []insertFunc, []hostRows, error) {
	var stores []orderStore
	var inserts []insertFunc
	var hosts []hostRows
	for i := 0; i < n; i++ {
		s := memstore.NewStore(clk.orderNow)
		stores, inserts = append(stores, s), append(inserts, func(ctx context.Context, p cancel.Placement) error { return s.Place(ctx, p) })
		hosts = append(hosts, memHost{s})
	}
	return stores, inserts, hosts, nil
}

// memHost is the host's part on memstore's rows (its test seams): a soft
// delete is a hard one there (the row leaves the store's view either way).
type memHost struct{ s *memstore.Store }

func (h memHost) delete(_ context.Context, no string, _ bool) error {
	if !h.s.DeleteOrder(no) {
		return fmt.Errorf("order %s: %w", no, expiry.ErrNotFound)
	}
	return nil
}

func (h memHost) hold(_ context.Context, no string) (func(), error) { return h.s.HoldRow(no), nil }

func (memOrders) shift(context.Context, time.Duration) error { return nil }

// memSeats is memstore's seat store on the world's clock.
type memSeats struct{}

func (memSeats) open(clk *fakeClock) (seats, error) {
	s := memstore.NewSeats(clk.Now)
	return seats{
		root:   s,
		scoped: func(scope string) seatStore { return scopedSeats(s, scope, clk.Now) },
		now:    s.Now,
	}, nil
}

func (memSeats) shift(context.Context, time.Duration) error { return nil }
