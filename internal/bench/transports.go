package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // "sqlite" database/sql driver, for River on SQLite

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Part 8: each transport of the library beside its own client library used
// by hand for the same job (a message due at a given time, handled once it
// arrives), in one process, rounds interleaved (ours, raw; raw, ours; …).
//
// ours: expiry.Scheduler.Schedule → the transport's Sender; its consumer →
// expiry.Shell → Handler → cancel.Service on the in-memory store and seats
// (memstore), so what differs between transports is the transport. An order
// counts as handled when the Service reports it cancelled.
//
// raw: the client library's own send with the due time, the order number as
// the body; its own consumer records the arrival. Nothing checks whether the
// arrival is early: that is what the early column counts.

// arrivals records when each expected order was handled.
type arrivals struct {
	mu     sync.Mutex
	want   map[string]bool
	at     map[string]time.Time
	done   chan struct{}
	dups   int // a second arrival of an order handled already
	stray  int // an order of no current round (a warm-up's, a late duplicate)
	rearms int // ours: early arrivals the Handler re-armed
	fails  int // ours: send, release or bad-message events
}

func newArrivals() *arrivals {
	a := &arrivals{}
	a.expect(nil)
	return a
}

// expect starts a round: nos are the orders to wait for.
func (a *arrivals) expect(nos []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.want = make(map[string]bool, len(nos))
	for _, no := range nos {
		a.want[no] = true
	}
	a.at = make(map[string]time.Time, len(nos))
	a.done = make(chan struct{})
	a.dups, a.stray, a.rearms, a.fails = 0, 0, 0, 0
	if len(nos) == 0 {
		close(a.done)
	}
}

func (a *arrivals) hit(no string) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.want[no]:
		a.stray++
	case !a.at[no].IsZero():
		a.dups++
	default:
		a.at[no] = now
		if len(a.at) == len(a.want) {
			close(a.done)
		}
	}
}

// wait waits for every expected order, or until the deadline.
func (a *arrivals) wait(deadline time.Time) bool {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(time.Until(deadline)):
		return false
	}
}

// Observe makes arrivals the Observer of ours: an order is handled when the
// cancel Service reports it cancelled.
func (a *arrivals) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindCancelled:
		a.hit(e.OrderNo)
	case expiry.KindHandled:
		if e.Outcome == expiry.OutcomeRearmed {
			a.mu.Lock()
			a.rearms++
			a.mu.Unlock()
		}
	case expiry.KindSendFailed, expiry.KindReleaseFailed, expiry.KindBadMessage:
		a.mu.Lock()
		a.fails++
		a.mu.Unlock()
	}
}

// trVariant is one side of a pair: ours or raw.
type trVariant struct {
	desc string
	rec  *arrivals
	// place, for ours, inserts the orders (untimed; raw has nothing to place).
	place func(ctx context.Context, nos []string, dues []time.Time) error
	// send schedules one order due at due.
	send func(ctx context.Context, no string, due time.Time) error
}

// trPair is a transport with its two sides, started.
type trPair struct {
	name, needs string
	ours, raw   *trVariant
	stop        []func()
}

func (p *trPair) close() {
	for i := len(p.stop) - 1; i >= 0; i-- {
		p.stop[i]()
	}
}

// oursSide wires the library's consumer side for a transport whose Sender
// is s: the in-memory store and seats, the cancel Service, the Handler, the
// Shell and the Scheduler, all observed by rec.
func (c *common) oursSide(s expiry.DelaySender, rec *arrivals) (*trVariant, *expiry.Shell, error) {
	store := memstore.NewStore(nil)
	seats := memstore.NewSeats(nil)
	rt := expiry.Runtime{Observer: rec, Logger: c.log}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: rt})
	if err != nil {
		return nil, nil, err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: s, Runtime: rt})
	if err != nil {
		return nil, nil, err
	}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: s, Runtime: rt})
	if err != nil {
		return nil, nil, err
	}
	v := &trVariant{rec: rec}
	v.place = func(ctx context.Context, nos []string, dues []time.Time) error {
		for i, no := range nos {
			p := cancel.Placement{OrderNo: no, UserID: "u" + strconv.Itoa(i%1000), ShowID: "tr", Seats: []string{no}, ExpireAt: dues[i]}
			if err := svc.Place(ctx, p, store.Place); err != nil {
				return err
			}
		}
		return nil
	}
	v.send = func(ctx context.Context, no string, due time.Time) error {
		if !sched.Schedule(ctx, no, due) {
			return errors.New("Schedule reported a failed send (see the log)")
		}
		return nil
	}
	return v, expiry.NewShell(h), nil
}

