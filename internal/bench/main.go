// Command bench measures orderexpiry against the limits it sits on: the
// delay-level hop chains (simulated, and on a real RocketMQ broker), end-to-end
// expiry throughput against the raw SQL + Redis work it does, reconcile drain
// rate against table size, the library's transport against asynq, the
// hot path's allocations, and how fast reconcile.Run drains the backlog an
// outage leaves.
//
// Every part prints markdown tables. Absolute numbers drift on a shared
// 2-core machine, so each part measures what it compares side by side in the
// same run (interleaved where it can) and reports ratios.
//
//	go -C internal/bench run . -h
//	go -C internal/bench run . all
//	go -C internal/bench run . throughput -n 1000 -conc 1,4,16,32
//
// It is a tool of this repository (internal/), not part of the library, and a
// module of its own so that its dependencies (asynq, gonum/plot) stay out of
// the library's go.mod.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"
)

type part struct {
	name  string
	about string
	run   func(c *common, args []string) error
}

var parts = []part{
	{"hops", "1. hops and lateness per order: simulation of the level rule (slack 0, slack 1s) and timer mode; real RocketMQ broker if it answers", runHops},
	{"throughput", "2. expired orders/s end to end (Shell→Handler→Service→SQL→Redis) beside the raw SQL transaction and raw EVALSHA, MariaDB and PostgreSQL", runThroughput},
	{"drain", "3. reconcile drain rate of a 10k backlog in a 20k and a 1M order table, with EXPLAIN of the scan", runDrain},
	{"asynq", "4. the library's transport (RocketMQ timer mode, and in-process) against asynq ProcessIn on the same cancel path", runAsynq},
	{"hotpath", "5. go test -bench of the hot path (Handler.Handle, Shell.Process, Encode/DecodeMessage) with -benchmem", runHotpath},
	{"backlog", "6. a 100k backlog left by an outage: reconcile.Run with the default Config beside the raw cancel path over an equal backlog, MariaDB and PostgreSQL; correctness checks", runBacklog},
	{"cluster", "7. several instances as processes: a 100k backlog drained by three instances' reconcilers beside the raw cancel path in three processes; the message path with 1, 2, 3 instances and each process's CPU", runCluster},
	{"transports", "8. each transport (RocketMQ timer mode, asynq, River on PostgreSQL and SQLite) beside its own client library used by hand: lateness p50/p99/max, early arrivals, schedule and expiry rates, rounds interleaved", runTransports},
	{"place", "9. placing: cancel.Service.Place end to end beside the same work by hand and the SQL transaction alone, MariaDB and PostgreSQL, in-process sender and RocketMQ; round trips per placement", runPlace},
	{"batch", "10. cancels in batches: a 100k backlog drained by the reconciler through cancel.Service.ExpireDue (one transaction per batch, one EVALSHA per show) beside the one-order path over an equal copy, MariaDB and PostgreSQL", runBatch},
	{"consume", "11. a consumer's due messages in batches: a 100k backlog of due expiry messages handed to expiry.Handler by 20 goroutines at once, as a push consumer does; concurrent Timeout calls batched (cancel.Service as it is) beside the one-order path over an equal copy, MariaDB and PostgreSQL", runConsume},
	{"wave", "12. the onsale wave end to end: 50k orders due within one minute, through RocketMQ timer mode and the reconciler together, the Service as it is beside the one-order path over an equal copy: drain time, lateness p50/p99/max, who cancelled, each server's CPU per order, MariaDB and PostgreSQL", runWave},
}

func usage() {
	w := flag.CommandLine.Output()
	fmt.Fprintf(w, "usage: go -C internal/bench run . [common flags] <part|all> [part flags]\n\nparts:\n")
	for _, p := range parts {
		fmt.Fprintf(w, "  %-11s %s\n", p.name, p.about)
	}
	fmt.Fprintf(w, "  %-11s every part above with its defaults (about 10 minutes)\n\n", "all")
	fmt.Fprintf(w, "common flags (before the part name):\n")
	flag.PrintDefaults()
	fmt.Fprintf(w, "\n'go -C internal/bench run . <part> -h' lists a part's own flags.\n")
}

func main() {
	c := &common{}
	c.register(flag.CommandLine)
	flag.Usage = usage
	flag.Parse()
	if flag.NArg() == 0 {
		usage()
		os.Exit(2)
	}
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelDebug
	}
	c.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(c.log)

	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	name, args := flag.Arg(0), flag.Args()[1:]
	var todo []part
	if name == "all" {
		todo = parts
		args = nil
	} else {
		for _, p := range parts {
			if p.name == name {
				todo = []part{p}
			}
		}
		if todo == nil {
			fmt.Fprintf(os.Stderr, "unknown part %q\n\n", name)
			usage()
			os.Exit(2)
		}
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			err := todo[0].run(c, args)
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fatal(err)
		}
	}
	start := time.Now()
	c.printMachine(os.Stdout)
	failed := 0
	for _, p := range todo {
		t0 := time.Now()
		fmt.Printf("\n## Part %s\n\n", p.name)
		if err := p.run(c, args); err != nil {
			failed++
			fmt.Printf("\n**%s failed:** %v\n", p.name, err)
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", p.name, err)
		}
		fmt.Printf("\n_(%s took %v)_\n", p.name, time.Since(t0).Round(time.Second))
	}
	fmt.Printf("\n_total %v_\n", time.Since(start).Round(time.Second))
	if failed > 0 {
		if c.cpuprofile != "" {
			pprof.StopCPUProfile()
		}
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// table prints a markdown table.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case string:
			row[i] = v
		case time.Duration:
			row[i] = fmtDur(v)
		case float64:
			row[i] = fmt.Sprintf("%.3g", v)
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.rows = append(t.rows, row)
}

func (t *table) print(w io.Writer) {
	fmt.Fprintln(w, "| "+strings.Join(t.head, " | ")+" |")
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintln(w, "| "+strings.Join(seps, " | ")+" |")
	for _, r := range t.rows {
		fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
	}
}

// fmtDur prints a duration with a sensible precision.
func fmtDur(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case a >= time.Minute:
		return d.Round(time.Second).String()
	case a >= 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case a >= time.Second:
		return d.Round(time.Millisecond).String()
	case a >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}

// pct returns the p-th percentile (0..100) of xs, sorting a copy.
func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func maxDur(xs []time.Duration) time.Duration {
	var m time.Duration
	for i, x := range xs {
		if i == 0 || x > m {
			m = x
		}
	}
	return m
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f %%", 100*a/b)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurs(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
