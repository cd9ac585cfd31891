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
// model follows what really happened, not what the library was told.
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
	"reflect"
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
	cancel.DiscrepancyStore
	reconcile.Orders
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
	cleanup        func(shows []string)
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
		}
		if env.orderStoreOnly {
			for _, k := range []string{"PayLate", "PayLateResold", "Extend", "Shorten", "WarnRedeliver"} {
				delete(actions, k)
			}
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
)

// mFaultOps are the operations a fault can be armed for, and whether a lost
// acknowledgement makes sense for them (it does for writes).
var mFaultOps = []struct {
	op      string
	lostAck bool
}{
	{"Order", false}, {"CancelPending", true}, {"PayPending", true}, {"Expired", false}, {"Statuses", false}, {"Place", true},
	{"Lock", true}, {"Release", true}, {"Sell", true}, {"ScanLocks", false},
	{"Send", true},
	{"ReinstateCancelled", true}, {"SetDeadline", false}, {"MarkWarned", true},
}

var mSeatOps = map[string]bool{"Lock": true, "Release": true, "Sell": true, "ScanLocks": true}

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
	// midRelease, when set, runs inside the next release of its order,
	// before the seat store sees it (CancelUnderScan).
	midRelease *mMid
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
		obs: &mObserver{kinds: map[expiry.Kind]int{}, cancelled: map[string]int{}, paid: map[string]int{}},
	}
	for i := 1; i <= 12; i++ {
		m.pool = append(m.pool, "s"+strconv.Itoa(i))
	}
	m.pool = append(m.pool, "S1", "S2") // case variants of s1, s2: other seats (I10)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m.fo = &mOrders{m: m, inner: env.store, place: env.place}
	m.fs = &mSeats{m: m, inner: env.seats}
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
	m.svc, err = cancel.New(cancel.Config{Store: m.fo, Seats: m.fs, Discrepancies: m.fo, Runtime: expiry.Runtime{Observer: m.obs, Logger: quiet},
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
	m.rcfg = reconcile.Config{Orders: m.fo, Seats: m.fs, Service: m.svc, Runtime: expiry.Runtime{Clock: clock, Observer: m.obs, Logger: quiet},
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

// ---- model updates, from the decorators' view of what really happened ------

func (m *machine) onPlaced(p cancel.Placement) {
	o := m.orders[p.OrderNo]
	if o == nil || o.placed {
		m.violate("placed %s twice, or an order the model did not try", p.OrderNo)
		return
	}
	o.placed, o.status = true, expiry.StatusPending
}

func (m *machine) onTransition(no string, to expiry.Status, req *cancel.Request, res cancel.Result) {
	o := m.orders[no]
	if o == nil || !o.placed {
		m.violate("I1: %s moved to %s, but it was never placed", no, to)
		return
	}
	o.transitions++
	if o.status != expiry.StatusPending {
		m.violate("I1: %s was %s and became %s", no, o.status, to)
	}
	if got, want := slices.Sorted(slices.Values(res.Seats)), slices.Sorted(slices.Values(o.p.Seats)); !slices.Equal(got, want) {
		m.violate("%s: the transition to %s took seats %v, the order has %v", no, to, got, want)
	}
	if req != nil && (req.Reason == cancel.ReasonTimeout || req.Reason == cancel.ReasonReconcile) {
		if !req.OnlyIfDue {
			m.violate("I4: %s cancelled with reason %s without the due guard", no, req.Reason)
		}
		// ReadAt is the store's clock read in the cancel's own transaction,
		// after the compare-and-set: an expire_at after it is certainly early.
		if o.p.ExpireAt.After(res.Order.ReadAt) {
			m.violate("I4: %s cancelled (%s) at %s by the store's clock, before its expire_at %s", no, req.Reason, res.Order.ReadAt, o.p.ExpireAt)
		}
	}
	o.status = to
	if req != nil {
		o.reason = req.Reason
	}
}

// onReinstated: a late payment p brought order no back from cancelled to
// paid (the decorator saw the store do it).
func (m *machine) onReinstated(p cancel.Payment, res cancel.Result) {
	o := m.orders[p.OrderNo]
	switch {
	case o == nil || !o.placed:
		m.violate("I1: %s reinstated, but it was never placed", p.OrderNo)
		return
	case o.status != expiry.StatusCancelled || o.reinstated:
		m.violate("I1: %s reinstated from %s (reinstated before: %v)", p.OrderNo, o.status, o.reinstated)
	case o.reason != cancel.ReasonTimeout && o.reason != cancel.ReasonReconcile:
		m.violate("late payment %s reinstated %s, cancelled by %s", p.PaymentID, p.OrderNo, o.reason)
	}
	if got, want := slices.Sorted(slices.Values(res.Seats)), slices.Sorted(slices.Values(o.p.Seats)); !slices.Equal(got, want) {
		m.violate("%s: reinstated with seats %v, the order has %v", p.OrderNo, got, want)
	}
	o.status, o.reinstated, o.paidBy = expiry.StatusPaid, true, p.PaymentID
	m.stats.kinds["reinstated"]++
}

// onWarning is the host's warning hook: once per order, only while pending.
func (m *machine) onWarning(_ context.Context, ord expiry.Order) error {
	o := m.orders[ord.No]
	if o == nil || !o.placed {
		m.violate("warned %s, never placed", ord.No)
		return nil
	}
	o.warned++
	if o.warned > 1 {
		m.violate("%s warned %d times", ord.No, o.warned)
	}
	if o.status != expiry.StatusPending {
		m.violate("%s warned while %s", ord.No, o.status)
	}
	m.stats.kinds["warned"]++
	return nil
}

// ---- decorators -----------------------------------------------------------------

// mOrders is the order store with injected failures.
type mOrders struct {
	m     *machine
	inner mOrderStore
	place func(ctx context.Context, p cancel.Placement) error
}

func (s *mOrders) Order(ctx context.Context, no string) (expiry.Order, error) {
	if _, hit := s.m.fault("Order", no); hit {
		return expiry.Order{}, injected("Order")
	}
	return s.inner.Order(ctx, no)
}

func (s *mOrders) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if s.m.stuck[req.OrderNo] {
		s.m.hits = append(s.m.hits, "CancelPending")
		s.m.stats.failures["stuck/CancelPending"]++
		return cancel.Result{}, injected("CancelPending (stuck)")
	}
	mode, hit := s.m.fault("CancelPending", req.OrderNo)
	if hit && req.Reason == cancel.ReasonReconcile { // that reconciler backs off from the order
		s.m.backoff[req.OrderNo] = s.m.appNow().Add(reconcile.BackoffMax)
	}
	if mode == mBefore {
		return cancel.Result{}, injected("CancelPending")
	}
	res, err := s.inner.CancelPending(ctx, req)
	if err == nil && res.Changed {
		s.m.onTransition(req.OrderNo, expiry.StatusCancelled, &req, res)
	}
	if hit {
		return cancel.Result{}, injected("CancelPending")
	}
	return res, err
}

func (s *mOrders) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	no := p.OrderNo
	mode, hit := s.m.fault("PayPending", no)
	if mode == mBefore {
		return cancel.Result{}, injected("PayPending")
	}
	res, err := s.inner.PayPending(ctx, p)
	if err == nil && res.Changed {
		s.m.onTransition(no, expiry.StatusPaid, nil, res)
		s.m.orders[no].paidBy = p.PaymentID
	}
	if hit {
		return cancel.Result{}, injected("PayPending")
	}
	return res, err
}

// ReinstateCancelled is the late-payment side of the store. A lost
// acknowledgement is a commit whose answer was lost (expiry.ErrCommitUnknown).
func (s *mOrders) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	mode, hit := s.m.fault("ReinstateCancelled", p.OrderNo)
	if mode == mBefore {
		return cancel.Result{}, injected("ReinstateCancelled")
	}
	res, err := s.inner.(cancel.Reinstater).ReinstateCancelled(ctx, p, claim)
	if err == nil && res.Changed {
		s.m.onReinstated(p, res)
	}
	if hit {
		return cancel.Result{}, fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, injected("ReinstateCancelled"))
	}
	return res, err
}

