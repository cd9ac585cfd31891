package e2e_test

// The lifecycle of a reservation on the two public ticketing systems of the
// corpus (internal/corpus: hi.events and alf.io), on MariaDB and
// PostgreSQL, wired as their host would wire the library: cancel.New with
// the sqlstore on the entry's final mapping (the host's own tables) and
// redisseat on real Redis, scoped with the store's Scope; an
// expiry.Scheduler and expiry.Handler over an in-memory transport whose
// messages the test delivers (early, late, twice, or never); and
// reconcile.New for rounds. Every feature is driven once, and each is judged
// from what the host can see: its own rows (SELECT status and the deadline
// column from the host's table), the seat store (who holds which seat, and
// the buyer's purchase-limit counter) and the host's hooks (the refund
// hook's and the warning hook's calls), never from a return value alone.
//
// Deadlines are DATETIME / timestamp columns of whole seconds here (the
// library rounds a deadline up to the second), so the orders that must
// become due are placed about four seconds ahead and the test waits for the
// database's clock to pass them once; every other order is placed far ahead
// and never waits.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/corpus"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// tlCase is a ticketing entry as its host's code sees its table.
type tlCase struct {
	name                        string
	table, no, status, deadline string
	created, updated            string // "" when the mapping has none
	pending, paid, cancelled    string // as the host's rows hold them
	owner, other                string // two buyers (the mapping's user column)
	show                        string // the event (an integer column)
	newNo                       func(tag string) string
	hostStatuses                func(t *testing.T, w *tlWorld) *tlHostPhase
}

var tlCases = []tlCase{
	{
		name: "hievents", table: "orders", no: "public_id", status: "status", deadline: "reserved_until",
		created: "created_at", updated: "updated_at",
		pending: "RESERVED", paid: "COMPLETED", cancelled: "CANCELLED",
		owner: "sess-ann", other: "sess-bob", show: "7",
		newNo:        func(tag string) string { return "TL" + strings.ToUpper(tag) + strings.ToUpper(testenv.Unique()[:6]) },
		hostStatuses: tlHiEventsHostStatuses,
	},
	{
		name: "alfio", table: "tickets_reservation", no: "id", status: "status", deadline: "validity",
		created: "creation_ts",
		pending: "PENDING", paid: "COMPLETE", cancelled: "CANCELLED",
		owner: "1001", other: "1002", show: "7",
		newNo:        func(string) string { return tlUUID() },
		hostStatuses: tlAlfioHostStatuses,
	},
}

// tlUUID is a random UUID as alf.io writes its reservation ids.
func tlUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

const (
	tlSettle     = 1500 * time.Millisecond // reconcile.Config.Settle
	tlWarnBefore = 30 * time.Minute        // expiry.SchedulerConfig.WarnBefore
	tlRaces      = 4                       // pay races at the deadline
)

// TestTicketingLifecycle drives every feature on hi.events' and alf.io's
// own tables, on MariaDB and PostgreSQL, each in a database and a Redis
// namespace of its own (so the four run in parallel).
func TestTicketingLifecycle(t *testing.T) {
	for _, c := range tlCases {
		var e corpus.Entry
		for _, x := range corpus.Entries {
			if x.Name == c.name {
				e = x
			}
		}
		require.Equal(t, c.name, e.Name, "the corpus has the entry")
		for _, d := range corpus.Dialects {
			open := testenv.MySQL
			if d == sqlstore.Postgres {
				open = testenv.Postgres
			}
			t.Run(c.name+"/"+string(d), func(t *testing.T) {
				t.Parallel()
				require.True(t, e.Maps(d), "the entry maps on %s", d)
				tlLifecycle(t, tlNewWorld(t, c, e, d, open(t)))
			})
		}
	}
}

// ---------------------------------------------------------------------------
// The host's wiring and its view of the world.

// tlWorld is one host: its database, its wiring, and what it can observe.
type tlWorld struct {
	c      tlCase
	d      sqlstore.Dialect
	db     *sql.DB
	store  *sqlstore.Store
	rs     *redisseat.Seats // the scoped seat store, read by the test
	lossy  *tlLossySeats    // what the Service and the reconciler use
	sender *tlSender
	svc    *cancel.Service
	h      *expiry.Handler
	rec    *reconcile.Reconciler
	hooks  *tlHooks
}

