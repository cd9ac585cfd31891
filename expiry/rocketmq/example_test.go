package rocketmq_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// A host wires the transport once at startup: the topic, a Sender for the
// after-commit schedule and the Handler's re-arms, and a Consumer that feeds
// the Shell. db is the host's database, store and seats its order
// and seat stores; it needs a broker, so it is compiled here but not run.
func Example() {
	var (
		db    *sql.DB
		store *sqlstore.Store  // sqlstore.New(db, sqlstore.MySQL)
		seats cancel.SeatStore // redisseat.New(rdb, "")
	)
	ctx := context.Background()
	ns := []string{"127.0.0.1:9876"}
	if err := rocketmq.EnsureTopic(ctx, ns, "127.0.0.1:10911", "order_expiry"); err != nil {
		log.Fatal(err)
	}
	cfg := rocketmq.Config{NameServers: ns, Topic: "order_expiry", Group: "order_expiry_p", Mode: rocketmq.ModeTimer}
	sender, err := rocketmq.NewSender(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := sender.Close(); err != nil {
			log.Println("sender close:", err)
		}
	}()

	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender})
	if err != nil {
		log.Fatal(err)
	}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched})
	if err != nil {
		log.Fatal(err)
	}
	handler, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender})
	if err != nil {
		log.Fatal(err)
	}
	cfg.Group = "order_expiry_c"
	consumer, err := rocketmq.StartConsumer(ctx, cfg, expiry.NewShell(handler))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		cctx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		if err := consumer.Close(cctx); err != nil { // drains handlers in flight
			log.Println("consumer close:", err)
		}
	}()

	// Placing an order: the service locks the seats, runs the host's
	// transaction (Insert: the order, and rows of the host's own, nil
	// here), and sends the expiry message through sched once it committed.
	p := cancel.Placement{OrderNo: "A1001", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: time.Now().Add(15 * time.Minute), Limit: 6}
	err = svc.Place(ctx, p, store.Insert(db, nil))
	if err != nil {
		log.Println("order not placed:", err)
	}
}

// ParseMode reads the mode from configuration.
func ExampleParseMode() {
	for _, s := range []string{"levels", "timer", "fast"} {
		m, err := rocketmq.ParseMode(s)
		fmt.Println(m, err)
	}
	// Output:
	// levels <nil>
	// timer <nil>
	// levels rocketmq: unknown mode "fast" (want levels or timer)
}