func (s *mOrders) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if _, hit := s.m.fault("SetDeadline", c.OrderNo); hit {
		return cancel.DeadlineResult{}, injected("SetDeadline")
	}
	res, err := s.inner.(cancel.DeadlineStore).SetDeadline(ctx, c)
	if err == nil && res.Changed {
		o := s.m.orders[c.OrderNo]
		switch {
		case o == nil || !o.placed || o.status != expiry.StatusPending:
			s.m.violate("the deadline of %s (%s) moved", c.OrderNo, s.m.state(o))
		case !c.Shorten && (res.Order.ExpireAt.Before(o.p.ExpireAt) || !o.p.ExpireAt.After(res.Order.ReadAt.Add(-time.Second))):
			s.m.violate("I4: extending %s moved its deadline from %s to %s (store clock %s)", c.OrderNo, o.p.ExpireAt, res.Order.ExpireAt, res.Order.ReadAt)
		default:
			o.p.ExpireAt = res.Order.ExpireAt
		}
	}
	return res, err
}

func (s *mOrders) MarkWarned(ctx context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	mode, hit := s.m.fault("MarkWarned", no)
	if mode == mBefore {
		return expiry.WarnResult{}, injected("MarkWarned")
	}
	res, err := s.inner.(cancel.WarnStore).MarkWarned(ctx, no, lead)
	if hit {
		if err == nil && res.Fired {
			s.m.orders[no].warned++ // marked, never fired: at most once
		}
		return expiry.WarnResult{}, injected("MarkWarned")
	}
	return res, err
}

func (s *mOrders) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if _, hit := s.m.fault("Expired", ""); hit {
		return nil, "", injected("Expired")
	}
	return s.inner.Expired(ctx, cursor, limit)
}

func (s *mOrders) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	return s.inner.Claims(ctx, cursor, limit)
}

func (s *mOrders) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	return s.inner.RecordDiscrepancy(ctx, d)
}

func (s *mOrders) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	ds, err := s.inner.ClaimDiscrepancies(ctx, lease, limit)
	mine := ds[:0:0] // the SQL variants share one table between runs
	for _, d := range ds {
		if strings.HasPrefix(d.OrderNo, s.m.env.prefix) {
			mine = append(mine, d)
		}
	}
	return mine, err
}

func (s *mOrders) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	return s.inner.SettleDiscrepancy(ctx, paymentID)
}

func (s *mOrders) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	if _, hit := s.m.fault("Statuses", ""); hit {
		return nil, injected("Statuses")
	}
	return s.inner.Statuses(ctx, nos)
}

// Place is the host's placing transaction. A lost acknowledgement is a
// commit whose answer was lost: expiry.ErrCommitUnknown, as sqlstore's Insert
// reports it.
func (s *mOrders) Place(ctx context.Context, p cancel.Placement) error {
	mode, hit := s.m.fault("Place", p.OrderNo)
	if mode == mBefore {
		return injected("Place")
	}
	err := s.place(ctx, p)
	if err == nil {
		s.m.onPlaced(p)
	}
	if hit {
		return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, injected("Place"))
	}
	return err
}

// mSeats is the seat store with injected failures. It also audits every
// release and sale against the seat store's state before and after (I2). Each
// run has its own Redis namespace; the lock scan is still confined to this
// run's shows, as a second fence against judging another test's locks.
type mSeats struct {
	m     *machine
	inner canceltest.SeatStore
}

func (s *mSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	mode, hit := s.m.fault("Lock", h.OrderNo)
	if mode == mBefore {
		return "", injected("Lock")
	}
	id, err := s.inner.Lock(ctx, h, limit)
	// A seat this order locks again (a late payment's reinstatement, whose
	// lock may be left behind when the reinstatement fails) may be released
	// again: "released twice" counts releases per lock. Checked even when
	// the ack is lost: the lock is in the store all the same.
	after := s.show(ctx, h.ShowID)
	for _, seat := range h.Seats {
		if st, ok := after[seat]; ok && st.Status == cancel.SeatLocked && st.OrderNo == h.OrderNo {
			delete(s.m.freed, [3]string{h.OrderNo, h.ShowID, seat})
		}
	}
	if hit {
		return "", injected("Lock")
	}
	return id, err
}

func (s *mSeats) Lost(ctx context.Context) (string, bool, error) { return s.inner.Lost(ctx) }

func (s *mSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	mine := claims[:0:0]
	for _, c := range claims {
		if slices.Contains(s.m.shows, c.ShowID) {
			mine = append(mine, c)
		}
	}
	return s.inner.Restore(ctx, mine)
}

func (s *mSeats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	mine := claims[:0:0]
	for _, c := range claims {
		if slices.Contains(s.m.shows, c.ShowID) {
			mine = append(mine, c)
		}
	}
	return s.inner.Missing(ctx, mine)
}

func (s *mSeats) MarkRestored(ctx context.Context, token string) error {
	return s.inner.MarkRestored(ctx, token)
}

func (s *mSeats) show(ctx context.Context, show string) map[string]cancel.SeatState {
	st, err := s.inner.Show(ctx, show)
	if err != nil {
		s.m.violate("reading show %s: %v", show, err)
	}
	return st
}

func (s *mSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	mode, hit := s.m.fault("Release", h.OrderNo)
	if mode == mBefore {
		return 0, injected("Release")
	}
	if mid := s.m.midRelease; mid != nil && mid.order == h.OrderNo {
		s.m.midRelease = nil
		mid.run()
	}
	before := s.show(ctx, h.ShowID)
	n, err := s.inner.Release(ctx, h)
	after := s.show(ctx, h.ShowID)
	s.auditRelease(h, before, after, n, err)
	if hit {
		return 0, injected("Release")
	}
	return n, err
}

func (s *mSeats) auditRelease(h cancel.Hold, before, after map[string]cancel.SeatState, n int, err error) {
	m := s.m
	o := m.orders[h.OrderNo]
	freed := 0
	for seat, b := range before {
		a, still := after[seat]
		if still && a == b {
			continue
		}
		if b.Status != cancel.SeatLocked || b.OrderNo != h.OrderNo || still {
			m.violate("I2: releasing %s changed seat %s/%s from %+v to %+v (not a lock of this order)", h.OrderNo, h.ShowID, seat, b, a)
			continue
		}
		freed++
		key := [3]string{h.OrderNo, h.ShowID, seat}
		if m.freed[key] {
			m.violate("I2: seat %s/%s of %s released twice", h.ShowID, seat, h.OrderNo)
		}
		m.freed[key] = true
		switch {
		case o == nil:
			m.violate("I2: released seat %s/%s of an order the model never tried: %s", h.ShowID, seat, h.OrderNo)
		case o.placed && o.status == expiry.StatusPaid:
			m.violate("I2: released seat %s/%s of paid order %s", h.ShowID, seat, h.OrderNo)
		case o.placed && o.status == expiry.StatusPending:
			m.violate("released seat %s/%s of %s while the store still has it pending", h.ShowID, seat, h.OrderNo)
		}
	}
	for seat, a := range after {
		if _, was := before[seat]; !was {
			m.violate("releasing %s created seat %s/%s: %+v", h.OrderNo, h.ShowID, seat, a)
		}
	}
	if err == nil && n != freed {
		m.violate("release of %s reported %d seats freed, %d were", h.OrderNo, n, freed)
	}
}

func (s *mSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	mode, hit := s.m.fault("Sell", h.OrderNo)
	if mode == mBefore {
		return 0, injected("Sell")
	}
	before := s.show(ctx, h.ShowID)
	n, err := s.inner.Sell(ctx, h)
	after := s.show(ctx, h.ShowID)
	changed := 0
	for seat, a := range after {
		b, was := before[seat]
		if was && a == b {
			continue
		}
		changed++
		if a.Status != cancel.SeatSold || a.OrderNo != h.OrderNo || (was && (b.Status != cancel.SeatLocked || b.OrderNo != h.OrderNo)) {
			s.m.violate("I2: selling for %s changed seat %s/%s from %+v to %+v", h.OrderNo, h.ShowID, seat, b, a)
		}
	}
	if o := s.m.orders[h.OrderNo]; changed > 0 && (o == nil || !o.placed || o.status != expiry.StatusPaid) {
		s.m.violate("seats of %s marked sold, but the order is not paid", h.OrderNo)
	}
	if hit {
		return 0, injected("Sell")
	}
	return n, err
}