func tlNewWorld(t *testing.T, c tlCase, e corpus.Entry, d sqlstore.Dialect, db *sql.DB) *tlWorld {
	ctx := context.Background()
	ddl, err := e.FullDDL(d)
	require.NoError(t, err)
	for _, q := range ddl {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	store, err := sqlstore.New(db, d, e.Final(d))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	require.NoError(t, store.Migrate(ctx))
	require.NoError(t, store.Check(ctx), "the host's tables with the additions match the final mapping")

	rdb := testenv.Redis(t)
	ns := "oe-tl-" + testenv.Unique()
	root, err := redisseat.New(rdb, ns)
	require.NoError(t, err)
	t.Cleanup(func() {
		// The keys are this test's alone: drop them.
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, ns+":*", 200).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	rs := root.Scoped(store.Scope())
	lossy := &tlLossySeats{Seats: rs, lose: map[string]bool{}}

	quiet := expiry.Runtime{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sender := &tlSender{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, WarnBefore: tlWarnBefore, Runtime: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sched.Close(context.Background()) })
	hooks := &tlHooks{refunds: map[string]int{}, warnings: map[string]int{}}
	svc, err := cancel.New(cancel.Config{
		Store: store, Seats: lossy, Runtime: quiet, Scheduler: sched,
		OnDiscrepancy:      hooks.refund,
		OnWarning:          hooks.warn,
		AcceptLatePayments: true, // asked for; these mappings cannot honour it (no reason column, one cancelled value)
	})
	require.NoError(t, err)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: sender, Runtime: quiet})
	require.NoError(t, err)
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: lossy, Service: svc, Settle: tlSettle, Batch: 100, Runtime: quiet})
	require.NoError(t, err)
	return &tlWorld{c: c, d: d, db: db, store: store, rs: rs, lossy: lossy, sender: sender, svc: svc, h: h, rec: rec, hooks: hooks}
}

// tlHooks are the host's refund and warning hooks: they count their calls.
type tlHooks struct {
	mu       sync.Mutex
	refunds  map[string]int // by payment id
	warnings map[string]int // by order number
}

func (k *tlHooks) refund(_ context.Context, d cancel.Discrepancy) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refunds[d.PaymentID]++
	return nil
}

func (k *tlHooks) warn(_ context.Context, o expiry.Order) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.warnings[o.No]++
	return nil
}

func (k *tlHooks) refunded(pid string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refunds[pid]
}

func (k *tlHooks) warned(no string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.warnings[no]
}

// tlSender is the host's transport, in memory: it keeps every message the
// library sends, and the test delivers them (or loses them).
type tlSender struct {
	mu   sync.Mutex
	sent []tlSent
}

type tlSent struct {
	m     expiry.Message
	delay time.Duration
}

func (s *tlSender) Send(_ context.Context, m expiry.Message, delay time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, tlSent{m, delay})
	return nil
}

// last is the newest message for no (its warning, or its expiry message).
func (s *tlSender) last(no string, warning bool) (tlSent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.sent) - 1; i >= 0; i-- {
		if m := s.sent[i]; m.m.OrderNo == no && m.m.Warning == warning {
			return m, true
		}
	}
	return tlSent{}, false
}

func (s *tlSender) count(no string, warning bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.sent {
		if m.m.OrderNo == no && m.m.Warning == warning {
			n++
		}
	}
	return n
}

// tlLossySeats is the seat store with one fault: the release of an order
// named in lose is lost once (Redis unreachable for that call), as after a
// network blip between the cancel's commit and its release.
type tlLossySeats struct {
	*redisseat.Seats
	mu   sync.Mutex
	lose map[string]bool
}

var errTLLost = errors.New("tl: release lost on the way to Redis")

func (l *tlLossySeats) take(no string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lose[no] {
		delete(l.lose, no)
		return true
	}
	return false
}

func (l *tlLossySeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	if l.take(h.OrderNo) {
		return 0, errTLLost
	}
	return l.Seats.Release(ctx, h)
}

func (l *tlLossySeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	out := make([]int, len(holds))
	var keep []cancel.Hold
	var at []int
	lost := false
	for i, h := range holds {
		if l.take(h.OrderNo) {
			out[i], lost = -1, true
			continue
		}
		keep, at = append(keep, h), append(at, i)
	}
	var err error
	if len(keep) > 0 {
		var ns []int
		ns, err = l.Seats.ReleaseAll(ctx, keep)
		for k, i := range at {
			if k < len(ns) {
				out[i] = ns[k]
			} else {
				out[i] = -1
			}
		}
	}
	if lost {
		err = errors.Join(err, errTLLost)
	}
	return out, err
}

// ---------------------------------------------------------------------------
// What the host reads: its rows, its database's clock, the seat store.

