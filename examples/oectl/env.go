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
	MySQL, Postgres, SQLite, Mapping string
	Redis, Namespace, RedisMaster    string
	RedisCluster                     bool
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.MySQL, "mysql", "", "MySQL/MariaDB `DSN` of the order database")
	fs.StringVar(&c.Postgres, "postgres", "", "PostgreSQL `DSN` of the order database")
	fs.StringVar(&c.SQLite, "sqlite", "", "SQLite database `FILE`")
	fs.StringVar(&c.Mapping, "mapping", "", "JSON `FILE` of the service's sqlstore.Mapping, when its orders are in its own tables (empty: the library's schema)")
	fs.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "seat Redis `ADDRS`: host:port or a redis:// URL; several host:port, comma-separated, are a Cluster's nodes (or with -redis-master its Sentinels)")
	fs.BoolVar(&c.RedisCluster, "redis-cluster", false, "the -redis address is a Redis Cluster node, even alone")
	fs.StringVar(&c.RedisMaster, "redis-master", "", "the Sentinel-monitored master's `NAME`: -redis lists Sentinels")
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
	var m sqlstore.Mapping // zero: the library's own schema
	if c.Mapping != "" {
		if m, err = loadMapping(c.Mapping); err != nil {
			return fail(err)
		}
	}
	if e.store, err = sqlstore.New(db, d, m); err != nil {
		return fail(err)
	}
	e.closers = append(e.closers, e.store.Close)
	if c.Mapping != "" {
		// A mistyped mapping would show every order as missing: say what
		// does not match instead.
		if err := e.store.Check(pctx); err != nil {
			return fail(err)
		}
	}

	rdb, err := redisClient(c)
	if err != nil {
		return fail(err)
	}
	e.closers = append(e.closers, rdb.Close)
	if err := rdb.Ping(pctx).Err(); err != nil {
		return fail(fmt.Errorf("Redis %s does not answer: %w", c.Redis, err))
	}
	root, err := redisseat.New(rdb, c.Namespace)
	if err != nil {
		return fail(err)
	}
	// The seats of a mapped store's orders are in its scope, as the
	// service wires them (redisseat.Seats.Scoped).
	e.seats = root.Scoped(e.store.Scope())
	quiet := expiry.Runtime{Logger: slog.New(slog.DiscardHandler)}
	if e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: quiet}); err != nil {
		return fail(err)
	}
	return e, nil
}

// redisClient is the seat Redis c names: one server, a Cluster or a
// Sentinel-monitored master (go-redis's UniversalClient).
func redisClient(c config) (redis.UniversalClient, error) {
	if strings.Contains(c.Redis, "://") {
		opts, err := redis.ParseURL(c.Redis)
		if err != nil {
			return nil, fmt.Errorf("-redis: %w", err)
		}
		opts.DialTimeout, opts.MaxRetries = dialTimeout, -1 // an operator wants the error now
		return redis.NewClient(opts), nil
	}
	var addrs []string
	for _, a := range strings.Split(c.Redis, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: -redis names no address", errUsage)
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: addrs, MasterName: c.RedisMaster, IsClusterMode: c.RedisCluster && c.RedisMaster == "",
		DialTimeout: dialTimeout, MaxRetries: -1,
	}), nil
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
