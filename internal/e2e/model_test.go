package e2e_test

// A model-based property test of the whole order life cycle (pgregory.net/rapid).
//
// Each rapid run drives one world (an order store, a seat store, the cancel
// service, the expiry handler and shell, the after-commit scheduler, two
// reconciler "hosts") through a random sequence of actions: place, pay, user
// cancel (also by the wrong user), deliveries of the delayed messages (early,
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
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/internal/fake"
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
		store := fake.NewStore(clock.Now)
		return &mEnv{
			store: store,
			seats: fake.NewSeats(clock.Now),
			place: store.Place,
			clock: clock,
			grace: time.Minute,
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
			expiryMin: -800 * time.Millisecond, expiryMax: 2500 * time.Millisecond,
		}
		env.cleanup = func(shows []string) {
			// The prefix is ours ([a-z0-9-]), so the LIKE pattern is a constant.
			for _, q := range []string{"DELETE FROM oe_order_seat WHERE order_no LIKE '" + prefix + "%'", "DELETE FROM oe_order WHERE order_no LIKE '" + prefix + "%'"} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					rt.Errorf("cleanup: %v", err)
				}
			}
			for _, show := range shows {
				rdb.Del(ctx, ns+":{"+show+"}:seats", ns+":{"+show+"}:limit")
			}
			rdb.Del(ctx, ns+":shows")
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
	reconcile.ExpiredFinder
	reconcile.StatusReader
	Now(ctx context.Context) (time.Time, error)
}

