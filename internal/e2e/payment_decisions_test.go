package e2e

// An outside review of the transitions added since 0471ed9 (a payment id's
// fate decided once, lock ids, Placement.Limit kept with the order,
// Config.MaxHold, Shorten rescheduling, scopes), through the public API only:
// cancel, cancel/memstore, cancel/sqlstore on SQLite, reconcile, expiry.
// Each test judges outcomes (who paid, who was refunded, who holds which
// seat, the counters), never the library's own rules.
//
// TestReviewHole* fail: each is a hole found, kept failing until it is fixed.
// TestReviewHolds* pass: attacks that held.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"

	_ "modernc.org/sqlite"
)

// rvQuiet is the runtime of every component here: no log noise.
var rvQuiet = expiry.Runtime{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

// rvRefunds is the refund hook's ledger: calls per payment id.
type rvRefunds struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rvRefunds) hook(_ context.Context, d cancel.Discrepancy) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[d.PaymentID]++
	return nil
}

func (r *rvRefunds) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// rvStore is what the tests need of an order store: both adapters serve it.
type rvStore interface {
	cancel.OrderStore
}

// rvEnv is one world: an order store (memstore or SQLite), a memstore seat
// store, the refund ledger, and how to place and to let time pass.
type rvEnv struct {
	t       *testing.T
	ctx     context.Context
	kind    string
	store   rvStore
	mem     *memstore.Store // memstore only
	sqls    *sqlstore.Store // sqlite only
	db      *sql.DB         // sqlite only
	clock   *expirytest.FakeClock
	seats   *memstore.Seats
	refunds *rvRefunds
}

func rvOpenSQLite(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "review.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// newRvEnv returns a world of kind "memstore" or "sqlite" (the library's
// own schema, migrated).
func newRvEnv(t *testing.T, kind string) *rvEnv {
	e := &rvEnv{t: t, ctx: context.Background(), kind: kind, clock: expirytest.NewFakeClock(time.Now()), refunds: &rvRefunds{}}
	e.seats = memstore.NewSeats(e.clock.Now)
	switch kind {
	case "memstore":
		e.mem = memstore.NewStore(e.clock.Now)
		e.store = e.mem
	case "sqlite":
		e.db = rvOpenSQLite(t)
		s, err := sqlstore.New(e.db, sqlstore.SQLite)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(e.ctx))
		e.sqls, e.store = s, s
	default:
		t.Fatalf("kind %q", kind)
	}
	return e
}

// service wires a Service on the world, with the refund hook; mod may change
// the config.
func (e *rvEnv) service(mod func(*cancel.Config)) *cancel.Service {
	c := cancel.Config{Store: e.store, Seats: e.seats, OnDiscrepancy: e.refunds.hook, Runtime: rvQuiet}
	if mod != nil {
		mod(&c)
	}
	svc, err := cancel.New(c)
	require.NoError(e.t, err)
	return svc
}

func (e *rvEnv) insert() func(context.Context, cancel.Placement) error {
	if e.mem != nil {
		return e.mem.Place
	}
	return e.sqls.Insert(e.db, nil)
}

// soon is a deadline that due() passes.
func (e *rvEnv) soon() time.Time {
	if e.mem != nil {
		return e.clock.Now().Add(time.Minute)
	}
	return time.Now().Add(30 * time.Millisecond)
}

// later is a deadline due() does not pass.
func (e *rvEnv) later() time.Time {
	if e.mem != nil {
		return e.clock.Now().Add(time.Hour)
	}
	return time.Now().Add(time.Hour)
}

// due lets the time pass that makes soon() deadlines due, by the store's
// clock (and the seat store's).
func (e *rvEnv) due() {
	e.clock.Advance(2 * time.Minute)
	if e.mem == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *rvEnv) place(svc *cancel.Service, p cancel.Placement) error {
	return svc.Place(e.ctx, p, e.insert())
}

// status is the order's status in the order store.
func (e *rvEnv) status(no string) expiry.Status {
	o, err := e.store.Order(e.ctx, no)
	require.NoError(e.t, err)
	return o.Status
}

// paidBy is the payment that paid the order ("" unless it is paid).
func (e *rvEnv) paidBy(no string) string {
	if e.status(no) != expiry.StatusPaid {
		return ""
	}
	// A paid order is not pending: PayPending changes nothing and answers
	// who paid it.
	res, err := e.store.PayPending(e.ctx, cancel.Payment{OrderNo: no, PaymentID: "probe"})
	require.NoError(e.t, err)
	require.False(e.t, res.Changed)
	return res.PaymentID
}

// ordersPaidBy lists the orders among nos paid by payment id.
func (e *rvEnv) ordersPaidBy(id string, nos ...string) []string {
	var out []string
	for _, no := range nos {
		if e.paidBy(no) == id {
			out = append(out, no)
		}
	}
	return out
}

// holding counts the seats of the placements whose order is pending or paid
// (the seats their user holds, by the outcome); a placement that was
// refused holds none.
func (e *rvEnv) holding(ps ...cancel.Placement) int {
	n := 0
	for _, p := range ps {
		o, err := e.store.Order(e.ctx, p.OrderNo)
		if errors.Is(err, expiry.ErrNotFound) {
			continue
		}
		require.NoError(e.t, err)
		if o.Status == expiry.StatusPending || o.Status == expiry.StatusPaid {
			n += len(p.Seats)
		}
	}
	return n
}

func (e *rvEnv) seat(show, seat string) cancel.SeatState {
	st, err := e.seats.Show(e.ctx, show)
	require.NoError(e.t, err)
	return st[seat]
}

func (e *rvEnv) held(show, user string) int {
	n, err := e.seats.Held(e.ctx, show, user)
	require.NoError(e.t, err)
	return n
}

var rvKinds = []string{"memstore", "sqlite"}

// ---------------------------------------------------------------------------
// 1. A payment id's fate decided once (I14).

