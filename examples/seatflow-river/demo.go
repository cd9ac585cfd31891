//go:build unix

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	oeriver "github.com/seatflow/orderexpiry/expiry/river"
	"github.com/seatflow/orderexpiry/reconcile"
)

const (
	purchaseLimit  = 6 // seats one user may hold in one show
	reconcileEvery = 2 * time.Second
	settleTime     = time.Second
	// Deadlines are 4-11 s after the run's start: most of them fall after
	// the kill, so their River jobs are worked by the restarted process.
	minExpiry = 4 * time.Second
	maxExpiry = 11 * time.Second
	// waitLimit bounds the wait for the last orders and jobs after the last
	// deadline; past it the checks run anyway and report what is left.
	waitLimit = 30 * time.Second
)

var shows = []string{"show-1", "show-2", "show-3"}

// kind is what the scenario does with an order.
type kind uint8

const (
	kindExpire kind = iota // nobody acts: its River job cancels it
	kindPay                // paid before it is due
	kindCancel             // cancelled by its user before it is due
)

// plan is one order of the batch: the same for every run on a file, made
// from the seed the file keeps.
type plan struct {
	no, user, show string
	seats          []string
	kind           kind
	expiry, act    time.Duration // from the batch's start (t0)
}

func makePlans(seed uint64, n int) []*plan {
	rng := rand.New(rand.NewPCG(seed, 0x5ea7f10))
	free := map[string][]string{}
	for _, s := range shows {
		for r := 'A'; r <= 'H'; r++ {
			for c := 1; c <= 10; c++ {
				free[s] = append(free[s], fmt.Sprintf("%c%02d", r, c))
			}
		}
		rng.Shuffle(len(free[s]), func(i, j int) { free[s][i], free[s][j] = free[s][j], free[s][i] })
	}
	plans := make([]*plan, n)
	for i := range plans {
		// Two orders per user, in different shows: within the limit.
		p := &plan{no: fmt.Sprintf("o%02d", i+1), user: fmt.Sprintf("u%02d", i/2+1), show: shows[i%len(shows)]}
		k := 1 + rng.IntN(3)
		p.seats, free[p.show] = free[p.show][:k], free[p.show][k:]
		p.expiry = minExpiry + time.Duration(rng.Int64N(int64(maxExpiry-minExpiry)))
		p.expiry = p.expiry.Round(10 * time.Millisecond)
		switch x := rng.IntN(100); {
		case x < 35:
			p.kind = kindPay
		case x < 50:
			p.kind = kindCancel
		}
		if p.kind != kindExpire { // at least a second before it is due
			p.act = 500*time.Millisecond + time.Duration(rng.Int64N(int64(p.expiry-1500*time.Millisecond)))
			p.act = p.act.Round(10 * time.Millisecond)
		}
		plans[i] = p
	}
	return plans
}

func (p *plan) intent() string {
	switch p.kind {
	case kindPay:
		return fmt.Sprintf("will pay at +%.2fs", p.act.Seconds())
	case kindCancel:
		return fmt.Sprintf("user will cancel at +%.2fs", p.act.Seconds())
	}
	return "will expire"
}

// demo is one run of the service on one SQLite file.
type demo struct {
	path   string // the SQLite file
	out    io.Writer
	tl     *timeline
	run    int       // 1 the first run on the file, 2 the restart, …
	t0     time.Time // the batch's start, kept in the file
	seed   uint64
	plans  []*plan
	byNo   map[string]*plan
	lock   *os.File
	db     *sql.DB
	mr     *miniredis.Miniredis
	rdb    *redis.Client
	store  *sqlstore.Store
	seats  *redisseat.Seats
	svc    *cancel.Service
	client *river.Client[*sql.Tx]
	sender *oeriver.Sender[*sql.Tx]
	rec    *reconcile.Reconciler
	log    *os.File // the decisions log, appended as the library reports them

	restored int // seats the restart's reconcile round gave back from SQL

	mu       sync.Mutex
	problems []string
	rearms   int
}