// q binds a statement written with ? for the dialect.
func (w *tlWorld) q(s string) string {
	if w.d != sqlstore.Postgres {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// micros is a time column (holding UTC, or an instant) in epoch
// microseconds, read by the database itself.
func (w *tlWorld) micros(col string) string {
	if w.d == sqlstore.Postgres {
		return "CAST(EXTRACT(EPOCH FROM " + col + ") * 1000000 AS BIGINT)"
	}
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// dbNow is the database's clock, read by the host.
func (w *tlWorld) dbNow(t *testing.T) time.Time {
	q := "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	if w.d == sqlstore.Postgres {
		q = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
	}
	var us int64
	require.NoError(t, w.db.QueryRow(q).Scan(&us))
	return time.UnixMicro(us).UTC()
}

// tlRow is an order's row as the host's own SELECT reads it.
type tlRow struct {
	Status   string
	Deadline time.Time // zero: NULL
}

func (r tlRow) String() string {
	return fmt.Sprintf("%s until %s", r.Status, r.Deadline.Format("15:04:05.000000"))
}

func (w *tlWorld) row(t *testing.T, no string) tlRow {
	t.Helper()
	var r tlRow
	var dl sql.NullInt64
	err := w.db.QueryRow(w.q("SELECT "+w.c.status+", "+w.micros(w.c.deadline)+" FROM "+w.c.table+" WHERE "+w.c.no+" = ?"), no).Scan(&r.Status, &dl)
	require.NoError(t, err, "the host's row of %s", no)
	r.Status = strings.TrimSpace(r.Status)
	if dl.Valid {
		r.Deadline = time.UnixMicro(dl.Int64).UTC()
	}
	return r
}

// createdAt is the host's creation column of no.
func (w *tlWorld) createdAt(t *testing.T, no string) time.Time {
	var us int64
	require.NoError(t, w.db.QueryRow(w.q("SELECT "+w.micros(w.c.created)+" FROM "+w.c.table+" WHERE "+w.c.no+" = ?"), no).Scan(&us))
	return time.UnixMicro(us).UTC()
}

// setStatus is the host's own code writing v into no's row.
func (w *tlWorld) setStatus(t *testing.T, no, v string) {
	r, err := w.db.Exec(w.q("UPDATE "+w.c.table+" SET "+w.c.status+" = ? WHERE "+w.c.no+" = ?"), v, no)
	require.NoError(t, err)
	n, err := r.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// holder is who holds seat by the seat store: "" free, else "locked:<no>"
// or "sold:<no>".
func (w *tlWorld) holder(t *testing.T, seat string) string {
	st, err := w.rs.Show(context.Background(), w.c.show)
	require.NoError(t, err)
	s, ok := st[seat]
	if !ok {
		return ""
	}
	return s.Status.String() + ":" + s.OrderNo
}

// held is the buyer's purchase-limit counter in the seat store (I8).
func (w *tlWorld) held(t *testing.T, user string) int {
	n, err := w.rs.Held(context.Background(), w.c.show, user)
	require.NoError(t, err)
	return n
}

// tlOrder is one placement and what it is for.
type tlOrder struct {
	cancel.Placement
	what string
}

func (o tlOrder) seat() string { return o.Seats[0] }

// place places one order of one seat through the Service, into the host's
// own table (Store.Insert), as the host's checkout does.
func (w *tlWorld) place(t *testing.T, what, tag, user, seat string, at time.Time) tlOrder {
	p := cancel.Placement{OrderNo: w.c.newNo(tag), UserID: user, ShowID: w.c.show, Seats: []string{seat}, ExpireAt: at, Limit: 20}
	require.NoError(t, w.svc.Place(context.Background(), p, w.store.Insert(w.db, nil)), "place %s", what)
	return tlOrder{Placement: p, what: what}
}

// deliver hands the newest message of no to the Handler, as the transport's
// consumer would.
func (w *tlWorld) deliver(t *testing.T, no string, warning bool) expiry.Outcome {
	t.Helper()
	m, ok := w.sender.last(no, warning)
	require.True(t, ok, "a message was sent for %s (warning %v)", no, warning)
	out, err := w.h.Handle(context.Background(), m.m)
	require.NoError(t, err, "deliver %+v", m.m)
	return out
}

// round runs one reconcile round.
func (w *tlWorld) round(t *testing.T, what string) reconcile.Report {
	t.Helper()
	rep, err := w.rec.Round(context.Background())
	assert.NoError(t, err, "round: %s", what)
	t.Logf("round (%s): %+v", what, rep)
	return rep
}

// untilPast waits until the database's clock is past every deadline of
// nos, as the host's rows have them.
func (w *tlWorld) untilPast(t *testing.T, nos ...string) {
	var last time.Time
	for _, no := range nos {
		if dl := w.row(t, no).Deadline; dl.After(last) {
			last = dl
		}
	}
	limit := time.Now().Add(10 * time.Second)
	for {
		now := w.dbNow(t)
		if now.After(last.Add(20 * time.Millisecond)) {
			return
		}
		require.True(t, time.Now().Before(limit), "the database's clock never passed %s", last)
		time.Sleep(min(last.Sub(now)+30*time.Millisecond, 200*time.Millisecond))
	}
}

// ---------------------------------------------------------------------------
// The lifecycle.

func tlLifecycle(t *testing.T, w *tlWorld) {
	ctx := context.Background()
	c := w.c
	start := time.Now()
	now := w.dbNow(t)
	due := now.Add(4 * time.Second) // whole seconds: rounded up, 4-5 s ahead (the early message must find the first order not due, even on a loaded machine)
	far := now.Add(10 * time.Minute)

	// --- An early message: re-armed, nothing changes. Delivered before
	// anything else, well before the order's deadline.
	tOrd := w.place(t, "timeout", "t", c.owner, "A01", due)
	before := w.row(t, tOrd.OrderNo)
	assert.Equal(t, c.pending, before.Status, "placed: the host's row holds the pending value")
	assert.False(t, before.Deadline.Before(due.Truncate(time.Second)), "the deadline column is never earlier than asked (%s < %s)", before.Deadline, due)
	assert.Equal(t, "locked:"+tOrd.OrderNo, w.holder(t, "A01"), "the placement locked its seat")
	sentBefore := w.sender.count(tOrd.OrderNo, false)
	out := w.deliver(t, tOrd.OrderNo, false)
	assert.Equal(t, expiry.OutcomeRearmed, out, "early message")
	assert.Equal(t, before, w.row(t, tOrd.OrderNo), "I4: an early message changes nothing of the row")
	assert.Equal(t, "locked:"+tOrd.OrderNo, w.holder(t, "A01"), "I4: nor of the seat")
	if m, ok := w.sender.last(tOrd.OrderNo, false); assert.True(t, ok) {
		assert.Equal(t, sentBefore+1, w.sender.count(tOrd.OrderNo, false), "re-armed: one more message on the transport")
		assert.Greater(t, m.delay, time.Duration(0), "re-armed for the time left")
		assert.LessOrEqual(t, m.delay, before.Deadline.Sub(now)+time.Second, "no later than the deadline")
	}

	// The rest of the orders due at the same deadline.
	lost := w.place(t, "lost message", "l", c.owner, "A02", due)
	var races []tlOrder
	for i := 0; i < tlRaces; i++ {
		races = append(races, w.place(t, "pay race", "r", c.owner, fmt.Sprintf("R%02d", i), due))
	}
	// The host's own statuses (entry-specific): set up now, judged later.
	hp := c.hostStatuses(t, w)
	hp.setup(due)

	// Orders far from their deadlines.
	uOrd := w.place(t, "user cancel", "u", c.owner, "B01", far)
	pOrd := w.place(t, "repeated callbacks", "p", c.owner, "B02", far)
	eOrd := w.place(t, "extend and shorten", "e", c.owner, "B03", far)
	sOrd := w.place(t, "shorten to now", "s", c.owner, "B04", far)
	wOrd := w.place(t, "warning", "w", c.owner, "B05", far)
	rOrd := w.place(t, "lost release", "x", c.other, "B06", far)

	// --- A user's cancel: another user's is refused and changes nothing;
	// the owner's cancels the row and frees the seat.
	t.Run("user cancel", func(t *testing.T) {
		_, err := w.svc.UserCancel(ctx, uOrd.OrderNo, c.other)
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "another user's cancel is refused")
		assert.Equal(t, c.pending, w.row(t, uOrd.OrderNo).Status, "and changes nothing of the row")
		assert.Equal(t, "locked:"+uOrd.OrderNo, w.holder(t, "B01"), "nor of the seat")
		heldBefore := w.held(t, c.owner)
		_, err = w.svc.UserCancel(ctx, uOrd.OrderNo, c.owner)
		assert.NoError(t, err)
		assert.Equal(t, c.cancelled, w.row(t, uOrd.OrderNo).Status, "the owner's cancel: the host's row says cancelled")
		assert.Empty(t, w.holder(t, "B01"), "I2: its seat is free")
		assert.Equal(t, heldBefore-1, w.held(t, c.owner), "I8: the buyer's counter follows")
	})

	// --- Repeated callbacks: the first pays, the repeats are answered,
	// nothing is refunded.
	t.Run("repeated callbacks", func(t *testing.T) {
		pay := cancel.Payment{OrderNo: pOrd.OrderNo, PaymentID: "pi-p-" + testenv.Unique()}
		_, err := w.svc.Pay(ctx, pay)
		assert.NoError(t, err, "the callback pays the order")
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = w.svc.Pay(ctx, pay)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "repeat %d is answered", i)
		}
		_, err = w.svc.Pay(ctx, pay)
		assert.NoError(t, err, "and a late repeat too")
		assert.Equal(t, c.paid, w.row(t, pOrd.OrderNo).Status, "the host's row says paid")
		assert.Equal(t, "sold:"+pOrd.OrderNo, w.holder(t, "B02"), "I15: its seat is sold to it")
		assert.Zero(t, w.hooks.refunded(pay.PaymentID), "I9, I14: a repeated callback is never refunded")
	})

	// --- Extend and Shorten, judged from the deadline column.
	t.Run("extend and shorten", func(t *testing.T) {
		r0 := w.row(t, eOrd.OrderNo)
		n0 := w.dbNow(t)
		_, err := w.svc.Extend(ctx, eOrd.OrderNo, c.owner, 30*time.Minute)
		assert.NoError(t, err)
		n1 := w.dbNow(t)
		r1 := w.row(t, eOrd.OrderNo)
		assert.Equal(t, c.pending, r1.Status)
		assert.False(t, r1.Deadline.Before(n0.Add(30*time.Minute)), "extended to at least 30 min from now: %s, now %s", r1.Deadline, n0)
		assert.False(t, r1.Deadline.After(n1.Add(30*time.Minute+time.Second)), "and not more than a second's rounding past it: %s", r1.Deadline)
		assert.True(t, r1.Deadline.After(r0.Deadline), "later than before")

		_, err = w.svc.Extend(ctx, eOrd.OrderNo, c.owner, 20*time.Minute)
		assert.NoError(t, err)
		assert.Equal(t, r1, w.row(t, eOrd.OrderNo), "an extension is 'at least': a shorter one changes nothing")
		_, err = w.svc.Extend(ctx, eOrd.OrderNo, c.other, 45*time.Minute)
		assert.ErrorIs(t, err, cancel.ErrNotOwner, "another user's extension is refused")
		assert.Equal(t, r1, w.row(t, eOrd.OrderNo), "and changes nothing")

		// Past the maximum hold (cancel.MaxHoldDefault, an hour from the
		// placement): capped there (I17).
		_, err = w.svc.Extend(ctx, eOrd.OrderNo, "", 2*time.Hour)
		assert.NoError(t, err)
		r2 := w.row(t, eOrd.OrderNo)
		created := w.createdAt(t, eOrd.OrderNo)
		hold := created.Add(cancel.MaxHoldDefault)
		assert.True(t, r2.Deadline.After(r1.Deadline), "extended towards the maximum hold: %s", r2.Deadline)
		assert.False(t, r2.Deadline.After(hold.Add(time.Second)), "I17: never past placement (%s) + MaxHold: %s", created, r2.Deadline)
		assert.False(t, r2.Deadline.Before(hold.Add(-2*time.Second)), "capped at placement + MaxHold, not below: %s", r2.Deadline)

		// Shortened to 5 minutes from now; a new expiry message follows it.
		sent := w.sender.count(eOrd.OrderNo, false)
		n2 := w.dbNow(t)
		_, err = w.svc.Shorten(ctx, eOrd.OrderNo, "", 5*time.Minute)
		assert.NoError(t, err)
		n3 := w.dbNow(t)
		r3 := w.row(t, eOrd.OrderNo)
		assert.Equal(t, c.pending, r3.Status)
		assert.False(t, r3.Deadline.After(n3.Add(5*time.Minute)), "shortened to at most 5 min from now: %s, now %s", r3.Deadline, n3)
		assert.False(t, r3.Deadline.Before(n2.Add(5*time.Minute-time.Second)), "by no more than a second's rounding: %s", r3.Deadline)
		assert.Equal(t, sent+1, w.sender.count(eOrd.OrderNo, false), "Shorten sends a new expiry message")
		if m, ok := w.sender.last(eOrd.OrderNo, false); ok {
			assert.InDelta(t, float64(5*time.Minute), float64(m.delay), float64(2*time.Second), "due at the new deadline")
		}
		_, err = w.svc.Shorten(ctx, eOrd.OrderNo, "", 10*time.Minute)
		assert.NoError(t, err)
		assert.Equal(t, r3, w.row(t, eOrd.OrderNo), "a shortening is 'at most': a longer one changes nothing")
		assert.Equal(t, "locked:"+eOrd.OrderNo, w.holder(t, "B03"), "its seat stays locked throughout")

		// Shortened to now: due at once (rounded down, never later).
		_, err = w.svc.Shorten(ctx, sOrd.OrderNo, c.owner, 0)
		assert.NoError(t, err)
		rs := w.row(t, sOrd.OrderNo)
		assert.False(t, rs.Deadline.After(w.dbNow(t)), "shortened to now: %s", rs.Deadline)
	})

	// --- The warning: fired once, however often its message arrives.
	t.Run("warning", func(t *testing.T) {
		r0 := w.row(t, wOrd.OrderNo)
		m, ok := w.sender.last(wOrd.OrderNo, true)
		require.True(t, ok, "Place sent a warning message (WarnBefore)")
		assert.Equal(t, tlWarnBefore, m.m.Lead)
		var wg sync.WaitGroup
		outs := make([]expiry.Outcome, 3)
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				outs[i], err = w.h.Handle(ctx, m.m)
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		out, err := w.h.Handle(ctx, m.m)
		assert.NoError(t, err)
		outs = append(outs, out)
		assert.Equal(t, 1, w.hooks.warned(wOrd.OrderNo), "the warning hook runs once (outcomes %v)", outs)
		assert.Equal(t, r0, w.row(t, wOrd.OrderNo), "a warning changes nothing of the row")
		assert.Equal(t, "locked:"+wOrd.OrderNo, w.holder(t, "B05"), "nor of the seat")
	})

	// --- The deadline passes (by the database's clock).
	w.untilPast(t, append([]string{tOrd.OrderNo, lost.OrderNo, hp.dueNo()}, tlNos(races)...)...)
	t.Logf("deadline passed %v after the start", time.Since(start).Round(time.Millisecond))

	// --- The pay race at the deadline: a payment and the timeout message
	// at once; exactly one wins.
	t.Run("pay race", func(t *testing.T) {
		pids := make([]string, len(races))
		gate := make(chan struct{})
		var wg sync.WaitGroup
		payErrs := make([]error, len(races))
		outs := make([]expiry.Outcome, len(races))
		handleErrs := make([]error, len(races))
		for i, o := range races {
			pids[i] = "pi-race-" + strconv.Itoa(i) + "-" + testenv.Unique()
			m, ok := w.sender.last(o.OrderNo, false)
			require.True(t, ok)
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-gate
				_, payErrs[i] = w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: pids[i]})
			}()
			go func() {
				defer wg.Done()
				<-gate
				outs[i], handleErrs[i] = w.h.Handle(ctx, m.m)
			}()
		}
		close(gate)
		wg.Wait()
		paid, cancelled := 0, 0
		for i, o := range races {
			assert.NoError(t, handleErrs[i], "race %d: the timeout is handled", i)
			r := w.row(t, o.OrderNo)
			switch r.Status {
			case c.paid:
				paid++
				assert.NoError(t, payErrs[i], "race %d: the payment won and says so", i)
				assert.Equal(t, "sold:"+o.OrderNo, w.holder(t, o.seat()), "race %d: I15: paid, its seat is sold to it", i)
				assert.Zero(t, w.hooks.refunded(pids[i]), "race %d: I14: an honoured payment is never refunded", i)
			case c.cancelled:
				cancelled++
				assert.ErrorIs(t, payErrs[i], cancel.ErrDiscrepancy, "race %d: the payment lost and says so", i)
				assert.Empty(t, w.holder(t, o.seat()), "race %d: I2: cancelled, its seat is free", i)
				assert.Equal(t, 1, w.hooks.refunded(pids[i]), "race %d: I9, I14: the payment is refunded once", i)
			default:
				t.Errorf("race %d: I1: the row is %s: neither paid nor cancelled (pay %v, timeout %v %v)", i, r, payErrs[i], outs[i], handleErrs[i])
			}
			// The provider repeats its callback: the fate never flips.
			_, _ = w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: pids[i]})
			assert.Equal(t, r.Status, w.row(t, o.OrderNo).Status, "race %d: I1: a repeat changes nothing", i)
			want := 0
			if r.Status == c.cancelled {
				want = 1
			}
			assert.Equal(t, want, w.hooks.refunded(pids[i]), "race %d: I9: a repeat is not refunded again", i)
		}
		t.Logf("pay races at the deadline: %d paid, %d cancelled", paid, cancelled)
	})

	// --- The timeout: the re-armed message arrives after the deadline.
	t.Run("timeout", func(t *testing.T) {
		heldBefore := w.held(t, c.owner)
		assert.Equal(t, expiry.OutcomeCancelled, w.deliver(t, tOrd.OrderNo, false), "the re-armed message cancels the due order")
		assert.Equal(t, c.cancelled, w.row(t, tOrd.OrderNo).Status, "the host's row says cancelled")
		assert.Empty(t, w.holder(t, "A01"), "I2: its seat is free at once")
		assert.Equal(t, heldBefore-1, w.held(t, c.owner), "I8: the buyer's counter follows")
		assert.Equal(t, expiry.OutcomeFinal, w.deliver(t, tOrd.OrderNo, false), "I5: a duplicate is final")
		assert.Equal(t, c.cancelled, w.row(t, tOrd.OrderNo).Status)

		// The order shortened to now, by its rescheduled message.
		assert.Equal(t, expiry.OutcomeCancelled, w.deliver(t, sOrd.OrderNo, false), "the shortened order's new message cancels it")
		assert.Equal(t, c.cancelled, w.row(t, sOrd.OrderNo).Status)
		assert.Empty(t, w.holder(t, "B04"), "I2: its seat is free")
	})

	// --- A late payment for the order its timeout cancelled: these
	// mappings cannot tell a timeout's cancel from a user's, so it is
	// refunded once, however often it is repeated.
	t.Run("late payment", func(t *testing.T) {
		pay := cancel.Payment{OrderNo: tOrd.OrderNo, PaymentID: "pi-late-" + testenv.Unique()}
		for i := 0; i < 3; i++ {
			_, err := w.svc.Pay(ctx, pay)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "callback %d: a late payment is a discrepancy", i)
		}
		assert.Equal(t, 1, w.hooks.refunded(pay.PaymentID), "I9: refunded once")
		assert.Equal(t, c.cancelled, w.row(t, tOrd.OrderNo).Status, "I1: the row stays cancelled")
		assert.Empty(t, w.holder(t, "A01"), "the seat stays free (not taken again)")
	})

	// --- A lost release: the owner's cancel commits, its release never
	// reaches Redis; the reconciler frees the seat once Settle has passed.
	w.lossy.mu.Lock()
	w.lossy.lose[rOrd.OrderNo] = true
	w.lossy.mu.Unlock()
	_, err := w.svc.UserCancel(ctx, rOrd.OrderNo, c.other)
	require.NoError(t, err)
	lostReleaseAt := time.Now()
	assert.Equal(t, c.cancelled, w.row(t, rOrd.OrderNo).Status, "lost release: the cancel committed")
	assert.Equal(t, "locked:"+rOrd.OrderNo, w.holder(t, "B06"), "lost release: the seat is still locked in Redis")

	// --- Reconcile rounds: the lost message's order is cancelled, the lost
	// release repaired, the host's own statuses left as they are.
	assert.Equal(t, c.pending, w.row(t, lost.OrderNo).Status, "lost message: still pending before the round")
	rep := w.round(t, "first after the deadline")
	t.Run("lost message", func(t *testing.T) {
		assert.GreaterOrEqual(t, rep.Expired, 1, "the expired pass cancelled it")
		assert.Equal(t, c.cancelled, w.row(t, lost.OrderNo).Status, "I3: the reconciler cancels the due order whose message was lost")
		assert.Empty(t, w.holder(t, "A02"), "I2: its seat is free")
	})
	early := w.holder(t, "B06")
	if c.updated != "" {
		// The store knows when the order was decided: its lock is left to
		// the Service that decided it until Settle has passed.
		if time.Since(lostReleaseAt) < tlSettle-200*time.Millisecond {
			assert.Equal(t, "locked:"+rOrd.OrderNo, early, "lost release: within Settle the lock pass leaves the lock to its decider")
		}
		time.Sleep(time.Until(lostReleaseAt.Add(tlSettle + 300*time.Millisecond)))
		w.round(t, "after Settle")
	} else {
		t.Logf("lost release: no updated-at column, the order's age is unknown: repaired at the first round (seat %q)", early)
	}
	w.round(t, "another")
	t.Run("lost release", func(t *testing.T) {
		assert.Equal(t, c.cancelled, w.row(t, rOrd.OrderNo).Status)
		assert.Empty(t, w.holder(t, "B06"), "I2, I15: the reconciler frees the seat after Settle")
		assert.Zero(t, w.held(t, c.other), "I8: the buyer's counter follows")
	})

	// --- The host's own statuses, through messages, a user's cancel and
	// the rounds above.
	t.Run("host statuses", func(t *testing.T) { hp.judge(t) })

	// --- Nothing else moved: the far orders are as the test left them,
	// and no pending row is past its deadline (I3).
	t.Run("end state", func(t *testing.T) {
		assert.Equal(t, c.paid, w.row(t, pOrd.OrderNo).Status)
		assert.Equal(t, "sold:"+pOrd.OrderNo, w.holder(t, "B02"), "a round never frees a sold seat")
		assert.Equal(t, "locked:"+eOrd.OrderNo, w.holder(t, "B03"))
		assert.Equal(t, "locked:"+wOrd.OrderNo, w.holder(t, "B05"))
		assert.Equal(t, c.pending, w.row(t, eOrd.OrderNo).Status)
		assert.Equal(t, c.pending, w.row(t, wOrd.OrderNo).Status)
		rows, err := w.db.Query("SELECT " + c.no + ", " + c.status + ", " + w.micros(c.deadline) + " FROM " + c.table)
		require.NoError(t, err)
		defer rows.Close()
		now := w.dbNow(t)
		for rows.Next() {
			var no, st string
			var dl sql.NullInt64
			require.NoError(t, rows.Scan(&no, &st, &dl))
			if strings.TrimSpace(st) == c.pending && dl.Valid && time.UnixMicro(dl.Int64).Before(now) {
				t.Errorf("I3: %s is pending past its deadline %s (now %s)", no, time.UnixMicro(dl.Int64).UTC(), now)
			}
		}
		require.NoError(t, rows.Err())
	})
	t.Logf("%s on %s: %v", c.name, w.d, time.Since(start).Round(time.Millisecond))
}

