package e2e_test

// A model-based property test of the whole order life cycle (pgregory.net/rapid).
//
// Each rapid run drives one world (an order store, a seat store, the cancel
// service, the expiry handler and shell, the after-commit scheduler, two
// reconciler "hosts") through a random sequence of actions: place, pay, user
// cancel (also by the wrong user, and with the other host's reconcile round
// between its commit and its release), deliveries of the delayed messages (early,
// on time, late, duplicated, unknown orders, garbage bodies), reconcile rounds,
// the passage of time, and injected failures. A simple model keeps what each
// order's state must be; after every action the invariants that hold at any
// moment are checked, and at the end, once the failures stop and a reconcile
// round has run, I3 and an exact I8 too.
//
// Failures are injected by decorators around the order store, the seat store
// and the delay sender (mOrders, mSeats, mSender). A failure is armed for the
// next call of one operation and comes in two kinds: "before" (the call fails
// before doing anything) and "lost_ack" (the call did its work, but the caller
// got an error: a commit whose answer was lost, a Redis script that ran while
// the connection dropped). A seat-store outage makes every seat operation fail
// for a few actions. The decorators see the true result of every call, so the
// model follows what really happened, not what the library was told. Where the
// stores cancel and release in batches (CancelDue, ReleaseAll), the
// decorators fault those methods too, and the reconciler's expired pass
// takes them (model_batch_test.go).
//
// The variants: fake stores on a FakeClock (fast, many runs), and the SQL store
// on SQLite, MariaDB and PostgreSQL with the Redis seat store (fewer, shorter
// runs, in real time: expiry times are relative to the database's clock and the
// waits are short).

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// ---- the variants -----------------------------------------------------------

func TestModelFake(t *testing.T) {
	// Many runs: rapid's default check count, longer action sequences.
	mRapidBudget(t, 0, 80, false)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mRun(t, "fake", func(rt *rapid.T) *mEnv {
		clock := expirytest.NewFakeClock(start)
		store := memstore.NewStore(clock.Now)
		seats := memstore.NewSeats(clock.Now)
		return &mEnv{
			store:    store,
			seats:    seats,
			place:    store.Place,
			clock:    clock,
			grace:    time.Minute,
			settle:   reconcile.SettleDefault,
			lease:    time.Minute,
			wipe:     seats.Wipe,
			wipeShow: seats.WipeShow,
			// Born up to 2 minutes past due, or due within 20 minutes.
			expiryMin: -2 * time.Minute, expiryMax: 20 * time.Minute,
		}
	})
}

func TestModelSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "model.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	mRunSQL(t, "sqlite", db, sqlstore.SQLite, 12, 50)
}

func TestModelMariaDB(t *testing.T) {
	mRunSQL(t, "mariadb", testenv.MySQL(t), sqlstore.MySQL, 12, 50)
}

func TestModelPostgres(t *testing.T) {
	mRunSQL(t, "postgres", testenv.Postgres(t), sqlstore.Postgres, 12, 50)
}