func (s *mSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if _, hit := s.m.fault("ScanLocks", ""); hit {
		return nil, "", injected("ScanLocks")
	}
	locks, next, err := s.inner.ScanLocks(ctx, cursor, count)
	mine := locks[:0:0]
	for _, l := range locks {
		if slices.Contains(s.m.shows, l.ShowID) {
			mine = append(mine, l)
		}
	}
	return mine, next, err
}

// mSender is the transport: it keeps sent messages in flight until the model
// delivers them.
type mSender struct{ m *machine }

func (s *mSender) Send(ctx context.Context, msg expiry.Message, delay time.Duration) error {
	if _, err := expiry.EncodeMessage(msg); err != nil {
		return err
	}
	if s.m.brokerDown {
		s.m.stats.failures["broker_down/Send"]++
		return injected("Send (broker down)")
	}
	mode, hit := s.m.fault("Send", msg.OrderNo)
	if mode == mBefore {
		return injected("Send")
	}
	s.m.flights = append(s.m.flights, &mFlight{msg: msg, due: s.m.appNow().Add(delay)})
	if hit {
		return injected("Send")
	}
	return nil
}

// mObserver counts what the library reports.
type mObserver struct {
	mu        sync.Mutex
	kinds     map[expiry.Kind]int
	cancelled map[string]int
	paid      map[string]int
	handled   expiry.Event // the last KindHandled
}

func (o *mObserver) Observe(_ context.Context, e expiry.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds[e.Kind]++
	switch e.Kind {
	case expiry.KindCancelled:
		o.cancelled[e.OrderNo]++
	case expiry.KindPaid:
		o.paid[e.OrderNo]++
	case expiry.KindHandled:
		o.handled = e
	}
}

// ---- actions --------------------------------------------------------------------

// Place places a new order through the library's placing call
// (cancel.Service.Place): lock the seats, insert the order in one
// transaction, schedule the message after commit; the library releases the
// seats when the insert fails, except after an unknown commit (the reconciler
// decides: a lock whose order is missing is released after the grace period).
func (m *machine) Place(t *rapid.T) {
	show := rapid.SampledFrom(m.shows).Draw(t, "show")
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	seats := rapid.SliceOfNDistinct(rapid.SampledFrom(m.pool), 1, 4, rapid.ID[string]).Draw(t, "seats")
	m.next++
	m.place(t, fmt.Sprintf("%so%d", m.env.prefix, m.next), user, show, seats, m.drawExpiry(t))
}

func (m *machine) drawExpiry(t *rapid.T) time.Time {
	offset := time.Duration(rapid.Int64Range(m.env.expiryMin.Milliseconds(), m.env.expiryMax.Milliseconds()).Draw(t, "expire_in_ms")) * time.Millisecond
	return m.storeNow(t).Add(offset).Truncate(time.Millisecond)
}

// place tries one placement and checks the library's answer against what the
// seat store and the order store hold.
func (m *machine) place(t *rapid.T, no, user, show string, seats []string, expireAt time.Time) {
	if r := m.env.resolution; r > 0 && !expireAt.Equal(expireAt.Truncate(r)) {
		expireAt = expireAt.Truncate(r).Add(r) // as the store keeps it: rounded up
	}
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: seats, ExpireAt: expireAt}
	o := m.orders[no]
	again := o != nil && o.placed
	if o == nil {
		o = &mOrder{p: p}
		m.orders[no] = o
		m.nos = append(m.nos, no)
	} else if !o.placed {
		o.p = p // a number tried before and never placed: a fresh try
	}

	// What the library must answer, from the stores as they are.
	state := m.fs.show(m.ctx, show)
	held, err := m.env.seats.Held(m.ctx, show, user)
	if err != nil {
		t.Fatal(err)
	}
	var want error
	for _, s := range seats {
		if _, taken := state[s]; taken {
			want = cancel.ErrSeatUnavailable
		}
	}
	if want == nil && held+len(seats) > m.limit {
		want = cancel.ErrLimitExceeded
	}
	if again {
		want = cancel.ErrOrderExists // refused before any lock
	}
	p.Limit = m.limit
	err = m.svc.Place(m.ctx, p, m.fo.Place) // Place schedules it (Config.Scheduler); a failed send is left to the reconciler
	switch {
	case m.hit("Lock", "Place", "Order"):
	case m.lost || m.lostShows[show]:
		// Seats SQL claims may look free in a seat store that lost them: the
		// store's unique claim refuses the order then, and the seats go back.
		if err != nil && !errors.Is(err, want) && !errors.Is(err, cancel.ErrSeatUnavailable) && !errors.Is(err, cancel.ErrLimitExceeded) {
			m.violate("place %s while the seat store lost data: %v", no, err)
		}
	case want == nil && err != nil:
		m.violate("place %v for %s: %v; want it placed", seats, no, err)
	case want != nil && !errors.Is(err, want):
		m.violate("place %v for %s: %v; want %v", seats, no, err, want)
	}
	if err != nil {
		m.stats.kinds["place_refused"]++
	}
}

// PlaceDupSeat places an order that lists one seat twice: refused as invalid,
// nothing locked (the limit counter must not count the seat twice, I8).
func (m *machine) PlaceDupSeat(t *rapid.T) {
	seat := rapid.SampledFrom(m.pool).Draw(t, "seat")
	m.next++
	no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
	p := cancel.Placement{OrderNo: no, UserID: m.users[0], ShowID: m.shows[0], Seats: []string{seat, seat}, ExpireAt: m.storeNow(t).Add(time.Second)}
	p.Limit = m.limit
	err := m.svc.Place(m.ctx, p, func(ctx context.Context, p cancel.Placement) error {
		m.violate("an order with a seat listed twice reached the store")
		return nil
	})
	m.expectErr("place with a seat listed twice", err, expiry.ErrInvalidID)
}

// PlaceAgain places an order number that exists (a retry after an unknown
// commit, a double submit), with its own seats or others, by its owner or
// another user: refused, and the live order keeps its seats (I2, I8).
func (m *machine) PlaceAgain(t *rapid.T) {
	no, o := m.pickPlaced(t)
	p := o.p
	switch rapid.SampledFrom([]string{"same", "other_seats", "other_user"}).Draw(t, "again") {
	case "other_seats":
		p.Seats = rapid.SliceOfNDistinct(rapid.SampledFrom(m.pool), 1, 3, rapid.ID[string]).Draw(t, "seats")
	case "other_user":
		p.UserID = rapid.SampledFrom(m.users).Draw(t, "user")
	}
	m.stats.kinds["place_again_"+o.status.String()]++
	m.place(t, no, p.UserID, p.ShowID, p.Seats, p.ExpireAt)
}

// pickPlaced draws one of the orders placed (the action is skipped when
// there is none yet).
func (m *machine) pickPlaced(t *rapid.T) (string, *mOrder) {
	var placed []string
	for _, no := range m.nos {
		if m.orders[no].placed {
			placed = append(placed, no)
		}
	}
	if len(placed) == 0 {
		t.Skip("no order placed yet")
	}
	no := rapid.SampledFrom(placed).Draw(t, "order")
	return no, m.orders[no]
}

// pick draws one of the orders tried, or a number never used.
func (m *machine) pick(t *rapid.T) (string, *mOrder) {
	i := rapid.IntRange(-1, len(m.nos)-1).Draw(t, "order")
	if i < 0 {
		return m.env.prefix + "nosuch", nil
	}
	return m.nos[i], m.orders[m.nos[i]]
}

// who draws the user making a request: the owner, another user, or (for
// payment callbacks, which may carry none) nobody.
func (m *machine) who(t *rapid.T, o *mOrder, anonymous bool) (string, bool) {
	choices := []string{"owner", "other"}
	if anonymous {
		choices = append(choices, "nobody")
	}
	switch rapid.SampledFrom(choices).Draw(t, "who") {
	case "other":
		owner := "u1"
		if o != nil {
			owner = o.p.UserID
		}
		var others []string
		for _, u := range m.users {
			if u != owner {
				others = append(others, u)
			}
		}
		return rapid.SampledFrom(others).Draw(t, "other_user"), false
	case "nobody":
		return "", true
	}
	if o == nil {
		return "u1", true
	}
	return o.p.UserID, true
}

