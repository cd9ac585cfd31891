package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Part 6: a backlog left by a broker outage, drained by reconcile.Run with
// the library's default Config, beside the cancel path's own rate over an
// equal backlog.

// backlogShows is how many shows the orders are spread over.
const backlogShows = 20

// backlogSet is one loaded copy of the data: its database (or schema), its
// Redis logical database, and the counters the checks read.
type backlogSet struct {
	label  string
	bd     *benchDB
	store  *sqlstore.Store
	rdb    *redis.Client
	rclose func()
	seats  *countingSeats
	obs    *cancelCounter
	svc    *cancel.Service
	load   time.Duration
	claims int // seat claims in SQL after loading (restored into Redis)
}

// cancelCounter is the Observer of both variants: how often each order was
// reported cancelled (expiry.KindCancelled), when the last one was, and the
// events that would mean trouble.
type cancelCounter struct {
	mu        sync.Mutex
	per       map[string]int
	last      atomic.Int64 // UnixNano of the last KindCancelled
	repaired  atomic.Int64 // KindRepaired "expired" (the reconciler's own count)
	skipped   atomic.Int64
	relFailed atomic.Int64
}

func newCancelCounter(n int) *cancelCounter { return &cancelCounter{per: make(map[string]int, n)} }

func (o *cancelCounter) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindCancelled:
		o.mu.Lock()
		o.per[e.OrderNo]++
		o.mu.Unlock()
		o.last.Store(time.Now().UnixNano())
	case expiry.KindRepaired:
		if e.Reason == "expired" {
			o.repaired.Add(1)
		}
	case expiry.KindSkipped:
		o.skipped.Add(1)
	case expiry.KindReleaseFailed:
		o.relFailed.Add(1)
	}
}

// countingSeats is the real seat store, counting the seats each Release
// freed per order: the cancel path's releases and the reconciler's own
// alike.
type countingSeats struct {
	*redisseat.Seats
	mu    sync.Mutex
	freed map[string]int
}

func (s *countingSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := s.Seats.Release(ctx, h)
	if n > 0 {
		s.mu.Lock()
		s.freed[h.OrderNo] += n
		s.mu.Unlock()
	}
	return n, err
}

// roundClock tells the reconciler's rounds apart from the outside. A round
// starts with the expired pass (its first Expired call). A full round goes
// on with the lock pass (its first ScanLocks call) and ends with the refunds
// pass (RetryDiscrepancies). While a backlog drains, Run's rounds between
// full ones run the expired pass alone: such a round's expired pass is done
// once its Expired calls returned MaxPerRound orders or reached the end, and
// the round ends when its last cancel returns; the next Expired call (or
// the drain's end) closes it. Every call comes from Run's goroutine but the
// cancels, which run on the pass's workers.
type roundClock struct {
	mu        sync.Mutex
	inRound   bool
	start     time.Time
	locks     time.Time // first ScanLocks of the round
	scan      time.Duration
	got       int  // orders the round's Expired calls returned
	scanned   bool // the round's expired pass has read its last page
	inflight  int  // cancels running
	cancelEnd time.Time
	scanEnd   time.Time // the last Expired call's return
	rounds    []roundTimes
	obs       *cancelCounter
}

type roundTimes struct {
	start, locks, end time.Time
	scan              time.Duration // inside Expired
	expired           int64         // KindRepaired "expired" during the round
}

// busy says whether a round is in progress: not once an expired-only
// round's cancels have all returned.
func (r *roundClock) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inRound && r.locks.IsZero() && r.scanned && r.inflight == 0 {
		r.closeLocked(r.expiredEnd())
	}
	return r.inRound
}

// expiredEnd is when an expired-only round ended: its last cancel's
// return, or its last scan's when it cancelled nothing after it; under mu.
func (r *roundClock) expiredEnd() time.Time {
	if r.cancelEnd.After(r.scanEnd) {
		return r.cancelEnd
	}
	return r.scanEnd
}

// closeLocked ends the round in progress at end; under mu.
func (r *roundClock) closeLocked(end time.Time) {
	var before int64
	for _, rt := range r.rounds {
		before += rt.expired
	}
	var expired int64
	if r.obs != nil {
		expired = r.obs.repaired.Load() - before
	}
	r.rounds = append(r.rounds, roundTimes{start: r.start, locks: r.locks, end: end, scan: r.scan, expired: expired})
	r.inRound = false
}