// mRunSQL runs the model on the SQL store over db with real Redis. Every run
// uses fresh show ids and order numbers (a unique prefix) and deletes its rows
// and keys when it ends, so runs and other tests sharing the servers never see
// each other's orders.
func mRunSQL(t *testing.T, name string, db *sql.DB, d sqlstore.Dialect, checks, steps int) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	store, err := sqlstore.New(db, d)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	mRapidBudget(t, checks, steps, true)
	mRun(t, name, func(rt *rapid.T) *mEnv {
		prefix := "m" + testenv.Unique() + "-"
		ns := "oe-" + strings.TrimSuffix(prefix, "-") // a namespace per run
		seats, err := redisseat.New(rdb, ns)
		if err != nil {
			rt.Fatal(err)
		}
		env := &mEnv{
			prefix: prefix,
			store:  store,
			seats:  seats,
			place: func(ctx context.Context, p cancel.Placement) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := store.Place(ctx, tx, p); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			grace:     100 * time.Millisecond,
			settle:    300 * time.Millisecond,
			lease:     20 * time.Millisecond,
			expiryMin: -800 * time.Millisecond, expiryMax: 2500 * time.Millisecond,
		}
		keys := func(show string) []string {
			return []string{ns + ":{" + show + "}:seats", ns + ":{" + show + "}:limit", ns + ":{" + show + "}:locked"}
		}
		env.wipeShow = func(show string) {
			if err := rdb.Del(ctx, keys(show)...).Err(); err != nil {
				rt.Fatalf("wipe %s: %v", show, err)
			}
		}
		env.wipe = func() {
			var all []string
			for _, show := range []string{prefix + "showA", prefix + "showB"} {
				all = append(all, keys(show)...)
			}
			all = append(all, ns+":shows", ns+":restored", ns+":rebuild")
			if err := rdb.Del(ctx, all...).Err(); err != nil {
				rt.Fatalf("wipe: %v", err)
			}
		}
		env.cleanup = func(shows []string) {
			// The prefix is ours ([a-z0-9-]), so the LIKE pattern is a constant.
			for _, q := range []string{"DELETE FROM oe_order_seat WHERE order_no LIKE '" + prefix + "%'", "DELETE FROM oe_order WHERE order_no LIKE '" + prefix + "%'",
				"DELETE FROM oe_payment_discrepancy WHERE order_no LIKE '" + prefix + "%'"} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					rt.Errorf("cleanup: %v", err)
				}
			}
			env.wipe()
		}
		return env
	})
}

// mRapidBudget sets rapid's check count and average action count for one test
// (rapid reads them from its flags at each Check and Repeat), unless they were
// given on the command line, and restores them afterwards. 0 keeps the value.
//
// On real servers the runs depend on real time and cannot be replayed
// exactly, so rapid writes no fail files for them (nofailfile).
func mRapidBudget(t *testing.T, checks, steps int, nofailfile bool) {
	mFlagsOnce.Do(func() {
		mFlagsGiven = map[string]bool{}
		flag.Visit(func(f *flag.Flag) { mFlagsGiven[f.Name] = true })
	})
	set := func(name, v string) {
		f := flag.Lookup(name)
		if v == "0" || f == nil || mFlagsGiven[name] {
			return
		}
		old := f.Value.String()
		require.NoError(t, f.Value.Set(v))
		t.Cleanup(func() { _ = f.Value.Set(old) })
	}
	set("rapid.checks", strconv.Itoa(checks))
	set("rapid.steps", strconv.Itoa(steps))
	if nofailfile {
		set("rapid.nofailfile", "true")
	}
}

var (
	mFlagsOnce  sync.Once
	mFlagsGiven map[string]bool
)

// ---- environment, statistics ------------------------------------------------

// mOrderStore is what the model needs of an order store: the library's
// interfaces over orders, plus the store's clock.
type mOrderStore interface {
	cancel.OrderStore
	Now(ctx context.Context) (time.Time, error)
}

// mEnv is one run's stores and how time passes for them.
type mEnv struct {
	prefix string
	store  mOrderStore
	seats  canceltest.SeatStore
	place  func(ctx context.Context, p cancel.Placement) error
	// clock is the FakeClock of the fake variant; nil means real time.
	clock *expirytest.FakeClock
	grace time.Duration
	// settle is reconcile.Config.Settle: how long the lock scan leaves a
	// decided order to the host that decided it.
	settle               time.Duration
	lease                time.Duration // of a discrepancy whose refund hook failed
	expiryMin, expiryMax time.Duration
	// resolution, when set, is how finely the store keeps a deadline (a
	// host's DATETIME column: a second): drawn expiries are rounded up to it.
	resolution time.Duration
	// orderStoreOnly: the store has the order store's transitions only (a
	// host's tables through a sqlstore.Mapping): a late payment is
	// refunded, never reinstated, and there is no deadline control and no
	// warning, so those actions are left out.
	orderStoreOnly bool
	// noLate: the store cannot tell a timeout's cancel from a user's (a
	// mapping with one cancelled value and no reason column), so a late
	// payment is refunded, never reinstated. noDeadline: the deadline is
	// the creation time plus a window, so it cannot move (no Extend or
	// Shorten).
	noLate, noDeadline bool
	// noClaims: the store keeps no claims in SQL (a mapping without a
	// claims table), so a seat store that lost its data cannot be rebuilt
	// from it: no wipes.
	noClaims bool
	cleanup  func(shows []string)
	// wipe makes the seat store lose every key (a restart without
	// persistence), wipeShow one show's keys (eviction, a partial loss).
	wipe     func()
	wipeShow func(show string)
}

