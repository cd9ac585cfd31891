package expiry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/levels"
)

// Wiring the Handler: an order store, the cancel service, a delay sender and
// the consumer shell. Here everything is in memory and the clock is fake; a
// host uses cancel/sqlstore, cancel/redisseat and expiry/rocketmq.
func Example() {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	store, seats := memstore.NewStore(clock.Now), memstore.NewSeats(clock.Now)

	// RocketMQ-like delays: the default levels, one second of slack.
	sends := expiry.ObserverFunc(func(_ context.Context, e expiry.Event) {
		if e.Kind == expiry.KindSent {
			fmt.Printf("hop %d: level %d (%v)\n", e.Hop, e.Level, e.Delay)
		}
	})
	sender := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock, Observer: sends}, Levels: levels.Default, Slack: time.Second})
	defer sender.Close()
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Clock: clock}})
	if err != nil {
		panic(err)
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
	if err != nil {
		panic(err)
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender})
	if err != nil {
		panic(err)
	}
	sender.Attach(expiry.NewShell(h))

	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: clock.Now().Add(15 * time.Minute), Limit: 4}
	// In a host the insert is its SQL transaction (cancel/sqlstore's
	// Insert); Place sends the message once it has committed.
	if err := svc.Place(ctx, p, store.Place); err != nil {
		panic(err)
	}

	clock.Advance(15 * time.Minute)
	o, err := store.Order(ctx, "A1")
	if err != nil {
		panic(err)
	}
	fmt.Println("order", o.Status)
	// Output:
	// hop 1: level 14 (10m0s)
	// hop 2: level 9 (5m0s)
	// order cancelled
}

// A transport hands the Shell whatever trace context a producer put beside
// the body; Clean bounds it before a Tracer reads it. A message is never
// refused for its trace context.
func ExampleTrace_Clean() {
	ok := expiry.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE"}
	fmt.Println(ok.Clean() == ok)
	hostile := expiry.Trace{Parent: ok.Parent, State: "a=1\x01b=2"}
	fmt.Printf("%q\n", hostile.Clean().State)
	fmt.Println(expiry.Trace{Parent: string(make([]byte, 4096))}.Clean() == expiry.Trace{})
	// Output:
	// true
	// ""
	// true
}

// Async takes the send off the placing request's path: Place returns at the
// commit and a goroutine of the Scheduler sends behind it. Close, at
// shutdown, sends what is queued (or, when its context ends first, leaves
// it to the reconciler, counted).
func ExampleSchedulerConfig_async() {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: printSender{}, Async: 8})
	if err != nil {
		panic(err)
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
	if err != nil {
		panic(err)
	}
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: time.Now().Add(15 * time.Minute), Limit: 4}
	if err := svc.Place(ctx, p, store.Place); err != nil { // returns once committed and queued
		panic(err)
	}
	sctx, done := context.WithTimeout(ctx, 5*time.Second)
	defer done()
	if err := sched.Close(sctx); err != nil {
		fmt.Println("left to the reconciler:", err)
	}
	// Output:
	// sent A1
}

// printSender stands for a broker's DelaySender (expiry/rocketmq's Sender).
type printSender struct{}

func (printSender) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	fmt.Println("sent", m.OrderNo)
	return nil
}