func (m *machine) Pay(t *rapid.T) {
	no, o := m.pick(t)
	user, rightful := m.who(t, o, true)
	kind := "pay"
	if !rightful {
		kind = "pay_wrong_user"
	}
	m.stats.kinds[kind]++
	m.pay(t, no, o, user, rightful, fmt.Sprintf("pay-%s-%d", no, rapid.IntRange(1, 2).Draw(t, "payment")))
}

// pay sends one payment callback and checks the answer (I1, I9).
func (m *machine) pay(t *rapid.T, no string, o *mOrder, user string, rightful bool, pid string) {
	before := m.state(o)
	// A late payment reinstates an order its timeout or the reconciler
	// cancelled when every seat is free; one held by another order (or
	// a stale lock) refunds it.
	late := !m.env.orderStoreOnly && before == "cancelled" && (o.reason == cancel.ReasonTimeout || o.reason == cancel.ReasonReconcile)
	free := late && !m.lost && !m.lostShows[o.p.ShowID]
	if late {
		state := m.fs.show(m.ctx, o.p.ShowID)
		for _, s := range o.p.Seats {
			if _, taken := state[s]; taken {
				free = false
			}
		}
		// The purchase limit holds on this path too (I17): a buyer holding
		// other seats of the show may be refused.
		if held, err := m.env.seats.Held(m.ctx, o.p.ShowID, o.p.UserID); err != nil || held+len(o.p.Seats) > m.limit {
			free = false
		}
	}
	// An id answered as a discrepancy before is decided: refunded (I14).
	_, decided := m.owed[pid]
	res, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: no, UserID: user, PaymentID: pid})
	if decided && res.Changed {
		m.violate("I14: payment %s of %s was refused and refunded before, now it paid the order", pid, no)
	}
	if errors.Is(err, cancel.ErrDiscrepancy) {
		m.owed[pid] = no
	}
	if m.hit("PayPending", "ReinstateCancelled", "Lock", "Sell", "Release") {
		return
	}
	switch {
	case late && rightful && free && !decided:
		if err != nil || !res.Changed {
			m.violate("late payment %s of %s (cancelled by %s, its seats free): changed=%v err=%v, want reinstated", pid, no, o.reason, res.Changed, err)
		}
		m.stats.kinds["pay_late_reinstated"]++
	case late && rightful && decided:
		m.expectErr("late payment "+pid+" of "+no+", refunded before", err, cancel.ErrDiscrepancy)
	case late && rightful && res.Changed:
		if m.lost || m.lostShows[o.p.ShowID] {
			m.stats.kinds["pay_late_reinstated_after_loss"]++
			break
		}
		m.violate("late payment %s of %s reinstated it, but a seat was held or the user at the limit", pid, no)
	case before == "missing":
		m.expectErr("pay "+no, err, expiry.ErrNotFound)
	case !rightful:
		m.expectErr("pay "+no+" by "+user, err, cancel.ErrNotOwner)
	case before == "pending":
		if err != nil || !res.Changed {
			m.violate("pay pending %s: changed=%v err=%v", no, res.Changed, err)
		}
	case before == "paid" && o.paidBy == pid:
		if err != nil || res.Changed {
			m.violate("pay paid %s again with %s: changed=%v err=%v, want nothing", no, pid, res.Changed, err)
		}
	case before == "paid" || before == "cancelled":
		m.expectErr("pay "+before+" "+no+" with "+pid, err, cancel.ErrDiscrepancy)
		m.stats.kinds["discrepancy_"+before]++
	}
}

// PayAgain repeats a payment callback that was already sent, as providers do
// when the answer was an error or got lost (same payment id), or sends a
// second payment for an order paid or refunded already (a new payment id).
func (m *machine) PayAgain(t *rapid.T) {
	byPID := maps.Clone(m.owed)
	for _, no := range m.nos {
		if o := m.orders[no]; o.paidBy != "" {
			byPID[o.paidBy] = no
		}
	}
	if len(byPID) == 0 {
		t.Skip("no payment yet")
	}
	pid := rapid.SampledFrom(slices.Sorted(maps.Keys(byPID))).Draw(t, "payment")
	no := byPID[pid]
	o := m.orders[no]
	if rapid.Bool().Draw(t, "second_payment") { // the buyer pays the same order again
		m.next++
		pid = fmt.Sprintf("pay-%s-second%d", no, m.next)
		m.stats.kinds["pay_second"]++
	} else {
		m.stats.kinds["pay_again"]++
	}
	m.pay(t, no, o, o.p.UserID, true, pid)
}

// refund is the host's refund hook: it counts successful calls per payment
// id (I9 wants exactly one for every discrepancy answered).
func (m *machine) refund(_ context.Context, d cancel.Discrepancy) error {
	if m.refundDown {
		m.stats.failures["refund_hook"]++
		return errors.New("model: the payment provider is down")
	}
	// The provider refunds once per payment id (the hook's idempotency
	// key): a second call is at least once by design, after a call that
	// stalled or died past Config.DiscrepancyLease between the record and
	// the hook's success (README, I9). It is counted; a refund of a payment
	// that paid an order is I14's, judged at Check.
	if m.refunded[d.PaymentID] > 0 {
		m.stats.kinds["refund_hook_repeated"]++
		return nil
	}
	m.refunded[d.PaymentID]++
	return nil
}

// FailRefunds makes the refund hook fail until the next FailRefunds (the
// reconciler must call it again later).
func (m *machine) FailRefunds(t *rapid.T) {
	m.refundDown = !m.refundDown
}

// CaseVariant sends a request with a case-shifted id: another user's or
// another order's id on every dialect and collation (I10), so it finds
// nothing of the original's.
func (m *machine) CaseVariant(t *rapid.T) {
	no, o := m.pickPlaced(t)
	switch what := rapid.SampledFrom([]string{"user_cancel_user", "pay_user", "cancel_order", "pay_order"}).Draw(t, "variant"); what {
	case "user_cancel_user":
		_, err := m.svc.UserCancel(m.ctx, no, strings.ToUpper(o.p.UserID))
		if !m.hit("CancelPending") {
			m.expectErr("cancel "+no+" by a case variant of its user", err, cancel.ErrNotOwner)
		}
	case "pay_user":
		_, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: no, UserID: strings.ToUpper(o.p.UserID), PaymentID: "pay-" + no + "-case"})
		if !m.hit("PayPending") {
			m.expectErr("pay "+no+" by a case variant of its user", err, cancel.ErrNotOwner)
		}
	case "cancel_order":
		_, err := m.svc.UserCancel(m.ctx, strings.ToUpper(no), o.p.UserID)
		if !m.hit("CancelPending") {
			m.expectErr("cancel a case variant of "+no, err, expiry.ErrNotFound)
		}
	case "pay_order":
		_, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: strings.ToUpper(no), UserID: o.p.UserID, PaymentID: "pay-" + no + "-case"})
		if !m.hit("PayPending") {
			m.expectErr("pay a case variant of "+no, err, expiry.ErrNotFound)
		}
	}
}

// StuckOrder makes every cancel of one pending order fail from now on (its
// row held by a stuck transaction) until the run settles: the reconciler
// must skip it and do the rest (I12).
func (m *machine) StuckOrder(t *rapid.T) {
	var pending []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending && !m.stuck[no] {
			pending = append(pending, no)
		}
	}
	if len(pending) == 0 {
		t.Skip("no pending order")
	}
	no := rapid.SampledFrom(pending).Draw(t, "order")
	m.stuck[no] = true
	m.orders[no].lag = true // a user cancel of it fails too: its seats stay locked
}

// Backlog places several orders that are due already (their messages lost in
// a broker outage, say), more than one reconcile round takes.
func (m *machine) Backlog(t *rapid.T) {
	n := rapid.IntRange(5, 16).Draw(t, "orders")
	for i := 0; i < n; i++ {
		m.next++
		no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
		seat := fmt.Sprintf("bk%d", m.next) // seats of their own: a backlog of placed orders
		m.brokerDown = true                 // the message is lost
		due := m.storeNow(t).Add(-time.Millisecond)
		if r := m.env.resolution; r > 0 {
			due = due.Truncate(r) // due already at the store's resolution too
		}
		m.place(t, no, m.users[i%len(m.users)], m.shows[i%2], []string{seat}, due)
		m.brokerDown = false
	}
	m.stats.kinds["backlog_orders"] += n
}

