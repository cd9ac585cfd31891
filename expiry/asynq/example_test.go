package asynq_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	oeasynq "github.com/seatflow/orderexpiry/expiry/asynq"
)

// A host wires the transport once at startup: a Sender on an asynq client
// for the after-commit schedule and the Handler's re-arms, and a Consumer
// that feeds the Shell. db is the host's database, store and seats its
// order and seat stores; it needs Redis, so it is compiled here but
// not run. For a Redis Cluster, use asynq.RedisClusterClientOpt{Addrs: ...}.
func Example() {
	var (
		db    *sql.DB
		store *sqlstore.Store  // sqlstore.New(db, sqlstore.MySQL)
		seats cancel.SeatStore // redisseat.New(rdb, "")
	)
	ctx := context.Background()
	redis := asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}
	cfg := oeasynq.Config{Queue: "order_expiry"} // the same Config for both sides

	client := asynq.NewClient(redis)
	defer client.Close() // after the consumer, whose re-arms send through it
	sender, err := oeasynq.NewSender(client, cfg)
	if err != nil {
		log.Fatal(err)
	}

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
	consumer, err := oeasynq.StartConsumer(redis, cfg, expiry.NewShell(handler))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		cctx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		if err := consumer.Close(cctx); err != nil { // drains handlers in flight
			log.Println("consumer close:", err)
		}
		log.Println("poison tasks dropped:", consumer.Poisoned())
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

// asynq keeps due times in whole seconds, so the Sender rounds them up: a
// message is never processed before its delay has passed.
func ExampleDueAt() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 300*int(time.Millisecond), time.UTC)
	for _, d := range []time.Duration{0, 2 * time.Second, 15 * time.Minute} {
		fmt.Println(d, "->", oeasynq.DueAt(now, d).Format("15:04:05.000"))
	}
	// Output:
	// 0s -> 12:00:00.300
	// 2s -> 12:00:03.000
	// 15m0s -> 12:15:01.000
}