// full counts the rounds that ran every pass.
func (r *roundClock) full() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rt := range r.rounds {
		if !rt.locks.IsZero() {
			n++
		}
	}
	return n
}

type clockedOrders struct {
	cancel.OrderStore
	rc *roundClock
}

func (o clockedOrders) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	o.rc.mu.Lock()
	if o.rc.inRound && o.rc.locks.IsZero() && o.rc.scanned { // an expired-only round ended
		o.rc.closeLocked(o.rc.expiredEnd())
	}
	if !o.rc.inRound {
		o.rc.inRound, o.rc.start, o.rc.locks, o.rc.scan, o.rc.got, o.rc.scanned = true, time.Now(), time.Time{}, 0, 0, false
	}
	o.rc.mu.Unlock()
	t0 := time.Now()
	nos, next, err := o.OrderStore.Expired(ctx, cursor, limit)
	o.rc.mu.Lock()
	o.rc.scan += time.Since(t0)
	o.rc.scanEnd = time.Now()
	o.rc.got += len(nos)
	o.rc.scanned = o.rc.scanned || next == "" || err != nil || o.rc.got >= reconcile.MaxPerRoundDefault
	o.rc.mu.Unlock()
	return nos, next, err
}

type clockedSeats struct {
	*countingSeats
	rc *roundClock
}

func (s clockedSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	s.rc.mu.Lock()
	if s.rc.locks.IsZero() {
		s.rc.locks = time.Now()
	}
	s.rc.mu.Unlock()
	return s.countingSeats.ScanLocks(ctx, cursor, count)
}

type clockedService struct {
	reconcile.Service
	rc  *roundClock
	obs *cancelCounter
}

// cancelling notes a cancel in flight; the func it returns, its end.
func (s clockedService) cancelling() func() {
	s.rc.mu.Lock()
	s.rc.inflight++
	s.rc.mu.Unlock()
	return func() {
		s.rc.mu.Lock()
		s.rc.inflight--
		s.rc.cancelEnd = time.Now()
		s.rc.mu.Unlock()
	}
}

func (s clockedService) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	defer s.cancelling()()
	return s.Service.Cancel(ctx, req)
}

func (s clockedService) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	defer s.cancelling()()
	return s.Service.ExpireDue(ctx, nos, reason)
}

func (s clockedService) RetryDiscrepancies(ctx context.Context, limit int) (int, error) {
	n, err := s.Service.RetryDiscrepancies(ctx, limit)
	s.rc.mu.Lock()
	s.rc.closeLocked(time.Now())
	s.rc.mu.Unlock()
	return n, err
}

// backlogRows generates n backlog orders (B…: pending, past expire_at, 2
// seats, users bu*) in expire_at order, then history orders (H…, users hu*):
// 5 % pending and not yet due (20–30 min ahead, 2 locked seats), 60 % paid
// (2 sold seats), 35 % cancelled.
func backlogRows(n int, outage time.Duration, now time.Time) func(int) orderRow {
	nowMS, span := now.UnixMilli(), outage.Milliseconds()
	return func(i int) orderRow {
		h := uint64(i)*0x9E3779B97F4A7C15 ^ 0xD1B54A32D192ED03
		h ^= h >> 29
		show := fmt.Sprintf("show%d", h%backlogShows)
		if i < n {
			no := fmt.Sprintf("B%08d", i)
			return orderRow{no: no, user: fmt.Sprintf("bu%d", h%5000), show: show, status: expiry.StatusPending,
				expireMS: nowMS - 1000 - span + int64(i)*span/int64(n), seats: []string{no + "-a", no + "-b"}}
		}
		no := fmt.Sprintf("H%08d", i-n)
		r := orderRow{no: no, user: fmt.Sprintf("hu%d", h%5000), show: show}
		two := []string{no + "-a", no + "-b"}
		switch p := (h >> 8) % 100; {
		case p < 5:
			r.status, r.expireMS, r.seats = expiry.StatusPending, nowMS+20*60_000+int64(h%(10*60_000)), two
		case p < 65:
			r.status, r.expireMS, r.seats = expiry.StatusPaid, nowMS-int64(h%(30*24*3600_000)), two
		default:
			r.status, r.expireMS = expiry.StatusCancelled, nowMS-int64(h%(30*24*3600_000))
		}
		return r
	}
}

