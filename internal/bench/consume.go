package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Part 11: a consumer's due messages in batches. The backlog of part 10 in
// two copies; each backlog order's expiry message is handed to
// expiry.Handler.Handle by -workers goroutines at once, as a push
// consumer's goroutines hand over their deliveries (RocketMQ's client: 20
// by default). One copy goes through the Service as it is: concurrent
// Timeout calls are cancelled together (cancel/timeouts.go: one CancelDue
// transaction and one ReleaseAll per batch). The other goes through a
// Service whose store hides CancelDue: one Service.Cancel (one transaction,
// one EVALSHA) per message. The copies alternate in slices of -slice
// messages, so both see the same machine.

func runConsume(c *common, args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	var o backlogOpts
	fs.IntVar(&o.n, "n", 100_000, "backlog: pending orders past expire_at (2 seats each, locked in Redis), one message each, in each of the two copies")
	fs.IntVar(&o.history, "history", 20_000, "history orders beside the backlog in each copy (5 % pending not yet due, 60 % paid, 35 % cancelled)")
	fs.DurationVar(&o.outage, "outage", 30*time.Minute, "the backlog's expire_at values are spread over this span before the run")
	workers := fs.Int("workers", 20, "goroutines handing messages to the Handler at once (a push consumer's)")
	slice := fs.Int("slice", 5000, "messages per turn before the other copy's turn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	if o.n <= 0 || o.history < 0 || *workers <= 0 || *slice <= 0 {
		return fmt.Errorf("consume: -n, -workers and -slice must be positive, -history not negative")
	}
	fmt.Printf("Load average at start: %s. Two equal copies per database (each its own database/schema and Redis logical database): %d pending orders past `expire_at` "+
		"(2 seats each, over %d shows), beside %d history orders, bulk-loaded (`-load %s`), claims restored into Redis, ANALYZE. "+
		"Each backlog order's expiry message goes to `expiry.Handler.Handle` from %d goroutines at once, as a push consumer's goroutines hand over deliveries; "+
		"the copies take turns of %d messages; the rate counts the turns' time only.\n\n"+
		"- **batched**: the Service as it is: a `Timeout` that arrives while another is in the store waits for it and goes in the next batch "+
		"(sqlstore `CancelDue`, one transaction; `redisseat.ReleaseAll`, one EVALSHA per show in one pipeline); a lone one goes by the one-order path.\n"+
		"- **one order**: the same Service over the store without `CancelDue`: one `Service.Cancel` (one transaction, one EVALSHA) per message.\n\n",
		loadAvg(), o.n, backlogShows, o.history, loadMode, *workers, *slice)
	summary := newTable("database", "messages", "batched: time", "**orders/s**", "one order: time", "**orders/s**", "**batched / one order**")
	cpuT := newTable("database", "copy", "DB server", "Redis server", fmt.Sprintf("bench process (Handler, Service, drivers, the %d goroutines)", *workers), "total",
		fmt.Sprintf("cores busy (of %d)", runtime.NumCPU()))
	checks := newTable("database", "copy", "cancelled rows (reason timeout) / backlog", "KindCancelled per order: once / twice+ / never", "seats freed (2 per order)",
		"backlog seats held in Redis", "Redis seats = SQL claims", "backlog users' counters ≠ 0", "counters = SQL seats per user", "history unchanged", "skipped / release failed")
	var failed []string
	for _, e := range engines {
		if err := c.consumeEngine(e, o, *workers, *slice, summary, cpuT, checks, &failed); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	fmt.Printf("\n### Consume summary\n\n")
	summary.print(os.Stdout)
	fmt.Printf("\nGoal: batched / one order ≥ 3× on both databases.\n\n### CPU time per order (µs, user+system, during the turns)\n\n")
	cpuT.print(os.Stdout)
	fmt.Printf("\n### Correctness\n\n")
	checks.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

func (c *common) consumeEngine(engine string, o backlogOpts, workers, slice int, summary, cpuT, checks *table, failed *[]string) error {
	ctx := context.Background()
	sets := []*backlogSet{{label: "batched"}, {label: "one order"}}
	defer closeSets(sets)
	gen := backlogRows(o.n, o.outage, time.Now())
	handlers := make([]*expiry.Handler, len(sets))
	rearm := &noRearm{}
	for i, s := range sets {
		if err := c.loadSet(ctx, s, engine, "consume", i, workers+4, workers+4, o.n+o.history, gen); err != nil {
			return err
		}
		var err error
		s.obs = newCancelCounter(o.n)
		rt := expiry.Runtime{Observer: s.obs, Logger: c.log}
		if s.svc, err = cancel.New(cancel.Config{Store: s.store, Seats: s.seats, Runtime: rt}); err != nil {
			return err
		}
		var canceller expiry.Canceller = s.svc
		if i == 1 {
			canceller = oneOrderTimeouts{s.svc} // Timeout goes order by order
		}
		if handlers[i], err = expiry.NewHandler(expiry.HandlerConfig{Canceller: canceller, Sender: rearm, Runtime: rt}); err != nil {
			return err
		}
	}
	fmt.Printf("### %s\n\n", engineName(engine))
	fmt.Printf("- load average after loading: %s\n", loadAvg())
	for _, s := range sets {
		fmt.Printf("- %s copy: %d orders, %d seat claims restored into Redis, loaded in %v\n", s.label, o.n+o.history, s.claims, s.load.Round(100*time.Millisecond))
	}
	servers := map[string]string{"Redis": c.redisAddr}
	if engine == engMySQL {
		servers["MariaDB"] = dsnAddr(c.mysqlDSN, "127.0.0.1:13306")
	} else {
		servers["PostgreSQL"] = "127.0.0.1:" + fmt.Sprint(pgPort(c.pgDSN))
	}
	meter := c.newCPUMeter(servers)
	cpu := make([][]time.Duration, len(sets))
	spent := make([]time.Duration, len(sets))
	var handleErrs [2]atomic.Int64
	outcomes := [2]map[expiry.Outcome]int{{}, {}}
	var omu sync.Mutex
	for from := 0; from < o.n; from += slice {
		to := min(from+slice, o.n)
		for i := range sets {
			next := atomic.Int64{}
			next.Store(int64(from))
			cpu0 := meter.sample()
			t0 := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						k := int(next.Add(1) - 1)
						if k >= to {
							return
						}
						out, err := handlers[i].Handle(ctx, expiry.Message{OrderNo: gen(k).no, Hop: 1})
						if err != nil {
							handleErrs[i].Add(1)
						}
						omu.Lock()
						outcomes[i][out]++
						omu.Unlock()
					}
				}()
			}
			wg.Wait()
			spent[i] += time.Since(t0)
			d := sub(meter.sample(), cpu0)
			if cpu[i] == nil {
				cpu[i] = make([]time.Duration, len(d))
			}
			for k := range d {
				cpu[i][k] += d[k]
			}
		}
	}
	fmt.Printf("- load average after the drains: %s\n", loadAvg())
	for i, s := range sets {
		fmt.Printf("- %s: outcomes %v, Handle errors %d\n", s.label, outcomes[i], handleErrs[i].Load())
		if handleErrs[i].Load() > 0 || outcomes[i][expiry.OutcomeCancelled] != o.n {
			*failed = append(*failed, fmt.Sprintf("%s %s: %d messages cancelled their order of %d, %d Handle errors", engineName(engine), s.label, outcomes[i][expiry.OutcomeCancelled], o.n, handleErrs[i].Load()))
		}
	}
	if n := rearm.n.Load(); n > 0 {
		*failed = append(*failed, fmt.Sprintf("%s: %d due orders re-armed", engineName(engine), n))
	}
	fmt.Println()
	rate := func(i int) float64 { return float64(o.n) / spent[i].Seconds() }
	summary.add(engineName(engine), o.n, fmtDur(spent[0]), fmt.Sprintf("%.0f", rate(0)), fmtDur(spent[1]), fmt.Sprintf("%.0f", rate(1)), ratio(rate(0), rate(1)))
	for i, s := range sets {
		per := map[string]time.Duration{}
		var total time.Duration
		for k, name := range meter.names {
			per[name] = cpu[i][k]
			total += cpu[i][k]
		}
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/float64(o.n)) }
		// Cores busy = CPU spent / wall time of the turns: below the core count,
		// the copy waited on round trips rather than on the processor.
		busy := fmt.Sprintf("%.2f", total.Seconds()/spent[i].Seconds())
		cpuT.add(engineName(engine), s.label, us(per["MariaDB"]+per["PostgreSQL"]), us(per["Redis"]), us(per["bench process"]), us(total), busy)
	}
	for _, s := range sets {
		row, bad, err := checkBacklog(ctx, s, o.n, o.history, gen, cancel.ReasonTimeout)
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

// oneOrderTimeouts is the Service with every Timeout by the one-order path
// (one Cancel each), the path Service.Timeout takes for a lone call: the
// copy the batches are compared with.
type oneOrderTimeouts struct{ *cancel.Service }

func (s oneOrderTimeouts) Timeout(ctx context.Context, orderNo string) (bool, expiry.Order, error) {
	res, err := s.Cancel(ctx, cancel.Request{OrderNo: orderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	return res.Changed, res.Order, err
}
