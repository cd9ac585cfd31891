// Command payments shows a host wiring its payment provider into
// orderexpiry (cancel.Config.Provider): before a timeout or the reconciler
// cancels a due order, the library asks the provider whether its buyer
// paid, pays the order when the webhook is late or lost, waits while the
// buyer is still on the payment page (never past MaxHold), and expires the
// provider's session before it cancels, so nobody can pay a cancelled order.
//
// The provider is a model of a hosted checkout after Stripe's Checkout
// Sessions (checkout.go: sessions open, complete or expired; "Expire a
// Session" refuses a complete one); the host's adapter (provider.go) keeps
// which session it opened for which order in its own table,
// payment_session, in the orders' database. The demo places orders, has
// buyers pay before and after their deadlines, delivers some webhooks late
// or never, loses an expiry message, cuts the provider off for one session,
// and prints what became of each order.
//
//	go run ./examples/payments                      # SQLite file + miniredis
//	go run ./examples/payments -random 30 -seed 7   # and 30 buyers with random plans
//	go run ./examples/payments -mysql 'oe:oe@tcp(127.0.0.1:13306)/oe' -redis 127.0.0.1:16379
//	go run ./examples/payments -postgres 'postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable' -redis 127.0.0.1:16379
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

func main() {
	mysqlDSN := flag.String("mysql", "", "MySQL/MariaDB `DSN` (default: a SQLite file in a temporary directory)")
	pgURL := flag.String("postgres", "", "PostgreSQL `URL`")
	redisAddr := flag.String("redis", "", "Redis `ADDR` (default: miniredis in process)")
	random := flag.Int("random", 0, "buyers with random plans besides the ten scripted ones")
	seed := flag.Uint64("seed", 0, "seed of the random plans (default: from the time)")
	flag.Parse()
	if *mysqlDSN != "" && *pgURL != "" {
		fmt.Fprintln(os.Stderr, "payments: -mysql and -postgres exclude each other")
		os.Exit(2)
	}
	if err := mainErr(*mysqlDSN, *pgURL, *redisAddr, Options{Random: *random, Seed: *seed}); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func mainErr(mysqlDSN, pgURL, redisAddr string, opts Options) error {
	ctx := context.Background()
	env := Env{}
	if mysqlDSN != "" || pgURL != "" || redisAddr != "" {
		env.Prefix = runPrefix() // shared servers: this run's orders, sessions and seats apart
	}
	var err error
	switch {
	case mysqlDSN != "":
		env.DB, err = sql.Open("mysql", mysqlDSN)
		env.Dialect = sqlstore.MySQL
	case pgURL != "":
		env.DB, err = sql.Open("pgx", pgURL)
		env.Dialect = sqlstore.Postgres
	default:
		dir, derr := os.MkdirTemp("", "payments")
		if derr != nil {
			return derr
		}
		defer os.RemoveAll(dir)
		env.DB, err = sql.Open("sqlite", "file:"+filepath.Join(dir, "orders.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		env.Dialect = sqlstore.SQLite
	}
	if err != nil {
		return err
	}
	defer env.DB.Close()
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
	env.Redis = rdb
	_, err = Run(ctx, env, opts, os.Stdout)
	return err
}

// runPrefix is a random prefix for this run's order numbers and Redis
// namespace, so runs on shared servers do not meet.
func runPrefix() string {
	return fmt.Sprintf("r%08x-", rand.Uint32())
}