// open opens (or creates) the file, wires the service on it and prints the
// header. The caller closes the demo.
func open(ctx context.Context, cfg config, out io.Writer) (d *demo, err error) {
	d = &demo{path: cfg.DB, out: out, tl: &timeline{w: out}}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	// This process is the only one on the file: the lock says so, and lets
	// a restart drop the River leader lease its killed predecessor left.
	if d.lock, err = os.OpenFile(cfg.DB+".lock", os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		return d, setupErrorf("%w", err)
	}
	if err := syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return d, setupErrorf("%s is in use by another process: %w", cfg.DB, err)
	}
	if d.db, err = sql.Open("sqlite", "file:"+cfg.DB+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"); err != nil {
		return d, setupErrorf("%w", err)
	}
	d.db.SetMaxOpenConns(1) // SQLite: River's goroutines share the one writer
	if d.store, err = sqlstore.New(d.db, sqlstore.SQLite); err != nil {
		return d, setupErrorf("%w", err)
	}
	if err := d.store.Migrate(ctx); err != nil {
		return d, setupErrorf("%w", err)
	}
	driver := riversqlite.New(d.db)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return d, setupErrorf("%w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return d, setupErrorf("river migrate: %w", err)
	}
	if err := d.loadRun(ctx, cfg); err != nil {
		return d, err
	}
	d.plans = makePlans(d.seed, len(d.plans))
	d.byNo = map[string]*plan{}
	for _, p := range d.plans {
		d.byNo[p.no] = p
	}
	d.tl.start = d.t0
	if d.log, err = os.OpenFile(cfg.DB+".decisions", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return d, setupErrorf("%w", err)
	}

	// The seats: redisseat on an in-memory Redis, empty at every start, as
	// a Redis that lost its data. The reconciler rebuilds it from SQL.
	if d.mr, err = miniredis.Run(); err != nil {
		return d, setupErrorf("miniredis: %w", err)
	}
	d.rdb = redis.NewClient(&redis.Options{Addr: d.mr.Addr()})
	if d.seats, err = redisseat.New(d.rdb, ""); err != nil {
		return d, setupErrorf("%w", err)
	}

	logger := slog.New(slog.NewTextHandler(d.tl, &slog.HandlerOptions{Level: slog.LevelError,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	rt := expiry.Runtime{Observer: d, Logger: logger}
	if d.svc, err = cancel.New(cancel.Config{Store: d.store, Seats: d.seats, Runtime: rt}); err != nil {
		return d, setupErrorf("%w", err)
	}
	worker := oeriver.NewWorker(nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	d.client, err = river.NewClient(driver, &river.Config{
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{oeriver.QueueDefault: {MaxWorkers: 10}},
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            logger,
	})
	if err != nil {
		return d, setupErrorf("river: %w", err)
	}
	if d.sender, err = oeriver.NewSender(d.client, oeriver.Config{Runtime: rt}); err != nil {
		return d, setupErrorf("%w", err)
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: d.svc, Sender: d.sender, Runtime: rt})
	if err != nil {
		return d, setupErrorf("%w", err)
	}
	worker.Attach(expiry.NewShell(h))
	if d.rec, err = reconcile.New(reconcile.Config{Orders: d.store, Seats: d.seats, Service: d.svc, Settle: settleTime, Runtime: rt}); err != nil {
		return d, setupErrorf("%w", err)
	}
	if d.run == 1 {
		d.tl.plain("seatflow-river: %d orders, seed %d, run 1 on a new file", len(d.plans), d.seed)
	} else {
		d.tl.plain("seatflow-river: run %d on the same file (%d orders, seed %d, started %.2fs ago)", d.run, len(d.plans), d.seed, time.Since(d.t0).Seconds())
	}
	d.tl.plain("  orders and River jobs: SQLite %s", cfg.DB)
	d.tl.plain("  seats:  miniredis %s, empty at start (cancel/redisseat)", d.mr.Addr())
	d.tl.plain("  expiry: expiry/river, each order's job inserted in the order's transaction")
	d.tl.plain("")
	return d, nil
}

// loadRun reads the batch this file holds (seed, size, start) and counts
// this run, or records a new batch.
func (d *demo) loadRun(ctx context.Context, cfg config) error {
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS seatflow_run (
		id INTEGER PRIMARY KEY CHECK (id = 1), seed INTEGER NOT NULL, orders INTEGER NOT NULL,
		t0_ms INTEGER NOT NULL, runs INTEGER NOT NULL)`); err != nil {
		return setupErrorf("%w", err)
	}
	var seed, n, t0, runs int64
	err := d.db.QueryRowContext(ctx, "SELECT seed, orders, t0_ms, runs FROM seatflow_run").Scan(&seed, &n, &t0, &runs)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		now, err := d.store.Now(ctx) // the database's clock
		if err != nil {
			return setupErrorf("%w", err)
		}
		seed, n, t0, runs = int64(cfg.Seed), int64(cfg.Orders), now.UnixMilli(), 1
		_, err = d.db.ExecContext(ctx, "INSERT INTO seatflow_run (id, seed, orders, t0_ms, runs) VALUES (1, ?, ?, ?, 1)", seed, n, t0)
		if err != nil {
			return setupErrorf("%w", err)
		}
	case err != nil:
		return setupErrorf("%w", err)
	default:
		runs++
		if _, err := d.db.ExecContext(ctx, "UPDATE seatflow_run SET runs = ?", runs); err != nil {
			return setupErrorf("%w", err)
		}
	}
	d.seed, d.t0, d.run = uint64(seed), time.UnixMilli(t0), int(runs)
	d.plans = make([]*plan, n)
	return nil
}

// close releases what the demo holds; what fails to close is reported,
// since nothing more can be done about it at the end of the run.
func (d *demo) close() {
	var errs []error
	if d.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.client.Stop(ctx); err != nil { // nil when it never started
			errs = append(errs, fmt.Errorf("stop River: %w", err))
		}
		cancel()
	}
	if d.rdb != nil {
		errs = append(errs, d.rdb.Close())
	}
	if d.mr != nil {
		d.mr.Close()
	}
	if d.db != nil {
		errs = append(errs, d.db.Close())
	}
	for _, f := range []*os.File{d.log, d.lock} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "seatflow-river: closing:", err)
	}
}

// scenario runs the batch: places it on a new file, or, on a restart,
// rebuilds the seats, then works the remaining jobs and actions until every
// order has ended and no job is left, stops, and verifies.
func (d *demo) scenario(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	restart := time.Now()
	if d.run > 1 {
		// A lease left by the killed leader would keep this client from
		// leading (and so from making scheduled jobs available) for up to
		// 15 s. The file lock proves its holder is gone.
		res, err := d.db.ExecContext(ctx, "DELETE FROM river_leader")
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n > 0 {
			d.tl.say("", "River: dropped the leader lease of the killed process (this process holds the file's lock)")
		}
		// The seat store starts empty: one reconcile round, before any
		// job or action, rebuilds it from SQL's claims, and cancels what
		// fell due while the service was down.
		rep, err := d.rec.Round(ctx)
		if err != nil {
			return fmt.Errorf("reconcile round on restart: %w", err)
		}
		d.restored = rep.Restored
		d.tl.say("", "reconciler on restart: seats rebuilt from SQL claims (restored=%d, rebuild complete=%v); %d orders due while down cancelled",
			rep.Restored, rep.Rebuilt, rep.Expired)
	}
	if err := d.client.Start(ctx); err != nil {
		return fmt.Errorf("river: %w", err)
	}
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		if err := d.rec.Run(ctx, reconcileEvery); !errors.Is(err, context.Canceled) { // until ctx is cancelled
			d.tl.say("", "reconciler stopped: %v", err)
		}
	}()

	placed, err := d.orderStatus(ctx)
	if err != nil {
		return err
	}
	if d.run == 1 {
		for _, p := range d.plans {
			if err := d.place(ctx, p); err != nil {
				return fmt.Errorf("place %s: %w", p.no, err)
			}
			placed[p.no] = expiry.StatusPending
		}
	}
	var actions sync.WaitGroup
	for _, p := range d.plans {
		st, ok := placed[p.no]
		if p.kind == kindExpire || !ok || st != expiry.StatusPending {
			continue // nothing to do, never placed, or ended already
		}
		at := d.t0.Add(p.act)
		if d.run > 1 && at.Before(restart) {
			d.tl.say(p.no, "missed: its user came at +%.2fs, while the service was down; it will expire", p.act.Seconds())
			continue
		}
		actions.Go(func() {
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				return
			}
			d.act(ctx, p)
		})
	}
	actions.Wait()
	if err := d.waitEnded(ctx); err != nil {
		return err
	}
	stop()
	<-recDone
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.client.Stop(sctx); err != nil {
		return fmt.Errorf("river: stop: %w", err)
	}
	rep, err := d.rec.Round(sctx)
	if err != nil {
		return fmt.Errorf("final reconcile round: %w", err)
	}
	d.tl.say("", "service stopped; final reconcile round: expired=%d released=%d sold=%d", rep.Expired, rep.Released, rep.Sold)
	return d.verify(sctx)
}

// place places p: Service.Place locks its seats, then this transaction
// inserts the order and its River job, which commit together or not at all.
func (d *demo) place(ctx context.Context, p *plan) error {
	pl := cancel.Placement{OrderNo: p.no, UserID: p.user, ShowID: p.show, Seats: p.seats, ExpireAt: d.t0.Add(p.expiry), Limit: purchaseLimit}
	err := d.svc.Place(ctx, pl, func(ctx context.Context, pl cancel.Placement) error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := d.store.Place(ctx, tx, pl); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		if err := d.sender.ScheduleTx(ctx, tx, pl.OrderNo, pl.ExpireAt); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
		}
		return nil
	})
	if err == nil {
		d.tl.say(p.no, "placed: %s %s %v, due at +%.2fs, job in the same transaction; %s", p.user, p.show, p.seats, p.expiry.Seconds(), p.intent())
	}
	return err
}

func (d *demo) act(ctx context.Context, p *plan) {
	var err error
	switch p.kind {
	case kindPay:
		_, err = d.svc.Pay(ctx, cancel.Payment{OrderNo: p.no, UserID: p.user, PaymentID: "pay-" + p.no})
	case kindCancel:
		_, err = d.svc.UserCancel(ctx, p.no, p.user)
	}
	if err != nil && ctx.Err() == nil {
		d.problem("%s: %s: %v", p.no, p.intent(), err)
	}
}

// orderStatus reads every order of the file.
func (d *demo) orderStatus(ctx context.Context) (map[string]expiry.Status, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT order_no, status FROM oe_order")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]expiry.Status{}
	for rows.Next() {
		var no string
		var st expiry.Status
		if err := rows.Scan(&no, &st); err != nil {
			return nil, err
		}
		out[no] = st
	}
	return out, rows.Err()
}

// jobsLeft counts the River jobs still to be worked: waiting, or being
// worked by this run's client (a job being worked may still schedule
// another). A job the SIGKILLed run was working stays 'running' with that
// run's client in attempted_by until River's rescuer takes it back (an hour
// by default); its order is decided by this run's reconciler.
func (d *demo) jobsLeft(ctx context.Context) (int, error) {
	var n int
	err := d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM river_job WHERE state IN ('available', 'scheduled', 'retryable', 'pending')
		OR (state = 'running' AND EXISTS (SELECT 1 FROM json_each(attempted_by) WHERE value = ?))`, d.client.ID()).Scan(&n)
	return n, err
}

// waitEnded waits until no order is pending and no job is left, or for
// waitLimit past the last deadline.
func (d *demo) waitEnded(ctx context.Context) error {
	limit := d.t0.Add(maxExpiry + waitLimit)
	next := time.Now().Add(2 * time.Second)
	for {
		var pending int
		if err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_order WHERE status = 0").Scan(&pending); err != nil {
			return err
		}
		jobs, err := d.jobsLeft(ctx)
		if err != nil {
			return err
		}
		if pending == 0 && jobs == 0 {
			return nil
		}
		if time.Now().After(limit) {
			d.tl.say("", "gave up waiting: %d orders pending, %d jobs left", pending, jobs)
			return nil
		}
		if time.Now().After(next) {
			d.tl.say("", "… waiting: %d orders pending, %d River jobs to work", pending, jobs)
			next = time.Now().Add(2 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Observe implements expiry.Observer: what the library reports is printed,
// and each decision appended to the decisions log (one write each, so it
// survives the process being killed) for the checks after the restart.
func (d *demo) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindCancelled:
		d.decided(e.OrderNo, "cancelled("+e.Reason+")")
		d.tl.say(e.OrderNo, "cancelled (%s), %s released", e.Reason, seats(e.Seats))
	case expiry.KindPaid:
		d.decided(e.OrderNo, "paid")
		d.tl.say(e.OrderNo, "paid, %s sold", seats(e.Seats))
	case expiry.KindRearmed:
		d.mu.Lock()
		d.rearms++
		d.mu.Unlock()
		d.tl.say(e.OrderNo, "job arrived %v early → re-armed (hop %d)", e.Delay.Round(time.Millisecond), e.Hop)
	case expiry.KindHandled:
		if e.Outcome == expiry.OutcomeFinal {
			d.tl.say(e.OrderNo, "job worked: order already ended, nothing to do")
		}
	case expiry.KindRepaired:
		if e.Reason != "expired" && e.Reason != "restored" { // reported as cancelled, and by the restart's round
			d.tl.say(e.OrderNo, "reconciler: %s %s from SQL", seats(e.Seats), e.Reason)
		}
	case expiry.KindBadMessage:
		d.problem("bad message: %v", e.Err)
	}
}

func (d *demo) decided(orderNo, what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := fmt.Fprintf(d.log, "%d %s %s\n", d.run, orderNo, what); err != nil {
		d.problems = append(d.problems, "decisions log: "+err.Error())
	}
}

func (d *demo) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.problems = append(d.problems, msg)
	d.mu.Unlock()
	d.tl.say("", "PROBLEM: %s", msg)
}

func seats(n int) string {
	if n == 1 {
		return "1 seat"
	}
	return fmt.Sprintf("%d seats", n)
}

// timeline prints one line per event: the time since the batch's start (so
// a restart's lines continue the first run's), the order, what happened.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (t *timeline) say(order, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if order == "" {
		order = "-"
	}
	fmt.Fprintf(t.w, "%8s  %-3s  %s\n", fmt.Sprintf("+%.2fs", time.Since(t.start).Seconds()), order, fmt.Sprintf(format, args...))
}

func (t *timeline) plain(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, format+"\n", args...)
}

// Write implements io.Writer for the library's and River's slog handler.
func (t *timeline) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%8s  %-3s  log: %s", fmt.Sprintf("+%.2fs", time.Since(t.start).Seconds()), "", p)
	return len(p), nil
}
