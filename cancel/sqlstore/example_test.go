package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// Placing, paying and cancelling on SQLite. With MySQL/MariaDB or
// PostgreSQL only the driver, the DSN and the Dialect change.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "oe")
	check(err)
	defer os.RemoveAll(dir)
	// Immediate transactions and a busy timeout let concurrent writers queue
	// instead of failing with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	check(err)
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.SQLite)
	check(err)
	check(store.Migrate(ctx))

	now, err := store.Now(ctx) // the database's clock
	check(err)
	for _, no := range []string{"A1", "A2"} {
		tx, err := db.BeginTx(ctx, nil)
		check(err)
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-r1c1"}, ExpireAt: now.Add(-time.Second)}
		if err := store.Place(ctx, tx, p); err != nil {
			check(errors.Join(err, tx.Rollback()))
		}
		check(tx.Commit())
	}

	paid, err := store.PayPending(ctx, cancel.Payment{OrderNo: "A1", UserID: "u1", PaymentID: "pay-1"})
	check(err)
	fmt.Println("A1 paid:", paid.Changed, paid.Seats)
	late, err := store.CancelPending(ctx, cancel.Request{OrderNo: "A1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	check(err)
	fmt.Println("A1 cancelled after payment:", late.Changed, late.Order.Status)
	c, err := store.CancelPending(ctx, cancel.Request{OrderNo: "A2", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	check(err)
	fmt.Println("A2 cancelled:", c.Changed, c.Seats)
	// Output:
	// A1 paid: true [A1-r1c1]
	// A1 cancelled after payment: false paid
	// A2 cancelled: true [A2-r1c1]
}

func ExampleSchema() {
	stmts, err := sqlstore.Schema(sqlstore.Postgres)
	check(err)
	fmt.Println(len(stmts), "statements")
	// Output: 9 statements
}

// check stops an example at an error; a host handles it.
func check(err error) {
	if err != nil {
		panic(err)
	}
}
