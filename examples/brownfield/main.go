// Command brownfield is an existing order service, with SeatFlow's own
// schema and migrations (order_info, order_seat), onto which orderexpiry is
// wired through a sqlstore.Mapping: the service keeps inserting its own rows
// with the columns only it knows (amount, channel, remark), and the library
// expires unpaid orders, cancels and pays them on those rows, frees their
// order_seat rows and the seats in Redis, and repairs what was lost.
//
//	go run ./examples/brownfield                      # SQLite file + miniredis
//	go run ./examples/brownfield -mysql 'oe:oe@tcp(127.0.0.1:13306)/oe' -redis 127.0.0.1:16379
//	go run ./examples/brownfield -postgres 'postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

func main() {
	mysqlDSN := flag.String("mysql", "", "MySQL/MariaDB DSN (default: a SQLite file in a temporary directory)")
	pgURL := flag.String("postgres", "", "PostgreSQL URL")
	redisAddr := flag.String("redis", "", "Redis address (default: miniredis in process)")
	flag.Parse()
	if err := mainErr(*mysqlDSN, *pgURL, *redisAddr); err != nil {
		fmt.Fprintln(os.Stderr, "brownfield:", err)
		os.Exit(1)
	}
}

func mainErr(mysqlDSN, pgURL, redisAddr string) error {
	ctx := context.Background()
	var db *sql.DB
	var d sqlstore.Dialect
	var err error
	switch {
	case mysqlDSN != "":
		db, err = sql.Open("mysql", mysqlDSN)
		d = sqlstore.MySQL
	case pgURL != "":
		db, err = sql.Open("pgx", pgURL)
		d = sqlstore.Postgres
	default:
		dir, derr := os.MkdirTemp("", "brownfield")
		if derr != nil {
			return derr
		}
		defer os.RemoveAll(dir)
		db, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		d = sqlstore.SQLite
	}
	if err != nil {
		return err
	}
	defer db.Close()
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	_, err = Run(ctx, db, d, rdb, "brownfield-"+fmt.Sprint(time.Now().UnixNano()), os.Stdout)
	return err
}

// Report is what a run did.
type Report struct {
	Placed, Paid, UserCancelled, Expired, Refunds int
}

