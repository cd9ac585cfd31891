package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The pay side of the race: a payment that arrives after the timeout has
// cancelled the order changes nothing and reaches the refund hook, once per
// payment id however often the provider repeats its callback. (The in-memory
// stores stand in for cancel/sqlstore and cancel/redisseat.)
func ExampleService_Pay() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
		fmt.Println("refund", d.PaymentID, "of", d.OrderNo, "to", d.UserID)
		return nil
	}})
	if err != nil {
		panic(err)
	}
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: time.Now().Add(-time.Second)}
	if err := svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }); err != nil {
		panic(err)
	}

	cancelled, _, err := svc.Timeout(ctx, "A1")
	fmt.Println("timeout cancelled:", cancelled, err)
	for i := 0; i < 2; i++ { // the provider repeats the callback
		_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "A1", UserID: "u1", PaymentID: "pay-7"})
		fmt.Println(errors.Is(err, cancel.ErrDiscrepancy))
	}
	// Output:
	// timeout cancelled: true <nil>
	// refund pay-7 of A1 to u1
	// true
	// true
}

// Placing an order: the library locks the seats, runs the host's transaction
// (which inserts the order), schedules its expiry message once it committed
// (with Config.Scheduler), and gives the seats back if the transaction
// fails, unless its commit's outcome is unknown.
func ExampleService_Place() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	if err != nil {
		panic(err)
	}
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1", "r1c2"}, ExpireAt: time.Now().Add(15 * time.Minute), Limit: 4}
	// With database/sql: svc.Place(ctx, p, sqlStore.Insert(db, nil)).
	err = svc.Place(ctx, p, store.Place)
	fmt.Println("placed:", err)
	again := p // a double submit, or a retry after an unknown commit
	err = svc.Place(ctx, again, func(ctx context.Context, again cancel.Placement) error { return store.Place(ctx, again) })
	fmt.Println(errors.Is(err, cancel.ErrOrderExists))
	held, err := seats.Held(ctx, "s1", "u1")
	if err != nil {
		panic(err)
	}
	fmt.Println("seats held:", held)
	// Output:
	// placed: <nil>
	// true
	// seats held: 2
}

// The late-payment policy: a payment that arrives after the timeout
// cancelled the order reinstates it as paid while its seats are still free;
// after an operator's expire-now (or the user's cancel) it is refunded.
func ExampleService_Pay_latePayment() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, AcceptLatePayments: true,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			fmt.Println("refund", d.PaymentID)
			return nil
		}})
	if err != nil {
		panic(err)
	}
	for _, no := range []string{"A1", "A2"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{"seat-" + no}, ExpireAt: time.Now().Add(-time.Second)}
		if err := svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }); err != nil {
			panic(err)
		}
	}
	if _, _, err := svc.Timeout(ctx, "A1"); err != nil { // its message arrived: cancelled by the timeout
		panic(err)
	}
	if _, err := svc.ExpireNow(ctx, "A2"); err != nil { // an operator's decision
		panic(err)
	}
	for i := 0; i < 2; i++ { // the provider repeats the callback
		res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "A1", PaymentID: "pay-1"})
		fmt.Println("A1:", res.Order.Status, res.Changed, err)
	}
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "A2", PaymentID: "pay-2"})
	fmt.Println("A2:", errors.Is(err, cancel.ErrDiscrepancy))
	// Output:
	// A1: paid true <nil>
	// A1: paid false <nil>
	// refund pay-2
	// A2: true
}

// Extending a pending order's deadline: at least the given time from now by
// the store's clock, so repeating the call never shortens it.
func ExampleService_Extend() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	if err != nil {
		panic(err)
	}
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1"}, ExpireAt: time.Now().Add(time.Minute)}
	if err := svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }); err != nil {
		panic(err)
	}
	res, err := svc.Extend(ctx, "A1", "u1", 10*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("extended:", res.Changed, res.Order.Remaining() > 9*time.Minute)
	res, err = svc.Extend(ctx, "A1", "u1", 5*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("again, shorter:", res.Changed)
	// Output:
	// extended: true true
	// again, shorter: false
}

// lookup is a host's payment provider adapter: it asks the provider about
// the session it opened for an order (a trade query by the merchant's order
// number), and answers "not paid" at once for an order whose buyer never
// started paying.
type lookup map[string]cancel.PaymentAnswer

func (l lookup) QueryPayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	if a, ok := l[o.No]; ok {
		return a, nil
	}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// ClosePayment closes the session of an order about to be cancelled; one
// that completed meanwhile refuses, with its payment.
func (l lookup) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	if a := l[o.No]; a.State == cancel.PaymentPaid {
		return a, nil
	}
	fmt.Println("session of", o.No, "closed")
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// Asking the provider before a timeout cancels: the buyer of A1 paid but
// the callback is late, so A1 is paid by the provider's answer instead of
// cancelled and refunded; B2's buyer is still on the provider's page, so B2
// waits (its deadline moves ProviderRetry later, never past MaxHold); C3's
// buyer did not pay, so its session is closed (the buyer can no longer pay
// it) and it is cancelled.
func ExampleConfig_provider() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	provider := lookup{
		"A1": {State: cancel.PaymentPaid, PaymentID: "pay-1"},
		"B2": {State: cancel.PaymentOpen},
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Provider: provider, ProviderRetry: time.Minute,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			fmt.Println("refund", d.PaymentID)
			return nil
		}})
	if err != nil {
		panic(err)
	}
	for i, no := range []string{"A1", "B2", "C3"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{fmt.Sprintf("r1c%d", i)}, ExpireAt: time.Now().Add(-time.Second)}
		if err := svc.Place(ctx, p, store.Place); err != nil {
			panic(err)
		}
	}
	for _, no := range []string{"A1", "B2", "C3"} {
		cancelled, o, err := svc.Timeout(ctx, no) // what an expiry message does
		fmt.Println(no, "cancelled:", cancelled, "status:", o.Status, "waits:", o.Remaining() > 0, err)
	}
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "A1", PaymentID: "pay-1"}) // the late callback
	fmt.Println("callback:", err)
	// Output:
	// A1 cancelled: false status: paid waits: false <nil>
	// B2 cancelled: false status: pending waits: true <nil>
	// session of C3 closed
	// C3 cancelled: true status: cancelled waits: false <nil>
	// callback: <nil>
}