// One payment id, P, pays the buyer's pending order B; the provider then
// reports the same P (a repeat routed by its order reference to the buyer's
// other order, or a replayed callback) for order A, which its timeout
// cancelled. With late payments on, A is reinstated by P as well: one payment
// honoured by two orders, two orders' seats sold for one payment. The decision
// key (oe_payment_discrepancy) is written only by a reinstatement, never by
// the ordinary payment of a pending order, so the late path cannot see that P
// was honoured already.
func TestReviewPaymentIDPaysOneOrder(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			svc := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: e.soon()}
			b := cancel.Placement{OrderNo: "B", UserID: "u1", ShowID: "ev", Seats: []string{"b1"}, ExpireAt: e.later()}
			require.NoError(t, e.place(svc, a))
			require.NoError(t, e.place(svc, b))
			e.due()
			changed, _, err := svc.Timeout(e.ctx, "A")
			require.NoError(t, err)
			require.True(t, changed)

			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "B", PaymentID: "P"})
			require.NoError(t, err)
			_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"}) // the same payment, for the cancelled order

			paid := e.ordersPaidBy("P", "A", "B")
			assert.Len(t, paid, 1, "I14: payment P is honoured by orders %v; one payment pays one order", paid)
			assert.LessOrEqual(t, e.held("ev", "u1"), 1, "I14: seats sold to u1 for one payment")
		})
	}
}

// P is refunded (its order A was cancelled by its user), then the same P
// pays a pending order B: refunded and honoured. And the other way round: P
// pays pending order D, then arrives for C (cancelled by its user) and is
// handed to the refund hook although it paid D. The refuse path consults
// the decision key, but the pending path neither reads nor writes it.
func TestReviewRefundedPaymentIDNeverHonoured(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			svc := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			for _, p := range []cancel.Placement{
				{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: e.later()},
				{OrderNo: "B", UserID: "u1", ShowID: "ev", Seats: []string{"b1"}, ExpireAt: e.later()},
				{OrderNo: "C", UserID: "u2", ShowID: "ev", Seats: []string{"c1"}, ExpireAt: e.later()},
				{OrderNo: "D", UserID: "u2", ShowID: "ev", Seats: []string{"d1"}, ExpireAt: e.later()},
			} {
				require.NoError(t, e.place(svc, p))
			}

			// Refunded first, then honoured.
			_, err := svc.UserCancel(e.ctx, "A", "u1")
			require.NoError(t, err)
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			require.Equal(t, 1, e.refunds.count("P"))
			_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: "B", PaymentID: "P"})
			assert.False(t, e.refunds.count("P") > 0 && len(e.ordersPaidBy("P", "A", "B")) > 0,
				"I14: P refunded (%d) and honoured by %v", e.refunds.count("P"), e.ordersPaidBy("P", "A", "B"))

			// Honoured first, then refunded.
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "D", PaymentID: "Q"})
			require.NoError(t, err)
			_, err = svc.UserCancel(e.ctx, "C", "u2")
			require.NoError(t, err)
			_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: "C", PaymentID: "Q"})
			assert.False(t, e.refunds.count("Q") > 0 && len(e.ordersPaidBy("Q", "C", "D")) > 0,
				"I14: Q honoured by %v and refunded (%d)", e.ordersPaidBy("Q", "C", "D"), e.refunds.count("Q"))
		})
	}
}

// Repeats of two payment ids race a late reinstatement on two services of
// one store, one of them with late payments off (a deploy changing the
// policy): each id ends honoured or refunded once, at most one honours the
// order, and the seat follows.
func TestReviewHoldsLatePayRepeatsRacingOnTwoServices(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			late := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			strict := e.service(nil)
			const orders = 4
			var ps []cancel.Placement
			for i := range orders {
				p := cancel.Placement{OrderNo: fmt.Sprintf("o%d", i), UserID: fmt.Sprintf("u%d", i), ShowID: "ev",
					Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: e.soon(), Limit: 1}
				require.NoError(t, e.place(late, p))
				ps = append(ps, p)
			}
			e.due()
			for _, p := range ps {
				changed, _, err := late.Timeout(e.ctx, p.OrderNo)
				require.NoError(t, err)
				require.True(t, changed)
			}
			var wg sync.WaitGroup
			for i, p := range ps {
				for r := range 6 {
					svc := late
					if (r+i)%3 == 0 {
						svc = strict
					}
					id := fmt.Sprintf("%s-P%d", p.OrderNo, r%2)
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: id})
					}()
				}
			}
			wg.Wait()
			for _, p := range ps {
				// Settle: the refunds whose hook was interrupted would be retried.
				by := e.paidBy(p.OrderNo)
				for r := range 2 {
					id := fmt.Sprintf("%s-P%d", p.OrderNo, r)
					honoured := by == id
					refunds := e.refunds.count(id)
					assert.True(t, honoured != (refunds == 1) && refunds <= 1,
						"I14: %s honoured=%v refunded %d times", id, honoured, refunds)
				}
				st := e.seat("ev", p.Seats[0])
				if by != "" {
					assert.Equal(t, cancel.SeatSold, st.Status, "I15: %s paid, its seat sold", p.OrderNo)
					assert.Equal(t, p.OrderNo, st.OrderNo)
					assert.Equal(t, 1, e.held("ev", p.UserID))
				} else {
					assert.Empty(t, st.OrderNo, "I15: %s refunded, its seat free", p.OrderNo)
					assert.Equal(t, 0, e.held("ev", p.UserID))
				}
			}
		})
	}
}

