// Command oectl is an operator's view of orderexpiry: point it at the order
// database and the seat Redis a service uses, and it shows and repairs what
// the library keeps there.
//
//	oectl [flags] order NO          one order in SQL, its seats in Redis, side by side
//	oectl [flags] overdue [-n N]    pending orders past their deadline, oldest first
//	oectl [flags] reconcile [-dry-run]
//	                                one reconcile round (dry run: what it would do)
//	oectl [flags] extend NO DUR     keep a pending order open at least DUR from now
//	oectl [flags] expire NO         cancel a pending order now, its seats back
//
// Flags name the servers, as the service does:
//
//	go run ./examples/oectl -mysql 'oe:oe@tcp(127.0.0.1:13306)/oe' -redis 127.0.0.1:16379 overdue
//
// A service whose orders are in its own tables gives its sqlstore.Mapping as
// a JSON file (-mapping, the struct as Go spells it; see loadMapping), and
// seats in a Redis Cluster or behind Sentinel are named as go-redis's
// UniversalOptions name them:
//
//	oectl -postgres "$DSN" -mapping mapping.json -redis 10.0.0.1:7000,10.0.0.2:7000 overdue
//	oectl -mysql "$DSN" -redis 10.0.0.1:26379,10.0.0.2:26379 -redis-master seats order O-1
//
// It installs as a command of its own:
//
//	go install github.com/seatflow/orderexpiry/examples/oectl@latest
//
// It prints tables a person reads, and reports progress on long scans to
// stderr. Every time it shows is the database's or Redis's, never this
// host's clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// usage is printed for -h and for a command line it cannot run.
const usage = `oectl: an operator's view of orderexpiry's orders and seats.

Usage: oectl [flags] command [args]

Commands:
  order NO              the order in SQL and its seats in Redis, side by side
  overdue [-n N]        pending orders past their deadline, oldest first (at most N, default 50)
  reconcile [-dry-run]  run one reconcile round; -dry-run reports what it would do and changes nothing
  extend NO DUR         keep a pending order open at least DUR (e.g. 10m) from now, by the database's clock
  expire NO             cancel a pending order now (reason "expired"), its seats back; a payment after it is refunded

Flags:
`

// quietRedis drops go-redis's own log lines (redis.SetLogger).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// errUsage marks errors in the command line (exit status 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis logs its Sentinel and Cluster bookkeeping on every connection;
	// what fails reaches the operator as the command's error.
	redis.SetLogger(quietRedis{})
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "oectl:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "oectl:", err)
		os.Exit(1)
	}
}

// run is the whole command; stdout gets the tables, stderr the progress.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("oectl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no command (order, overdue, reconcile, extend, expire; -h for help)", errUsage)
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	var do func(context.Context, *env) error
	switch cmd {
	case "order":
		if len(rest) != 1 {
			return fmt.Errorf("%w: order takes one order number", errUsage)
		}
		do = func(ctx context.Context, e *env) error { return showOrder(ctx, e, rest[0], stdout) }
	case "overdue":
		sub := flag.NewFlagSet("overdue", flag.ContinueOnError)
		sub.SetOutput(io.Discard)
		n := sub.Int("n", 50, "list at most `N` orders")
		if err := sub.Parse(rest); err != nil || sub.NArg() > 0 || *n < 1 {
			return fmt.Errorf("%w: overdue [-n N], N at least 1", errUsage)
		}
		do = func(ctx context.Context, e *env) error { return listOverdue(ctx, e, *n, stdout, stderr) }
	case "reconcile":
		sub := flag.NewFlagSet("reconcile", flag.ContinueOnError)
		sub.SetOutput(io.Discard)
		dry := sub.Bool("dry-run", false, "report what the round would do, change nothing")
		if err := sub.Parse(rest); err != nil || sub.NArg() > 0 {
			return fmt.Errorf("%w: reconcile [-dry-run]", errUsage)
		}
		do = func(ctx context.Context, e *env) error { return reconcileOnce(ctx, e, *dry, stdout, stderr) }
	case "extend":
		if len(rest) != 2 {
			return fmt.Errorf("%w: extend takes an order number and a duration", errUsage)
		}
		d, err := time.ParseDuration(rest[1])
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: extend: %q is not a positive duration (10m, 90s)", errUsage, rest[1])
		}
		do = func(ctx context.Context, e *env) error { return extend(ctx, e, rest[0], d, stdout) }
	case "expire":
		if len(rest) != 1 {
			return fmt.Errorf("%w: expire takes one order number", errUsage)
		}
		do = func(ctx context.Context, e *env) error { return expireNow(ctx, e, rest[0], stdout) }
	default:
		return fmt.Errorf("%w: unknown command %q (order, overdue, reconcile, extend, expire)", errUsage, cmd)
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	return errors.Join(do(ctx, e), e.close())
}