type mStats struct {
	runs     int
	actions  map[string]int // by action
	kinds    map[string]int // finer: what the actions met (deliveries by timing, refused placements, ...)
	failures map[string]int // injected, by operation and kind
}

func (s *mStats) total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func mFormat(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// mRun runs the model with rapid, newEnv giving each run fresh stores, and
// prints the figures.
func mRun(t *testing.T, name string, newEnv func(rt *rapid.T) *mEnv) {
	stats := &mStats{actions: map[string]int{}, kinds: map[string]int{}, failures: map[string]int{}}
	rapid.Check(t, func(rt *rapid.T) {
		stats.runs++
		env := newEnv(rt)
		m := newMachine(rt, env, stats)
		if env.cleanup != nil {
			rt.Cleanup(func() { env.cleanup(m.shows) })
		}
		actions := map[string]func(*rapid.T){
			"Place":            m.Place,
			"PlaceMore":        m.Place, // placing is twice as likely as the other actions
			"Pay":              m.Pay,
			"UserCancel":       m.UserCancel,
			"Deliver":          m.Deliver,
			"DeliverStray":     m.DeliverStray,
			"Reconcile":        m.Reconcile,
			"PassTime":         m.PassTime,
			"ArmFault":         m.ArmFault,
			"SeatStoreOutage":  m.SeatStoreOutage,
			"":                 m.Check,
			"DeliverDuplicate": m.DeliverDuplicate,
			// The hostile-but-legal vocabulary (I13).
			"PlaceDupSeat": m.PlaceDupSeat,
			"PlaceAgain":   m.PlaceAgain,
			"PayAgain":     m.PayAgain,
			"CaseVariant":  m.CaseVariant,
			"StuckOrder":   m.StuckOrder,
			"Backlog":      m.Backlog,
			"WipeSeats":    m.WipeSeats,
			"WipeShow":     m.WipeShow,
			"FailRefunds":  m.FailRefunds,
			"SkewClock":    m.SkewClock,
			// Late payments, deadline control, the expiry warning.
			"PayLate":       m.PayLate,
			"PayLateResold": m.PayLateResold,
			"Extend":        m.Extend,
			"ExpireNow":     m.ExpireNow,
			"Shorten":       m.Shorten,
			"WarnRedeliver": m.WarnRedeliver,
			// Several instances: another host's scan between a
			// cancel's commit and its release.
			"CancelUnderScan": m.CancelUnderScan,
			// Cancels in batches: the reconciler's expired pass through
			// cancel.Service.ExpireDue (CancelDue, ReleaseAll), raced and
			// failed (model_batch_test.go).
			"ExpireBatch":     m.ExpireBatch,
			"ExpireBatchMore": m.ExpireBatch, // twice as likely: eight scenarios to cover
		}
		if env.orderStoreOnly {
			for _, k := range []string{"PayLate", "PayLateResold", "Extend", "Shorten", "WarnRedeliver"} {
				delete(actions, k)
			}
		}
		if env.noLate {
			delete(actions, "PayLate")
			delete(actions, "PayLateResold")
		}
		if env.noDeadline {
			delete(actions, "Extend")
			delete(actions, "Shorten")
		}
		if env.noClaims {
			delete(actions, "WipeSeats")
			delete(actions, "WipeShow")
		}
		for k, f := range actions {
			if k != "" {
				actions[k] = m.action(k, f)
			}
		}
		rt.Repeat(actions)
		m.settle(rt)
	})
	if t.Failed() {
		return
	}
	t.Logf("FIGURE model %s: runs=%d actions=%d failures_injected=%d violations=0", name, stats.runs, stats.total(stats.actions), stats.total(stats.failures))
	t.Logf("FIGURE model %s actions: %s", name, mFormat(stats.actions))
	t.Logf("FIGURE model %s kinds: %s", name, mFormat(stats.kinds))
	t.Logf("FIGURE model %s failures: %s", name, mFormat(stats.failures))
}

// ---- the machine --------------------------------------------------------------

var errInjected = errors.New("model: injected failure")

type mMode string

const (
	mBefore  mMode = "before"   // failed before doing anything
	mLostAck mMode = "lost_ack" // did it, but the caller got an error
	// mOneShow (ReleaseAll only): one show's step failed, the others' were
	// done; the counts say which (-1), as cancel.BatchReleaser allows.
	mOneShow mMode = "one_show"
)

type mFaultOp struct {
	op      string
	lostAck bool
}

// mFaultOps are the operations a fault can be armed for, and whether a lost
// acknowledgement makes sense for them (it does for writes).
var mFaultOps = []mFaultOp{
	{"Order", false}, {"CancelPending", true}, {"PayPending", true}, {"Expired", false}, {"Statuses", false}, {"Place", true},
	{"Lock", true}, {"Release", true}, {"Sell", true}, {"ScanLocks", false},
	{"Send", true},
	{"ReinstateCancelled", true}, {"SetDeadline", false}, {"MarkWarned", true},
}

// mBatchFaultOps are the faults of the batch path, armed only where the
// stores offer it (newMachine): a CancelDue that fails before its commit or
// commits and loses its answer (the crash between a batch's commit and its
// releases), a ReleaseAll that fails before the seat store or runs and
// loses its answer.
var mBatchFaultOps = []mFaultOp{{"CancelDue", true}, {"ReleaseAll", true}}

var mSeatOps = map[string]bool{"Lock": true, "Release": true, "ReleaseAll": true, "Sell": true, "ScanLocks": true}

type mOrder struct {
	p      cancel.Placement
	placed bool // the store holds it (seen by the decorator, whatever the caller was told)
	status expiry.Status
	reason cancel.Reason
	// lag: a failure touched this order, so its seat locks may be stale (and a
	// paid order's seats still locked rather than sold) until a reconcile round.
	lag         bool
	transitions int
	paidBy      string // the payment that paid it
	// lagBehind: the seat store lost this order's seats; until the run
	// settles, another order's stale lock may hold one of them.
	lagBehind bool
	// reinstated: a late payment brought it back from cancelled to paid
	// (at most once, and only after a timeout's or the reconciler's cancel).
	reinstated bool
	warned     int // times the warning hook fired for it
}

type mFlight struct {
	msg       expiry.Message
	due       time.Time // by the sender's (application's) clock
	delivered int
}

type machine struct {
	ctx   context.Context
	env   *mEnv
	stats *mStats

	shows, users, pool []string
	limit              int
	orders             map[string]*mOrder
	nos                []string // every order number tried, in order
	next               int
	flights            []*mFlight

	armed map[string]mMode
	stuck map[string]bool // orders whose every cancel fails (a row held by a stuck transaction)
	// backoff: orders whose cancel failed in a reconcile round, until when
	// (app clock) a reconciler may still be skipping them (BackoffMax).
	backoff map[string]time.Time
	// lost: the seat store lost its data (all of it, or lostShows' shows) and
	// has not been rebuilt since: seat-side checks wait for the repair.
	lost      bool
	lostShows map[string]bool
	// wiped says the seat store lost data in this run: the purchase limit
	// lives in its counters, so placements between a loss and the rebuild
	// are not held to it (a known gap), and I17 is not judged then.
	wiped bool
	// The refund hook: successful calls per payment id, the payment ids that
	// must reach it (a discrepancy was answered), and whether it fails now.
	refunded   map[string]int
	owed       map[string]string // payment id → order
	refundDown bool
	skew       time.Duration // how far the placing host's clock is off
	brokerDown bool          // every send fails (a broker outage: Backlog)
	// repairPasses: complete claims passes each reconciler still needs
	// before a lost show counts as repaired. Per reconciler: each keeps its
	// own cursor, so a pass one host began before the loss (and that may
	// have passed the show already) says nothing of another's.
	repairPasses map[*reconcile.Reconciler]int
	outage       int      // actions left during which every seat operation fails
	hits         []string // operations that failed in the current action
	bad          []string // violations seen inside decorators
	freed        map[[3]string]bool
	// reclaim: seats that a stale lock held after a loss while SQL gives
	// them to a live order (Check's blocked), and that were freed since.
	// The seat store gets them back only when a claims pass reaches their
	// claim, and the pass under way may have passed it already: each waits,
	// per reconciler, for the passes repairPasses counts for a lost show.
	reclaim map[[2]string]map[*reconcile.Reconciler]int
	// midRelease, when set, runs inside the next release of its order,
	// before the seat store sees it (CancelUnderScan).
	midRelease *mMid
	// midBatch, when set, runs inside the next CancelDue, before the store
	// sees it, with the batch's order numbers; it returns the orders it
	// decided meanwhile (ExpireBatch's race).
	midBatch func(nos []string) []string
	// faultOps are the faults ArmFault draws from: mFaultOps and the batch
	// path's. batchSteps are ExpireBatch's scenarios.
	faultOps   []mFaultOp
	batchSteps []string
	lead       time.Duration // the warning's lead (SchedulerConfig.WarnBefore)

	obs   *mObserver
	fo    *mOrders
	fs    *mSeats
	snd   *mSender
	svc   *cancel.Service
	h     *expiry.Handler
	shell *expiry.Shell
	sched *expiry.Scheduler
	rcfg  reconcile.Config
	hosts [2]*reconcile.Reconciler
}

func newMachine(rt *rapid.T, env *mEnv, stats *mStats) *machine {
	m := &machine{
		ctx: context.Background(), env: env, stats: stats,
		shows: []string{env.prefix + "showA", env.prefix + "showB"}, users: []string{"u1", "u2", "u3"},
		limit:  6,
		orders: map[string]*mOrder{}, armed: map[string]mMode{}, freed: map[[3]string]bool{},
		stuck: map[string]bool{}, backoff: map[string]time.Time{}, lostShows: map[string]bool{}, refunded: map[string]int{}, owed: map[string]string{},
		reclaim: map[[2]string]map[*reconcile.Reconciler]int{}, obs: &mObserver{kinds: map[expiry.Kind]int{}, cancelled: map[string]int{}, paid: map[string]int{}},
	}
	for i := 1; i <= 12; i++ {
		m.pool = append(m.pool, "s"+strconv.Itoa(i))
	}
	m.pool = append(m.pool, "S1", "S2") // case variants of s1, s2: other seats (I10)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m.fo = &mOrders{m: m, inner: env.store, place: env.place}
	m.fs = &mSeats{m: m, inner: env.seats}
	// Every store batches: the decorators offer CancelDue and ReleaseAll
	// with their own faults, and ExpireBatch drives them.
	m.faultOps = append(slices.Clone(mFaultOps), mBatchFaultOps...)
	orders, seats := mBatchOrders{m.fo}, mBatchSeats{m.fs}
	m.batchSteps = []string{"clean", "race", "cancel_due_before", "cancel_due_lost_ack", "seat_store_down",
		"release_all_before", "release_all_lost_ack", "release_all_one_show"}
	m.snd = &mSender{m: m}
	var err error
	m.lead = (env.expiryMax / 10).Truncate(time.Millisecond)
	if env.orderStoreOnly {
		m.lead = 0 // no warning is scheduled
	}
	var clock expiry.Clock = expiry.SystemClock
	if env.clock != nil {
		clock = env.clock
	}
	// The placing host's clock may be off (SkewClock): it only sizes the
	// first message's delay; nothing decides by it.
	m.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: m.snd, Runtime: expiry.Runtime{Clock: skewClock{clock, &m.skew}, Observer: m.obs, Logger: quiet}, WarnBefore: m.lead})
	if err != nil {
		rt.Fatal(err)
	}
	m.svc, err = cancel.New(cancel.Config{Store: orders, Seats: seats, Runtime: expiry.Runtime{Observer: m.obs, Logger: quiet},
		OnDiscrepancy: m.refund, DiscrepancyLease: env.lease,
		AcceptLatePayments: true, OnWarning: m.onWarning, Scheduler: m.sched})
	if err != nil {
		rt.Fatal(err)
	}
	var warner expiry.Warner = m.svc
	if env.orderStoreOnly {
		warner = nil
	}
	m.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: m.svc, Warner: warner, Sender: m.snd, Runtime: expiry.Runtime{Observer: m.obs, Logger: quiet}})
	if err != nil {
		rt.Fatal(err)
	}
	m.shell = expiry.NewShell(m.h)
	m.rcfg = reconcile.Config{Orders: orders, Seats: seats, Service: m.svc, Runtime: expiry.Runtime{Clock: clock, Observer: m.obs, Logger: quiet},
		// Small batches and rounds, so a backlog spans rounds (Report.More).
		Batch: 4, MaxPerRound: 12, Grace: env.grace, Settle: env.settle,
		// One cancel at a time: the model attributes each seat change to the
		// call that made it, which concurrent workers within a round would
		// blur (concurrency is the race and storm tests' job).
		Workers: 1}
	for i := range m.hosts {
		m.hosts[i], err = reconcile.New(m.rcfg)
		if err != nil {
			rt.Fatal(err)
		}
	}
	return m
}