type backlogOpts struct {
	n, history, workers int
	interval, poll, cap time.Duration
	outage              time.Duration
	drive               string // part 10: "run" or "round"
}

func runBacklog(c *common, args []string) error {
	fs := flag.NewFlagSet("backlog", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	var o backlogOpts
	fs.IntVar(&o.n, "n", 100_000, "backlog: pending orders past expire_at (2 seats each, locked in Redis), in each of the two copies")
	fs.IntVar(&o.history, "history", 100_000, "history orders beside the backlog in each copy (5 % pending not yet due, 60 % paid, 35 % cancelled)")
	fs.DurationVar(&o.outage, "outage", 30*time.Minute, "the backlog's expire_at values are spread over this span before the run")
	fs.DurationVar(&o.interval, "interval", 5*time.Minute, "the interval given to reconcile.Run")
	fs.IntVar(&o.workers, "workers", reconcile.WorkersDefault, "goroutines calling cancel.Service.Cancel in the raw variant (the reconciler's default Workers)")
	fs.DurationVar(&o.poll, "poll", 200*time.Millisecond, "how often the bench asks SQL whether a due pending order is left")
	fs.DurationVar(&o.cap, "cap", 4*time.Minute, "give up on a drain still incomplete after this long (less than -interval, so a Run waiting for its interval fails the part)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	if o.n <= 0 || o.history < 0 || o.workers <= 0 {
		return fmt.Errorf("backlog: -n and -workers must be positive, -history not negative")
	}
	per := reconcile.MaxPerRoundDefault
	fmt.Printf("Two equal copies per database, each its own database/schema and Redis logical database: %d pending orders past `expire_at` "+
		"(spread over the %v before the run, 2 seats each), beside %d history orders (5 %% pending and not yet due, 2 locked seats; 60 %% paid, 2 sold seats; 35 %% cancelled); "+
		"bulk-loaded (`-load %s`), then every SQL claim given to Redis through `redisseat.Seats.Restore` (locks for pending orders, sales for paid ones), then ANALYZE.\n\n"+
		"- **reconciler**: `reconcile.Reconciler.Run(ctx, %v)` with the default Config (MaxPerRound %d, Batch %d, Workers %d); the bench asks SQL every %v whether a due pending order is left "+
		"(`Store.Expired(ctx, \"\", 1)`) and stops Run's context at the end of the round in progress once none is. Drain time: Run's start to the last `KindCancelled` event.\n"+
		"- **raw cancel path**: %d goroutines calling `cancel.Service.Cancel(ctx, cancel.Request{OrderNo, Reason: cancel.ReasonReconcile, OnlyIfDue: true})` over the other copy's backlog in `expire_at` order "+
		"(each call bounded by %v, as the reconciler bounds it), no reconciler: half before the reconciler's drain and half after it, so drift on the machine falls on both.\n\n",
		o.n, o.outage, o.history, loadMode, o.interval, per, reconcile.BatchDefault, reconcile.WorkersDefault, o.poll, o.workers, reconcile.OrderTimeoutDefault)
	summary := newTable("database", "backlog", "reconciler: rounds", "round time median (max)", "gap between rounds max", "drain time", "**orders/s**",
		"raw cancel path: time", "**orders/s**", "**reconciler / raw**", "old: a round per interval")
	checks := newTable("database", "copy", "cancelled rows (reason reconcile) / backlog", "KindCancelled per order: once / twice+ / never", "seats freed (2 per order)",
		"backlog seats held in Redis", "Redis seats = SQL claims", "backlog users' counters ≠ 0", "counters = SQL seats per user", "history unchanged", "skipped / release failed")
	var failed []string
	for _, e := range engines {
		if err := c.backlogEngine(e, o, summary, checks, &failed); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	fmt.Printf("\n### Backlog summary\n\n")
	summary.print(os.Stdout)
	fmt.Printf("\nRounds counts the rounds Run completed (the last one found nothing due and Run waited for its interval until stopped); a gap is the time from a round's end to the next round's first scan. "+
		"\"old\" is when the last order would have been cancelled had Run waited %v after every round, as it did before `Report.More`: (rounds that cancelled something − 1) intervals plus one round.\n\n### Correctness\n\n", o.interval)
	checks.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

func (c *common) backlogEngine(engine string, o backlogOpts, summary, checks *table, failed *[]string) error {
	ctx := context.Background()
	sets := []*backlogSet{{label: "reconciler"}, {label: "raw"}}
	defer closeSets(sets)
	now := time.Now()
	gen := backlogRows(o.n, o.outage, now)
	for i, s := range sets {
		if err := c.loadSet(ctx, s, engine, "backlog", i, 8, 16, o.n+o.history, gen); err != nil {
			return err
		}
		var err error
		s.obs = newCancelCounter(o.n)
		if s.svc, err = cancel.New(cancel.Config{Store: s.store, Seats: s.seats, Runtime: expiry.Runtime{Observer: s.obs, Logger: c.log}}); err != nil {
			return err
		}
	}
	fmt.Printf("### %s\n\n", engineName(engine))
	fmt.Printf("- load average after loading: %s\n", loadAvg())
	defer func() { fmt.Printf("- load average after the drains and checks: %s\n\n", loadAvg()) }()
	for _, s := range sets {
		fmt.Printf("- %s copy: %d orders, %d seat claims restored into Redis, loaded in %v\n", s.label, o.n+o.history, s.claims, s.load.Round(100*time.Millisecond))
	}

	// The raw cancel path, first half.
	raw := sets[1]
	rawCancel := func(i int) error {
		octx, done := context.WithTimeout(ctx, reconcile.OrderTimeoutDefault)
		defer done()
		_, err := raw.svc.Cancel(octx, cancel.Request{OrderNo: gen(i).no, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
		return err
	}
	half := o.n / 2
	d1, f1, err := runWorkers(o.workers, half, rawCancel)
	if err != nil {
		return fmt.Errorf("raw cancel path: %d failed, first: %w", f1, err)
	}

	// The reconciler.
	rec := sets[0]
	rc := &roundClock{obs: rec.obs}
	r, err := reconcile.New(reconcile.Config{
		Orders:  clockedOrders{rec.store, rc},
		Seats:   clockedSeats{rec.seats, rc},
		Service: clockedService{rec.svc, rc, rec.obs},
		Runtime: expiry.Runtime{Observer: rec.obs, Logger: c.log},
	})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- r.Run(rctx, o.interval) }()
	drained, waitedRound := false, false
	tick := time.NewTicker(o.poll)
	for !drained && time.Since(start) < o.cap {
		<-tick.C
		nos, _, err := rec.store.Expired(ctx, "", 1)
		if err != nil {
			c.log.Warn("backlog poll", "err", err)
			continue
		}
		drained = len(nos) == 0
	}
	tick.Stop()
	if drained { // let the round in progress finish its releases and passes
		for rc.busy() && time.Since(start) < o.cap {
			waitedRound = true
			time.Sleep(time.Millisecond)
		}
	}
	stopped := time.Since(start)
	stop()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		return fmt.Errorf("reconcile.Run returned %v", err)
	}
	if !drained {
		var left int
		_ = rec.bd.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_order WHERE status = 0 AND order_no LIKE 'B%'").Scan(&left)
		*failed = append(*failed, fmt.Sprintf("%s: the reconciler left %d of %d backlog orders pending after %v (%d rounds)", engineName(engine), left, o.n, o.cap, len(rc.rounds)))
	}
	recDrain := time.Duration(rec.obs.last.Load() - start.UnixNano())

	// The raw cancel path, second half.
	d2, f2, err := runWorkers(o.workers, o.n-half, func(i int) error { return rawCancel(half + i) })
	if err != nil {
		return fmt.Errorf("raw cancel path: %d failed, first: %w", f2, err)
	}
	rawTime := d1 + d2

	// Rounds.
	rounds := append([]roundTimes(nil), rc.rounds...)
	var dur []time.Duration
	var maxGap time.Duration
	var perRound []string
	working := 0
	for i, rt := range rounds {
		if rt.expired > 0 {
			working++
		}
		dur = append(dur, rt.end.Sub(rt.start))
		if i > 0 {
			maxGap = max(maxGap, rt.start.Sub(rounds[i-1].end))
		}
		perRound = append(perRound, fmt.Sprint(rt.expired))
	}
	fmt.Printf("- reconciler: %d rounds, orders cancelled per round: %s; last cancel %v after Run started, Run stopped at %v%s\n",
		len(rounds), compressRuns(perRound), fmtDur(recDrain), fmtDur(stopped), map[bool]string{true: " (once the round in progress had ended)", false: ""}[waitedRound])
	if len(rounds) > 0 {
		var exp, scan, rest time.Duration
		for _, rt := range rounds {
			scan += rt.scan
			if rt.locks.IsZero() { // the expired pass alone
				exp += rt.end.Sub(rt.start)
			} else {
				exp += rt.locks.Sub(rt.start)
				rest += rt.end.Sub(rt.locks)
			}
		}
		fmt.Printf("- of the rounds' time: the expired pass with its cancels %v (of which inside `Expired` %v), the lock, claims and refunds passes %v\n", fmtDur(exp), fmtDur(scan), fmtDur(rest))
	}
	fmt.Printf("- raw cancel path: %d orders in %v + %v\n", o.n, fmtDur(d1), fmtDur(d2))
	recRate := float64(o.n) / recDrain.Seconds()
	rawRate := float64(o.n) / rawTime.Seconds()
	// The same rounds, each followed by a wait of one interval: the last
	// order is cancelled in the working-th round.
	old := time.Duration(max(working-1, 0))*o.interval + recDrain/time.Duration(max(working, 1))
	medMax := "—"
	if len(dur) > 0 {
		medMax = fmtDur(pct(dur, 50)) + " (" + fmtDur(maxDur(dur)) + ")"
	}
	summary.add(engineName(engine), o.n, len(rounds), medMax, maxGap, recDrain, fmt.Sprintf("%.0f", recRate),
		rawTime, fmt.Sprintf("%.0f", rawRate), ratio(recRate, rawRate), fmt.Sprintf("%v (%d round%s)", fmtDur(old), working, map[bool]string{true: "", false: "s"}[working == 1]))

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

// compressRuns writes 5000,5000,5000,0 as 3×5000, 0.
func compressRuns(xs []string) string {
	var out []string
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j] == xs[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%d×%s", j-i, xs[i]))
		} else {
			out = append(out, xs[i])
		}
		i = j
	}
	return strings.Join(out, ", ")
}

// restoreClaims gives every SQL claim (pending: locked, paid: sold) to the
// seat store through Restore, as the reconciler's rebuild does, and marks
// the store restored. It returns the number of claims.
func restoreClaims(ctx context.Context, store *sqlstore.Store, seats *redisseat.Seats) (int, error) {
	total, cursor := 0, ""
	for {
		claims, next, err := store.Claims(ctx, cursor, 5000)
		if err != nil {
			return total, err
		}
		n, err := seats.Restore(ctx, claims)
		if err != nil {
			return total, err
		}
		if n != len(claims) {
			return total, fmt.Errorf("restore: %d of %d seats changed (the store was not empty)", n, len(claims))
		}
		total += n
		if cursor = next; cursor == "" {
			break
		}
	}
	token, lost, err := seats.Lost(ctx)
	if err != nil {
		return total, err
	}
	if lost {
		err = seats.MarkRestored(ctx, token)
	}
	return total, err
}

func analyze(ctx context.Context, bd *benchDB) error {
	stmts := []string{"ANALYZE TABLE oe_order, oe_order_seat"}
	if bd.engine == engPG {
		stmts = []string{"VACUUM ANALYZE oe_order", "VACUUM ANALYZE oe_order_seat"}
	}
	for _, q := range stmts {
		if _, err := bd.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// checkBacklog checks one copy after its drain: every backlog order
// cancelled once (SQL, with one of reasons, and the Observer), two seats freed each, Redis's seats
// exactly SQL's remaining claims, the purchase counters equal to SQL's seats
// per user (none left for the backlog's users), the history untouched. It
// returns the table cells and what failed.
func checkBacklog(ctx context.Context, s *backlogSet, n, history int, gen func(int) orderRow, reasons ...cancel.Reason) ([]any, []string, error) {
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf(f, a...)) }

	// SQL: statuses.
	var cancelledB, pendingB, otherB int
	rows, err := s.bd.QueryContext(ctx, "SELECT status, cancel_reason, COUNT(*) FROM oe_order WHERE order_no LIKE 'B%' GROUP BY status, cancel_reason")
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var st, cnt int
		var why *string
		if err := rows.Scan(&st, &why, &cnt); err != nil {
			rows.Close()
			return nil, nil, err
		}
		switch {
		case st == int(expiry.StatusCancelled) && why != nil && slices.Contains(reasons, cancel.Reason(*why)):
			cancelledB += cnt
		case st == int(expiry.StatusPending):
			pendingB += cnt
		default:
			otherB += cnt
		}
	}
	rows.Close()
	if cancelledB != n || pendingB != 0 || otherB != 0 {
		fail("backlog in SQL: %d cancelled (%v), %d pending, %d otherwise, of %d", cancelledB, reasons, pendingB, otherB, n)
	}

	// History by status, against the generator.
	want := map[expiry.Status]int{}
	for i := n; i < n+history; i++ {
		want[gen(i).status]++
	}
	got := map[expiry.Status]int{}
	rows, err = s.bd.QueryContext(ctx, "SELECT status, COUNT(*) FROM oe_order WHERE order_no LIKE 'H%' GROUP BY status")
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var st, cnt int
		if err := rows.Scan(&st, &cnt); err != nil {
			rows.Close()
			return nil, nil, err
		}
		got[expiry.Status(st)] = cnt
	}
	rows.Close()
	histOK := len(got) == len(want)
	for k, v := range want {
		histOK = histOK && got[k] == v
	}
	if !histOK {
		fail("history statuses %v, loaded %v", got, want)
	}

	// The Observer and the releases.
	once, twice, never := 0, 0, 0
	s.obs.mu.Lock()
	for i := 0; i < n; i++ {
		switch s.obs.per[gen(i).no] {
		case 0:
			never++
		case 1:
			once++
		default:
			twice++
		}
	}
	extra := len(s.obs.per) - once - twice
	s.obs.mu.Unlock()
	if once != n || extra != 0 {
		fail("KindCancelled: %d once, %d twice or more, %d never, %d for other orders", once, twice, never, extra)
	}
	s.seats.mu.Lock()
	freed, wrongFreed := 0, 0
	for no, k := range s.seats.freed {
		freed += k
		if !strings.HasPrefix(no, "B") || k != 2 {
			wrongFreed++
		}
	}
	s.seats.mu.Unlock()
	if freed != 2*n || wrongFreed != 0 {
		fail("seats freed: %d (want %d), %d orders freed other than 2 or not of the backlog", freed, 2*n, wrongFreed)
	}

	// Redis seats against SQL claims.
	type claim struct {
		order string
		state int
	}
	sqlClaims := map[string]claim{}
	rows, err = s.bd.QueryContext(ctx, "SELECT show_id, seat_id, order_no, state FROM oe_order_seat")
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var show, seat, order string
		var state int
		if err := rows.Scan(&show, &seat, &order, &state); err != nil {
			rows.Close()
			return nil, nil, err
		}
		sqlClaims[show+"/"+seat] = claim{order, state}
	}
	rows.Close()
	heldB, mismatch, redisN, lockedIdx := 0, 0, 0, 0
	for k := 0; k < backlogShows; k++ {
		show := fmt.Sprintf("show%d", k)
		m, err := s.seats.Show(ctx, show)
		if err != nil {
			return nil, nil, err
		}
		for seat, st := range m {
			redisN++
			if strings.HasPrefix(st.OrderNo, "B") {
				heldB++
			}
			cl, ok := sqlClaims[show+"/"+seat]
			if !ok || cl.order != st.OrderNo || cl.state != soldState(st.Status) {
				mismatch++
			}
		}
		li, err := s.rdb.SCard(ctx, lockedKey(show)).Result()
		if err != nil {
			return nil, nil, err
		}
		lockedIdx += int(li)
	}
	wantLocked := 0
	for _, cl := range sqlClaims {
		if cl.state == 1 {
			wantLocked++
		}
	}
	if heldB != 0 || mismatch != 0 || redisN != len(sqlClaims) || lockedIdx != wantLocked {
		fail("Redis: %d backlog seats held, %d seats unlike SQL, %d seats against %d claims, lock index %d against %d locked claims", heldB, mismatch, redisN, len(sqlClaims), lockedIdx, wantLocked)
	}

	// Purchase counters against SQL (I8).
	sqlHeld := map[string]int{}
	rows, err = s.bd.QueryContext(ctx, "SELECT o.show_id, o.user_id, COUNT(*) FROM oe_order_seat s JOIN oe_order o ON o.order_no = s.order_no WHERE o.status IN (0, 1) GROUP BY o.show_id, o.user_id")
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var show, user string
		var cnt int
		if err := rows.Scan(&show, &user, &cnt); err != nil {
			rows.Close()
			return nil, nil, err
		}
		sqlHeld[show+"/"+user] = cnt
	}
	rows.Close()
	backlogCounters, counterBad, counters := 0, 0, 0
	for k := 0; k < backlogShows; k++ {
		show := fmt.Sprintf("show%d", k)
		all, err := s.rdb.HGetAll(ctx, limitKey(show)).Result()
		if err != nil {
			return nil, nil, err
		}
		for user, v := range all {
			counters++
			if strings.HasPrefix(user, "bu") && v != "0" {
				backlogCounters++
			}
			if fmt.Sprint(sqlHeld[show+"/"+user]) != v {
				counterBad++
			}
		}
	}
	if counters != len(sqlHeld) {
		counterBad += abs(len(sqlHeld) - counters)
	}
	if backlogCounters != 0 || counterBad != 0 {
		fail("counters: %d backlog users' counters not zero, %d counters unlike SQL (%d in Redis, %d in SQL)", backlogCounters, counterBad, counters, len(sqlHeld))
	}
	sk, rf := s.obs.skipped.Load(), s.obs.relFailed.Load()
	if sk != 0 || rf != 0 {
		fail("%d orders skipped, %d releases failed", sk, rf)
	}

	yes := func(ok bool, detail string) string {
		if ok {
			return "yes (" + detail + ")"
		}
		return "**no** (" + detail + ")"
	}
	cells := []any{
		fmt.Sprintf("%d / %d", cancelledB, n),
		fmt.Sprintf("%d / %d / %d", once, twice, never),
		fmt.Sprintf("%d", freed),
		heldB,
		yes(mismatch == 0 && redisN == len(sqlClaims) && lockedIdx == wantLocked, fmt.Sprintf("%d seats, %d locked", redisN, lockedIdx)),
		backlogCounters,
		yes(counterBad == 0, fmt.Sprintf("%d users×shows", counters)),
		yes(histOK, histSummary(got)),
		fmt.Sprintf("%d / %d", sk, rf),
	}
	return cells, bad, nil
}