// A reinstatement whose seat claim fails after the decision was written:
// a transient failure leaves the id undecided (its retry reinstates, never
// refunded); a refusal by the purchase limit refunds it once, and its repeat
// after the limit frees up neither reinstates nor refunds again.
func TestReviewHoldsDecisionRolledBackWhenClaimFails(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			var failLock atomic.Bool
			e.seats.Fail = func(op string) error {
				if op == "Lock" && failLock.CompareAndSwap(true, false) {
					return errors.New("injected: seat store unreachable")
				}
				return nil
			}
			svc := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: e.soon(), Limit: 1}
			c := cancel.Placement{OrderNo: "C", UserID: "u2", ShowID: "ev", Seats: []string{"c1"}, ExpireAt: e.soon(), Limit: 1}
			require.NoError(t, e.place(svc, a))
			require.NoError(t, e.place(svc, c))
			e.due()
			for _, no := range []string{"A", "C"} {
				changed, _, err := svc.Timeout(e.ctx, no)
				require.NoError(t, err)
				require.True(t, changed)
			}

			failLock.Store(true)
			_, err := svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", PaymentID: "PA"})
			require.Error(t, err)
			assert.Equal(t, 0, e.refunds.count("PA"))
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", PaymentID: "PA"})
			require.NoError(t, err)
			assert.Equal(t, "PA", e.paidBy("A"))
			assert.Equal(t, 0, e.refunds.count("PA"), "I14: honoured, never refunded")
			assert.Equal(t, "A", e.seat("ev", "a1").OrderNo)

			// u2 is at the limit with another order: PC is refunded.
			d := cancel.Placement{OrderNo: "D", UserID: "u2", ShowID: "ev", Seats: []string{"d1"}, ExpireAt: e.later(), Limit: 1}
			require.NoError(t, e.place(svc, d))
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "C", PaymentID: "PC"})
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			_, err = svc.UserCancel(e.ctx, "D", "u2")
			require.NoError(t, err)
			_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: "C", PaymentID: "PC"})
			assert.Equal(t, expiry.StatusCancelled, e.status("C"), "I14: refunded PC never honoured")
			assert.Equal(t, 1, e.refunds.count("PC"))
			assert.Equal(t, 0, e.held("ev", "u2"))
			assert.Empty(t, e.seat("ev", "c1").OrderNo)
		})
	}
}

// ---------------------------------------------------------------------------
// 3. The purchase limit on the late path (I17).

// The buyer, at a limit of 2, lets order A (2 seats) time out, places B (2
// seats), then pays A late: refunded, the buyer keeps 2 seats.
func TestReviewHoldsLateReinstatementHeldToLimit(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			svc := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1", "a2"}, ExpireAt: e.soon(), Limit: 2}
			require.NoError(t, e.place(svc, a))
			e.due()
			_, _, err := svc.Timeout(e.ctx, "A")
			require.NoError(t, err)
			b := cancel.Placement{OrderNo: "B", UserID: "u1", ShowID: "ev", Seats: []string{"b1", "b2"}, ExpireAt: e.later(), Limit: 2}
			require.NoError(t, e.place(svc, b))
			_, _ = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})
			assert.LessOrEqual(t, e.holding(a, b), 2, "I17")
			assert.Equal(t, 1, e.refunds.count("P"))
			assert.Equal(t, 2, e.held("ev", "u1"), "I8")
		})
	}
}

