package storm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/onebyone"
	"github.com/seatflow/orderexpiry/internal/storm"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

func init() {
	// The drivers log every connection the faults break; the storm counts
	// the errors the library returns instead.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	redis.SetLogger(quietRedis{})
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...interface{}) {}

func TestStormMariaDB(t *testing.T) { stormTest(t, sqlstore.MySQL) }

func TestStormPostgres(t *testing.T) { stormTest(t, sqlstore.Postgres) }

func stormTest(t *testing.T, d sqlstore.Dialect) {
	if testing.Short() {
		t.Skip("storm: skipped with -short")
	}
	out := runStorm(t, d, loadConfig())
	if len(out.violations) > 0 {
		byInv := map[string]int{}
		for _, v := range out.violations {
			inv, _, _ := strings.Cut(v, ":")
			byInv[inv]++
		}
		t.Errorf("%d violations, by invariant: %v", len(out.violations), byInv)
	}
	for i, v := range out.violations {
		if i == 50 {
			t.Errorf("… and %d more violations", len(out.violations)-i)
			break
		}
		t.Error(v)
	}
	out.sanity(t)
	if len(out.violations) == 0 && !t.Failed() {
		t.Log(out.figure)
	}
}

// TestStormCatchesMutants runs small storms against deliberately broken
// wiring (a mutant store between the library's Service and the real
// store) and requires the checks to catch each: the storm's verdict can
// fail. OE_STORM_MUTANT=<name> runs TestStormMariaDB/Postgres with a mutant.
func TestStormCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("storm: skipped with -short")
	}
	for _, m := range []struct{ name, want string }{
		{"no_due_guard", "I4: "},             // timeouts without the expire_at <= now guard
		{"ignore_owner", "not linearizable"}, // user cancels and payments that skip the owner check
		{"phantom_win", "I1/I5: "},           // a payment that lost reports that it won
	} {
		t.Run(m.name, func(t *testing.T) {
			cfg := loadConfig()
			cfg.orders, cfg.window, cfg.users, cfg.mutant = 300, 6*time.Second, 100, m.name
			out := runStorm(t, sqlstore.MySQL, cfg)
			var hits []string
			for _, v := range out.violations {
				if strings.Contains(v, m.want) {
					hits = append(hits, v)
				}
			}
			require.NotEmpty(t, hits, "mutant %s survived the storm (violations: %v)", m.name, out.violations)
			example, _, _ := strings.Cut(hits[0], "\n    [") // the first order of a history violation is enough
			t.Logf("mutant %s caught: %d of %d violations match %q, e.g. %s", m.name, len(hits), len(out.violations), m.want, example)
		})
	}
}

// config sizes the storm; OE_STORM_ORDERS and OE_STORM_SECONDS override it,
// OE_STORM_SEED replays a plan (the orders and the calls planned for them;
// the timing of a run is never replayed).
type config struct {
	orders    int
	window    time.Duration // the storm: faults and calls
	users     int
	limit     int           // purchase limit per user (seats in the show)
	opTimeout time.Duration // every library call runs under a deadline, as a host's request would
	hosts     int           // reconcilers running rounds during the storm
	seed      uint64
	mutant    string // a deliberately broken store wrapper (see auditStore); "" for none
	// redisNoPersist runs the private Redis without persistence
	// (OE_STORM_REDIS_NOPERSIST=1): its restarts then lose the seat state,
	// which the invariants do not survive (see storm.RedisProc).
	redisNoPersist bool
}

func loadConfig() config {
	c := config{orders: 2000, window: 16 * time.Second, limit: 12, opTimeout: 2500 * time.Millisecond, hosts: 3, seed: uint64(time.Now().UnixNano())}
	if v, err := strconv.Atoi(os.Getenv("OE_STORM_ORDERS")); err == nil && v > 0 {
		c.orders = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("OE_STORM_SECONDS"), 64); err == nil && v >= 4 {
		c.window = time.Duration(v * float64(time.Second))
	}
	if v, err := strconv.ParseUint(os.Getenv("OE_STORM_SEED"), 10, 64); err == nil {
		c.seed = v
	}
	c.users = max(c.orders/3, 2)
	c.mutant = os.Getenv("OE_STORM_MUTANT")
	c.redisNoPersist = os.Getenv("OE_STORM_REDIS_NOPERSIST") == "1"
	return c
}

// rig is the library wired on one World, with every call recorded.
type rig struct {
	t        *testing.T
	cfg      config
	postgres bool // the dialect, for the outcome ledgers' own reads
	w        *e2e.World
	svc      *cancel.Service
	hist     *storm.History
	sched    *storm.Scheduler
	rel      *releaser
	audit    *auditStore
	errs     *storm.Counter // errors the library returned, by call and kind
	logs     *storm.Counter // what the library logged (failures it swallowed)
	outcomes *storm.Counter // Handler outcomes
	faults   *storm.Counter
	owners   map[string]string // order → user; read-only once the storm starts

	brokerRefused, brokerLost, hookCalls atomic.Int64
	// hostile counts the hostile-but-legal calls by kind (placed again,
	// seat listed twice, case variants); misplaced the ones that wrongly
	// succeeded (each a violation).
	hostile   *storm.Counter
	misplaced []string
	misMu     sync.Mutex

	hookMu sync.Mutex
	hooked map[string]cancel.Discrepancy // payment id → the discrepancy the refund hook got
	hooks  map[string]int                // payment id → refund hook calls
}

// discrepancyLease is the storm's cancel.Config.DiscrepancyLease: short, so
// the reconciler retries a refund hook whose run was cut off by a fault
// within the drain.
const discrepancyLease = 2 * time.Second

// seatStore is the seat store as the service and the reconcilers use it
// (redisseat.Seats).
type seatStore interface {
	cancel.SeatStore
}