func histSummary(m map[expiry.Status]int) string {
	var parts []string
	for _, st := range []expiry.Status{expiry.StatusPending, expiry.StatusPaid, expiry.StatusCancelled} {
		parts = append(parts, fmt.Sprintf("%d %s", m[st], st))
	}
	return strings.Join(parts, ", ")
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// loadSet creates copy s of a part's data: its database or schema
// oe_bench_<part>_<label> (dbConns connections), Redis logical database idx
// (redisConns), the store migrated; then it loads total orders from gen,
// restores their claims into Redis and runs ANALYZE, timing the load.
func (c *common) loadSet(ctx context.Context, s *backlogSet, engine, part string, idx, dbConns, redisConns, total int, gen func(int) orderRow) error {
	var err error
	if s.bd, err = c.openDB(ctx, engine, part+"_"+strings.ReplaceAll(s.label, " ", "_"), dbConns); err != nil {
		return err
	}
	if s.rdb, s.rclose, err = c.redisClient(ctx, idx, redisConns); err != nil {
		return err
	}
	if s.store, err = sqlstore.New(s.bd.DB, s.bd.dialect); err != nil {
		return err
	}
	if err := s.store.Migrate(ctx); err != nil {
		return err
	}
	s.seats = &countingSeats{Seats: newSeats(s.rdb), freed: make(map[string]int, total)}
	t0 := time.Now()
	if err := bulkLoad(ctx, s.bd, total, gen); err != nil {
		return err
	}
	if s.claims, err = restoreClaims(ctx, s.store, s.seats.Seats); err != nil {
		return err
	}
	if err := analyze(ctx, s.bd); err != nil {
		return err
	}
	s.load = time.Since(t0)
	return nil
}

// closeSets drops the copies' databases and closes their clients.
func closeSets(sets []*backlogSet) {
	for _, s := range sets {
		if s.store != nil {
			s.store.Close()
		}
		if s.bd != nil {
			s.bd.drop()
		}
		if s.rclose != nil {
			s.rclose()
		}
	}
}