// An order placed by the previous version (its purchase limit, 3, given to
// Place beside the placement and not stored; the seat_limit column did not
// exist) is cancelled by its timeout after the upgrade; the buyer places
// another order up to the limit, then pays the old one late. The old order
// is reinstated with no limit at all (seat_limit NULL is read as 0): the
// buyer holds 4 seats of a show limited to 3.
func TestReviewLimitOfOrderPlacedBeforeUpgradeKept(t *testing.T) {
	ctx := context.Background()
	db := rvOpenSQLite(t)
	for _, q := range rvSchemaBeforeLimit {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	clock := expirytest.NewFakeClock(time.Now())
	seats := memstore.NewSeats(clock.Now)
	// The previous version's placement of A: its rows, its seats locked
	// under the limit of 3.
	now := time.Now().UnixMilli()
	_, err := db.ExecContext(ctx, `INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms, seats)
		VALUES ('A', 'u1', 'ev', 0, ?, ?, ?, 'a1,a2')`, now+30, now, now)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO oe_order_seat (show_id, seat_id, order_no, state) VALUES ('ev', 'a1', 'A', 1), ('ev', 'a2', 'A', 1)`)
	require.NoError(t, err)
	require.NoError(t, lockErr(seats.Lock(ctx, cancel.Hold{ShowID: "ev", OrderNo: "A", UserID: "u1", Seats: []string{"a1", "a2"}}, 3)))

	// The upgrade.
	store, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	require.NoError(t, store.Migrate(ctx))
	refunds := &rvRefunds{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: refunds.hook,
		AcceptLatePayments: true, Runtime: rvQuiet})
	require.NoError(t, err)

	time.Sleep(50 * time.Millisecond)
	changed, _, err := svc.Timeout(ctx, "A")
	require.NoError(t, err)
	require.True(t, changed)
	b := cancel.Placement{OrderNo: "B", UserID: "u1", ShowID: "ev", Seats: []string{"b1", "b2"}, ExpireAt: time.Now().Add(time.Hour), Limit: 3}
	require.NoError(t, svc.Place(ctx, b, store.Insert(db, nil)))
	_, _ = svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})

	e := &rvEnv{t: t, ctx: ctx, store: store, seats: seats}
	a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1", "a2"}}
	assert.LessOrEqual(t, e.holding(a, b), 3, "I17: u1 holds %d seats of a show limited to 3 (A %v, B %v)",
		e.holding(a, b), e.status("A"), e.status("B"))
}

// rvSchemaBeforeLimit is the SQLite schema of 0471ed9: oe_order without
// seat_limit.
var rvSchemaBeforeLimit = []string{
	`CREATE TABLE oe_order (order_no TEXT PRIMARY KEY, user_id TEXT NOT NULL, show_id TEXT NOT NULL,
		status INTEGER NOT NULL DEFAULT 0, expire_at_ms INTEGER NOT NULL, created_at_ms INTEGER NOT NULL,
		updated_at_ms INTEGER NOT NULL, cancel_reason TEXT, payment_id TEXT, seats TEXT, warned_at_ms INTEGER)`,
	`CREATE INDEX oe_order_due ON oe_order (status, expire_at_ms, order_no)`,
	`CREATE TABLE oe_order_seat (show_id TEXT NOT NULL, seat_id TEXT NOT NULL, order_no TEXT NOT NULL,
		state INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (show_id, seat_id))`,
	`CREATE INDEX oe_order_seat_order ON oe_order_seat (order_no)`,
	`CREATE TABLE oe_payment_discrepancy (payment_id TEXT NOT NULL PRIMARY KEY, order_no TEXT NOT NULL,
		user_id TEXT NOT NULL, status INTEGER NOT NULL, recorded_at_ms INTEGER NOT NULL, tried_at_ms INTEGER NOT NULL,
		settled_at_ms INTEGER)`,
	`CREATE INDEX oe_payment_discrepancy_due ON oe_payment_discrepancy (settled_at_ms, tried_at_ms, payment_id)`,
}

// ---------------------------------------------------------------------------
// 4. MaxHold (I17).

// Extend asked again and again, before and after a Shorten, never moves a
// deadline past placement + MaxHold by the store's clock; MaxHold 0 is the
// hour; a negative one is refused.
func TestReviewHoldsMaxHoldCapsEveryExtension(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rvDiscardSender{}, Runtime: rvQuiet})
			require.NoError(t, err)
			_, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, MaxHold: -time.Second})
			require.Error(t, err, "a negative MaxHold")
			for _, tc := range []struct {
				no      string
				maxHold time.Duration
				cap     time.Duration
			}{{"H1", 3 * time.Second, 3 * time.Second}, {"H0", 0, time.Hour}} {
				svc := e.service(func(c *cancel.Config) { c.MaxHold, c.Scheduler = tc.maxHold, sched })
				before, err := e.store.(interface {
					Now(context.Context) (time.Time, error)
				}).Now(e.ctx)
				require.NoError(t, err)
				p := cancel.Placement{OrderNo: tc.no, UserID: "u1", ShowID: "ev", Seats: []string{tc.no}, ExpireAt: e.later().Add(-time.Hour + time.Second)}
				require.NoError(t, e.place(svc, p))
				after, err := e.store.(interface {
					Now(context.Context) (time.Time, error)
				}).Now(e.ctx)
				require.NoError(t, err)
				most := after.Add(tc.cap)
				check := func(what string) {
					o, err := e.store.Order(e.ctx, tc.no)
					require.NoError(t, err)
					assert.False(t, o.ExpireAt.After(most), "I17 after %s: deadline %v past placement + %v (%v)", what, o.ExpireAt, tc.cap, most)
				}
				for i := range 3 {
					res, err := svc.Extend(e.ctx, tc.no, "u1", 10*tc.cap)
					require.NoError(t, err)
					check("Extend")
					if i == 0 {
						require.True(t, res.Changed, "the first extension moves the deadline")
						assert.WithinDuration(t, most, res.Order.ExpireAt, time.Second+after.Sub(before), "up to the cap")
					}
				}
				_, err = svc.Shorten(e.ctx, tc.no, "", 500*time.Millisecond)
				require.NoError(t, err)
				_, err = svc.Extend(e.ctx, tc.no, "", 3*tc.cap)
				require.NoError(t, err)
				check("Shorten then Extend")
				_, err = svc.Extend(e.ctx, tc.no, "", 2*time.Hour)
				require.NoError(t, err)
				check("Extend by 2h")
			}
		})
	}
}

type rvDiscardSender struct{}

func (rvDiscardSender) Send(context.Context, expiry.Message, time.Duration) error { return nil }

// ---------------------------------------------------------------------------
// 5. Shorten reschedules, warning included.

// rvQueue is a DelaySender that keeps messages for a simulated broker.
type rvQueue struct {
	mu    sync.Mutex
	clock *expirytest.FakeClock
	msgs  []rvMsg
}

type rvMsg struct {
	at time.Time
	m  expiry.Message
}

func (q *rvQueue) Send(_ context.Context, m expiry.Message, d time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, rvMsg{at: q.clock.Now().Add(max(d, 0)), m: m})
	return nil
}

// next pops the earliest message.
func (q *rvQueue) next() (rvMsg, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		return rvMsg{}, false
	}
	sort.SliceStable(q.msgs, func(i, j int) bool { return q.msgs[i].at.Before(q.msgs[j].at) })
	m := q.msgs[0]
	q.msgs = q.msgs[1:]
	return m, true
}

// A 15-minute order with a 2-minute warning is shortened to 1 minute; its
// messages (the old expiry and warning in flight, and whatever Shorten sent)
// are delivered on time: the buyer is warned once, before the new deadline,
// and the order is cancelled at the new deadline, not 15 minutes in.
func TestReviewHoldsShortenWarnsBeforeNewDeadline(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Now())
	store := memstore.NewStore(clock.Now)
	seats := memstore.NewSeats(clock.Now)
	q := &rvQueue{clock: clock}
	rt := rvQuiet
	rt.Clock = clock
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: q, WarnBefore: 2 * time.Minute, Runtime: rt})
	require.NoError(t, err)
	var warnedAt []time.Time
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched, Runtime: rt,
		OnWarning: func(context.Context, expiry.Order) error { warnedAt = append(warnedAt, clock.Now()); return nil }})
	require.NoError(t, err)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: q, Runtime: rt})
	require.NoError(t, err)

	p := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: clock.Now().Add(15 * time.Minute)}
	require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
		if err := store.Place(ctx, p); err != nil {
			return err
		}
		sched.Schedule(ctx, p.OrderNo, p.ExpireAt)
		return nil
	}))
	clock.Advance(time.Minute)
	res, err := svc.Shorten(ctx, "A", "u1", time.Minute)
	require.NoError(t, err)
	require.True(t, res.Changed)
	deadline := res.Order.ExpireAt
	var cancelledAt time.Time
	for i := 0; i < 50; i++ {
		m, ok := q.next()
		if !ok {
			break
		}
		if m.at.After(clock.Now()) {
			clock.Advance(m.at.Sub(clock.Now()))
		}
		_, _ = h.Handle(ctx, m.m)
		if cancelledAt.IsZero() {
			if o, _ := store.Order(ctx, "A"); o.Status == expiry.StatusCancelled {
				cancelledAt = clock.Now()
			}
		}
	}
	require.Len(t, warnedAt, 1, "warned once")
	assert.True(t, warnedAt[0].Before(deadline), "warned at %v, before the new deadline %v", warnedAt[0], deadline)
	require.False(t, cancelledAt.IsZero(), "cancelled")
	assert.WithinDuration(t, deadline, cancelledAt, time.Second, "cancelled at the new deadline")
}

// ---------------------------------------------------------------------------
// 2. Lock ids (I15).

// rvGate blocks the n-th call of one operation until released.
type rvGate struct {
	op      string
	n       int32
	calls   atomic.Int32
	reached chan struct{}
	release chan struct{}
}

func newRvGate(op string, n int32) *rvGate {
	return &rvGate{op: op, n: n, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *rvGate) at(op string) {
	if op == g.op && g.calls.Add(1) == g.n {
		close(g.reached)
		<-g.release
	}
}

// The claims pass restores a lost lock of pending order A; before its
// re-check, A's timeout cancels it (freeing the restored lock), and a late
// payment reinstates A: a new lock of A, whose sale fails for a moment (left
// to the reconciler). Found by the review when the re-check released the
// restored locks of cancelled orders without a lock id (Restore returns
// none) and so freed the reinstated, paid order's new lock. The re-check now
// releases nothing (the lock pass does, naming the lock): u1 keeps the paid
// seat, its counter, and the limit.
func TestReviewRecheckSparesReinstatedLock(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Now())
	store := memstore.NewStore(clock.Now)
	seats := memstore.NewSeats(clock.Now)
	statuses := newRvGate("Statuses", 2) // the re-check's read
	var failSell atomic.Bool
	var releases atomic.Int32
	var svc *cancel.Service
	paid := make(chan cancel.Result, 1)
	lateCall := func() { // the late payment, whose sale fails for a moment
		failSell.Store(true)
		res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})
		assert.NoError(t, err)
		failSell.Store(false)
		paid <- res
	}
	store.Fail = func(op string) error { statuses.at(op); return nil }
	seats.Fail = func(op string) error {
		if op == "Release" && releases.Add(1) == 2 {
			// A release after the re-check read A cancelled (the first
			// Release is the timeout's): the late payment lands now.
			lateCall()
		}
		if op == "Sell" && failSell.Load() {
			return errors.New("injected: sell failed")
		}
		return nil
	}
	refunds := &rvRefunds{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: refunds.hook,
		AcceptLatePayments: true, Runtime: rvQuiet})
	require.NoError(t, err)
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: rvQuiet})
	require.NoError(t, err)
	a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: clock.Now().Add(time.Minute), Limit: 1}
	require.NoError(t, svc.Place(ctx, a, func(ctx context.Context, a cancel.Placement) error { return store.Place(ctx, a) }))
	seats.WipeShow("ev") // a partial loss: the claims pass restores A's lock

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = rec.Round(ctx)
	}()
	<-statuses.reached // the lock is restored; the re-check is about to read A's status
	clock.Advance(2 * time.Minute)
	changed, _, err := svc.Timeout(ctx, "A")
	require.NoError(t, err)
	require.True(t, changed)
	close(statuses.release) // the re-check reads A cancelled
	<-done
	if releases.Load() < 2 { // the re-check released nothing: the payment comes after it
		lateCall()
	}
	require.True(t, (<-paid).Changed, "reinstated")

	o, err := store.Order(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPaid, o.Status)
	st, err := seats.Show(ctx, "ev")
	require.NoError(t, err)
	assert.Equal(t, "A", st["a1"].OrderNo, "I15: the paid order's new lock was freed by a release that judged another lock")
	assert.Equal(t, 1, rvHeld(t, seats, "u1"), "I8: u1 holds one paid seat")
	d := cancel.Placement{OrderNo: "D", UserID: "u1", ShowID: "ev", Seats: []string{"d1"}, ExpireAt: clock.Now().Add(time.Hour), Limit: 1}
	err = svc.Place(ctx, d, func(ctx context.Context, d cancel.Placement) error { return store.Place(ctx, d) })
	assert.ErrorIs(t, err, cancel.ErrLimitExceeded, "I17: u1 already holds A's seat (paid) at a limit of 1")
}

// The same newer lock against the lock pass, which names the lock
// it judged: a stale lock of cancelled A (its release failed) is judged by
// one reconciler, freed by another, A is reinstated by a late payment whose
// sale fails for a moment, and the first reconciler's release then finds
// the new lock and leaves it; a later round sells it.
func TestReviewHoldsLockPassSparesReinstatedLock(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Now())
	store := memstore.NewStore(clock.Now)
	seats := memstore.NewSeats(clock.Now)
	release := newRvGate("Release", 2) // the first reconciler's
	var failRelease, failSell atomic.Bool
	seats.Fail = func(op string) error {
		if op == "Release" && failRelease.CompareAndSwap(true, false) {
			release.calls.Add(1)
			return errors.New("injected: release failed")
		}
		release.at(op)
		if op == "Sell" && failSell.Load() {
			return errors.New("injected: sell failed")
		}
		return nil
	}
	refunds := &rvRefunds{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, OnDiscrepancy: refunds.hook,
		AcceptLatePayments: true, Runtime: rvQuiet})
	require.NoError(t, err)
	newRec := func() *reconcile.Reconciler {
		r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Runtime: rvQuiet})
		require.NoError(t, err)
		return r
	}
	r1, r2 := newRec(), newRec()
	a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: clock.Now().Add(time.Minute), Limit: 1}
	require.NoError(t, svc.Place(ctx, a, func(ctx context.Context, a cancel.Placement) error { return store.Place(ctx, a) }))
	clock.Advance(2 * time.Minute)
	failRelease.Store(true)
	changed, _, err := svc.Timeout(ctx, "A")
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, "A", rvSeat(t, seats, "a1").OrderNo, "the stale lock")
	clock.Advance(time.Minute) // past Settle

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r1.Round(ctx)
	}()
	<-release.reached
	_, err = r2.Round(ctx) // frees the stale lock
	require.NoError(t, err)
	require.Empty(t, rvSeat(t, seats, "a1").OrderNo)
	failSell.Store(true)
	res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})
	require.NoError(t, err)
	require.True(t, res.Changed)
	failSell.Store(false)
	close(release.release)
	<-done
	assert.Equal(t, "A", rvSeat(t, seats, "a1").OrderNo, "I15: the new lock stays")
	assert.Equal(t, 1, rvHeld(t, seats, "u1"))
	clock.Advance(time.Minute)
	_, err = r1.Round(ctx)
	require.NoError(t, err)
	st := rvSeat(t, seats, "a1")
	assert.Equal(t, cancel.SeatSold, st.Status)
	assert.Equal(t, "A", st.OrderNo)
	assert.Equal(t, 1, rvHeld(t, seats, "u1"))
	assert.Equal(t, 0, refunds.count("P"))
}

func rvSeat(t *testing.T, seats *memstore.Seats, seat string) cancel.SeatState {
	st, err := seats.Show(context.Background(), "ev")
	require.NoError(t, err)
	return st[seat]
}

func rvHeld(t *testing.T, seats *memstore.Seats, user string) int {
	n, err := seats.Held(context.Background(), "ev", user)
	require.NoError(t, err)
	return n
}

// ---------------------------------------------------------------------------
// 6. Scopes (I16).

// rvHostDDL is a host's orders and claims tables on SQLite, with a tenant
// column when tenant is set.
func rvHostDDL(orders, claims string, tenant bool) []string {
	tcol, tkey := "", ""
	if tenant {
		tcol, tkey = "tenant_id INTEGER NOT NULL, ", "tenant_id, "
	}
	return []string{
		`CREATE TABLE ` + orders + ` (id INTEGER PRIMARY KEY AUTOINCREMENT, ` + tcol + `order_no TEXT NOT NULL,
			user_id TEXT NOT NULL, show_id TEXT NOT NULL, status INTEGER NOT NULL DEFAULT 0, expire_ms INTEGER NOT NULL,
			pay_no TEXT, reason TEXT, updated_ms INTEGER)`,
		`CREATE UNIQUE INDEX ` + orders + `_no ON ` + orders + ` (` + tkey + `order_no)`,
		`CREATE INDEX ` + orders + `_due ON ` + orders + ` (` + tkey + `status, expire_ms, order_no)`,
		`CREATE TABLE ` + claims + ` (` + tcol + `show_id TEXT NOT NULL, seat_id TEXT NOT NULL, order_no TEXT NOT NULL,
			PRIMARY KEY (` + tkey + `show_id, seat_id))`,
		`CREATE INDEX ` + claims + `_order ON ` + claims + ` (` + tkey + `order_no)`,
	}
}

// rvHostMapping maps rvHostDDL's tables; where applies to both tables except
// a soft-delete flag ("deleted"), which only the orders table has.
func rvHostMapping(orders, claims string, where ...sqlstore.Condition) sqlstore.Mapping {
	var claimsWhere []sqlstore.Condition
	for _, c := range where {
		if c.Column != "deleted" {
			claimsWhere = append(claimsWhere, c)
		}
	}
	return sqlstore.Mapping{
		Orders: sqlstore.Orders{Table: orders, OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses:     sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline:     sqlstore.Time{Column: "expire_ms", Type: sqlstore.EpochMillis},
			UpdatedAt:    sqlstore.Time{Column: "updated_ms", Type: sqlstore.EpochMillis},
			CancelReason: "reason", PaymentID: "pay_no", Where: where},
		Claims: &sqlstore.Claims{Table: claims, ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no", Where: claimsWhere},
	}
}

func rvHostStore(t *testing.T, db *sql.DB, m sqlstore.Mapping) *sqlstore.Store {
	ctx := context.Background()
	s, err := sqlstore.New(db, sqlstore.SQLite, m)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))
	return s
}

// Two services of one tenant on one database, the second built from a
// mapping that carries the tenant's condition twice (a shared base mapping
// plus a helper that adds the tenant again): New and Check accept it, it
// reads and writes exactly the rows of the first, but its Scope is
// "tenant_id=7&tenant_id=7", not "tenant_id=7". Each is wired as the README
// says, seats.Scoped(store.Scope()), so the tenant's seat locks and
// purchase-limit counters are split in two: the buyer places 2 seats
// through each service at a limit of 2 and holds 4. (Spelling the column
// "TENANT_ID" instead is refused by Check: that attack held.)
//
// Fixed: a Where that names a column twice is refused by New.
func TestReviewOneTenantOneScope(t *testing.T) {
	ctx := context.Background()
	db := rvOpenSQLite(t)
	for _, q := range rvHostDDL("t_order", "t_seat", true) {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	shared := memstore.NewSeats(nil)
	var placed []cancel.Placement
	var stores []*sqlstore.Store
	tenant7 := sqlstore.Condition{Column: "tenant_id", Value: 7}
	for i, where := range [][]sqlstore.Condition{{tenant7}, {tenant7, tenant7}} {
		store, err := sqlstore.New(db, sqlstore.SQLite, rvHostMapping("t_order", "t_seat", where...))
		if err != nil {
			t.Logf("refused at startup: %v", err)
			assert.ErrorContains(t, err, "listed twice")
			continue
		}
		t.Cleanup(func() { store.Close() })
		stores = append(stores, store)
		svc, err := cancel.New(cancel.Config{Store: store, Seats: shared.Scoped(store.Scope()), Runtime: rvQuiet})
		require.NoError(t, err)
		p := cancel.Placement{OrderNo: fmt.Sprintf("o%d", i), UserID: "u1", ShowID: "ev", Seats: []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)},
			ExpireAt: time.Now().Add(time.Hour), Limit: 2}
		if err := svc.Place(ctx, p, store.Insert(db, nil)); err == nil {
			placed = append(placed, p)
		}
	}
	for _, st := range stores {
		t.Logf("scope %q", st.Scope())
	}
	n := 0
	for _, p := range placed {
		o, err := stores[0].Order(ctx, p.OrderNo) // one tenant: either store reads both
		require.NoError(t, err)
		if o.Status == expiry.StatusPending {
			n += len(p.Seats)
		}
	}
	assert.LessOrEqual(t, n, 2, "I17: tenant 7's buyer holds %d seats of a show limited to 2", n)
}

// Two tenants, each on its own tables of one database (a table per tenant,
// no Where), share one seat store: both stores have scope "", so both
// wirings are accepted on the unscoped seat store. Tenant 1's reconciler
// then reads tenant 2's seat locks, finds no such order in its own table and
// frees them: tenant 2's pending order loses its seat lock and its buyer's
// counter, and that buyer places past the limit.
//
// Fixed: a mapped store's scope names its table, so the shared seat store is
// refused, and with each table's own scope tenant 2 keeps its seat.
func TestReviewTenantPerTableHasItsScope(t *testing.T) {
	ctx := context.Background()
	db := rvOpenSQLite(t)
	for _, tn := range []string{"t1", "t2"} {
		for _, q := range rvHostDDL(tn+"_order", tn+"_seat", false) {
			_, err := db.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
	}
	clock := expirytest.NewFakeClock(time.Now())
	seats := memstore.NewSeats(clock.Now)
	store1 := rvHostStore(t, db, rvHostMapping("t1_order", "t1_seat"))
	store2 := rvHostStore(t, db, rvHostMapping("t2_order", "t2_seat"))
	_, err1 := cancel.New(cancel.Config{Store: store1, Seats: seats, Runtime: rvQuiet})
	_, err2 := cancel.New(cancel.Config{Store: store2, Seats: seats, Runtime: rvQuiet})
	require.Error(t, err1, "a mapped store's scope is its table: the shared, unscoped seat store is refused")
	require.Error(t, err2)
	svc1, err1 := cancel.New(cancel.Config{Store: store1, Seats: seats.Scoped(store1.Scope()), Runtime: rvQuiet})
	svc2, err2 := cancel.New(cancel.Config{Store: store2, Seats: seats.Scoped(store2.Scope()), Runtime: rvQuiet})
	rec1, err3 := reconcile.New(reconcile.Config{Orders: store1, Seats: seats.Scoped(store1.Scope()), Service: svc1, Runtime: rvQuiet})
	require.NoError(t, errors.Join(err1, err2, err3), "each tenant's table with its own scope of the seat store")
	seats = seats.Scoped(store2.Scope()) // what tenant 2's buyer holds

	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "ev2", Seats: []string{"x1"}, ExpireAt: time.Now().Add(time.Hour), Limit: 1}
	require.NoError(t, svc2.Place(ctx, p, store2.Insert(db, nil)))
	clock.Advance(2 * reconcile.GraceDefault)
	_, err := rec1.Round(ctx)
	require.NoError(t, err)

	st, err := seats.Show(ctx, "ev2")
	require.NoError(t, err)
	assert.Equal(t, "o1", st["x1"].OrderNo, "I16: tenant 1's reconciler freed tenant 2's pending order's seat")
	q := cancel.Placement{OrderNo: "o2", UserID: "u1", ShowID: "ev2", Seats: []string{"x2"}, ExpireAt: time.Now().Add(time.Hour), Limit: 1}
	_ = svc2.Place(ctx, q, store2.Insert(db, nil))
	n := 0
	for _, pl := range []cancel.Placement{p, q} {
		if o, err := store2.Order(ctx, pl.OrderNo); err == nil && o.Status == expiry.StatusPending {
			n++
		}
	}
	assert.LessOrEqual(t, n, 1, "I17: tenant 2's buyer holds %d seats at a limit of 1", n)
}

// reconcile.New checks that its Orders and Seats serve one scope, but not
// its Service: tenant 7's reconciler wired with tenant 8's Service cancels
// tenant 8's due order of the same number (another tenant's row changed),
// while tenant 7's own due order stays pending round after round.
func TestReviewReconcilerRefusesServiceOfAnotherScope(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Now())
	shared := memstore.NewSeats(clock.Now)
	store7 := memstore.NewScopedStore(clock.Now, "tenant_id=7")
	store8 := memstore.NewScopedStore(clock.Now, "tenant_id=8")
	svc7, err := cancel.New(cancel.Config{Store: store7, Seats: shared.Scoped("tenant_id=7"), Runtime: rvQuiet})
	require.NoError(t, err)
	svc8, err := cancel.New(cancel.Config{Store: store8, Seats: shared.Scoped("tenant_id=8"), Runtime: rvQuiet})
	require.NoError(t, err)
	for _, w := range []struct {
		svc   *cancel.Service
		store *memstore.Store
		user  string
	}{{svc7, store7, "u7"}, {svc8, store8, "u8"}} {
		p := cancel.Placement{OrderNo: "o1", UserID: w.user, ShowID: "ev", Seats: []string{"x1"}, ExpireAt: clock.Now().Add(time.Minute)}
		require.NoError(t, w.svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return w.store.Place(ctx, p) }))
	}
	clock.Advance(2 * time.Minute)
	rec7, err := reconcile.New(reconcile.Config{Orders: store7, Seats: shared.Scoped("tenant_id=7"), Service: svc8, Runtime: rvQuiet})
	if err != nil {
		return // refused: the wiring cannot be built
	}
	for range 3 {
		_, _ = rec7.Round(ctx)
	}
	o8, err := store8.Order(ctx, "o1")
	require.NoError(t, err)
	o7, err := store7.Order(ctx, "o1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o8.Status, "I16: tenant 7's reconciler cancelled tenant 8's order")
	assert.Equal(t, expiry.StatusCancelled, o7.Status, "I3: tenant 7's due order still pending after its reconciler's rounds")
}

// The scope checks that held: a seat store of another scope is refused by
// both constructors; Scoped of a Scoped is that scope (not a nesting that
// could meet another tenant's); the Where's order does not change the scope.
func TestReviewHoldsScopeWiring(t *testing.T) {
	ctx := context.Background()
	db := rvOpenSQLite(t)
	for _, q := range rvHostDDL("t_order", "t_seat", true) {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	_, err := db.ExecContext(ctx, "ALTER TABLE t_order ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0")
	require.NoError(t, err)
	a := rvHostStore(t, db, rvHostMapping("t_order", "t_seat", sqlstore.Condition{Column: "tenant_id", Value: 7}, sqlstore.Condition{Column: "deleted", Value: 0}))
	m := rvHostMapping("t_order", "t_seat", sqlstore.Condition{Column: "deleted", Value: 0}, sqlstore.Condition{Column: "tenant_id", Value: 7})
	b := rvHostStore(t, db, m)
	assert.Equal(t, a.Scope(), b.Scope())

	_, err = sqlstore.New(db, sqlstore.SQLite, rvHostMapping("t_order", "t_seat", sqlstore.Condition{Column: "TENANT_ID", Value: 7}))
	if err == nil {
		s, _ := sqlstore.New(db, sqlstore.SQLite, rvHostMapping("t_order", "t_seat", sqlstore.Condition{Column: "TENANT_ID", Value: 7}))
		assert.Error(t, s.Check(ctx), "the tenant column spelled in capitals: another scope for the same rows")
		s.Close()
	}

	shared := memstore.NewSeats(nil)
	_, err = cancel.New(cancel.Config{Store: a, Seats: shared})
	assert.Error(t, err)
	_, err = cancel.New(cancel.Config{Store: a, Seats: shared.Scoped("tenant_id=8")})
	assert.Error(t, err)
	nested := shared.Scoped("x").Scoped(a.Scope())
	assert.Same(t, shared.Scoped(a.Scope()), nested)
	svc, err := cancel.New(cancel.Config{Store: a, Seats: nested, Runtime: rvQuiet})
	require.NoError(t, err)
	_, err = reconcile.New(reconcile.Config{Orders: a, Seats: shared.Scoped("x"), Service: svc})
	assert.Error(t, err)
	_, err = reconcile.New(reconcile.Config{Orders: memstore.NewStore(nil), Seats: nested, Service: svc})
	assert.Error(t, err)
}

// A payment callback naming another user (a forged or misrouted one) for a
// late order decides nothing: the owner's payment with the same id later
// reinstates the order, and the id is never refunded.
func TestReviewHoldsLatePaymentOfAnotherUserDecidesNothing(t *testing.T) {
	for _, kind := range rvKinds {
		t.Run(kind, func(t *testing.T) {
			e := newRvEnv(t, kind)
			svc := e.service(func(c *cancel.Config) { c.AcceptLatePayments = true })
			a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: e.soon()}
			require.NoError(t, e.place(svc, a))
			e.due()
			_, _, err := svc.Timeout(e.ctx, "A")
			require.NoError(t, err)
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", UserID: "u2", PaymentID: "P"})
			require.Error(t, err)
			_, err = svc.Pay(e.ctx, cancel.Payment{OrderNo: "A", UserID: "u1", PaymentID: "P"})
			require.NoError(t, err)
			assert.Equal(t, "P", e.paidBy("A"))
			assert.Equal(t, 0, e.refunds.count("P"))
			st := e.seat("ev", "a1")
			assert.Equal(t, "A", st.OrderNo)
			assert.Equal(t, cancel.SeatSold, st.Status)
		})
	}
}

// A host table without a payment-id column (the DESIGN's corpus has such
// tables, and says what a host table lacks the library keeps in side tables
// of its own): the provider repeats the callback of the payment that paid
// the order, and the repeat is handed to the refund hook. The payment is
// honoured and refunded.
func TestReviewRepeatedCallbackNeverRefundedOnTableWithoutPaymentID(t *testing.T) {
	ctx := context.Background()
	db := rvOpenSQLite(t)
	for _, q := range rvHostDDL("t_order", "t_seat", false) {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	m := rvHostMapping("t_order", "t_seat")
	m.Orders.PaymentID = ""
	store := rvHostStore(t, db, m)
	refunds := &rvRefunds{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(nil).Scoped(store.Scope()), OnDiscrepancy: refunds.hook, Runtime: rvQuiet})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, p, store.Insert(db, nil)))
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, _ = svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P"}) // the provider repeats its callback
	}
	o, err := store.Order(ctx, "A")
	require.NoError(t, err)
	require.Equal(t, expiry.StatusPaid, o.Status, "P paid A")
	assert.Equal(t, 0, refunds.count("P"), "I14/I9: P honoured (it paid A) and refunded")
}

// lockErr is the error of a seat store's Lock, for asserting on it.
func lockErr(_ string, err error) error { return err }