// ---- the measurement ----

// trRound is one side's run of one round.
type trRound struct {
	late      []time.Duration // the spread orders: handled − due
	early     int             // handled before due (ours: cancelled before its deadline)
	rearms    int
	handled   int
	want      int
	schedRate float64 // sends/s, all of the round's orders
	drainRate float64 // the backlog: orders / (last − first handled)
	drainLag  time.Duration
	cpuPerMsg time.Duration // this process's CPU in the side's send slices / orders
	// sliceRatios (ours only): per send slice, ours' rate / raw's rate
	// in the slice next to it.
	sliceRatios []float64
	overlap     bool // the side due first was still being delivered when the other's orders fell due
	dups        int
	fails       int
}

type trOpts struct {
	n, backlog, schedConc int
	dmin, dmax, gap       time.Duration
	offset                time.Duration
	slice                 int
}

func runTransports(c *common, args []string) error {
	fs := flag.NewFlagSet("transports", flag.ContinueOnError)
	transportsF := fs.String("transports", "rocketmq,asynq,river-pg,river-sqlite", "comma list of rocketmq, asynq, river-pg, river-sqlite (rocketmq is skipped if the broker does not answer)")
	rounds := fs.Int("rounds", 2, "rounds per transport; a round runs both sides one after the other, alternating which goes first")
	n := fs.Int("n", 200, "orders per side and round with delays spread over [delay-min, delay-max] (lateness)")
	backlog := fs.Int("backlog", 1000, "orders per side and round all due at one instant (expiry rate)")
	dmin := fs.Duration("delay-min", 6*time.Second, "shortest delay (River's leader moves scheduled jobs every 5 s, looking 5 s ahead: shorter delays wait for it)")
	dmax := fs.Duration("delay-max", 9*time.Second, "longest delay")
	gap := fs.Duration("backlog-after", 2*time.Second, "the backlog is due this long after the longest delay")
	slice := fs.Int("slice", 200, "orders per send slice")
	offset := fs.Duration("offset", 18*time.Second, "the second side's orders are due this long after the first side's (so that their deliveries do not overlap)")
	schedConc := fs.Int("sched-conc", 8, "goroutines sending")
	consumers := fs.Int("consumers", 20, "consumer concurrency of every side (RocketMQ consume goroutines, asynq Concurrency, River MaxWorkers)")
	riverPoll := fs.Duration("river-poll", 0, "River's FetchPollInterval (0: River's default, 1 s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dmax < *dmin || *dmin <= 0 || *n <= 0 || *backlog < 2 || *rounds <= 0 || *slice <= 0 {
		return errors.New("need 0 < delay-min ≤ delay-max, n > 0, backlog ≥ 2, rounds > 0, slice > 0")
	}
	o := trOpts{n: *n, backlog: *backlog, schedConc: *schedConc, dmin: *dmin, dmax: *dmax, gap: *gap, offset: *offset, slice: *slice}
	fmt.Printf("Each transport of the library (ours) beside its own client library used by hand for the same job (raw), in this one process, %d rounds. "+
		"A side's round: %d orders due at send start + U(%v, %v) (lateness) and %d orders all due at send start + %v (the backlog, expiry rate), "+
		"sent by %d goroutines; %d consumers each side. "+
		"In a round both sides' orders are sent in one phase, in slices of %d that alternate between the sides (which goes first alternates by slice and by round), so the sends of both see the same moments of the machine; "+
		"the second side's orders are due %v after the first side's (ours first in even rounds, raw in odd ones), so each side's deliveries run alone, the other's consumer idling.\n\n"+
		"- **ours**: `expiry.Scheduler.Schedule` → the transport's Sender; its consumer → `expiry.Shell` → `Handler` → `cancel.Service` on the in-memory store and seats (`cancel/memstore`), "+
		"so the store costs microseconds and what differs is the transport; an order is handled when the Service reports it cancelled.\n"+
		"- **raw**: the client library's own send with the due time, the order number as the body, and its own consumer recording the arrival; nothing checks for an early arrival.\n\n"+
		"Lateness = handled − due, over every spread order of every round; early = handled before its due time (ours: cancelled before the deadline; its early *arrivals* are re-armed and counted apart). "+
		"Schedule rate = orders sent / the side's time in its send slices; its ours/raw is the median over every full slice of every round of (raw's time / ours' time in the adjacent slices). Expiry rate = backlog orders / (last − first handled). "+
		"Ratios are the median over rounds of ours / raw in the same round (paired), robust to the load other work puts on this 2-core machine.\n\n",
		*rounds, o.n, o.dmin, o.dmax, o.backlog, o.dmax+o.gap, o.schedConc, *consumers, o.slice, o.offset)

	ctx := context.Background()
	type result struct {
		p         *trPair
		ours, raw []trRound
		oursDesc  string
		rawDesc   string
		dropped   []string
	}
	var results []*result
	var failures []string
	for ti, tr := range strings.Split(*transportsF, ",") {
		var p *trPair
		var err error
		tr = strings.TrimSpace(tr)
		switch tr {
		case "rocketmq":
			if !brokerUp(c.namesrv, c.broker) {
				fmt.Printf("RocketMQ skipped: the name server %s / broker %s did not answer.\n\n", c.namesrv, c.broker)
				continue
			}
			p, err = c.rocketmqPair(ctx, *consumers)
		case "asynq":
			p, err = c.asynqPair(ctx, *consumers)
		case "river-pg":
			p, err = c.riverPair(ctx, "postgres", *consumers, *riverPoll)
		case "river-sqlite":
			p, err = c.riverPair(ctx, "sqlite", *consumers, *riverPoll)
		case "":
			continue
		default:
			return fmt.Errorf("unknown transport %q", tr)
		}
		if err != nil {
			return fmt.Errorf("%s: start: %w", tr, err)
		}
		res := &result{p: p, oursDesc: p.ours.desc, rawDesc: p.raw.desc}
		err = func() error {
			defer p.close()
			if err := warmUp(ctx, p, *schedConc); err != nil {
				return err
			}
			// A round whose sends overran the first due time (a machine
			// too busy) is dropped and run again, up to two extra rounds.
			for a := 0; len(res.ours) < *rounds && a < *rounds+2; a++ {
				r := len(res.ours)
				ours, raw, err := trRun(ctx, p, fmt.Sprintf("%d%d", ti, a), r, o, c.seed+int64(a))
				if errors.Is(err, errOverrun) {
					res.dropped = append(res.dropped, err.Error())
					continue
				}
				if err != nil {
					return fmt.Errorf("round %d: %w", r, err)
				}
				res.ours = append(res.ours, ours)
				res.raw = append(res.raw, raw)
			}
			if len(res.ours) == 0 {
				return errors.New("no round completed")
			}
			return nil
		}()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", p.name, err))
			fmt.Fprintf(os.Stderr, "bench transports: %s: %v\n", p.name, err)
			continue
		}
		results = append(results, res)
	}

	fmt.Printf("Sides:\n\n")
	for _, r := range results {
		fmt.Printf("- %s: ours %s; raw %s.\n", r.p.name, r.oursDesc, r.rawDesc)
	}
	fmt.Println()
	t := newTable("transport", "side", "handled", "early", "late p50", "late p99", "late max", "re-arms", "duplicates")
	for _, r := range results {
		for _, side := range []struct {
			name   string
			rounds []trRound
		}{{"ours", r.ours}, {"raw", r.raw}} {
			var late []time.Duration
			early, rearms, handled, want, dups := 0, 0, 0, 0, 0
			for _, rr := range side.rounds {
				late = append(late, rr.late...)
				early += rr.early
				rearms += rr.rearms
				handled += rr.handled
				want += rr.want
				dups += rr.dups
			}
			earlyCell := strconv.Itoa(early)
			if side.name == "ours" && early > 0 {
				earlyCell = "**" + earlyCell + "**"
			}
			rearmCell := "—"
			if side.name == "ours" {
				rearmCell = strconv.Itoa(rearms)
			}
			t.add(r.p.name, side.name, fmt.Sprintf("%d/%d", handled, want), earlyCell, pct(late, 50), pct(late, 99), maxDur(late), rearmCell, dups)
		}
	}
	t.print(os.Stdout)

	fmt.Println()
	rt := newTable("transport", "schedule/s ours", "raw", "ours/raw", "expiry/s ours", "raw", "ours/raw", "backlog all handled after its due time (ours / raw)", "send CPU µs/order (ours / raw)")
	for _, r := range results {
		med := func(rs []trRound, f func(trRound) float64) float64 {
			xs := make([]float64, len(rs))
			for i, x := range rs {
				xs[i] = f(x)
			}
			return medianF(xs)
		}
		paired := func(f func(trRound) float64) string {
			var xs []float64
			for i := range r.ours {
				if b := f(r.raw[i]); b > 0 {
					xs = append(xs, f(r.ours[i])/b)
				}
			}
			if len(xs) == 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.0f %%", 100*medianF(xs))
		}
		sched := func(x trRound) float64 { return x.schedRate }
		drain := func(x trRound) float64 { return x.drainRate }
		lag := func(x trRound) float64 { return float64(x.drainLag) }
		cpu := func(x trRound) float64 { return float64(x.cpuPerMsg) }
		var sr []float64
		for _, x := range r.ours {
			sr = append(sr, x.sliceRatios...)
		}
		schedRatio := "n/a"
		if len(sr) > 0 {
			schedRatio = fmt.Sprintf("%.0f %% (%d slices)", 100*medianF(sr), len(sr))
		}
		rt.add(r.p.name, fmt.Sprintf("%.0f", med(r.ours, sched)), fmt.Sprintf("%.0f", med(r.raw, sched)), schedRatio,
			fmt.Sprintf("%.0f", med(r.ours, drain)), fmt.Sprintf("%.0f", med(r.raw, drain)), paired(drain),
			fmtDur(time.Duration(med(r.ours, lag)))+" / "+fmtDur(time.Duration(med(r.raw, lag))),
			fmt.Sprintf("%.0f / %.0f", float64(time.Duration(med(r.ours, cpu)).Nanoseconds())/1e3, float64(time.Duration(med(r.raw, cpu)).Nanoseconds())/1e3))
	}
	rt.print(os.Stdout)
	fmt.Printf("\nPer round (due first: the side whose orders fell due first):\n\n")
	pt := newTable("transport", "round", "due first", "schedule/s ours / raw", "expiry/s ours / raw", "late p50 ours / raw", "deliveries apart")
	for _, r := range results {
		for i := range r.ours {
			first := "ours"
			if i%2 == 1 {
				first = "raw"
			}
			o, w := r.ours[i], r.raw[i]
			pt.add(r.p.name, i, first, fmt.Sprintf("%.0f / %.0f", o.schedRate, w.schedRate), fmt.Sprintf("%.0f / %.0f", o.drainRate, w.drainRate),
				fmtDur(pct(o.late, 50))+" / "+fmtDur(pct(w.late, 50)), yes(!(o.overlap || w.overlap)))
		}
	}
	pt.print(os.Stdout)
	fmt.Printf("\nRates are medians over rounds; expiry ours/raw is the median of the rounds' paired ratios, schedule ours/raw the median over the send slices. Send CPU = this process's user+system time in the side's send slices / its orders (the other side's consumer polling included, alike for both). " +
		"\"deliveries apart\" is **no** when the side due first was still being delivered when the other side's orders fell due (raise -offset).\n")
	for _, r := range results {
		for _, d := range r.dropped {
			fmt.Printf("\n- %s: %s (lower -n/-backlog or raise -delay-min).", r.p.name, d)
		}
	}
	for _, f := range failures {
		fmt.Printf("\n- **failed**: %s", f)
	}
	fmt.Println()
	if len(failures) > 0 {
		return fmt.Errorf("%d transports failed: %s", len(failures), strings.Join(failures, "; "))
	}
	bad := 0
	for _, r := range results {
		for _, rr := range r.ours {
			bad += rr.early + rr.fails + (rr.want - rr.handled)
		}
	}
	if bad > 0 {
		return fmt.Errorf("ours: %d orders early, failed or never handled", bad)
	}
	return nil
}

