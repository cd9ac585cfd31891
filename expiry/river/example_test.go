package river_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
)

// Placing an order whose expiry job commits with it, on SQLite. On
// PostgreSQL only the driver changes: riverdatabasesql.New(db) (or
// riverpgxv5 with a pgx pool) and sqlstore.Postgres.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "oe")
	check(err)
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	check(err)
	defer db.Close()
	db.SetMaxOpenConns(1) // SQLite: River's goroutines share the one writer
	driver := riversqlite.New(db)

	// Once, at deployment: the order tables and River's tables.
	store, err := sqlstore.New(db, sqlstore.SQLite)
	check(err)
	check(store.Migrate(ctx))
	migrator, err := rivermigrate.New(driver, nil)
	check(err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	check(err)

	// The River client works the expiry queue with the Worker; the Sender
	// on the same client re-arms, so the Worker's Shell is attached after.
	worker := oeriver.NewWorker(nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(driver, &river.Config{
		Workers: workers,
		Queues:  map[string]river.QueueConfig{oeriver.QueueDefault: {MaxWorkers: 20}},
		// How often due jobs are looked for (the transport's precision
		// without LISTEN/NOTIFY); River's default is a second.
		FetchPollInterval: 100 * time.Millisecond,
	})
	check(err)
	sender, err := oeriver.NewSender(client, oeriver.Config{})
	check(err)
	// memstore stands in for cancel/redisseat, the seat store of a host.
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(nil)})
	check(err)
	handler, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sender})
	check(err)
	worker.Attach(expiry.NewShell(handler))
	check(client.Start(ctx))
	defer func() { check(client.Stop(ctx)) }()

	// Placing: Service.Place locks the seats, then runs Insert's
	// transaction, which inserts the order (with its seat lock's id, in the
	// p it gets) and, in the callback, its expiry job: both commit, or
	// neither. svc has no Config.Scheduler: nothing is sent after the
	// commit, the job is in.
	now, err := store.Now(ctx) // the database's clock
	check(err)
	p := cancel.Placement{OrderNo: "A1", UserID: "u1", ShowID: "s1", Seats: []string{"r1c1"}, ExpireAt: now.Add(time.Second)}
	check(svc.Place(ctx, p, store.Insert(db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		return sender.ScheduleTx(ctx, tx, p.OrderNo, p.ExpireAt)
	})))

	for o, err := store.Order(ctx, "A1"); o.Status == expiry.StatusPending; o, err = store.Order(ctx, "A1") {
		check(err)
		time.Sleep(50 * time.Millisecond)
	}
	o, err := store.Order(ctx, "A1")
	check(err)
	fmt.Println("A1:", o.Status)
	// Output: A1: cancelled
}

// check stops an example at an error; a host handles it.
func check(err error) {
	if err != nil {
		panic(err)
	}
}
