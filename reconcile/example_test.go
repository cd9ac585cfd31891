package reconcile_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/reconcile"
)

// An order whose expiry message was lost is cancelled by the next round.
// (The in-memory stores stand in for cancel/sqlstore and cancel/redisseat.)
func Example() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	if err != nil {
		panic(err)
	}
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc})
	if err != nil {
		panic(err)
	}

	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1", "r1c2"}, ExpireAt: time.Now().Add(-time.Minute)}
	// …placed, and its expiry message was never sent.
	if err := svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }); err != nil {
		panic(err)
	}

	rep, err := r.Round(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("expired:", rep.Expired)
	held, err := seats.Held(ctx, "s1", "u1")
	if err != nil {
		panic(err)
	}
	fmt.Println("seats held:", held)
	// Output:
	// expired: 1
	// seats held: 0
}
