package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// An outbox row in the transaction of every cancel and payment: the row
// commits with the order's new state, or neither does. A hook that fails
// rolls the cancel back; it is tried again later (here: at once).
func ExampleStore_SetHook() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "oe")
	check(err)
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	check(err)
	defer db.Close()
	lines, err := outboxHost(ctx, db, sqlstore.SQLite)
	check(err)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// B1 paid: true
	// B2 cancel: orderexpiry: transition hook failed; the transition was rolled back
	// B2 after the failed hook: pending
	// B2 cancelled: true
	// outbox: B1 paid, B2 cancelled
}

// errCouponsDown is the host's coupon service refusing, once.
var errCouponsDown = errors.New("coupon service unavailable")

// outboxHost is the host of ExampleStore_SetHook on any dialect (the tests
// run it on MariaDB and PostgreSQL too): it returns what it saw.
func outboxHost(ctx context.Context, db *sql.DB, d sqlstore.Dialect) ([]string, error) {
	store, err := sqlstore.New(db, d)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	// The host's own table, migrated by the host.
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS shop_outbox (order_no VARCHAR(64) NOT NULL, event VARCHAR(16) NOT NULL, PRIMARY KEY (order_no, event))"); err != nil {
		return nil, err
	}
	insert := "INSERT INTO shop_outbox (order_no, event) VALUES (?, ?)"
	if d == sqlstore.Postgres {
		insert = "INSERT INTO shop_outbox (order_no, event) VALUES ($1, $2)"
	}
	couponsDown := true
	store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		// Every write through tx: a failed attempt leaves none behind.
		if _, err := tx.ExecContext(ctx, insert, r.Order.No, r.Order.Status.String()); err != nil {
			return err
		}
		if r.Order.Status == expiry.StatusCancelled && couponsDown { // return the buyer's coupon
			couponsDown = false
			return errCouponsDown
		}
		return nil
	})

	now, err := store.Now(ctx)
	if err != nil {
		return nil, err
	}
	insertOrder := store.Insert(db, nil)
	for _, no := range []string{"B1", "B2"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s1", Seats: []string{no + "-r1c1"}, ExpireAt: now.Add(-time.Second)}
		if err := insertOrder(ctx, p); err != nil {
			return nil, err
		}
	}
	var out []string
	paid, err := store.PayPending(ctx, cancel.Payment{OrderNo: "B1", PaymentID: "pay-B1"})
	if err != nil {
		return nil, err
	}
	out = append(out, fmt.Sprint("B1 paid: ", paid.Changed))
	req := cancel.Request{OrderNo: "B2", Reason: cancel.ReasonTimeout, OnlyIfDue: true}
	if _, err := store.CancelPending(ctx, req); errors.Is(err, cancel.ErrHook) && errors.Is(err, errCouponsDown) {
		out = append(out, "B2 cancel: "+cancel.ErrHook.Error())
	} else {
		return nil, fmt.Errorf("want the hook's error, got %v", err)
	}
	o, err := store.Order(ctx, "B2")
	if err != nil {
		return nil, err
	}
	out = append(out, "B2 after the failed hook: "+o.Status.String())
	c, err := store.CancelPending(ctx, req) // the next attempt: a redelivery, the reconciler
	if err != nil {
		return nil, err
	}
	out = append(out, fmt.Sprint("B2 cancelled: ", c.Changed))
	rows, err := db.QueryContext(ctx, "SELECT order_no, event FROM shop_outbox ORDER BY order_no")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var events []string
	for rows.Next() {
		var no, ev string
		if err := rows.Scan(&no, &ev); err != nil {
			return nil, err
		}
		events = append(events, no+" "+ev)
	}
	out = append(out, "outbox: "+strings.Join(events, ", "))
	return out, rows.Err()
}

// TestOutboxHostOnServers runs ExampleStore_SetHook's host on MariaDB and
// PostgreSQL: the same lines as on SQLite.
func TestOutboxHostOnServers(t *testing.T) {
	want := []string{"B1 paid: true", "B2 cancel: " + cancel.ErrHook.Error(), "B2 after the failed hook: pending", "B2 cancelled: true", "outbox: B1 paid, B2 cancelled"}
	for _, c := range []struct {
		d    sqlstore.Dialect
		open func(t testing.TB) *sql.DB
	}{{sqlstore.MySQL, testenv.MySQL}, {sqlstore.Postgres, testenv.Postgres}} {
		t.Run(string(c.d), func(t *testing.T) {
			got, err := outboxHost(context.Background(), c.open(t), c.d)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}
