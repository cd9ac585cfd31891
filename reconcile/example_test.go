package reconcile_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/internal/fake"
	"github.com/seatflow/orderexpiry/reconcile"
)

// An order whose expiry message was lost is cancelled by the next round.
// (The in-memory stores stand in for cancel/sqlstore and cancel/redisseat;
// hosts pass the same Store and Seats to every field that takes them.)
func Example() {
	ctx := context.Background()
	store, seats := fake.NewStore(nil), fake.NewSeats(nil)
	svc, _ := cancel.New(cancel.Config{Store: store, Seats: seats})
	r, _ := reconcile.New(reconcile.Config{Expired: store, Canceller: svc, Locks: seats, Orders: store, Seats: seats, Seller: seats})

	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1", "r1c2"}, ExpireAt: time.Now().Add(-time.Minute)}
	_, _ = seats.Lock(ctx, p.Hold(), 0)
	_ = store.Place(ctx, p) // …and the message was never sent

	rep, _ := r.Round(ctx)
	fmt.Println("expired:", rep.Expired)
	held, _ := seats.Held(ctx, "s1", "u1")
	fmt.Println("seats held:", held)
	// Output:
	// expired: 1
	// seats held: 0
}
