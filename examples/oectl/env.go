package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// dialTimeout bounds the check that each server answers.
const dialTimeout = 3 * time.Second

type config struct {
	MySQL, Postgres, SQLite string
	Redis, Namespace        string
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.MySQL, "mysql", "", "MySQL/MariaDB `DSN` of the order database")
	fs.StringVar(&c.Postgres, "postgres", "", "PostgreSQL `DSN` of the order database")
	fs.StringVar(&c.SQLite, "sqlite", "", "SQLite database `FILE`")
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "seat Redis `ADDR` (host:port or redis:// URL)")
	fs.StringVar(&c.Namespace, "namespace", "", "the services' redisseat namespace (empty: the default)")
}

// env is what the commands work on: the service's stores, and a cancel
// service over them for the reconciler (no refund hook: a round here only
// counts the refunds left to the service's own reconciler).
type env struct {
	store   *sqlstore.Store
	seats   *redisseat.Seats
	svc     *cancel.Service
	closers []func() error
}

func openEnv(ctx context.Context, c config) (*env, error) {
	var driver, dsn string
	var d sqlstore.Dialect
	switch n := countSet(c.MySQL, c.Postgres, c.SQLite); {
	case n != 1:
		return nil, fmt.Errorf("%w: name the order database with exactly one of -mysql, -postgres, -sqlite", errUsage)
	case c.MySQL != "":
		driver, dsn, d = "mysql", c.MySQL, sqlstore.MySQL
	case c.Postgres != "":
		driver, dsn, d = "pgx", c.Postgres, sqlstore.Postgres
	default:
		driver, dsn, d = "sqlite", "file:"+c.SQLite+"?_pragma=busy_timeout(10000)&_txlock=immediate", sqlstore.SQLite
	}
	e := &env{}
	fail := func(err error) (*env, error) { return nil, errors.Join(err, e.close()) }
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return fail(fmt.Errorf("open %s database: %w", d, err))
	}
	e.closers = append(e.closers, db.Close)
	pctx, cancelPing := context.WithTimeout(ctx, dialTimeout)
	defer cancelPing()
	if err := db.PingContext(pctx); err != nil {
		return fail(fmt.Errorf("the %s database does not answer: %w", d, err))
	}
	if e.store, err = sqlstore.New(db, d); err != nil {
		return fail(err)
	}
	e.closers = append(e.closers, e.store.Close)

	opts := &redis.Options{Addr: c.Redis}
	if strings.Contains(c.Redis, "://") {
		if opts, err = redis.ParseURL(c.Redis); err != nil {
			return fail(fmt.Errorf("-redis: %w", err))
		}
	}
	opts.DialTimeout, opts.MaxRetries = dialTimeout, -1 // an operator wants the error now
	rdb := redis.NewClient(opts)
	e.closers = append(e.closers, rdb.Close)
	if err := rdb.Ping(pctx).Err(); err != nil {
		return fail(fmt.Errorf("Redis %s does not answer: %w", opts.Addr, err))
	}
	if e.seats, err = redisseat.New(rdb, c.Namespace); err != nil {
		return fail(err)
	}
	quiet := expiry.Runtime{Logger: slog.New(slog.DiscardHandler)}
	if e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Discrepancies: e.store, Runtime: quiet}); err != nil {
		return fail(err)
	}
	return e, nil
}

// close closes what was opened, last first, and returns every error.
func (e *env) close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	e.closers = nil
	return errors.Join(errs...)
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}