// releaser is the seat store, but counts, in the world's Ledger, every seat a
// release freed (the world's own counting releaser is not used, so this is
// the only writer of Ledger.Released), and remembers the orders whose release
// failed: such a release may have freed the seats in Redis although its
// reply was lost. It also counts the locks the reconciler's claims pass gave
// back to pending orders: a cancel that commits between the pass's read of
// the claims and its restore has its seats locked again, and released again
// by the pass's re-check, so such an order rightly sees more releases than it
// has seats.
type releaser struct {
	seatStore
	ledger        *e2e.Ledger
	mu            sync.Mutex
	failed        map[string]int
	restored      map[string]int // pending orders' seats locked again by Restore
	restoreFailed map[string]int // orders of a Restore that failed (it may have locked them)
}

// Restore restores the claims one at a time, so that the locks it gives
// back are counted per order.
func (r *releaser) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	total := 0
	for _, c := range claims {
		n, err := r.seatStore.Restore(ctx, []cancel.Claim{c})
		total += n
		r.mu.Lock()
		if n > 0 && c.Status == expiry.StatusPending {
			r.restored[c.OrderNo] += n
		}
		if err != nil {
			r.restoreFailed[c.OrderNo]++
		}
		r.mu.Unlock()
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReleaseAll counts each hold's release as Release does; a failed call
// marks every hold whose count it did not give.
func (r *releaser) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := r.seatStore.ReleaseAll(ctx, holds)
	r.mu.Lock()
	for i, h := range holds {
		switch {
		case i < len(ns) && ns[i] > 0:
			r.ledger.Released[h.OrderNo] += ns[i]
		case err != nil && (i >= len(ns) || ns[i] < 0):
			r.failed[h.OrderNo]++
		}
	}
	r.mu.Unlock()
	return ns, err
}

func (r *releaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := r.seatStore.Release(ctx, h)
	r.mu.Lock()
	if n > 0 {
		r.ledger.Released[h.OrderNo] += n
	}
	if err != nil {
		r.failed[h.OrderNo]++
	}
	r.mu.Unlock()
	return n, err
}

// auditStore records, for every cancel guarded by OnlyIfDue (timeouts and
// the reconciler) that changed the order, the store's clock read in the same
// transaction, for I4.
//
// With a mutant it also breaks the store on purpose, to show that the
// storm's checks catch the breakage:
//   - no_due_guard: due-guarded cancels lose their guard (I4);
//   - ignore_owner: user cancels and payments lose their owner check;
//   - phantom_win: a payment that lost to a cancel reports that it won (I1).
type auditStore struct {
	cancel.OrderStore
	mutant string
	mu     sync.Mutex
	due    []dueCancel
}

type dueCancel struct {
	order            string
	reason           cancel.Reason
	expireAt, readAt time.Time
}

func (a *auditStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	due := req.OnlyIfDue
	switch a.mutant {
	case "no_due_guard":
		req.OnlyIfDue = false
	case "ignore_owner":
		req.UserID = ""
	}
	res, err := a.OrderStore.CancelPending(ctx, req)
	if err == nil && res.Changed && due {
		a.mu.Lock()
		a.due = append(a.due, dueCancel{order: req.OrderNo, reason: req.Reason, expireAt: res.Order.ExpireAt, readAt: res.Order.ReadAt})
		a.mu.Unlock()
	}
	return res, err
}

func (a *auditStore) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	if a.mutant == "ignore_owner" {
		p.UserID = ""
	}
	res, err := a.OrderStore.PayPending(ctx, p)
	if a.mutant == "phantom_win" && err == nil && !res.Changed && res.Order.Status == expiry.StatusCancelled {
		res.Changed = true
	}
	return res, err
}

// recordingService is the reconciler's cancel path, recorded per order, and
// its refund retries.
type recordingService struct{ r *rig }

func (c recordingService) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	done := c.r.hist.Begin(storm.Input{Order: req.OrderNo, Kind: storm.OpReconcile, Owner: c.r.owners[req.OrderNo]})
	res, err := c.r.svc.Cancel(ctx, req)
	done(storm.CancelOutput(res, err))
	c.r.errs.Err("reconcile_cancel", err)
	return res, err
}

// ExpireDue is Cancel per order, so that the history records each cancel
// as its own operation.
func (c recordingService) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	return onebyone.Expire(ctx, c.Cancel, nos, reason)
}

// Scope is the Service's.
func (c recordingService) Scope() string { return c.r.svc.Scope() }

func (c recordingService) RetryDiscrepancies(ctx context.Context, limit int) (int, error) {
	n, err := c.r.svc.RetryDiscrepancies(ctx, limit)
	c.r.errs.Err("retry_refunds", err)
	return n, err
}

// broker is the DelaySender: it delivers re-arms through the scheduler, a
// little early or late, refuses a few sends, and loses what would arrive
// after the storm (the reconciler must catch those orders).
type broker struct{ r *rig }

func (b broker) Send(_ context.Context, m expiry.Message, delay time.Duration) error {
	if rand.Float64() < 0.03 {
		b.r.brokerRefused.Add(1)
		return storm.ErrBroker
	}
	jitter := time.Duration(rand.Int64N(int64(100*time.Millisecond))) - 40*time.Millisecond
	if !b.r.sched.At(b.r.sched.Now()+delay+jitter, func() { b.r.deliver(m) }) {
		b.r.brokerLost.Add(1)
	}
	return nil
}

// logCounter is the library's slog handler: it counts records by message.
type logCounter struct{ c *storm.Counter }

func (h logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h logCounter) Handle(_ context.Context, r slog.Record) error {
	h.c.Add(r.Level.String()+" "+r.Message, "")
	return nil
}
func (h logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCounter) WithGroup(string) slog.Handler      { return h }