func tlNos(os []tlOrder) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.OrderNo)
	}
	return out
}

// ---------------------------------------------------------------------------
// The host's own statuses (I18, I19), per entry.

// tlHostPhase is an entry's orders in statuses the mapping leaves to the
// host: set up before the deadline passes, judged after the rounds.
type tlHostPhase struct {
	setup func(due time.Time)
	dueNo func() string // an order whose deadline the test waits for
	judge func(t *testing.T)
}

// tlAlfioHostStatuses: alf.io moves a reservation to OFFLINE_PAYMENT when
// the buyer chooses a bank transfer (its validity then the transfer's
// deadline), and to EXTERNAL_PROCESSING_PAYMENT while the buyer is on the
// provider's page (a Paying status of the mapping). Both past their
// validity stay as they are through their expiry messages, a user's cancel
// and reconcile rounds, row and seats; then the provider's webhook pays the
// EXTERNAL_PROCESSING_PAYMENT one: COMPLETE written, its seat sold.
func tlAlfioHostStatuses(t *testing.T, w *tlWorld) *tlHostPhase {
	ctx := context.Background()
	var off, ext tlOrder
	var offRow, extRow tlRow
	return &tlHostPhase{
		setup: func(due time.Time) {
			off = w.place(t, "offline payment", "o", w.c.owner, "H01", due)
			ext = w.place(t, "external payment", "x", w.c.owner, "H02", due)
			w.setStatus(t, off.OrderNo, "OFFLINE_PAYMENT")
			w.setStatus(t, ext.OrderNo, "EXTERNAL_PROCESSING_PAYMENT")
			offRow, extRow = w.row(t, off.OrderNo), w.row(t, ext.OrderNo)
		},
		dueNo: func() string { return ext.OrderNo },
		judge: func(t *testing.T) {
			for _, o := range []tlOrder{off, ext} {
				assert.Equal(t, expiry.OutcomeFinal, w.deliver(t, o.OrderNo, false), "%s: its expiry message is final past its validity", o.what)
				_, err := w.svc.UserCancel(ctx, o.OrderNo, o.UserID)
				assert.NoError(t, err, "%s: a user's cancel answers", o.what)
			}
			w.round(t, "host statuses")
			assert.Equal(t, offRow, w.row(t, off.OrderNo), "I19: OFFLINE_PAYMENT past its validity stays as the host wrote it")
			assert.Equal(t, extRow, w.row(t, ext.OrderNo), "I18: EXTERNAL_PROCESSING_PAYMENT past its validity stays as the host wrote it")
			assert.Equal(t, "locked:"+off.OrderNo, w.holder(t, "H01"), "I19: the offline payment's seat stays its own")
			assert.Equal(t, "locked:"+ext.OrderNo, w.holder(t, "H02"), "I18: the paying reservation's seat stays its own")

			pay := cancel.Payment{OrderNo: ext.OrderNo, PaymentID: "pi-ext-" + testenv.Unique()}
			_, err := w.svc.Pay(ctx, pay)
			assert.NoError(t, err, "I18: the provider's webhook pays the EXTERNAL_PROCESSING_PAYMENT reservation")
			_, err = w.svc.Pay(ctx, pay)
			assert.NoError(t, err, "and its repeat is answered")
			assert.Equal(t, "COMPLETE", w.row(t, ext.OrderNo).Status, "the paid value is written")
			assert.Equal(t, "sold:"+ext.OrderNo, w.holder(t, "H02"), "I15: its seat is sold to it")
			assert.Zero(t, w.hooks.refunded(pay.PaymentID), "I9: nothing is refunded")

			w.round(t, "after the external payment")
			assert.Equal(t, offRow, w.row(t, off.OrderNo), "I19: the offline payment is still the host's")
			assert.Equal(t, "locked:"+off.OrderNo, w.holder(t, "H01"))
			assert.Equal(t, "sold:"+ext.OrderNo, w.holder(t, "H02"))
		},
	}
}