// WipeSeats makes the seat store lose all its data (a restart without
// persistence), possibly in the middle of a rebuild.
func (m *machine) WipeSeats(t *rapid.T) {
	if m.lost {
		m.stats.kinds["wipe_during_rebuild"]++
	}
	m.env.wipe()
	m.lost, m.wiped = true, true
	for _, o := range m.orders {
		o.lagBehind = o.placed
	}
	m.freed = map[[3]string]bool{}
}

// WipeShow makes the seat store lose one show's keys (an eviction, an async
// replica promoted): the marker stays, so only the claims pass repairs it.
func (m *machine) WipeShow(t *rapid.T) {
	show := rapid.SampledFrom(m.shows).Draw(t, "show")
	m.env.wipeShow(show)
	m.lostShows[show], m.wiped = true, true
	for _, o := range m.orders {
		o.lagBehind = o.lagBehind || o.placed && o.p.ShowID == show
	}
	// For each reconciler, the pass under way may have passed the show
	// already; the next one began after the loss. A fresh reconciler (the
	// final rounds') starts its first pass after it.
	m.repairPasses = map[*reconcile.Reconciler]int{}
	for _, h := range m.hosts {
		m.repairPasses[h] = 2
	}
	m.freed = map[[3]string]bool{}
}

func (m *machine) UserCancel(t *rapid.T) {
	no, o := m.pick(t)
	user, rightful := m.who(t, o, false)
	kind := "user_cancel"
	if !rightful {
		kind = "user_cancel_wrong_user"
	}
	m.stats.kinds[kind]++
	before := m.state(o)
	res, err := m.svc.UserCancel(m.ctx, no, user)
	if m.hit("CancelPending") {
		return
	}
	switch {
	case before == "missing":
		m.expectErr("cancel "+no, err, expiry.ErrNotFound)
	case !rightful:
		m.expectErr("cancel "+no+" by "+user, err, cancel.ErrNotOwner)
	case before == "pending":
		if err != nil || !res.Changed {
			m.violate("user cancel of pending %s: changed=%v err=%v", no, res.Changed, err)
		} else if !m.hit("Release") && !m.lost && !m.lostShows[o.p.ShowID] && res.Released != len(o.p.Seats) {
			m.violate("user cancel of %s released %d seats, want %d", no, res.Released, len(o.p.Seats))
		}
	default:
		if err != nil || res.Changed {
			m.violate("user cancel of %s %s: changed=%v err=%v, want nothing", before, no, res.Changed, err)
		}
	}
}

// mMid is what runs between a cancel's commit and its release.
type mMid struct {
	order string
	run   func()
}

// CancelUnderScan is the hostile interleaving of two instances: a user's
// cancel commits, and before its release reaches the seat store the other
// host's reconciler runs a round. The order was decided moments ago, so
// that round must leave its locks to the canceller (reconcile.Config.Settle),
// which then frees every seat itself: one instance frees an order's seats,
// never two racing each other seat by seat. Checked when the round surely
// ran within the settle time: on the fake clock always, in real time when
// the time since the cancel began, plus the store's resolution of its
// write time, is shorter.
func (m *machine) CancelUnderScan(t *rapid.T) {
	var pending []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending {
			pending = append(pending, no)
		}
	}
	if len(pending) == 0 {
		m.stats.kinds["cancel_under_scan_none_pending"]++
		return
	}
	no := rapid.SampledFrom(pending).Draw(t, "pending_order")
	o := m.orders[no]
	host := rapid.IntRange(0, 1).Draw(t, "host")
	// Seats lost (and maybe restored by that round) or a lock an earlier
	// failure left: the counts say nothing.
	unsure := o.lag || m.lost || m.lostShows[o.p.ShowID]
	start := m.appNow()
	var byScan []string
	within := false
	m.midRelease = &mMid{order: no, run: func() {
		_, _ = m.rounds(m.hosts[host]) // an armed fault may fail it: it frees less, never more
		for _, seat := range o.p.Seats {
			if m.freed[[3]string{no, o.p.ShowID, seat}] {
				byScan = append(byScan, seat)
			}
		}
		within = m.appNow().Sub(start)+m.env.resolution < m.env.settle
	}}
	res, err := m.svc.UserCancel(m.ctx, no, o.p.UserID)
	ran := m.midRelease == nil
	m.midRelease = nil
	if m.hit("CancelPending") {
		return
	}
	if err != nil || !res.Changed {
		m.violate("cancel under scan of pending %s: changed=%v err=%v", no, res.Changed, err)
		return
	}
	switch {
	case !ran: // the release failed before the seat store
		m.stats.kinds["cancel_under_scan_release_failed"]++
	case !within || unsure:
		m.stats.kinds["cancel_under_scan_unchecked"]++
	default:
		m.stats.kinds["cancel_under_scan"]++
		if len(byScan) > 0 {
			m.violate("the other host's scan released seats %v of %s between its cancel's commit and the canceller's release", byScan, no)
		}
		if !m.hit("Release") && res.Released != len(o.p.Seats) {
			m.violate("cancel under scan of %s: the canceller released %d seats, want %d", no, res.Released, len(o.p.Seats))
		}
	}
}

func (m *machine) expectErr(what string, err, want error) {
	if !errors.Is(err, want) {
		m.violate("%s: err %v, want %v", what, err, want)
	}
}

func (m *machine) state(o *mOrder) string {
	if o == nil || !o.placed {
		return "missing"
	}
	return o.status.String()
}

// Deliver hands a message in flight to the consumer: now (early, if the order
// is not due), at its due time, or late; it may be kept in flight to arrive
// again (a duplicate).
func (m *machine) Deliver(t *rapid.T) {
	if len(m.flights) == 0 {
		t.Skip("no message in flight")
	}
	i := rapid.IntRange(0, len(m.flights)-1).Draw(t, "flight")
	f := m.flights[i]
	switch rapid.SampledFrom([]string{"now", "on_time", "late"}).Draw(t, "when") {
	case "on_time":
		if d := f.due.Sub(m.appNow()); m.env.clock != nil || d < 400*time.Millisecond {
			m.pass(d)
		}
	case "late":
		extra := time.Duration(rapid.IntRange(1, 600).Draw(t, "late_by_s")) * time.Second
		if m.env.clock == nil {
			extra = extra / 3000 // 0.3 ms .. 200 ms
		}
		if d := f.due.Sub(m.appNow()); m.env.clock != nil || d < 400*time.Millisecond {
			m.pass(d + extra)
		}
	}
	again := rapid.Bool().Draw(t, "deliver_again_later")
	acked := m.deliver(t, f.msg, f.delivered > 0)
	f.delivered++
	if acked && !again {
		m.flights = slices.Delete(m.flights, i, i+1)
	}
}

// DeliverDuplicate delivers again a message that was already delivered (and
// acknowledged) once, as an at-least-once broker may.
func (m *machine) DeliverDuplicate(t *rapid.T) {
	if len(m.nos) == 0 {
		t.Skip("no order yet")
	}
	no := rapid.SampledFrom(m.nos).Draw(t, "order")
	m.deliver(t, expiry.Message{OrderNo: no, Hop: rapid.IntRange(1, 3).Draw(t, "hop")}, true)
}

// DeliverStray delivers a message nobody sent: an unknown order, or a body
// that is not a message at all.
func (m *machine) DeliverStray(t *rapid.T) {
	if rapid.Bool().Draw(t, "garbage") {
		body := rapid.SampledFrom([]string{"", "oe1 ", "oe1 x{y} 1", "oe1 ok 0", "hello", "oe1 " + strings.Repeat("a", 300) + " 1"}).Draw(t, "body")
		snap := m.snapshot(t)
		bad := m.obs.kinds[expiry.KindBadMessage]
		if v := m.shell.Process(m.ctx, expiry.Delivery{Body: []byte(body), TraceID: "trace"}); v != expiry.Ack {
			m.violate("I7: garbage %q got verdict %v, want Ack", body, v)
		}
		if m.obs.kinds[expiry.KindBadMessage] != bad+1 {
			m.violate("I7: garbage %q was not counted", body)
		}
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("I7: garbage %q changed the stores", body)
		}
		m.stats.kinds["deliver_garbage"]++
		return
	}
	m.deliver(t, expiry.Message{OrderNo: m.env.prefix + "stray" + strconv.Itoa(rapid.IntRange(0, 9).Draw(t, "n")), Hop: 1}, false)
}