// mEnv is one run's stores and how time passes for them.
type mEnv struct {
	prefix string
	store  mOrderStore
	seats  canceltest.SeatStore
	place  func(ctx context.Context, p cancel.Placement) error
	// clock is the FakeClock of the fake variant; nil means real time.
	clock                *expirytest.FakeClock
	grace                time.Duration
	expiryMin, expiryMax time.Duration
	cleanup              func(shows []string)
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

	armed  map[string]mMode
	outage int      // actions left during which every seat operation fails
	hits   []string // operations that failed in the current action
	bad    []string // violations seen inside decorators
	freed  map[[3]string]bool

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
		obs: &mObserver{kinds: map[expiry.Kind]int{}, cancelled: map[string]int{}, paid: map[string]int{}},
	}
	for i := 1; i <= 12; i++ {
		m.pool = append(m.pool, "s"+strconv.Itoa(i))
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m.fo = &mOrders{m: m, inner: env.store, place: env.place}
	m.fs = &mSeats{m: m, inner: env.seats}
	m.snd = &mSender{m: m}
	var err error
	m.svc, err = cancel.New(cancel.Config{Store: m.fo, Seats: m.fs, Seller: m.fs, Observer: m.obs, Logger: quiet})
	if err != nil {
		rt.Fatal(err)
	}
	m.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: m.svc, Sender: m.snd, Observer: m.obs, Logger: quiet})
	if err != nil {
		rt.Fatal(err)
	}
	m.shell = expiry.NewShell(m.h, m.obs, quiet)
	var clock expiry.Clock = expiry.SystemClock
	if env.clock != nil {
		clock = env.clock
	}
	m.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: m.snd, Clock: clock, Observer: m.obs, Logger: quiet})
	if err != nil {
		rt.Fatal(err)
	}
	m.rcfg = reconcile.Config{Expired: m.fo, Canceller: m.svc, Locks: m.fs, Orders: m.fo, Seats: m.fs, Seller: m.fs,
		Batch: 100, Grace: env.grace, Observer: m.obs, Logger: quiet, Now: m.appNow,
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
	mode, hit := s.m.fault("CancelPending", req.OrderNo)
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

func (s *mOrders) PayPending(ctx context.Context, no, user string) (cancel.Result, error) {
	mode, hit := s.m.fault("PayPending", no)
	if mode == mBefore {
		return cancel.Result{}, injected("PayPending")
	}
	res, err := s.inner.PayPending(ctx, no, user)
	if err == nil && res.Changed {
		s.m.onTransition(no, expiry.StatusPaid, nil, res)
	}
	if hit {
		return cancel.Result{}, injected("PayPending")
	}
	return res, err
}

func (s *mOrders) Expired(ctx context.Context, limit int) ([]string, error) {
	if _, hit := s.m.fault("Expired", ""); hit {
		return nil, injected("Expired")
	}
	return s.inner.Expired(ctx, limit)
}

func (s *mOrders) Statuses(ctx context.Context, nos []string) (map[string]expiry.Status, error) {
	if _, hit := s.m.fault("Statuses", ""); hit {
		return nil, injected("Statuses")
	}
	return s.inner.Statuses(ctx, nos)
}

// Place is the host's placing transaction.
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
		return injected("Place")
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

func (s *mSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (int, error) {
	mode, hit := s.m.fault("Lock", h.OrderNo)
	if mode == mBefore {
		return 0, injected("Lock")
	}
	n, err := s.inner.Lock(ctx, h, limit)
	if hit {
		return 0, injected("Lock")
	}
	return n, err
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
		if b.Status != expiry.StatusPending || b.OrderNo != h.OrderNo || still {
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
		if a.Status != expiry.StatusPaid || a.OrderNo != h.OrderNo || (was && (b.Status != expiry.StatusPending || b.OrderNo != h.OrderNo)) {
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

// Place does what a host does: lock the seats, insert the order in one
// transaction, schedule the message after commit. When the insert reports an
// error the host cannot know whether it committed, so it reads the order back:
// found, it is placed; not found, the seats go back; no answer, the seats are
// left to the reconciler (a lock whose order is missing is released after the
// grace period).
func (m *machine) Place(t *rapid.T) {
	show := rapid.SampledFrom(m.shows).Draw(t, "show")
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	seats := rapid.SliceOfNDistinct(rapid.SampledFrom(m.pool), 1, 4, rapid.ID[string]).Draw(t, "seats")
	offset := time.Duration(rapid.Int64Range(m.env.expiryMin.Milliseconds(), m.env.expiryMax.Milliseconds()).Draw(t, "expire_in_ms")) * time.Millisecond
	m.next++
	no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: seats, ExpireAt: m.storeNow(t).Add(offset).Truncate(time.Millisecond)}
	m.orders[no] = &mOrder{p: p}
	m.nos = append(m.nos, no)

	// What the lock must answer, from the seat store as it is.
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
	n, err := m.fs.Lock(m.ctx, p.Hold(), m.limit)
	if !m.hit("Lock") {
		switch {
		case want == nil && (err != nil || n != len(seats)):
			m.violate("lock %v for %s: got %d, %v; want all seats", seats, no, n, err)
		case want != nil && !errors.Is(err, want):
			m.violate("lock %v for %s: got %d, %v; want %v", seats, no, n, err, want)
		}
	}
	if err != nil {
		m.stats.kinds["place_refused"]++
		return
	}
	if err := m.fo.Place(m.ctx, p); err != nil {
		if !m.hit("Place") {
			m.violate("the store refused %s although its seats were free in the seat store: %v", no, err)
		}
		_, rerr := m.fo.Order(m.ctx, no)
		switch {
		case rerr == nil: // it committed after all
		case errors.Is(rerr, expiry.ErrNotFound):
			_, _ = m.fs.Release(m.ctx, p.Hold()) // a failure leaves them to the reconciler
			return
		default:
			return
		}
	}
	m.sched.Schedule(m.ctx, no, p.ExpireAt) // a failed send is left to the reconciler
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
	before := m.state(o)
	res, err := m.svc.Pay(m.ctx, no, user)
	if m.hit("PayPending") {
		return
	}
	switch {
	case before == "missing":
		m.expectErr("pay "+no, err, expiry.ErrNotFound)
	case !rightful:
		m.expectErr("pay "+no+" by "+user, err, cancel.ErrNotOwner)
	case before == "pending":
		if err != nil || !res.Changed {
			m.violate("pay pending %s: changed=%v err=%v", no, res.Changed, err)
		}
	case before == "paid":
		if err != nil || res.Changed {
			m.violate("pay paid %s again: changed=%v err=%v, want nothing", no, res.Changed, err)
		}
	case before == "cancelled":
		m.expectErr("pay cancelled "+no, err, cancel.ErrDiscrepancy)
	}
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
		} else if !m.hit("Release") && res.Released != len(o.p.Seats) {
			m.violate("user cancel of %s released %d seats, want %d", no, res.Released, len(o.p.Seats))
		}
	default:
		if err != nil || res.Changed {
			m.violate("user cancel of %s %s: changed=%v err=%v, want nothing", before, no, res.Changed, err)
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
		if v := m.shell.Process(m.ctx, []byte(body), "trace"); v != expiry.Ack {
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
		v := m.shell.Process(m.ctx, body, "trace-"+msg.OrderNo)
		outcome, err = m.obs.handled.Outcome, m.obs.handled.Err
		if (v == expiry.Ack) != (err == nil) {
			m.violate("shell verdict %v for outcome %v err %v", v, outcome, err)
		}
	} else {
		outcome, err = m.h.Handle(m.ctx, msg)
	}
	t1 := m.storeNow(t)

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

func mDue(o *mOrder) string {
	if o == nil {
		return "-"
	}
	return o.p.ExpireAt.String()
}

// Reconcile runs a round on one of two reconciler hosts. Without failures, a
// round leaves no order pending that was due when it started.
func (m *machine) Reconcile(t *rapid.T) {
	host := rapid.IntRange(0, 1).Draw(t, "host")
	t0 := m.storeNow(t)
	_, err := m.hosts[host].Round(m.ctx)
	if len(m.hits) > 0 {
		return
	}
	if err != nil {
		m.violate("reconcile round without failures: %v", err)
	}
	m.noneDue(t0, "a reconcile round")
}

func (m *machine) noneDue(t0 time.Time, after string) {
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending && !o.p.ExpireAt.After(t0) {
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
	s := &mSnap{Statuses: st, Seats: map[string]map[string]cancel.SeatState{}, Held: map[string]int{}}
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
		if (m.obs.cancelled[no] > 0 && o.status != expiry.StatusCancelled) || (m.obs.paid[no] > 0 && o.status != expiry.StatusPaid) {
			fail("I1: %s is %s but was reported cancelled %d, paid %d times", no, m.state(o), m.obs.cancelled[no], m.obs.paid[no])
		}
	}

	// The seat store against the order store (I2, I8).
	for _, show := range m.shows {
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
			case s.Status == expiry.StatusPaid && o.status != expiry.StatusPaid:
				fail("I2: seat %s/%s sold to %s, which is %s", show, seat, s.OrderNo, m.state(o))
			case s.Status == expiry.StatusPaid:
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
		for _, no := range m.nos {
			o := m.orders[no]
			if !o.placed || o.p.ShowID != show || o.status == expiry.StatusCancelled {
				continue
			}
			want[o.p.UserID] += len(o.p.Seats)
			for _, seat := range o.p.Seats {
				s, ok := seats[seat]
				if !ok || s.OrderNo != no || (o.status == expiry.StatusPending && s.Status != expiry.StatusPending) {
					fail("I2: seat %s/%s of %s order %s is %+v (held %v)", show, seat, o.status, no, s, ok)
				}
			}
		}
		for _, u := range m.users {
			held := snap.Held[show+"/"+u]
			switch {
			case held < 0:
				fail("I8: %s/%s counter below zero: %d", show, u, held)
			case held != perUser[u]:
				fail("I8: %s/%s counter %d, but the seat store holds %d seats for the user", show, u, held, perUser[u])
			case stale[u] == 0 && held != want[u]:
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
	if m.env.clock != nil {
		latest := m.appNow()
		for _, o := range m.orders {
			if o.p.ExpireAt.After(latest) {
				latest = o.p.ExpireAt
			}
		}
		m.pass(latest.Sub(m.appNow()) + m.env.grace + time.Second)
	} else {
		m.pass(m.env.grace + 10*time.Millisecond)
	}
	r, err := reconcile.New(m.rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := m.storeNow(t)
	if _, err := r.Round(m.ctx); err != nil {
		t.Fatalf("final reconcile round: %v", err)
	}
	m.noneDue(t0, "the final reconcile round")
	for _, o := range m.orders {
		o.lag = false // nothing excuses a stale lock any more
	}
	m.Check(t)
	for _, show := range m.shows {
		for seat, s := range m.fs.show(m.ctx, show) {
			if o := m.orders[s.OrderNo]; o != nil && s.Status != expiry.StatusPaid && o.status == expiry.StatusPaid {
				t.Fatalf("seat %s/%s of paid %s not sold after the final round: %+v", show, seat, s.OrderNo, s)
			}
		}
	}
	// A second round has nothing to repair. (In real time, orders that were
	// not due at the first round may be by now: only the fake clock stood
	// still, so only there must it expire nothing.)
	rep, err := r.Round(m.ctx)
	if err != nil || rep.Released+rep.Sold != 0 || (m.env.clock != nil && rep.Expired != 0) {
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