// tlHiEventsHostStatuses: hi.events' later versions write statuses this
// mapping does not name (AWAITING_OFFLINE_PAYMENT). A row the host inserts
// itself in such a status, its reserved_until long past, is untouched by
// messages, a user's cancel and rounds (its updated_at stays NULL: nothing
// wrote to it), and nothing of it appears in the seat store; a reservation
// the library placed and the host then moved to that status keeps its row
// and its seat.
func tlHiEventsHostStatuses(t *testing.T, w *tlWorld) *tlHostPhase {
	ctx := context.Background()
	const status = "AWAITING_OFFLINE_PAYMENT"
	hostNo := w.c.newNo("h")
	var moved tlOrder
	var hostRow, movedRow tlRow
	untouched := func() bool {
		var n int
		require.NoError(t, w.db.QueryRow(w.q("SELECT CASE WHEN updated_at IS NULL THEN 1 ELSE 0 END FROM orders WHERE public_id = ?"), hostNo).Scan(&n))
		return n == 1
	}
	return &tlHostPhase{
		setup: func(due time.Time) {
			ago := "UTC_TIMESTAMP() - INTERVAL 1 HOUR"
			if w.d == sqlstore.Postgres {
				ago = "(now() AT TIME ZONE 'UTC') - interval '1 hour'"
			}
			// As the host's own OrderManagementService writes an order.
			_, err := w.db.Exec(w.q("INSERT INTO orders (short_id, event_id, currency, status, reserved_until, session_id, public_id, created_at) VALUES (?, "+w.c.show+", 'EUR', ?, "+ago+", ?, ?, "+ago+")"),
				"o"+testenv.Unique(), status, w.c.owner, hostNo)
			require.NoError(t, err)
			hostRow = w.row(t, hostNo)
			moved = w.place(t, "moved to the host's status", "m", w.c.owner, "H01", due)
			w.setStatus(t, moved.OrderNo, status)
			movedRow = w.row(t, moved.OrderNo)
		},
		dueNo: func() string { return moved.OrderNo },
		judge: func(t *testing.T) {
			for _, no := range []string{hostNo, moved.OrderNo} {
				out, err := w.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1})
				assert.NoError(t, err)
				assert.Equal(t, expiry.OutcomeFinal, out, "%s: an expiry message for an order in the host's status is final", no)
				_, err = w.svc.UserCancel(ctx, no, w.c.owner)
				assert.NoError(t, err, "%s: a user's cancel answers", no)
			}
			w.round(t, "host statuses")
			assert.Equal(t, hostRow, w.row(t, hostNo), "I19: the host's own row is untouched")
			assert.True(t, untouched(), "I19: nothing wrote to it (updated_at still NULL)")
			assert.Equal(t, movedRow, w.row(t, moved.OrderNo), "I19: the moved reservation stays as the host wrote it")
			assert.Equal(t, "locked:"+moved.OrderNo, w.holder(t, "H01"), "I19: and keeps its seat")
			st, err := w.rs.Show(ctx, w.c.show)
			require.NoError(t, err)
			for seat, s := range st {
				assert.NotEqual(t, hostNo, s.OrderNo, "the host's own row holds no seat %s in the seat store", seat)
			}
		},
	}
}