// deliver runs one delivery through the handler (directly or through the
// shell), checks its outcome against the model, and reports whether the
// transport may forget the message.
func (m *machine) deliver(t *rapid.T, msg expiry.Message, duplicate bool) bool {
	viaShell := rapid.Bool().Draw(t, "via_shell")
	o := m.orders[msg.OrderNo]
	before := m.state(o)
	var snap *mSnap
	if before != "pending" {
		snap = m.snapshot(t)
	}
	t0 := m.storeNow(t)
	var outcome expiry.Outcome
	var err error
	if viaShell {
		body, eerr := expiry.EncodeMessage(msg)
		if eerr != nil {
			t.Fatal(eerr)
		}
		v := m.shell.Process(m.ctx, expiry.Delivery{Body: body, TraceID: "trace-" + msg.OrderNo})
		outcome, err = m.obs.handled.Outcome, m.obs.handled.Err
		if (v == expiry.Ack) != (err == nil) {
			m.violate("shell verdict %v for outcome %v err %v", v, outcome, err)
		}
	} else {
		outcome, err = m.h.Handle(m.ctx, msg)
	}
	t1 := m.storeNow(t)
	if msg.Warning {
		return m.checkWarning(msg, o, before, outcome, err, t0, t1, snap, t)
	}

	kind := "deliver_" + before
	want := map[expiry.Outcome]bool{}
	switch before {
	case "missing":
		want[expiry.OutcomeMissing] = true
	case "paid", "cancelled":
		want[expiry.OutcomeFinal] = true
		kind = "deliver_final"
	default:
		due, notDue := !o.p.ExpireAt.After(t0), o.p.ExpireAt.After(t1)
		switch {
		case due && t0.Sub(o.p.ExpireAt) < time.Second:
			kind = "deliver_on_time"
		case due:
			kind = "deliver_late"
		case notDue:
			kind = "deliver_early"
		}
		want[expiry.OutcomeCancelled] = !notDue
		want[expiry.OutcomeRearmed] = !due
	}
	if duplicate {
		kind += "_duplicate"
	}
	m.stats.kinds[kind]++
	if m.hit("Order", "CancelPending", "Send") {
		want[expiry.OutcomeFailed] = true
	}
	if !want[outcome] {
		m.violate("delivery of %s (%s, due %s, store clock %s..%s): outcome %v err %v", msg.OrderNo, before, mDue(o), t0, t1, outcome, err)
	}
	if (outcome == expiry.OutcomeFailed) != (err != nil) {
		m.violate("delivery of %s: outcome %v with err %v", msg.OrderNo, outcome, err)
	}
	if snap != nil {
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("I5: a delivery for %s order %s changed the stores:\nbefore %+v\nafter  %+v", before, msg.OrderNo, snap, after)
		}
	}
	return err == nil
}

// checkWarning checks one delivery of a warning message: it fires the hook
// once, for a pending order within the lead of its deadline, re-arms when it
// came early (or the deadline was extended), and otherwise changes nothing.
func (m *machine) checkWarning(msg expiry.Message, o *mOrder, before string, outcome expiry.Outcome, err error, t0, t1 time.Time, snap *mSnap, t *rapid.T) bool {
	kind := "warning_" + before
	ok := false
	switch before {
	case "missing":
		ok = outcome == expiry.OutcomeMissing
	case "paid", "cancelled":
		ok = outcome == expiry.OutcomeFinal
	default:
		due := !o.p.ExpireAt.After(t0)
		switch outcome {
		case expiry.OutcomeWarned:
			ok = !due && !o.p.ExpireAt.Add(-msg.Lead).After(t1) && o.warned == 1
			kind = "warning_fired"
		case expiry.OutcomeRearmed:
			ok = o.p.ExpireAt.Add(-msg.Lead).After(t0) && o.warned == 0
			kind = "warning_early"
		case expiry.OutcomeFinal:
			ok = o.warned > 0 || !o.p.ExpireAt.After(t1)
			kind = "warning_final"
		}
	}
	m.stats.kinds[kind]++
	if m.hit("MarkWarned", "Send", "Order") && outcome == expiry.OutcomeFailed {
		ok = true
	}
	if !ok {
		m.violate("warning for %s (%s, due %s, lead %s, warned %d, store clock %s..%s): outcome %v err %v", msg.OrderNo, before, mDue(o), msg.Lead, m.warnedOf(o), t0, t1, outcome, err)
	}
	if snap != nil {
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("a warning for %s order %s changed the stores", before, msg.OrderNo)
		}
	}
	return err == nil
}

func (m *machine) warnedOf(o *mOrder) int {
	if o == nil {
		return 0
	}
	return o.warned
}

// PayLate pays an order that is cancelled (a late payment), once or
// repeated three times, by its owner: after a timeout or the reconciler it
// is reinstated when its seats are free, after the user's cancel or an
// expire-now it is refunded (once per payment id).
func (m *machine) PayLate(t *rapid.T) {
	var cancelled []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusCancelled {
			cancelled = append(cancelled, no)
		}
	}
	if len(cancelled) == 0 {
		t.Skip("no cancelled order")
	}
	no := rapid.SampledFrom(cancelled).Draw(t, "order")
	o := m.orders[no]
	m.next++
	pid := fmt.Sprintf("pay-%s-late%d", no, m.next)
	m.stats.kinds["pay_late_after_"+string(o.reason)]++
	for i := rapid.IntRange(1, 3).Draw(t, "callbacks"); i > 0; i-- {
		m.pay(t, no, o, o.p.UserID, true, pid)
	}
}

// PayLateResold cancels nothing itself: it places a new order on a seat of
// a cancelled order (the seat re-sold), then pays the cancelled one late:
// the seat is never taken from the new order.
func (m *machine) PayLateResold(t *rapid.T) {
	var cancelled []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusCancelled && (o.reason == cancel.ReasonTimeout || o.reason == cancel.ReasonReconcile) {
			cancelled = append(cancelled, no)
		}
	}
	if len(cancelled) == 0 {
		t.Skip("no order cancelled by a timeout")
	}
	no := rapid.SampledFrom(cancelled).Draw(t, "order")
	o := m.orders[no]
	seat := rapid.SampledFrom(o.p.Seats).Draw(t, "seat")
	m.next++
	other := fmt.Sprintf("%so%d", m.env.prefix, m.next)
	m.place(t, other, rapid.SampledFrom(m.users).Draw(t, "user"), o.p.ShowID, []string{seat}, m.storeNow(t).Add(m.env.expiryMax))
	m.next++
	m.stats.kinds["pay_late_resold"]++
	m.pay(t, no, o, o.p.UserID, true, fmt.Sprintf("pay-%s-late%d", no, m.next))
	if oo := m.orders[other]; oo.placed && oo.status == expiry.StatusPending && o.status == expiry.StatusPaid && !m.lost && !m.lostShows[o.p.ShowID] {
		m.violate("%s reinstated with seat %s, which %s holds", no, seat, other)
	}
}

// Extend extends an order's deadline (the buyer in the payment flow, by
// its owner or without a user), once or repeated; the messages in flight
// must follow the stored deadline (I4: never cancelled at the old one).
func (m *machine) Extend(t *rapid.T) {
	no, o := m.pickPlaced(t)
	by := ""
	if rapid.Bool().Draw(t, "by_owner") {
		by = o.p.UserID
	}
	d := time.Duration(rapid.Int64Range(1, m.env.expiryMax.Milliseconds()).Draw(t, "extend_ms")) * time.Millisecond
	before := m.state(o)
	t0 := m.storeNow(t)
	old := o.p.ExpireAt
	for i := 0; i < rapid.IntRange(1, 3).Draw(t, "calls"); i++ {
		res, err := m.svc.Extend(m.ctx, no, by, d)
		if m.hit("SetDeadline", "Order") {
			return
		}
		switch {
		case err != nil:
			m.violate("extend %s (%s): %v", no, before, err)
		case res.Changed && before != "pending":
			m.violate("extended %s order %s", before, no)
		case i == 0 && !res.Changed && before == "pending" && old.After(t0.Add(time.Second)) && old.Before(t0.Add(d-time.Second)):
			m.violate("extend pending %s (due %s) by %s at %s: not changed", no, old, d, t0)
		}
	}
	m.stats.kinds["extend_"+before]++
}