// action wraps an action: it counts it and ends a seat-store outage in time.
func (m *machine) action(name string, f func(*rapid.T)) func(*rapid.T) {
	return func(t *rapid.T) {
		m.hits = m.hits[:0]
		f(t)
		m.stats.actions[name]++
		if m.outage > 0 {
			m.outage--
		}
	}
}

func (m *machine) appNow() time.Time {
	if m.env.clock != nil {
		return m.env.clock.Now()
	}
	return time.Now()
}

// pass lets time pass: the fake clock moves, or the test sleeps.
func (m *machine) pass(d time.Duration) {
	if d <= 0 {
		return
	}
	if m.env.clock != nil {
		m.env.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

func (m *machine) storeNow(t *rapid.T) time.Time {
	now, err := m.env.store.Now(m.ctx)
	if err != nil {
		t.Fatalf("store clock: %v", err)
	}
	return now
}

// fault reports whether the call of op (for orderNo, "" if none) fails, and
// how; it counts the failure and marks the order as allowed to lag.
func (m *machine) fault(op, orderNo string) (mMode, bool) {
	mode, ok := m.armed[op]
	key := op + "/" + string(mode)
	if ok {
		delete(m.armed, op)
	} else if m.outage > 0 && mSeatOps[op] {
		mode, ok, key = mBefore, true, "seat_store_down/"+op
	}
	if !ok {
		return "", false
	}
	m.hits = append(m.hits, op)
	m.stats.failures[key]++
	if o := m.orders[orderNo]; o != nil {
		o.lag = true
	}
	return mode, true
}

func (m *machine) hit(ops ...string) bool {
	for _, h := range m.hits {
		if slices.Contains(ops, h) {
			return true
		}
	}
	return false
}

func (m *machine) violate(format string, args ...any) {
	m.bad = append(m.bad, fmt.Sprintf(format, args...))
}

func injected(op string) error { return fmt.Errorf("%w: %s", errInjected, op) }