func newRig(t *testing.T, w *e2e.World, cfg config) *rig {
	r := &rig{t: t, cfg: cfg, w: w, hist: storm.NewHistory(),
		errs: storm.NewCounter(), logs: storm.NewCounter(), outcomes: storm.NewCounter(), faults: storm.NewCounter(), hostile: storm.NewCounter(),
		owners: map[string]string{}, hooked: map[string]cancel.Discrepancy{}, hooks: map[string]int{}}
	r.rel = &releaser{seatStore: w.Seats, ledger: w.Ledger, failed: map[string]int{}, restored: map[string]int{}, restoreFailed: map[string]int{}}
	r.audit = &auditStore{OrderStore: w.Store, mutant: cfg.mutant}
	logger := slog.New(logCounter{r.logs})
	var err error
	r.svc, err = cancel.New(cancel.Config{Store: r.audit, Seats: r.rel, DiscrepancyLease: discrepancyLease,
		Runtime: expiry.Runtime{Observer: w.Ledger, Logger: logger}, OnDiscrepancy: r.refund})
	require.NoError(t, err)
	w.Service = r.svc
	w.Handler, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: r.svc, Sender: broker{r}, Runtime: expiry.Runtime{Observer: w.Ledger, Logger: logger}})
	require.NoError(t, err)
	return r
}

// refund is the host's refund hook: it records what it was given.
func (r *rig) refund(_ context.Context, d cancel.Discrepancy) error {
	r.hookCalls.Add(1)
	r.hookMu.Lock()
	r.hooked[d.PaymentID] = d
	r.hooks[d.PaymentID]++
	r.hookMu.Unlock()
	return nil
}

// reconciler returns a new reconciler (one per simulated host).
// stormSettle is the reconcilers' Settle: the storm's hosts decide orders
// until its end, and the drain waits this long for the last of them.
const stormSettle = time.Second

func (r *rig) reconciler() *reconcile.Reconciler {
	rec, err := reconcile.New(reconcile.Config{Orders: r.w.Store, Seats: r.rel, Service: recordingService{r},
		Batch: 100, Grace: time.Minute, Settle: stormSettle, Runtime: expiry.Runtime{Observer: r.w.Ledger, Logger: slog.New(logCounter{r.logs})}})
	require.NoError(r.t, err)
	return rec
}

func (r *rig) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.opTimeout)
}

// deliver is the consumer: one delivery of a timeout message. A failed
// handling is redelivered (at least once), while the storm lasts.
func (r *rig) deliver(m expiry.Message) {
	ctx, stop := r.opCtx()
	defer stop()
	done := r.hist.Begin(storm.Input{Order: m.OrderNo, Kind: storm.OpHandle, Owner: r.owners[m.OrderNo]})
	o, err := r.w.Handler.Handle(ctx, m)
	done(storm.HandleOutput(o, err))
	r.outcomes.Add(o.String(), "")
	if r.errs.Err("handle", err) != "" {
		backoff := 150*time.Millisecond + time.Duration(rand.Int64N(int64(300*time.Millisecond)))
		r.sched.At(r.sched.Now()+backoff, func() { r.deliver(m) })
	}
}

// pay is a payment callback: paymentID is the provider's id of the payment.
func (r *rig) pay(no, actor, paymentID string) {
	ctx, stop := r.opCtx()
	defer stop()
	done := r.hist.Begin(storm.Input{Order: no, Kind: storm.OpPay, Owner: r.owners[no], Actor: actor, Payment: paymentID})
	res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, UserID: actor, PaymentID: paymentID})
	done(storm.PayOutput(res, err))
	if !errors.Is(err, cancel.ErrDiscrepancy) && !errors.Is(err, cancel.ErrNotOwner) {
		r.errs.Err("pay", err)
	}
}

func (r *rig) userCancel(no, actor string) {
	ctx, stop := r.opCtx()
	defer stop()
	done := r.hist.Begin(storm.Input{Order: no, Kind: storm.OpUserCancel, Owner: r.owners[no], Actor: actor})
	res, err := r.svc.UserCancel(ctx, no, actor)
	done(storm.CancelOutput(res, err))
	if !errors.Is(err, cancel.ErrNotOwner) {
		r.errs.Err("user_cancel", err)
	}
}

// earlyTimeout is a timeout from a host whose clock runs ahead: it calls the
// cancel path directly, before the order is due by the database's clock.
func (r *rig) earlyTimeout(no string) {
	ctx, stop := r.opCtx()
	defer stop()
	done := r.hist.Begin(storm.Input{Order: no, Kind: storm.OpTimeout, Owner: r.owners[no]})
	ok, _, err := r.svc.Timeout(ctx, no)
	done(storm.TimeoutOutput(ok, err))
	r.errs.Err("timeout", err)
}

// placeAgain places p, which must be refused: its number exists already
// (ErrOrderExists, or a seat taken) or it lists a seat twice (ErrInvalidID).
// Faults may make it fail otherwise; it must never succeed, and the
// invariants checked afterwards show the live order untouched.
func (r *rig) placeAgain(p cancel.Placement) {
	ctx, stop := r.opCtx()
	defer stop()
	p.Limit = r.w.Limit
	err := r.svc.Place(ctx, p, r.w.Store.Insert(r.w.DB, nil))
	switch {
	case err == nil:
		r.misMu.Lock()
		r.misplaced = append(r.misplaced, p.OrderNo)
		r.misMu.Unlock()
	case errors.Is(err, expiry.ErrInvalidID):
		r.hostile.Add("seat_listed_twice", "")
	case errors.Is(err, cancel.ErrOrderExists):
		r.hostile.Add("placed_again", "")
	case errors.Is(err, cancel.ErrSeatUnavailable), errors.Is(err, cancel.ErrLimitExceeded):
		r.hostile.Add("placed_again_refused_seat", "")
	default:
		r.errs.Err("place_again", err)
	}
}

func (r *rig) read(no string) {
	ctx, stop := r.opCtx()
	defer stop()
	done := r.hist.Begin(storm.Input{Order: no, Kind: storm.OpRead, Owner: r.owners[no]})
	o, err := r.w.Store.Order(ctx, no)
	done(storm.ReadOutput(o, err))
	r.errs.Err("read", err)
}