// ExpireNow is the operator's expire-now: a pending order is cancelled at
// once (reason expired); a late payment after it is refunded.
func (m *machine) ExpireNow(t *rapid.T) {
	no, o := m.pickPlaced(t)
	before := m.state(o)
	res, err := m.svc.ExpireNow(m.ctx, no)
	m.stats.kinds["expire_now_"+before]++
	if m.hit("CancelPending") {
		return
	}
	if err != nil || res.Changed != (before == "pending") {
		m.violate("expire-now of %s %s: changed=%v err=%v", before, no, res.Changed, err)
	}
}

// Shorten moves a pending order's deadline earlier (to within a tenth of
// the longest expiry); its new message arrives in time.
func (m *machine) Shorten(t *rapid.T) {
	no, o := m.pickPlaced(t)
	before := m.state(o)
	d := time.Duration(rapid.Int64Range(0, (m.env.expiryMax/10).Milliseconds()).Draw(t, "shorten_ms")) * time.Millisecond
	_, err := m.svc.Shorten(m.ctx, no, "", d)
	m.stats.kinds["shorten_"+before]++
	if m.hit("SetDeadline", "Order", "Send") {
		return
	}
	if err != nil {
		m.violate("shorten %s %s: %v", before, no, err)
	}
}

// WarnRedeliver delivers an order's warning message again (a broker's
// duplicate, after the payment, after the cancel): it never fires twice.
func (m *machine) WarnRedeliver(t *rapid.T) {
	no, _ := m.pickPlaced(t)
	m.deliver(t, expiry.Message{OrderNo: no, Hop: rapid.IntRange(1, 3).Draw(t, "hop"), Warning: true, Lead: m.lead}, true)
}

func mDue(o *mOrder) string {
	if o == nil {
		return "-"
	}
	return o.p.ExpireAt.String()
}

// Reconcile runs a reconcile "interval" on one of two reconciler hosts: a
// round, and the next at once while the last stopped at its bound (as Run
// does). Without failures, that leaves no order pending that was due when it
// started, but the stuck ones (I3, I12).
func (m *machine) Reconcile(t *rapid.T) {
	host := rapid.IntRange(0, 1).Draw(t, "host")
	t0 := m.storeNow(t)
	rounds, err := m.rounds(m.hosts[host])
	m.stats.kinds[fmt.Sprintf("reconcile_rounds_%d", min(rounds, 3))]++
	if len(m.hits) > 0 {
		return
	}
	if err != nil {
		m.violate("reconcile round without failures: %v", err)
	}
	m.noneDue(t0, "a reconcile round")
}

// rounds runs rounds on r while they stop at their bound (at most 40), and
// notes what the seat store's repair completed.
func (m *machine) rounds(r *reconcile.Reconciler) (int, error) {
	var errs []error
	for n := 1; ; n++ {
		rep, err := r.Round(m.ctx)
		errs = append(errs, err)
		if rep.Rebuilt {
			m.lost = false
			m.stats.kinds["rebuilt"]++
		}
		left, ok := m.repairPasses[r]
		if !ok && len(m.repairPasses) > 0 {
			left = 1 // a reconciler that began after the loss
		}
		if rep.ClaimsComplete && !m.lost && left > 0 {
			if m.repairPasses[r] = left - 1; left == 1 { // that pass began after the loss
				m.repairPasses = nil
				m.lostShows = map[string]bool{}
				m.stats.kinds["show_repaired"]++
			}
		}
		m.stats.kinds["skipped"] += rep.Skipped
		m.stats.kinds["refund_retried"] += rep.Refunds
		if !rep.More || n == 40 {
			return n, errors.Join(errs...)
		}
	}
}

func (m *machine) noneDue(t0 time.Time, after string) {
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending && !o.p.ExpireAt.After(t0) && !m.stuck[no] &&
			!m.appNow().Before(m.backoff[no]) {
			m.violate("I3: %s still pending after %s, due %s (store clock %s)", no, after, o.p.ExpireAt, t0)
		}
	}
}

func (m *machine) PassTime(t *rapid.T) {
	if m.env.clock != nil {
		m.pass(time.Duration(rapid.IntRange(1, 900).Draw(t, "seconds")) * time.Second)
		return
	}
	m.pass(time.Duration(rapid.IntRange(10, 300).Draw(t, "ms")) * time.Millisecond)
}

func (m *machine) ArmFault(t *rapid.T) {
	f := rapid.SampledFrom(mFaultOps).Draw(t, "fault")
	mode := mBefore
	if f.lostAck && rapid.Bool().Draw(t, "lost_ack") {
		mode = mLostAck
	}
	m.armed[f.op] = mode
}

// SeatStoreOutage takes the seat store down for the next few actions: every
// seat operation fails.
func (m *machine) SeatStoreOutage(t *rapid.T) {
	m.outage = rapid.IntRange(1, 4).Draw(t, "actions") + 1 // +1: this action's own count-down
}

// SkewClock sets the placing host's clock ahead or behind (a tenth of the
// longest expiry: two minutes on the fake clock): its messages then arrive
// early (re-armed by the store's clock) or late (the reconciler's), and no
// decision may change (I4, I11).
func (m *machine) SkewClock(t *rapid.T) {
	unit := m.env.expiryMax / 10
	m.skew = time.Duration(rapid.IntRange(-1, 1).Draw(t, "skew")) * unit
	m.stats.kinds[fmt.Sprintf("skew_%+d", m.skew/unit)]++
}

// skewClock is a clock off by *skew.
type skewClock struct {
	expiry.Clock
	skew *time.Duration
}

func (c skewClock) Now() time.Time { return c.Clock.Now().Add(*c.skew) }

// ---- invariants -------------------------------------------------------------------

type mSnap struct {
	Statuses map[string]expiry.Status
	Seats    map[string]map[string]cancel.SeatState
	Held     map[string]int
}

func (m *machine) snapshot(t *rapid.T) *mSnap {
	st, err := m.env.store.Statuses(m.ctx, m.nos)
	if err != nil {
		t.Fatal(err)
	}
	s := &mSnap{Statuses: map[string]expiry.Status{}, Seats: map[string]map[string]cancel.SeatState{}, Held: map[string]int{}}
	for no, o := range st {
		s.Statuses[no] = o.Status
	}
	for _, show := range m.shows {
		s.Seats[show] = m.fs.show(m.ctx, show)
		for _, u := range m.users {
			n, err := m.env.seats.Held(m.ctx, show, u)
			if err != nil {
				t.Fatal(err)
			}
			s.Held[show+"/"+u] = n
		}
	}
	return s
}

