//go:build unix

// Command seatflow-river is the seatflow demo on a durable embedded default:
// orders and their expiry jobs in one SQLite file, the jobs worked by River
// (expiry/river), each inserted in its order's own transaction. It needs no
// server, and it survives its own restart.
//
// Run with no flags, it shows that: run 1, a child process, places a batch
// of orders due in 4-11 s and pays or cancels some; it is SIGKILLed
// mid-run; run 2, this process, starts again on the same file: a reconcile
// round rebuilds the seat store (in memory, so empty again) from SQL's
// claims, River works the jobs run 1 left, the users' remaining actions run,
// and when every order has ended the checks read SQL, the seat store and
// the decisions log back: every order ended exactly once. Exit status: 0 all
// checks passed, 1 a violation (listed above the summary) or a failure, 2
// bad flags or setup.
//
// It is a module of its own, so that River stays out of the library's
// go.mod; from the repository's root:
//
//	go -C examples/seatflow-river run .
//	go -C examples/seatflow-river run . -orders 40 -kill-after 8s -seed 7
//	go -C examples/seatflow-river run . -db /tmp/sf.db -kill-after 5s   # run 1, kills itself
//	go -C examples/seatflow-river run . -db /tmp/sf.db                  # run 2, finishes and checks
//
// Unix only: it locks the file with flock and kills with SIGKILL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// envChild marks the child process of the show (and of the test binary,
// whose TestMain runs main for it).
const envChild = "OE_SEATFLOW_RIVER_CHILD"

type config struct {
	Orders    int
	Seed      uint64
	DB        string        // "": the show, on a new file in a temporary directory
	KillAfter time.Duration // the show: when run 1 is killed; with DB: kill this process then (0: never)
	Keep      bool          // the show: keep the temporary directory
}

const maxOrders = 60

const usage = `seatflow-river runs the seatflow demo on SQLite and River (expiry/river):
orders and their expiry jobs in one SQLite file, no server. With no flags it
shows a restart: run 1 (a child process) places the batch and is SIGKILLed
mid-run; run 2 starts again on the same file, rebuilds the seats from SQL,
works the remaining River jobs, and checks that every order ended once. Its
last line is:

  summary: planned=N placed=N paid=N cancelled=N pending=N ... violations=N

Exit status: 0 every check passed; 1 a violation or a failure; 2 bad flags.

Usage: go -C examples/seatflow-river run . [flags]

Flags:
`

func parseFlags(args []string, stdout io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("seatflow-river", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Orders, "orders", 30, fmt.Sprintf("orders in the batch (1..%d; a file keeps its own)", maxOrders))
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: pick one; a file keeps its own)")
	fs.StringVar(&cfg.DB, "db", "", "SQLite `FILE`: one run on it, placing the batch if it has none, resuming it otherwise (default: the whole show on a new file)")
	fs.DurationVar(&cfg.KillAfter, "kill-after", 6*time.Second, "SIGKILL run 1 this long after it starts (with -db: this process; 0 there: never)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the show's temporary directory")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	killSet := false
	fs.Visit(func(f *flag.Flag) { killSet = killSet || f.Name == "kill-after" })
	if cfg.DB != "" && !killSet {
		cfg.KillAfter = 0
	}
	switch {
	case cfg.Orders < 1 || cfg.Orders > maxOrders:
		return cfg, fmt.Errorf("-orders %d: want 1..%d", cfg.Orders, maxOrders)
	case cfg.KillAfter < 0:
		return cfg, fmt.Errorf("-kill-after %v is negative", cfg.KillAfter)
	case cfg.DB == "" && cfg.KillAfter == 0:
		return cfg, errors.New("-kill-after 0: the show needs run 1 killed (use -db for a run that is not)")
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%999_999) + 1
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "seatflow-river: %v (see -h)\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if cfg.DB != "" {
		err = runOnce(ctx, cfg, os.Stdout)
	} else {
		err = runShow(ctx, cfg)
	}
	stop()
	os.Exit(exitCode(err))
}

// runOnce is one run on cfg.DB (-db), killing itself after cfg.KillAfter.
func runOnce(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.KillAfter > 0 {
		time.AfterFunc(cfg.KillAfter, func() {
			if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
				fmt.Fprintln(os.Stderr, "seatflow-river: cannot kill itself:", err)
			}
		})
	}
	d, err := open(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer d.close()
	return d.scenario(ctx)
}

// runShow runs the show in a temporary directory.
func runShow(ctx context.Context, cfg config) error {
	exe, err := os.Executable()
	if err != nil {
		return setupErrorf("%w", err)
	}
	dir, err := os.MkdirTemp("", "seatflow-river-")
	if err != nil {
		return setupErrorf("%w", err)
	}
	if cfg.Keep {
		defer fmt.Printf("(kept %s)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	d, err := show(ctx, cfg, exe, dir, os.Stdout)
	if d != nil {
		d.close()
	}
	return err
}

// show is the whole demo: run 1 in a child process (exe) on a new file in dir,
// SIGKILLed after cfg.KillAfter, then run 2 in this process on the same
// file. It returns run 2's demo, still open (the caller closes it), so a
// test can read its stores.
func show(ctx context.Context, cfg config, exe, dir string, out io.Writer) (*demo, error) {
	cfg.DB = filepath.Join(dir, "orders.db")
	fmt.Fprintf(out, "=== run 1: a child process on %s, SIGKILLed after %v\n", cfg.DB, cfg.KillAfter)
	cmd := exec.Command(exe, "-db", cfg.DB, "-orders", strconv.Itoa(cfg.Orders), "-seed", strconv.FormatUint(cfg.Seed, 10))
	cmd.Env = append(os.Environ(), envChild+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, setupErrorf("run 1: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return nil, fmt.Errorf("run 1 ended before it was killed (%v): -kill-after is too long, or it failed", err)
	case <-ctx.Done():
		err := cmd.Process.Kill()
		<-done
		return nil, errors.Join(ctx.Err(), err)
	case <-time.After(cfg.KillAfter):
	}
	// Killed mid-run means after run 1 decided something: on a loaded
	// machine that may take longer than cfg.KillAfter (up to 30 s more).
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(cfg.DB + ".decisions"); err == nil && fi.Size() > 0 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: nothing of run 1 runs after this
		return nil, err
	}
	err := <-done
	var exit *exec.ExitError
	if ws, ok := exitStatus(err, &exit); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return nil, fmt.Errorf("run 1 was not killed by SIGKILL: %v", err)
	}
	fmt.Fprintf(out, "=== run 1 (pid %d) killed by SIGKILL; run 2: this process, on the same file\n", cmd.Process.Pid)
	d, err := open(ctx, cfg, out)
	if err != nil {
		return nil, err
	}
	return d, d.scenario(ctx)
}

func exitStatus(err error, exit **exec.ExitError) (syscall.WaitStatus, bool) {
	if !errors.As(err, exit) {
		return 0, false
	}
	ws, ok := (*exit).Sys().(syscall.WaitStatus)
	return ws, ok
}

// setupError is a failure before the scenario starts: exit status 2.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

func setupErrorf(format string, args ...any) error {
	return &setupError{fmt.Errorf(format, args...)}
}

// errViolations: the checks failed; they and the summary are printed.
var errViolations = errors.New("invariant violations")

func exitCode(err error) int {
	var setup *setupError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errViolations):
		return 1
	case errors.As(err, &setup):
		fmt.Fprintln(os.Stderr, "seatflow-river:", oneLine(err))
		return 2
	default:
		fmt.Fprintln(os.Stderr, "seatflow-river:", oneLine(err))
		return 1
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