// plan is one order to place, decided before the storm.
type plan struct {
	p       cancel.Placement
	expOff  time.Duration // expire_at as an offset from the storm's start
	userIdx int
}

// outcome is what a storm found.
type outcome struct {
	violations []string
	figure     string             // the FIGURE line
	sanity     func(t *testing.T) // checks that the storm was one (faults reached the library, races happened)
}

// runStorm runs one storm on dialect d and returns its violations; setup
// failures fail t.
func runStorm(t *testing.T, d sqlstore.Dialect, cfg config) outcome {
	began := time.Now()
	t.Logf("storm %s: seed %d (OE_STORM_SEED), %d orders, window %s, mutant %q", d, cfg.seed, cfg.orders, cfg.window, cfg.mutant)
	ctx := context.Background()

	// A fresh database on the shared server (reached directly only to set
	// up and to audit), a private Redis, and toxiproxy in front of both.
	var direct *sql.DB
	var upstream string
	switch d {
	case sqlstore.MySQL:
		direct = testenv.MySQL(t)
		c, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
		require.NoError(t, err)
		upstream = c.Addr
	case sqlstore.Postgres:
		direct = testenv.Postgres(t)
		c, err := pgx.ParseConfig(os.Getenv(testenv.EnvPostgres))
		require.NoError(t, err)
		upstream = net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	}
	rp := storm.StartRedis(t, !cfg.redisNoPersist)
	px := storm.NewProxies(t)
	dbProxy := px.Add(t, "db", upstream)
	redisProxy := px.Add(t, "redis", rp.Addr())
	db := openProxied(t, d, direct, dbProxy.Addr())
	rdb := redis.NewClient(&redis.Options{
		Addr: redisProxy.Addr(),
		// No automatic retries: go-redis would re-run a script whose reply
		// was lost, and the idempotent re-run would report 0 seats freed,
		// hiding from the ledger what the first run did. The library must be
		// correct without client retries; the reconciler is its retry.
		MaxRetries:  -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		ContextTimeoutEnabled: true, PoolSize: 32, PoolTimeout: 2 * time.Second, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })

	show := "storm-" + testenv.Unique()
	w := e2e.NewWorld(t, db, d, rdb, show)
	w.Limit = cfg.limit
	r := newRig(t, w, cfg)
	r.postgres = d == sqlstore.Postgres

	// ---- place the orders (no faults yet) --------------------------------
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	placeBudget := 2*time.Second + time.Duration(cfg.orders)*2500*time.Microsecond
	dbNow, err := w.Store.Now(ctx)
	require.NoError(t, err)
	skew := time.Until(dbNow) // the database's clock minus ours (same host: about 0)
	startDB := dbNow.Add(placeBudget)
	plans := make([]plan, cfg.orders)
	seat := 0
	for i := range plans {
		u := rng.IntN(cfg.users)
		exp := time.Duration(float64(500*time.Millisecond) + rng.Float64()*float64(cfg.window-2500*time.Millisecond))
		if rng.Float64() < 0.08 {
			exp = -time.Second // due before the storm starts
		}
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%05d", show, i), UserID: fmt.Sprintf("u%04d", u), ShowID: show, ExpireAt: startDB.Add(exp)}
		for n := 1 + rng.IntN(4); n > 0; n-- {
			seat++
			p.Seats = append(p.Seats, fmt.Sprintf("s%d", seat))
		}
		if i > 0 && rng.Float64() < 0.02 { // wants a seat another order holds
			p.Seats[0] = plans[i-1].p.Seats[0]
		}
		plans[i] = plan{p: p, expOff: exp, userIdx: u}
	}
	placed, rejected := place(t, w, plans)
	require.Greater(t, len(placed), cfg.orders*8/10, "most orders must be placed")
	for _, pl := range placed {
		r.owners[pl.p.OrderNo] = pl.p.UserID
	}
	placeTook := time.Since(began)
	stormStart := startDB.Add(-skew)
	t.Logf("placed %d orders (%v rejected) by %s", len(placed), rejected, placeTook.Round(time.Millisecond))

	// ---- the storm --------------------------------------------------------
	r.sched = storm.NewScheduler(stormStart, cfg.window, 48)
	W := cfg.window
	clamp := func(d time.Duration) time.Duration { return min(max(d, 0), W) }
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	// raceOrEarly is when a payment or cancel arrives: half of them in the
	// 60ms around the order's expiry (racing its timeout and the
	// reconcilers), the others earlier.
	raceOrEarly := func(exp time.Duration) time.Duration {
		if rng.Float64() < 0.5 {
			return clamp(exp + uniform(-30*time.Millisecond, 30*time.Millisecond))
		}
		return uniform(0, max(exp, 300*time.Millisecond))
	}
	for _, pl := range placed {
		no, owner, exp := pl.p.OrderNo, pl.p.UserID, pl.expOff
		other := fmt.Sprintf("u%04d", (pl.userIdx+1)%cfg.users)
		if rng.Float64() >= 0.08 { // else the message was never sent (send failed after commit)
			first := clamp(exp + uniform(-40*time.Millisecond, 60*time.Millisecond))
			if rng.Float64() < 0.4 {
				first = uniform(0, max(exp, 0)) // early: the handler re-arms it
			}
			m := expiry.Message{OrderNo: no, Hop: 1}
			r.sched.At(first, func() { r.deliver(m) })
			if rng.Float64() < 0.25 { // delivered twice
				r.sched.At(first+uniform(0, 30*time.Millisecond), func() { r.deliver(m) })
			}
		}
		if rng.Float64() < 0.45 {
			actor := owner
			if rng.Float64() < 0.25 {
				actor = "" // a callback that carries no user
			}
			at, id := raceOrEarly(exp), "pay-"+no
			r.sched.At(at, func() { r.pay(no, actor, id) })
			if rng.Float64() < 0.3 { // the payment provider calls back again
				r.sched.At(at+uniform(0, 300*time.Millisecond), func() { r.pay(no, actor, id) })
			}
			if rng.Float64() < 0.1 { // a second payment (another id): refunded unless the first never landed
				r.sched.At(at+uniform(-100*time.Millisecond, 400*time.Millisecond), func() { r.pay(no, actor, id+"-b") })
			}
		}
		if rng.Float64() < 0.25 {
			r.sched.At(raceOrEarly(exp), func() { r.userCancel(no, owner) })
		}
		if rng.Float64() < 0.15 { // somebody else's user, or a case variant of the owner (I10)
			who := other
			if rng.IntN(3) == 0 {
				who = strings.ToUpper(owner)
				r.hostile.Add("case_variant_user", "")
			}
			if rng.IntN(2) == 0 {
				r.sched.At(uniform(0, W), func() { r.pay(no, who, "pay-"+no+"-"+who) })
			} else {
				r.sched.At(uniform(0, W), func() { r.userCancel(no, who) })
			}
		}
		if rng.Float64() < 0.06 { // the order number placed again: a retry, a double submit (I13)
			again := pl.p
			switch rng.IntN(3) {
			case 1:
				again.Seats = []string{fmt.Sprintf("again-%s", no)}
			case 2:
				again.UserID = other
			}
			r.sched.At(uniform(0, W), func() { r.placeAgain(again) })
		}
		if rng.Float64() < 0.03 { // a seat listed twice (I13)
			dup := cancel.Placement{OrderNo: no + "-dup", UserID: owner, ShowID: pl.p.ShowID,
				Seats: []string{"dup-" + no, "dup-" + no}, ExpireAt: pl.p.ExpireAt}
			r.sched.At(uniform(0, W), func() { r.placeAgain(dup) })
		}
		if exp > 100*time.Millisecond && rng.Float64() < 0.1 {
			r.sched.At(exp-uniform(20*time.Millisecond, min(800*time.Millisecond, exp)), func() { r.earlyTimeout(no) })
		}
		r.sched.At(uniform(0, W), func() { r.read(no) })
	}

	// overran: on a loaded machine placing can take longer than the window,
	// and then every message arrives after its deadline: none is re-armed.
	overran := false
	if wait := time.Until(stormStart); wait > 0 {
		time.Sleep(wait)
	} else {
		t.Logf("placing took %s more than planned: the first orders are due on arrival", -wait)
		overran = -wait > W/2
	}
	var hosts sync.WaitGroup
	var rounds atomic.Int64
	for h := 0; h < cfg.hosts; h++ {
		rec := r.reconciler()
		hosts.Add(1)
		go func() {
			defer hosts.Done()
			for r.sched.Now() < W {
				rctx, stop := context.WithTimeout(ctx, 4*time.Second)
				_, err := rec.Round(rctx)
				stop()
				rounds.Add(1)
				r.errs.Err("reconcile_round", err)
				time.Sleep(250*time.Millisecond + time.Duration(rand.Int64N(int64(350*time.Millisecond))))
			}
		}()
	}

	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.runFaults(W, dbProxy, redisProxy, rp)
	}()
	<-faultsDone
	// ---- faults off, let everything in flight finish ---------------------
	require.NoError(t, dbProxy.Heal())
	require.NoError(t, redisProxy.Heal())
	if !rp.Running() {
		require.NoError(t, rp.Start())
	}
	r.sched.Wait()
	hosts.Wait()
	stormEnd := time.Since(began)

	// ---- reconcile until a round does nothing -----------------------------
	var maxExp time.Time
	for _, pl := range placed {
		if pl.p.ExpireAt.After(maxExp) {
			maxExp = pl.p.ExpireAt
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		now, err := w.Store.Now(ctx)
		if err == nil && now.After(maxExp) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the database clock never passed the last expiry: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	// Refund hooks cut off by a fault are retried once their lease is over.
	time.Sleep(discrepancyLease)
	rec := r.reconciler()
	quiet, drainRounds := false, 0
	for ; drainRounds < 30 && !quiet; drainRounds++ {
		rctx, stop := context.WithTimeout(ctx, 30*time.Second)
		rep, err := rec.Round(rctx)
		stop()
		if r.errs.Err("drain_round", err) != "" || rep.Skipped > 0 {
			rec = r.reconciler() // a skipped order would wait out its backoff
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if rep.Settling > 0 { // an order decided moments ago: its decider's, until the settle time
			time.Sleep(stormSettle / 4)
			continue
		}
		quiet = rep.Complete && !rep.More && rep.Expired+rep.LostRaces+rep.Released+rep.Sold+rep.Restored+rep.Refunds == 0
	}
	require.True(t, quiet, "reconcile rounds did not settle in %d rounds; errors: %v", drainRounds, r.errs.Samples("drain_round:"))
	for _, pl := range placed { // the final state, as the last entry of every order's history
		r.read(pl.p.OrderNo)
	}

	// ---- invariants --------------------------------------------------------
	violations := r.verify(ctx, direct, placed)
	ops := r.hist.Operations()
	res, bad := r.hist.Check(2*time.Minute, 10)
	if res != porcupine.Ok {
		violations = append(violations, fmt.Sprintf("history is not linearizable (%s):\n%s", res, strings.Join(bad, "\n")))
	}
	if len(r.misplaced) > 0 {
		violations = append(violations, fmt.Sprintf("I13: %d placements that must be refused succeeded: %v", len(r.misplaced), r.misplaced))
	}
	if n := r.errs.Total(":other"); n > 0 {
		violations = append(violations, fmt.Sprintf("%d library errors that no fault explains:\n%s", n, strings.Join(r.errs.Samples(":other"), "\n")))
	}
	races := storm.Races(ops)
	sanity := func(t *testing.T) { // the storm must have been one: faults, errors, races, every path
		assert.Positive(t, r.errs.Total(""), "no call saw an error: the faults did not reach the library")
		assert.Positive(t, races, "no race was decided")
		for _, k := range []string{"cancelled", "rearmed", "final"} {
			if k == "rearmed" && overran && r.outcomes.Get(k) == 0 {
				t.Logf("no message was re-armed: placing overran the window, so every message came after its deadline")
				continue
			}
			assert.Positive(t, r.outcomes.Get(k), "no handler outcome %s", k)
		}
		assert.Positive(t, w.Ledger.Kind(expiry.KindDiscrepancy), "no payment lost a race")
		// Each new discrepancy reaches the hook in Pay; the reconciler's
		// retries add the ones a fault cut off.
		assert.GreaterOrEqual(t, r.hookCalls.Load(), int64(w.Ledger.Kind(expiry.KindDiscrepancy)), "every discrepancy reaches the host's hook")
	}

	errsByKind := map[string]int{}
	for k, v := range r.errs.Map() {
		errsByKind[k[strings.LastIndexByte(k, ':')+1:]] += v
	}
	errsByKind["swallowed_release"] = w.Ledger.Kind(expiry.KindReleaseFailed)
	errsByKind["swallowed_sell"] = r.logs.Get("ERROR marking seats sold failed after payment; the reconciler will mark them")
	errsByKind["broker_refused"] = int(r.brokerRefused.Load())
	t.Logf("errors by call: %v", r.errs.Map())
	t.Logf("handler outcomes: %v; library log lines: %v", r.outcomes.Map(), r.logs.Map())
	t.Logf("reconcile: %d rounds on %d hosts during the storm, %d to settle; messages lost after the storm: %d",
		rounds.Load(), cfg.hosts, drainRounds, r.sched.Dropped())
	t.Logf("phases: placed by %s, storm over by %s, checked by %s", placeTook.Round(time.Millisecond), stormEnd.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	return outcome{violations: violations, sanity: sanity, figure: fmt.Sprintf(
		"FIGURE storm %s: orders=%d ops=%d races_decided=%d discrepancies=%d hostile=%v faults=%v errors_seen=%v violations=%d duration=%s",
		d, len(placed), len(ops), races, w.Ledger.Kind(expiry.KindDiscrepancy), r.hostile.Map(), r.faults.Map(), errsByKind, len(violations), time.Since(began).Round(time.Millisecond))}
}

// place places the orders with 16 workers; rejections (purchase limit, seat
// taken) are expected and counted, anything else fails the test.
func place(t *testing.T, w *e2e.World, plans []plan) ([]plan, map[string]int) {
	var mu sync.Mutex
	var placed []plan
	rejected := map[string]int{}
	jobs := make(chan plan)
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pl := range jobs {
				ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
				err := w.Place(ctx, pl.p)
				stop()
				mu.Lock()
				switch {
				case err == nil:
					placed = append(placed, pl)
				case errors.Is(err, cancel.ErrLimitExceeded):
					rejected["limit"]++
				case errors.Is(err, cancel.ErrSeatUnavailable):
					rejected["seat_taken"]++
				default:
					t.Errorf("place %s: %v", pl.p.OrderNo, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, pl := range plans {
		jobs <- pl
	}
	close(jobs)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	sort.Slice(placed, func(i, j int) bool { return placed[i].p.OrderNo < placed[j].p.OrderNo })
	return placed, rejected
}

// runFaults injects the faults of the storm, in order, over the window W,
// and leaves everything healed.
func (r *rig) runFaults(W time.Duration, dbp, rdp *storm.Proxy, rp *storm.RedisProc) {
	t := r.t
	must := func(err error) {
		if err != nil {
			t.Errorf("fault injection: %v", err)
		}
	}
	lat := func(ms, jitter int) map[string]any { return map[string]any{"latency": ms, "jitter": jitter} }
	restart := func(sig syscall.Signal, kind string) {
		must(rp.Stop(sig))
		r.faults.Add("redis_restarts", kind)
		r.faults.Add("redis_"+kind, "")
	}
	steps := []struct {
		at float64 // fraction of W
		do func()
	}{
		{0.04, func() {
			must(dbp.Toxic("db_lat_down", "latency", "downstream", 1, lat(25, 20)))
			must(dbp.Toxic("db_lat_up", "latency", "upstream", 1, lat(10, 5)))
			r.faults.Add("latency", "db")
		}},
		{0.09, func() {
			must(rdp.Toxic("redis_lat", "latency", "downstream", 1, lat(15, 10)))
			r.faults.Add("latency", "redis")
		}},
		{0.20, func() { must(dbp.RemoveToxic("db_lat_down")); must(dbp.RemoveToxic("db_lat_up")) }},
		{0.23, func() { must(rdp.RemoveToxic("redis_lat")) }},
		{0.25, func() { // replies lost: Redis ran the script, the client never hears
			must(rdp.Toxic("redis_reset", "reset_peer", "downstream", 0.5, map[string]any{"timeout": 0}))
			r.faults.Add("resets", "redis")
		}},
		{0.30, func() { must(rdp.RemoveToxic("redis_reset")) }},
		{0.32, func() { restart(syscall.SIGTERM, "sigterm") }},
		{0.38, func() { must(rp.Start()) }},
		{0.42, func() { dbp.Disable(); r.faults.Add("proxy_down", "db") }},
		{0.50, func() { must(dbp.Enable()) }},
		{0.53, func() { // commits and replies cut mid-way
			must(dbp.Toxic("db_reset", "reset_peer", "downstream", 0.3, map[string]any{"timeout": 20}))
			r.faults.Add("resets", "db")
		}},
		{0.58, func() { rdp.Disable(); r.faults.Add("proxy_down", "redis") }},
		{0.61, func() { must(dbp.RemoveToxic("db_reset")) }},
		{0.65, func() { must(rdp.Enable()) }},
		{0.68, func() { // a black hole: nothing comes back, the connection dies later
			// (timeout 0: held until removed; the calls hit their deadline)
			must(dbp.Toxic("db_blackhole", "timeout", "downstream", 0.3, map[string]any{"timeout": 0}))
			r.faults.Add("timeouts", "db")
		}},
		{0.76, func() { must(dbp.RemoveToxic("db_blackhole")) }},
		{0.78, func() { restart(syscall.SIGKILL, "sigkill") }},
		{0.83, func() { must(rp.Start()) }},
		{0.84, func() {
			must(rdp.Toxic("redis_blackhole", "timeout", "upstream", 0.4, map[string]any{"timeout": 400}))
			r.faults.Add("timeouts", "redis")
		}},
		{0.88, func() {
			must(dbp.Toxic("db_lat_late", "latency", "downstream", 1, lat(60, 40)))
			r.faults.Add("latency", "db")
		}},
		{0.91, func() { must(rdp.RemoveToxic("redis_blackhole")) }},
		{0.97, func() { must(dbp.RemoveToxic("db_lat_late")) }},
	}
	for _, s := range steps {
		if wait := time.Duration(s.at*float64(W)) - r.sched.Now(); wait > 0 {
			time.Sleep(wait)
		}
		s.do()
	}
	if wait := W - r.sched.Now(); wait > 0 {
		time.Sleep(wait)
	}
}

// verify checks the invariants once the world is quiet and returns the
// violations.
func (r *rig) verify(ctx context.Context, direct *sql.DB, placed []plan) []string {
	t, w := r.t, r.w
	var violations []string
	fail := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	// Which orders had a call whose outcome is unknown (it failed: its
	// commit may have landed with the acknowledgement lost).
	payUnknown, cancelUnknown := map[string]bool{}, map[string]bool{}
	for _, op := range r.hist.Operations() {
		in, out := op.Input.(storm.Input), op.Output.(storm.Output)
		if out.Res != storm.ResUnknown || (in.Actor != "" && in.Actor != in.Owner) {
			continue
		}
		switch in.Kind {
		case storm.OpPay:
			payUnknown[in.Order] = true
		case storm.OpUserCancel, storm.OpHandle, storm.OpTimeout, storm.OpReconcile:
			cancelUnknown[in.Order] = true
		}
	}
	// I1/I2/I5 on what the library reported, before anything is adjusted:
	// never two decisions for an order, never more seats released than it had.
	statuses := map[string]expiry.Status{}
	for _, pl := range placed {
		no := pl.p.OrderNo
		o, err := w.Store.Order(ctx, no)
		require.NoError(t, err)
		statuses[no] = o.Status
		c, p, rel := w.Ledger.Cancelled[no], w.Ledger.Paid[no], w.Ledger.Released[no]
		r.rel.mu.Lock()
		restored, restoreFailed := r.rel.restored[no], r.rel.restoreFailed[no]
		r.rel.mu.Unlock()
		if c > 1 || p > 1 || c+p > 1 {
			fail("I1/I5: order %s reported cancelled %d times and paid %d times", no, c, p)
		}
		if rel > len(pl.p.Seats)+restored && restoreFailed == 0 {
			fail("I2: order %s had %d seats released, it has %d (and %d were locked again by the claims pass)", no, rel, len(pl.p.Seats), restored)
		}
		if o.Status == expiry.StatusPaid && rel > 0 {
			fail("I2: paid order %s had %d seats released", no, rel)
		}
	}
	// World.Check compares the database with what the library reported.
	// A call whose reply was lost did its work unreported: account for it,
	// only where a failed call can explain the gap (the linearizability
	// check covers those calls).
	adjusted := map[string]int{}
	for _, pl := range placed {
		no := pl.p.OrderNo
		switch statuses[no] {
		case expiry.StatusCancelled:
			if w.Ledger.Cancelled[no] == 0 && cancelUnknown[no] {
				w.Ledger.Cancelled[no] = 1
				adjusted["cancel_reply_lost"]++
			}
			r.rel.mu.Lock()
			relFailed, restored, restoreFailed := r.rel.failed[no], r.rel.restored[no], r.rel.restoreFailed[no]
			r.rel.mu.Unlock()
			// A lock the claims pass gave back was released again: that
			// release is not a second one of the order's seats.
			if restored > 0 {
				w.Ledger.Released[no] = max(w.Ledger.Released[no]-restored, 0)
				adjusted["relocked_by_claims_pass"]++
			}
			if w.Ledger.Released[no] > len(pl.p.Seats) && restoreFailed > 0 {
				w.Ledger.Released[no] = len(pl.p.Seats)
				adjusted["restore_reply_lost"]++
			}
			if w.Ledger.Released[no] < len(pl.p.Seats) && relFailed > 0 {
				w.Ledger.Released[no] = len(pl.p.Seats)
				adjusted["release_reply_lost"]++
			}
		case expiry.StatusPaid:
			if w.Ledger.Paid[no] == 0 && payUnknown[no] {
				w.Ledger.Paid[no] = 1
				adjusted["pay_reply_lost"]++
			}
		}
	}
	t.Logf("ledger: decisions whose reply was lost: %v", adjusted)
	ps := make([]cancel.Placement, len(placed))
	for i, pl := range placed {
		ps[i] = pl.p
	}
	bad, err := w.Check(ctx, ps, true)
	require.NoError(t, err)
	for _, b := range bad {
		fail("%s", b)
	}

	violations = append(violations, r.verifyRefunds(ctx, statuses)...)
	violations = append(violations, r.verifyBooks(ctx, direct, placed)...)

	// I4, from the library's side: every due-guarded cancel read the
	// store's clock at or after expire_at, in its own transaction.
	r.audit.mu.Lock()
	for _, dc := range r.audit.due {
		if dc.readAt.Before(dc.expireAt) {
			fail("I4: %s cancelled (%s) at store time %s, before its expiry %s", dc.order, dc.reason, dc.readAt, dc.expireAt)
		}
	}
	nDue := len(r.audit.due)
	r.audit.mu.Unlock()
	// I4, from the database's side (covering cancels whose reply was lost):
	// the compare-and-set stamped updated_at with the database's clock.
	rows, err := direct.QueryContext(ctx, "SELECT order_no, cancel_reason, expire_at_ms, updated_at_ms FROM oe_order WHERE status = 2")
	require.NoError(t, err)
	reasons := map[string]int{}
	var late []time.Duration
	for rows.Next() {
		var no, reason string
		var exp, upd int64
		require.NoError(t, rows.Scan(&no, &reason, &exp, &upd))
		reasons[reason]++
		if reason == string(cancel.ReasonTimeout) || reason == string(cancel.ReasonReconcile) {
			late = append(late, time.Duration(upd-exp)*time.Millisecond)
			if upd < exp {
				fail("I4: %s cancelled by %s at %d ms, before its expiry at %d ms (database clock)", no, reason, upd, exp)
			}
		}
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if len(late) > 0 {
		t.Logf("I4: %d due cancels audited in the library, %d in the database: cancelled by %v; lateness after expiry p50 %s, p99 %s, max %s",
			nDue, len(late), reasons, late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	}
	return violations
}

// verifyBooks judges the settled world by the outcome ledgers alone
// (e2e.Books: I14 payments, I15 seats, I17 limits): the orders' rows, the
// seat store and the refund hook's calls, whatever the library reported.
func (r *rig) verifyBooks(ctx context.Context, direct *sql.DB, placed []plan) []string {
	var nos []string
	users := map[string]bool{}
	for _, pl := range placed {
		nos = append(nos, pl.p.OrderNo)
		users[pl.p.UserID] = true
	}
	answered := map[string]bool{}
	for _, op := range r.hist.Operations() {
		in, out := op.Input.(storm.Input), op.Output.(storm.Output)
		if in.Kind == storm.OpPay && in.Payment != "" && out.Res != storm.ResUnknown && out.Res != storm.ResNotOwner && out.Res != storm.ResMissing {
			answered[in.Payment] = true
		}
	}
	o, err := e2e.ReadOutcome(ctx, direct, r.postgres, r.w.Seats, []string{r.w.ShowID}, slices.Sorted(maps.Keys(users)), nos)
	require.NoError(r.t, err)
	r.hookMu.Lock()
	o.Refunds = maps.Clone(r.hooks)
	r.hookMu.Unlock()
	for id, n := range o.Refunds {
		o.Refunds[id] = min(n, 1) // a rerun after a lost settle is one refund at the provider (keyed by id)
	}
	o.Answered = answered
	books := &e2e.Books{Limit: r.cfg.limit}
	bad := books.Observe(o, true)
	r.t.Logf("books: %d orders, %d payment ids answered, %d refunded, %d violations", len(o.Orders), len(answered), len(o.Refunds), len(bad))
	return bad
}

// verifyRefunds checks I9 once the world is quiet: every discrepancy the
// store recorded reached the refund hook and was settled; the hook ran once
// per payment id (again only after a run whose settle a fault cut off); and
// each payment it refunds is one its order could not take.
func (r *rig) verifyRefunds(ctx context.Context, statuses map[string]expiry.Status) []string {
	t := r.t
	var violations []string
	fail := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	left, err := r.w.Store.ClaimDiscrepancies(ctx, 0, 100000) // lease 0: every unsettled one
	require.NoError(t, err)
	for _, d := range left {
		fail("I9: the discrepancy of payment %s (order %s) was never settled by the refund hook", d.PaymentID, d.OrderNo)
	}
	r.hookMu.Lock()
	hooks, hooked := maps.Clone(r.hooks), maps.Clone(r.hooked)
	r.hookMu.Unlock()
	extra := 0
	for id, n := range hooks {
		extra += n - 1
		d := hooked[id]
		switch st := statuses[d.OrderNo]; {
		case st != d.Status:
			fail("I9: payment %s refunded for order %s as %s, the order is %s", id, d.OrderNo, d.Status, st)
		case st == expiry.StatusPaid:
			// The same payment id again is a read: a repeated callback
			// answers which payment paid the order.
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: d.OrderNo, PaymentID: id})
			if !errors.Is(err, cancel.ErrDiscrepancy) && err != nil {
				require.NoError(t, err)
			}
			if res.PaymentID == id {
				fail("I9: payment %s refunded, but it is the payment that paid order %s", id, d.OrderNo)
			}
		}
	}
	settleLost := r.logs.Get("ERROR refund hook ran but could not be recorded; it will be called again")
	if extra > settleLost {
		fail("I9: the refund hook ran %d times more than once per payment id, and only %d runs could not be recorded", extra, settleLost)
	}
	t.Logf("I9: %d payments refunded, %d hook calls (%d again after a lost settle)", len(hooks), r.hookCalls.Load(), extra)
	return violations
}

// openProxied opens the test's database through the proxy at addr.
func openProxied(t *testing.T, d sqlstore.Dialect, direct *sql.DB, addr string) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	switch d {
	case sqlstore.MySQL:
		var name string
		require.NoError(t, direct.QueryRow("SELECT DATABASE()").Scan(&name))
		c, perr := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
		require.NoError(t, perr)
		c.Addr, c.DBName = addr, name
		c.Timeout, c.ReadTimeout, c.WriteTimeout = time.Second, 5*time.Second, 5*time.Second
		db, err = sql.Open("mysql", c.FormatDSN())
	case sqlstore.Postgres:
		var schema string
		require.NoError(t, direct.QueryRow("SELECT current_schema()").Scan(&schema))
		dsn := os.Getenv(testenv.EnvPostgres)
		host, port, _ := net.SplitHostPort(addr)
		if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
			u, perr := url.Parse(dsn)
			require.NoError(t, perr)
			u.Host = addr
			q := u.Query()
			q.Set("search_path", schema)
			q.Set("connect_timeout", "2")
			u.RawQuery = q.Encode()
			dsn = u.String()
		} else {
			dsn += fmt.Sprintf(" host=%s port=%s search_path=%s connect_timeout=2", host, port, schema)
		}
		db, err = sql.Open("pgx", dsn)
	}
	require.NoError(t, err)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	db.SetConnMaxLifetime(time.Minute)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}
