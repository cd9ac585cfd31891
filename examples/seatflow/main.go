// Command seatflow is a small ticketing service in one process that runs the
// whole orderexpiry chain on embedded defaults and checks the invariants at
// the end:
//
//   - orders in SQL (cancel/sqlstore; a SQLite file in a temporary directory,
//     or MySQL/MariaDB or PostgreSQL with -mysql / -postgres),
//   - seats and purchase limits in Redis (cancel/redisseat, the production Lua
//     scripts; miniredis in memory, or a real server with -redis),
//   - the delayed expiry messages through expiry/inproc with a short
//     RocketMQ-style level table, so the level rule and the re-arm path run as
//     they do on a broker,
//   - the reconciler every two seconds.
//
// It places a batch of orders, pays some, lets users cancel others, lets the
// rest expire, fires a few deliberate three-way races (payment, user cancel
// and timeout at once) and a payment after a cancel, injects a lost message and
// a failed seat release for the reconciler to repair, and prints a timeline.
// When no order is pending it verifies the stores and prints a summary line
// last. Exit status: 0 all invariants hold, 1 a violation (listed above the
// summary) or a runtime failure, 2 bad flags or an unreachable server.
//
//	go run ./examples/seatflow
//	go run ./examples/seatflow -orders 200 -seed 7
//	go run ./examples/seatflow -mysql 'oe:oe@tcp(127.0.0.1:13306)/oe' -redis 127.0.0.1:16379
//	go run ./examples/seatflow -postgres 'postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// config is what the flags set; run takes it so that tests can drive the demo.
type config struct {
	Orders   int    // orders in the batch
	Seed     uint64 // 0: pick one (printed, so a run can be replayed)
	MySQL    string // DSN: use MySQL/MariaDB instead of SQLite
	Postgres string // DSN: use PostgreSQL instead of SQLite
	Redis    string // host:port or redis:// URL: use a real Redis instead of miniredis
	RocketMQ string // name server: RocketMQ instead of the in-process sender
	Broker   string // broker address, where the demo creates its topic
	Mode     string // RocketMQ mode: timer or levels
	Verbose  bool   // library debug logs in the timeline
}

const maxOrders = 5000

func (c config) validate() error {
	switch {
	case c.Orders < 1 || c.Orders > maxOrders:
		return fmt.Errorf("-orders %d: want 1..%d", c.Orders, maxOrders)
	case c.MySQL != "" && c.Postgres != "":
		return errors.New("-mysql and -postgres exclude each other")
	}
	return nil
}

const usage = `seatflow runs a small ticketing service in one process: orders in SQL, seats
in Redis, expiry messages through an in-process RocketMQ-like sender, the
reconciler every 2s. It places a batch of orders, pays, cancels, races and
expires them, prints a timeline, then verifies the stores. Its last line is:

  summary: placed=N paid=N cancelled=N pending=N seats_locked=N seats_sold=N discrepancies=N ...

Exit status: 0 every invariant holds; 1 a violation (listed above the summary)
or a failure while running; 2 bad flags or a server that does not answer.

Usage: go run ./examples/seatflow [flags]

Flags:
`

func parseFlags(args []string, stdout io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("seatflow", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by main
	fs.IntVar(&cfg.Orders, "orders", 40, fmt.Sprintf("orders in the batch (1..%d)", maxOrders))
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed for the scenario (0: pick one and print it)")
	fs.StringVar(&cfg.MySQL, "mysql", "", "MySQL/MariaDB `DSN` (go-sql-driver syntax, e.g. 'oe:oe@tcp(127.0.0.1:13306)/oe') instead of SQLite")
	fs.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL `DSN` (pgx syntax, e.g. 'postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable') instead of SQLite")
	fs.StringVar(&cfg.Redis, "redis", "", "Redis `ADDR` (host:port or redis:// URL) instead of miniredis")
	fs.StringVar(&cfg.RocketMQ, "rocketmq", "", "RocketMQ name server `NAMESRV` (host:port) instead of the in-process sender")
	fs.StringVar(&cfg.Broker, "rocketmq-broker", "127.0.0.1:10911", "RocketMQ broker `ADDR` (host:port) on which the demo creates its topic")
	fs.StringVar(&cfg.Mode, "rocketmq-mode", "timer", "RocketMQ delay `MODE`: timer (5.x broker, one hop) or levels (the broker's default levels, re-armed)")
	fs.BoolVar(&cfg.Verbose, "v", false, "show the library's debug logs in the timeline")
	fs.Usage = func() {} // the flag package calls it on every error; help is printed below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fmt.Fprint(stdout, "\nWith real servers every id gets a run prefix, so runs do not collide; their rows\nand keys are left in place.\n")
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return cfg, cfg.validate()
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "seatflow: %s (see -h)\n", oneLine(err))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// setupError is a failure before the scenario starts: bad configuration, a
// server that does not answer. It exits with status 2.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

func setupErrorf(format string, args ...any) error {
	return &setupError{fmt.Errorf(format, args...)}
}

// errViolations is returned by run when the final checks failed; they and the
// summary have been printed already.
var errViolations = errors.New("invariant violations")

// exitCode reports err in one line on stderr (unless it was printed already)
// and returns the process's exit status.
func exitCode(err error, stderr io.Writer) int {
	var setup *setupError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errViolations):
		return 1 // listed above the summary, which must stay the last line
	case errors.As(err, &setup):
		fmt.Fprintln(stderr, "seatflow:", oneLine(err))
		return 2
	default:
		fmt.Fprintln(stderr, "seatflow:", oneLine(err))
		return 1
	}
}

// oneLine flattens multi-line driver errors (pgx lists every address tried).
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
