package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/onebyone"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Part 10: cancels in batches. The same backlog as part 6 in two copies,
// drained by reconcile.Reconciler.Round with the default Config: one copy
// through the batch path (cancel.Service.ExpireDue: sqlstore's CancelDue,
// one transaction per batch, then redisseat's ReleaseAll per show), the
// other through the one-order path (the Service seen without ExpireDue:
// one Service.Cancel per order), rounds alternating between them.

// ReleaseAll counts what the batch path's releases freed, as Release does.
func (s *countingSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := s.Seats.ReleaseAll(ctx, holds)
	if err == nil {
		s.mu.Lock()
		for i, h := range holds {
			s.freed[h.OrderNo] += ns[i]
		}
		s.mu.Unlock()
	}
	return ns, err
}

func runBatch(c *common, args []string) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	var o backlogOpts
	fs.IntVar(&o.n, "n", 100_000, "backlog: pending orders past expire_at (2 seats each, locked in Redis), in each of the two copies")
	fs.IntVar(&o.history, "history", 20_000, "history orders beside the backlog in each copy (5 % pending not yet due, 60 % paid, 35 % cancelled)")
	fs.DurationVar(&o.outage, "outage", 30*time.Minute, "the backlog's expire_at values are spread over this span before the run")
	fs.DurationVar(&o.cap, "cap", 10*time.Minute, "give up on a drain still incomplete after this much round time")
	drive := fs.String("drive", "run", "run: each copy drained by reconcile.Run (-interval), one copy after the other, timed from Run's start until SQL shows no due order (the expired pass alone between full rounds while a backlog drains); round: reconcile.Round called in a loop, rounds alternating between the copies, every pass in every round")
	fs.DurationVar(&o.interval, "interval", 30*time.Second, "the interval given to reconcile.Run (-drive run)")
	fs.DurationVar(&o.poll, "poll", 50*time.Millisecond, "how often the bench asks SQL whether a due pending order is left (-drive run)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	if o.n <= 0 || o.history < 0 {
		return fmt.Errorf("batch: -n must be positive, -history not negative")
	}
	if *drive != "run" && *drive != "round" {
		return fmt.Errorf("batch: -drive %q is neither run nor round", *drive)
	}
	o.drive = *drive
	fmt.Printf("Load average at start: %s. Two equal copies per database (each its own database/schema and Redis logical database): %d pending orders past `expire_at` "+
		"(2 seats each, over %d shows), beside %d history orders, bulk-loaded (`-load %s`), claims restored into Redis, ANALYZE. "+
		"Both drained with the default Config (Batch %d, Workers %d, MaxPerRound %d) %s.\n\n"+
		"- **batch**: the Service as it is: the expired pass cuts each page into up to Workers batches, each `cancel.Service.ExpireDue` "+
		"(sqlstore `CancelDue`: one transaction, lock + one UPDATE … IN + claims read + claims freed; then one `redisseat.ReleaseAll`: one EVALSHA per show, all in one pipeline).\n"+
		"- **one order**: the same Service without `ExpireDue` (the pass's Workers goroutines each call `Service.Cancel`, one transaction and one EVALSHA per order).\n\n",
		loadAvg(), o.n, backlogShows, o.history, loadMode, reconcile.BatchDefault, reconcile.WorkersDefault, reconcile.MaxPerRoundDefault,
		map[string]string{
			"run":   fmt.Sprintf("by `reconcile.Reconciler.Run(ctx, %v)` (`-drive run`): the batch copy, then the one-order copy, each timed from Run's start until SQL shows no due order (asked every %v); while the backlog drains, the rounds between full ones run the expired pass alone", o.interval, o.poll),
			"round": "by `reconcile.Reconciler.Round` called in a loop (`-drive round`), rounds alternating between the copies until no due order is left, every pass in every round; the rate counts round time only",
		}[o.drive])
	summary := newTable("database", "backlog", "batch: rounds (full)", "drain time", "**orders/s**", "one order: rounds (full)", "drain time", "**orders/s**", "**batch / one order**")
	checks := newTable("database", "copy", "cancelled rows (reason reconcile) / backlog", "KindCancelled per order: once / twice+ / never", "seats freed (2 per order)",
		"backlog seats held in Redis", "Redis seats = SQL claims", "backlog users' counters ≠ 0", "counters = SQL seats per user", "history unchanged", "skipped / release failed")
	var failed []string
	for _, e := range engines {
		if err := c.batchEngine(e, o, summary, checks, &failed); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	fmt.Printf("\n### Batch summary\n\n")
	summary.print(os.Stdout)
	fmt.Printf("\nGoal: batch / one order ≥ 3× on both databases.\n\n### Correctness\n\n")
	checks.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

func (c *common) batchEngine(engine string, o backlogOpts, summary, checks *table, failed *[]string) error {
	ctx := context.Background()
	sets := []*backlogSet{{label: "batch"}, {label: "one order"}}
	defer closeSets(sets)
	gen := backlogRows(o.n, o.outage, time.Now())
	recs := make([]*reconcile.Reconciler, len(sets))
	clocks := []*roundClock{{}, {}}
	for i, s := range sets {
		if err := c.loadSet(ctx, s, engine, "batch", i, 8, 16, o.n+o.history, gen); err != nil {
			return err
		}
		var err error
		s.obs = newCancelCounter(o.n)
		clocks[i].obs = s.obs
		rt := expiry.Runtime{Observer: s.obs, Logger: c.log}
		if s.svc, err = cancel.New(cancel.Config{Store: s.store, Seats: s.seats, Runtime: rt}); err != nil {
			return err
		}
		rc := clocks[i]
		orders := clockedOrders{s.store, rc}
		var svc reconcile.Service = clockedService{s.svc, rc, s.obs}
		if i == 1 {
			svc = clockedService{onebyone.Service{Canceller: s.svc}, rc, s.obs}
		}
		if recs[i], err = reconcile.New(reconcile.Config{Orders: orders, Seats: clockedSeats{s.seats, rc}, Service: svc, Runtime: rt}); err != nil {
			return err
		}
	}
	fmt.Printf("### %s\n\n", engineName(engine))
	fmt.Printf("- load average after loading: %s\n", loadAvg())
	for _, s := range sets {
		fmt.Printf("- %s copy: %d orders, %d seat claims restored into Redis, loaded in %v\n", s.label, o.n+o.history, s.claims, s.load.Round(100*time.Millisecond))
	}
	spent := make([]time.Duration, len(sets))
	rounds := make([]int, len(sets))
	if o.drive == "run" {
		for i, s := range sets {
			d, ok, err := drainByRun(ctx, recs[i], s, clocks[i], o)
			if err != nil {
				return fmt.Errorf("%s: %w", s.label, err)
			}
			if !ok {
				*failed = append(*failed, fmt.Sprintf("%s %s: not drained after %v", engineName(engine), s.label, o.cap))
			}
			spent[i], rounds[i] = d, len(clocks[i].rounds)
		}
	} else if err := drainByRounds(ctx, c, recs, sets, o, spent, rounds, engine, failed); err != nil {
		return err
	}
	for i, s := range sets {
		var exp, rest time.Duration
		for _, rt := range clocks[i].rounds {
			if rt.locks.IsZero() { // the expired pass alone
				exp += rt.end.Sub(rt.start)
			} else {
				exp += rt.locks.Sub(rt.start)
				rest += rt.end.Sub(rt.locks)
			}
		}
		fmt.Printf("- %s: of the rounds' time, the expired pass with its cancels %v, the lock, claims and refunds passes %v\n", s.label, fmtDur(exp), fmtDur(rest))
	}
	fmt.Printf("- load average after the drains: %s\n\n", loadAvg())
	rate := func(i int) float64 { return float64(o.n) / spent[i].Seconds() }
	rf := func(i int) string { return fmt.Sprintf("%d (%d)", rounds[i], clocks[i].full()) }
	summary.add(engineName(engine), o.n, rf(0), fmtDur(spent[0]), fmt.Sprintf("%.0f", rate(0)), rf(1), fmtDur(spent[1]), fmt.Sprintf("%.0f", rate(1)), ratio(rate(0), rate(1)))
	for _, s := range sets {
		row, bad, err := checkBacklog(ctx, s, o.n, o.history, gen, cancel.ReasonReconcile)
		if err != nil {
			return fmt.Errorf("check %s: %w", s.label, err)
		}
		checks.add(append([]any{engineName(engine), s.label}, row...)...)
		for _, b := range bad {
			*failed = append(*failed, engineName(engine)+" "+s.label+": "+b)
		}
	}
	return nil
}

// drainByRun runs rec until SQL shows no due order of s (or o.cap), and
// returns the time from Run's start to the drain, whether it drained.
func drainByRun(ctx context.Context, rec *reconcile.Reconciler, s *backlogSet, rc *roundClock, o backlogOpts) (time.Duration, bool, error) {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- rec.Run(rctx, o.interval) }()
	drained := false
	for !drained && time.Since(start) < o.cap {
		time.Sleep(o.poll)
		left, _, err := s.store.Expired(ctx, "", 1)
		if err != nil {
			return 0, false, err
		}
		drained = len(left) == 0
	}
	d := time.Since(start)
	for rc.busy() && time.Since(start) < o.cap { // the round in progress ends (its releases)
		time.Sleep(time.Millisecond)
	}
	stop()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		return 0, false, fmt.Errorf("reconcile.Run returned %v", err)
	}
	return d, drained, nil
}

// drainByRounds calls Round on each copy in turn until neither has a due
// order left, adding each copy's round time to spent and its rounds to rounds.
func drainByRounds(ctx context.Context, c *common, recs []*reconcile.Reconciler, sets []*backlogSet, o backlogOpts, spent []time.Duration, rounds []int, engine string, failed *[]string) error {
	done := make([]bool, len(sets))
	for !(done[0] && done[1]) {
		for i, s := range sets {
			if done[i] {
				continue
			}
			t0 := time.Now()
			rep, err := recs[i].Round(ctx)
			spent[i] += time.Since(t0)
			rounds[i]++
			if err != nil {
				return fmt.Errorf("%s: round: %w", s.label, err)
			}
			if rep.Skipped > 0 {
				c.log.Warn("batch bench: skipped orders", "copy", s.label, "skipped", rep.Skipped)
			}
			left, _, err := s.store.Expired(ctx, "", 1)
			if err != nil {
				return err
			}
			if len(left) == 0 {
				done[i] = true
			} else if spent[i] > o.cap {
				*failed = append(*failed, fmt.Sprintf("%s %s: not drained after %v of rounds", engineName(engine), s.label, o.cap))
				done[i] = true
			}
		}
	}
	return nil
}