// Run opens the service on db and runs a few minutes of an order service in
// a few seconds: orders placed with their own columns, some paid, some
// cancelled by their user, the rest left to expire by message; one message
// is lost on purpose and the reconciler cancels that order. It checks every
// order's row afterwards and returns an error naming anything wrong.
func Run(ctx context.Context, db *sql.DB, d sqlstore.Dialect, rdb redis.UniversalClient, ns string, out io.Writer) (Report, error) {
	var rep Report
	s, err := Open(ctx, Config{DB: db, Dialect: d, Redis: rdb, Namespace: ns})
	if err != nil {
		return rep, err
	}
	defer s.Close()
	fmt.Fprintf(out, "order service on %s: the library's mapping checked against order_info and order_seat\n", d)

	prefix := ns + "-"
	orders := make([]Order, 12)
	for i := range orders {
		orders[i] = Order{No: fmt.Sprintf("%sSF%04d", prefix, i), User: fmt.Sprintf("u%d", i%6), Show: prefix + "show1",
			Seats: []string{fmt.Sprintf("R1-%d", 2*i), fmt.Sprintf("R1-%d", 2*i+1)}, AmountCents: 1000 + i, Channel: []string{"web", "app", "box"}[i%3], Remark: "note " + fmt.Sprint(i)}
		if err := s.Place(ctx, orders[i], 2*time.Second); err != nil {
			return rep, fmt.Errorf("place %s: %w", orders[i].No, err)
		}
		rep.Placed++
	}
	// A double submit of the first order's seats by another order.
	if err := s.Place(ctx, Order{No: prefix + "SFdup", User: "u9", Show: prefix + "show1", Seats: orders[0].Seats, AmountCents: 1, Channel: "web"}, time.Minute); err == nil {
		return rep, fmt.Errorf("a second order took seats %v", orders[0].Seats)
	}
	// An order whose message is lost: placed by the host outside the scheduler.
	lost := Order{No: prefix + "SFlost", User: "u1", Show: prefix + "show1", Seats: []string{"R9-1"}, AmountCents: 500, Channel: "box"}
	if _, err := db.ExecContext(ctx, s.rebind(`INSERT INTO order_info (order_no, user_id, show_id, status, expire_time, amount_cents, create_time, channel)
		VALUES (?, 'u1', ?, 0, `+s.ts()+`, 500, `+s.ts()+`, 'box')`), lost.No, lost.Show, utc(time.Now().Add(-time.Minute)), utc(time.Now().Add(-16*time.Minute))); err != nil {
		return rep, err
	}
	for i := 0; i < 4; i++ { // paid, one of them twice (a repeated callback)
		if _, err := s.Pay(ctx, orders[i].No, fmt.Sprintf("pay-%d", i)); err != nil {
			return rep, err
		}
		rep.Paid++
	}
	if _, err := s.Pay(ctx, orders[0].No, "pay-0"); err != nil {
		return rep, err
	}
	for i := 4; i < 6; i++ {
		if _, err := s.Cancel(ctx, orders[i].No, orders[i].User); err != nil {
			return rep, err
		}
		rep.UserCancelled++
	}
	n, oldest, err := s.Overdue(ctx)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "overdue pending orders: %d, the oldest %v past its deadline (the lost message)\n", n, oldest.Round(time.Second))
	if err := s.Reconcile(ctx); err != nil {
		return rep, err
	}
	// The rest expire by their messages; a payment arrives after one did.
	deadline := time.Now().Add(15 * time.Second)
	for {
		pending := 0
		for i := 6; i < len(orders); i++ {
			r, err := s.Row(ctx, orders[i].No)
			if err != nil {
				return rep, err
			}
			if r.Status == 0 {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%d orders still unpaid and not expired", pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rep.Expired = len(orders) - 6
	if res, err := s.Pay(ctx, orders[6].No, "pay-late"); err == nil && res.Changed {
		return rep, fmt.Errorf("a late payment paid the expired order %s", orders[6].No)
	}

	// Every row as the service reads it, its own columns untouched.
	for i, o := range append(orders, lost) {
		r, err := s.Row(ctx, o.No)
		if err != nil {
			return rep, err
		}
		want, seats, reason := 2, 0, "timeout"
		switch {
		case i < 4:
			want, seats, reason = 1, 2, ""
		case i < 6:
			reason = "user"
		case o.No == lost.No:
			reason = "reconcile"
		}
		if r.Status != want || r.Seats != seats || r.CancelReason.String != reason || r.AmountCents != o.AmountCents || r.Channel != o.Channel || r.Remark.String != o.Remark {
			return rep, fmt.Errorf("order %s: %+v, want status %d, %d seats, reason %q and its own columns kept", o.No, r, want, seats, reason)
		}
		if i < 4 && r.PayNo.String != fmt.Sprintf("pay-%d", i) {
			return rep, fmt.Errorf("order %s paid by %q", o.No, r.PayNo.String)
		}
	}
	// The service archives a paid order (its rows deleted); the provider
	// repeats the order's callback afterwards: it is answered as paid,
	// never refunded, as the library kept the payment's decision.
	if err := s.Archive(ctx, orders[1].No); err != nil {
		return rep, err
	}
	if _, err := s.Pay(ctx, orders[1].No, "pay-1"); err != nil {
		return rep, fmt.Errorf("the repeated callback of the archived order %s: %w", orders[1].No, err)
	}
	s.mu.Lock()
	rep.Refunds = len(s.refunds)
	s.mu.Unlock()
	if rep.Refunds != 1 {
		return rep, fmt.Errorf("%d refunds, want 1 (the late payment)", rep.Refunds)
	}
	if n, _, err := s.Overdue(ctx); err != nil || n != 0 {
		return rep, fmt.Errorf("overdue after the run: %d (%v)", n, err)
	}
	fmt.Fprintf(out, "placed %d: %d paid (one callback repeated), %d cancelled by their user, %d expired by message, 1 by the reconciler (its message lost); 1 late payment refunded; every row kept its own columns\n",
		rep.Placed, rep.Paid, rep.UserCancelled, rep.Expired)
	return rep, nil
}
