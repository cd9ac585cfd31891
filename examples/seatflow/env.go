package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/levels"
)

// pingTimeout bounds the check that each server answers at start.
const pingTimeout = 3 * time.Second

// env is the infrastructure the service runs on.
type env struct {
	db          *sql.DB
	dialect     sqlstore.Dialect
	rdb         *redis.Client
	sharedSQL   bool // a real database: other runs' orders may be there
	sharedRedis bool // a real Redis: other runs' seats may be there
	about       []string
	closers     []func() error
}

func openEnv(ctx context.Context, cfg config) (*env, error) {
	e := &env{}
	for _, open := range []func(context.Context, config) error{e.openDB, e.openRedis} {
		if err := open(ctx, cfg); err != nil {
			if cerr := e.close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
			return nil, err
		}
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

func (e *env) openDB(ctx context.Context, cfg config) error {
	var driver, dsn, about string
	switch {
	case cfg.MySQL != "":
		c, err := mysql.ParseDSN(cfg.MySQL)
		if err != nil {
			return setupErrorf("-mysql: %w", err)
		}
		driver, dsn, e.dialect, e.sharedSQL = "mysql", cfg.MySQL, sqlstore.MySQL, true
		about = fmt.Sprintf("MySQL/MariaDB %s/%s", c.Addr, c.DBName)
	case cfg.Postgres != "":
		c, err := pgx.ParseConfig(cfg.Postgres)
		if err != nil {
			return setupErrorf("-postgres: %w", err)
		}
		driver, dsn, e.dialect, e.sharedSQL = "pgx", cfg.Postgres, sqlstore.Postgres, true
		about = fmt.Sprintf("PostgreSQL %s:%d/%s", c.Host, c.Port, c.Database)
	default:
		dir, err := os.MkdirTemp("", "seatflow-")
		if err != nil {
			return setupErrorf("temporary directory: %w", err)
		}
		e.closers = append(e.closers, func() error { return os.RemoveAll(dir) })
		path := filepath.Join(dir, "orders.db")
		// A busy timeout and immediate transactions let several connections
		// write one SQLite file without "database is locked" errors.
		driver, e.dialect = "sqlite", sqlstore.SQLite
		dsn = "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
		about = "SQLite " + path
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return setupErrorf("open %s: %w", about, err)
	}
	e.closers = append(e.closers, db.Close)
	db.SetMaxOpenConns(16)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return setupErrorf("%s does not answer: %w", about, err)
	}
	e.db = db
	e.about = append(e.about, "orders: "+about)
	return nil
}

func (e *env) openRedis(ctx context.Context, cfg config) error {
	var opts *redis.Options
	about := ""
	if cfg.Redis == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return setupErrorf("miniredis: %w", err)
		}
		e.closers = append(e.closers, func() error { mr.Close(); return nil })
		opts, about = &redis.Options{Addr: mr.Addr()}, "miniredis "+mr.Addr()
	} else {
		e.sharedRedis = true
		if strings.Contains(cfg.Redis, "://") {
			o, err := redis.ParseURL(cfg.Redis)
			if err != nil {
				return setupErrorf("-redis: %w", err)
			}
			opts = o
		} else {
			opts = &redis.Options{Addr: cfg.Redis}
		}
		about = "Redis " + opts.Addr
		// A plain dial first: go-redis retries (and logs) a refused
		// connection several times before it gives up.
		conn, err := net.DialTimeout("tcp", opts.Addr, pingTimeout)
		if err != nil {
			return setupErrorf("%s does not answer: %w", about, err)
		}
		if err := conn.Close(); err != nil {
			return setupErrorf("%s: %w", about, err)
		}
	}
	opts.DialTimeout = pingTimeout
	rdb := redis.NewClient(opts)
	e.closers = append(e.closers, rdb.Close)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return setupErrorf("%s does not answer: %w", about, err)
	}
	e.rdb = rdb
	e.about = append(e.about, "seats:  "+about+" (cancel/redisseat: the production Lua scripts)")
	return nil
}

// The timer: RocketMQ's level rule on a short table so the demo is quick.
// A slack of 300ms lets a hop land that much past the deadline instead of
// re-arming for a sliver; below the first level a hop uses level 1.
var (
	demoLevels = levels.MustParse("1s 2s 3s 5s")
	demoSlack  = 300 * time.Millisecond
)

// transport is the delayed-message path: a sender, a way to attach the
// consumer shell, how many messages wait, and a close that drops them (the
// first call does, and returns its error; later calls return nil).
type transport struct {
	sender   expiry.DelaySender
	attach   func(*expiry.Shell) error
	inFlight func() int
	close    func() error
	about    string
}

// closeOnce returns a close function that runs f once.
func closeOnce(f func() error) func() error {
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = f() })
		return err
	}
}

func newTransport(cfg config, obs expiry.Observer) (*transport, error) {
	if cfg.RocketMQ != "" {
		return newRocketMQ(cfg, obs)
	}
	s := inproc.New(inproc.Config{Levels: demoLevels, Slack: demoSlack, Runtime: expiry.Runtime{Observer: obs}})
	return &transport{
		sender:   s,
		attach:   func(sh *expiry.Shell) error { s.Attach(sh); return nil },
		inFlight: s.Pending,
		close:    closeOnce(s.Close),
		about:    fmt.Sprintf("timer:  expiry/inproc with RocketMQ levels %q + %v slack", demoLevels.String(), demoSlack),
	}, nil
}

// runPrefix returns a short random prefix for every id of a run on real
// servers ("r", 6 characters of a-z and 2-7, and "-": valid in every id).
func runPrefix() string {
	return "r" + strings.ToLower(rand.Text()[:6]) + "-"
}