// Check runs after every action: the invariants that hold at any moment.
//
// I8 (the counter equals the seats of the user's pending and paid orders) may
// lag, legitimately, in one way only: seats still locked by an order that is
// cancelled, or was never placed, because the step that frees them failed or
// never ran: a release that failed or whose answer was lost, a cancel whose
// commit answer was lost (the service never got to the release), a lock whose
// answer was lost or a placement whose outcome the host could not learn (the
// host gave up on an order that may hold seats), a host rollback whose release
// failed. Each of those injected failures marks the order (lag), and only a
// marked order may hold such stale locks; the counter must then equal the
// seats the user holds in the seat store, and I8 holds exactly for every user
// without stale locks. A reconcile round without failures ends the lag (once a
// never-placed order's locks are past the grace period); settle checks that.
func (m *machine) Check(t *rapid.T) {
	if len(m.bad) > 0 {
		t.Fatalf("invariant violations:\n  %s", strings.Join(m.bad, "\n  "))
	}
	snap := m.snapshot(t)
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// I1: the store agrees with the model; one transition at most, reported
	// at most once.
	for _, no := range m.nos {
		o := m.orders[no]
		got, ok := snap.Statuses[no]
		if ok != o.placed || (ok && got != o.status) {
			fail("I1: store has %s as %v (exists %v); the model says %s", no, got, ok, m.state(o))
		}
		if o.transitions > 1 || m.obs.cancelled[no]+m.obs.paid[no] > 1 {
			fail("I1: %s changed state %d times; reported cancelled %d, paid %d times", no, o.transitions, m.obs.cancelled[no], m.obs.paid[no])
		}
		if (m.obs.cancelled[no] > 0 && o.status != expiry.StatusCancelled && !o.reinstated) || (m.obs.paid[no] > 0 && o.status != expiry.StatusPaid) {
			fail("I1: %s is %s but was reported cancelled %d, paid %d times", no, m.state(o), m.obs.cancelled[no], m.obs.paid[no])
		}
	}

	// I14: no payment id both paid an order and was refunded.
	for _, no := range m.nos {
		if pid := m.orders[no].paidBy; pid != "" && m.refunded[pid] > 0 {
			fail("I14: payment %s paid %s and was refunded %d times", pid, no, m.refunded[pid])
		}
	}

	// I9: every refund owed was made once at the provider (refund keeps
	// one per payment id); settle checks that each was made.

	// The seat store against the order store (I2, I8), but for shows whose
	// seat state was lost and is not repaired yet: there only the counter's
	// floor holds.
	for _, show := range m.shows {
		if m.lost || m.lostShows[show] {
			for _, u := range m.users {
				if held := snap.Held[show+"/"+u]; held < 0 {
					fail("I8: %s/%s counter below zero: %d", show, u, held)
				}
			}
			continue
		}
		seats := snap.Seats[show]
		perUser, stale, want := map[string]int{}, map[string]int{}, map[string]int{}
		for seat, s := range seats {
			o := m.orders[s.OrderNo]
			if o == nil || o.p.ShowID != show || !slices.Contains(o.p.Seats, seat) || o.p.UserID != s.UserID {
				fail("seat %s/%s is %+v: not a seat of that order", show, seat, s)
				continue
			}
			perUser[s.UserID]++
			switch {
			case s.Status == cancel.SeatSold && o.status != expiry.StatusPaid:
				fail("I2: seat %s/%s sold to %s, which is %s", show, seat, s.OrderNo, m.state(o))
			case s.Status == cancel.SeatSold:
			case o.placed && o.status == expiry.StatusPending:
			case o.placed && o.status == expiry.StatusPaid:
				if !o.lag {
					fail("seat %s/%s of paid %s is still only locked, and no failure explains it", show, seat, s.OrderNo)
				}
			default: // cancelled, or never placed: a stale lock
				stale[s.UserID]++
				if !o.lag {
					fail("I2/I8: seat %s/%s still locked by %s %s, and no failure explains it", show, seat, m.state(o), s.OrderNo)
				}
			}
		}
		blocked := map[string]int{}
		for _, no := range m.nos {
			o := m.orders[no]
			if !o.placed || o.p.ShowID != show || o.status == expiry.StatusCancelled {
				continue
			}
			want[o.p.UserID] += len(o.p.Seats)
			for _, seat := range o.p.Seats {
				s, ok := seats[seat]
				if ok && s.OrderNo != no && m.orders[s.OrderNo] != nil && m.orders[s.OrderNo].lag && o.lagBehind {
					// After a loss, a failed placement's lock (that a failure
					// left) holds a seat SQL gives this order; the reconciler
					// releases it after the grace period, then restores the claim.
					blocked[o.p.UserID]++
					continue
				}
				if !ok || s.OrderNo != no || (o.status == expiry.StatusPending && s.Status != cancel.SeatLocked) {
					fail("I2: seat %s/%s of %s order %s is %+v (held %v)", show, seat, o.status, no, s, ok)
				}
			}
		}
		for _, u := range m.users {
			held := snap.Held[show+"/"+u]
			if want[u] > m.limit && !m.wiped {
				fail("I17: %s/%s holds %d seats in pending and paid orders, past the limit %d", show, u, want[u], m.limit)
			}
			switch {
			case held < 0:
				fail("I8: %s/%s counter below zero: %d", show, u, held)
			case held != perUser[u]:
				fail("I8: %s/%s counter %d, but the seat store holds %d seats for the user", show, u, held, perUser[u])
			case stale[u] == 0 && blocked[u] == 0 && held != want[u]:
				fail("I8: %s/%s counter %d, the user's pending and paid orders hold %d seats", show, u, held, want[u])
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("invariant violations:\n  %s", strings.Join(bad, "\n  "))
	}
}

// settle ends a run: the failures stop, time passes until every lock of a
// missing order is past the grace period (on the fake clock, until every order
// is due too), and a fresh reconciler host runs a complete round. Then nothing
// is pending past due (I3), no seat lock is stale (I8 exactly), every paid
// seat is sold, and a second round has nothing left to do.
func (m *machine) settle(t *rapid.T) {
	m.armed = map[string]mMode{}
	m.outage = 0
	m.hits = m.hits[:0]
	m.stuck = map[string]bool{}
	m.backoff = map[string]time.Time{} // settle's reconciler is a fresh host
	m.refundDown = false
	if m.env.clock != nil {
		latest := m.appNow()
		for _, o := range m.orders {
			if o.p.ExpireAt.After(latest) {
				latest = o.p.ExpireAt
			}
		}
		m.pass(latest.Sub(m.appNow()) + max(m.env.grace, m.env.settle) + time.Second)
	} else {
		m.pass(max(m.env.grace, m.env.settle) + 10*time.Millisecond)
	}
	// A fresh host with the default bounds: one round covers every store of
	// a run (the model's hosts use small ones, so passes span rounds).
	final := m.rcfg
	final.Batch, final.MaxPerRound = 0, 0
	r, err := reconcile.New(final)
	if err != nil {
		t.Fatal(err)
	}
	t0 := m.storeNow(t)
	if _, err := m.rounds(r); err != nil {
		t.Fatalf("final reconcile round: %v", err)
	}
	// A rebuild or a repair pass that the run left unfinished completes in
	// further rounds (each bounded by MaxPerRound claims).
	for i := 0; (m.lost || len(m.lostShows) > 0) && i < 20; i++ {
		if _, err := m.rounds(r); err != nil {
			t.Fatalf("final reconcile round: %v", err)
		}
	}
	if m.lost || len(m.lostShows) > 0 {
		t.Fatalf("the seat store was not repaired in 20 rounds (lost %v, shows %v)", m.lost, m.lostShows)
	}
	m.noneDue(t0, "the final reconcile rounds")
	// I9: every payment answered with a discrepancy reached the hook, once.
	for i := 0; i < 50 && len(m.unrefunded()) > 0; i++ {
		m.pass(m.env.lease + time.Millisecond) // past the lease of a failed hook
		if _, err := r.Round(m.ctx); err != nil {
			t.Fatalf("reconcile round retrying refunds: %v", err)
		}
	}
	if left := m.unrefunded(); len(left) > 0 {
		t.Fatalf("I9: payments never refunded: %v", left)
	}
	for _, o := range m.orders {
		o.lag, o.lagBehind = false, false // nothing excuses a stale lock any more
	}
	m.Check(t)
	for _, show := range m.shows {
		for seat, s := range m.fs.show(m.ctx, show) {
			if o := m.orders[s.OrderNo]; o != nil && s.Status != cancel.SeatSold && o.status == expiry.StatusPaid {
				t.Fatalf("seat %s/%s of paid %s not sold after the final round: %+v", show, seat, s.OrderNo, s)
			}
		}
	}
	// A second round has nothing to repair. (In real time, orders that were
	// not due at the first round may be by now: only the fake clock stood
	// still, so only there must it expire nothing.)
	rep, err := r.Round(m.ctx)
	if err != nil || rep.Released+rep.Sold+rep.Restored != 0 || (m.env.clock != nil && rep.Expired != 0) {
		t.Fatalf("a second final round still did something: %+v, %v", rep, err)
	}
	m.Check(t)
	if m.env.clock != nil {
		for _, no := range m.nos {
			if o := m.orders[no]; o.placed && o.status == expiry.StatusPending {
				t.Fatalf("I3: %s pending although every order is past due", no)
			}
		}
	}
	m.stats.kinds["settle"]++
}

// unrefunded lists the payment ids owed a refund that the hook has not made.
func (m *machine) unrefunded() []string {
	var left []string
	for pid := range m.owed {
		if m.refunded[pid] == 0 {
			left = append(left, pid)
		}
	}
	slices.Sort(left)
	return left
}
