package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/internal/fake"
)

// The pay side of the race: a payment that arrives after the timeout has
// cancelled the order changes nothing and reaches the refund hook. (The
// in-memory stores stand in for cancel/sqlstore and cancel/redisseat.)
func ExampleService_Pay() {
	ctx := context.Background()
	store, seats := fake.NewStore(nil), fake.NewSeats(nil)
	svc, _ := cancel.New(cancel.Config{Store: store, Seats: seats, Seller: seats,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) {
			fmt.Println("refund", d.OrderNo, "to", d.UserID)
		}})
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: time.Now().Add(-time.Second)}
	_, _ = seats.Lock(ctx, p.Hold(), 0)
	_ = store.Place(ctx, p)

	cancelled, _, _ := svc.Timeout(ctx, "A1")
	fmt.Println("timeout cancelled:", cancelled)
	_, err := svc.Pay(ctx, "A1", "u1")
	fmt.Println(errors.Is(err, cancel.ErrDiscrepancy))
	// Output:
	// timeout cancelled: true
	// refund A1 to u1
	// true
}