// warmUp sends conc orders due at once on each side, from conc goroutines
// (so the pools have their connections), and waits for them: the consumers
// are up (a RocketMQ consumer's queues are assigned, River's
// leader is elected) before the first timed round.
func warmUp(ctx context.Context, p *trPair, conc int) error {
	for _, v := range []*trVariant{p.ours, p.raw} {
		nos := make([]string, conc)
		dues := make([]time.Time, conc)
		for i := range nos {
			nos[i] = fmt.Sprintf("warm%d-%d", time.Now().UnixNano()%1e9, i)
			dues[i] = time.Now()
		}
		v.rec.expect(nos)
		if v.place != nil {
			if err := v.place(ctx, nos, dues); err != nil {
				return err
			}
		}
		if _, _, err := runWorkers(conc, conc, func(i int) error { return v.send(ctx, nos[i], dues[i]) }); err != nil {
			return fmt.Errorf("warm-up send: %w", err)
		}
		if !v.rec.wait(time.Now().Add(60 * time.Second)) {
			return errors.New("warm-up: the orders were not handled within 60 s")
		}
	}
	return nil
}

// trRun runs one round of both sides. The orders of both are sent in one
// phase, in alternating slices (which side goes first alternates by slice
// and round), each slice timed: both sides' sends see the same moments of
// the machine. Their deliveries do not overlap: raw's orders are due
// o.offset after ours (ours first in even rounds, raw first in odd ones),
// so each side drains its backlog alone.
func trRun(ctx context.Context, p *trPair, tag string, round int, o trOpts, seed int64) (ours, raw trRound, err error) {
	r := rand.New(rand.NewPCG(uint64(seed), 8))
	total := o.n + o.backlog
	offs := make([]time.Duration, total)
	for i := range offs {
		if i < o.n {
			offs[i] = (o.dmin + time.Duration(r.Int64N(int64(o.dmax-o.dmin)+1))).Truncate(time.Millisecond)
		} else {
			offs[i] = o.dmax + o.gap
		}
	}
	type side struct {
		v     *trVariant
		nos   []string
		dues  []time.Time
		wall  time.Duration
		cpu   time.Duration
		res   *trRound
		shift time.Duration
	}
	// The due times are fixed before the sends, as a host stamps expire_at
	// before it commits; placing (ours) takes a moment, so the clock starts
	// after it.
	base := time.Now().Add(time.Second).Truncate(time.Millisecond)
	sides := []*side{{v: p.ours, res: &ours}, {v: p.raw, res: &raw}}
	if round%2 == 1 {
		slices.Reverse(sides) // raw's orders due first
	}
	sides[1].shift = o.offset
	for k, sd := range sides {
		sd.nos = make([]string, total)
		sd.dues = make([]time.Time, total)
		for i := range sd.nos {
			sd.nos[i] = fmt.Sprintf("T%s%d-%05d", tag, k, i)
			sd.dues[i] = base.Add(sd.shift + offs[i])
		}
		if sd.v.place != nil {
			if err := sd.v.place(ctx, sd.nos, sd.dues); err != nil {
				return ours, raw, fmt.Errorf("place: %w", err)
			}
		}
		sd.v.rec.expect(sd.nos)
	}
	time.Sleep(time.Until(base))
	for k, from := 0, 0; from < total; k, from = k+1, from+o.slice {
		to := min(from+o.slice, total)
		order := []*side{sides[0], sides[1]}
		if (k+round)%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		var walls [2]time.Duration
		for _, sd := range order {
			cpu0 := selfCPU()
			wall, failed, err := runWorkers(o.schedConc, to-from, func(i int) error { return sd.v.send(ctx, sd.nos[from+i], sd.dues[from+i]) })
			sd.cpu += selfCPU() - cpu0
			sd.wall += wall
			if err != nil {
				return ours, raw, fmt.Errorf("%d sends failed, first: %w", failed, err)
			}
			walls[slices.Index(sides, sd)] = wall
		}
		if o.slice == to-from { // a short last slice would weigh as much as a full one
			oursWall, rawWall := walls[0], walls[1]
			if sides[0].v != p.ours {
				oursWall, rawWall = rawWall, oursWall
			}
			ours.sliceRatios = append(ours.sliceRatios, rawWall.Seconds()/oursWall.Seconds())
		}
	}
	var overrun error
	if sent := time.Since(base); sent > o.dmin {
		overrun = fmt.Errorf("%w: the sends took %v, longer than the shortest delay %v", errOverrun, sent.Round(time.Millisecond), o.dmin)
	}
	for k, sd := range sides {
		sd.v.rec.wait(sd.dues[total-1].Add(60 * time.Second))
		sd.v.rec.mu.Lock()
		res := sd.res
		*res = trRound{sliceRatios: res.sliceRatios, want: total, handled: len(sd.v.rec.at), rearms: sd.v.rec.rearms, dups: sd.v.rec.dups, fails: sd.v.rec.fails,
			schedRate: float64(total) / sd.wall.Seconds(), cpuPerMsg: sd.cpu / time.Duration(total)}
		var first, last, lastAll time.Time
		drained := 0
		for i, no := range sd.nos {
			at, ok := sd.v.rec.at[no]
			if !ok {
				continue
			}
			if at.After(lastAll) {
				lastAll = at
			}
			if at.Before(sd.dues[i]) {
				res.early++
			}
			if i < o.n {
				res.late = append(res.late, at.Sub(sd.dues[i]))
				continue
			}
			drained++
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		sd.v.rec.mu.Unlock()
		if drained > 1 && last.After(first) {
			res.drainRate = float64(drained-1) / last.Sub(first).Seconds()
			res.drainLag = last.Sub(sd.dues[total-1])
		}
		if k == 0 && !lastAll.Before(sides[1].dues[0]) {
			res.overlap = true
		}
	}
	return ours, raw, overrun
}

// errOverrun: a round's sends were not done when its first orders fell due.
var errOverrun = errors.New("round dropped")

func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
