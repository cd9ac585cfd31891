package sqlstore_test

// Attacks on the transition hook (cancel.Hook, Store.SetHook), judged by
// outcomes: the order's status, the hook's own rows, the seats in Redis,
// which payment ids were honoured or refunded (expiry/doc.go's I1, I2, I9,
// I14, I15), on SQLite, MariaDB and PostgreSQL through the public API.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// hookWorld is one database with the library's schema, the hook's own
// table, Redis seats and a Service whose refund hook counts refunds.
type hookWorld struct {
	d     sqlstore.Dialect
	db    *sql.DB
	store *sqlstore.Store
	seats *redisseat.Seats
	svc   *cancel.Service
	show  string
	now   time.Time

	mu      sync.Mutex
	refunds map[string]int // payment id → refund hook calls

	// partialRows: not every transition runs the hook (an instance
	// without one), so assertAgrees does not ask for a row per transition.
	partialRows bool
	placed      []cancel.Placement
}

// eachDB runs fn on SQLite, MariaDB and PostgreSQL.
func eachDB(t *testing.T, fn func(t *testing.T, d sqlstore.Dialect, db *sql.DB)) {
	t.Run("SQLite", func(t *testing.T) { fn(t, sqlstore.SQLite, openSQLite(t)) })
	t.Run("MariaDB", func(t *testing.T) { fn(t, sqlstore.MySQL, testenv.MySQL(t)) })
	t.Run("Postgres", func(t *testing.T) { fn(t, sqlstore.Postgres, testenv.Postgres(t)) })
}

func bindQ(d sqlstore.Dialect, q string) string {
	if d != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func newHookWorld(t *testing.T, d sqlstore.Dialect, db *sql.DB, acceptLate bool) *hookWorld {
	return newMappedHookWorld(t, d, db, acceptLate, nil)
}

// newMappedHookWorld is newHookWorld on a host's tables (m; nil: the
// library's schema), its seats in the store's scope.
func newMappedHookWorld(t *testing.T, d sqlstore.Dialect, db *sql.DB, acceptLate bool, m *sqlstore.Mapping) *hookWorld {
	ctx := context.Background()
	var ms []sqlstore.Mapping
	if m != nil {
		ms = append(ms, *m)
	}
	s, err := sqlstore.New(db, d, ms...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { s.Close() })
	_, err = db.ExecContext(ctx, "CREATE TABLE hook_rows (order_no VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, payment_id VARCHAR(64) NOT NULL, PRIMARY KEY (order_no, status))")
	require.NoError(t, err)
	seats, err := redisseat.New(testenv.Redis(t), "oe-hk-"+testenv.Unique())
	require.NoError(t, err)
	seats = seats.Scoped(s.Scope())
	w := &hookWorld{d: d, db: db, store: s, seats: seats, show: "show-" + testenv.Unique(), refunds: map[string]int{}}
	w.svc, err = cancel.New(cancel.Config{Store: s, Seats: seats, AcceptLatePayments: acceptLate,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.refunds[d.PaymentID]++
			return nil
		}})
	require.NoError(t, err)
	w.now, err = s.Now(ctx)
	require.NoError(t, err)
	return w
}

// write is the well-behaved hook's work: one row per transition, through tx.
func (w *hookWorld) write(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
	_, err := tx.ExecContext(ctx, bindQ(w.d, "INSERT INTO hook_rows (order_no, status, payment_id) VALUES (?, ?, ?)"), r.Order.No, r.Order.Status.String(), r.PaymentID)
	return err
}

// rows returns the hook's committed rows: order → its statuses.
func (w *hookWorld) rows(t *testing.T) map[string][]string {
	rs, err := w.db.QueryContext(context.Background(), "SELECT order_no, status FROM hook_rows ORDER BY order_no, status")
	require.NoError(t, err)
	defer rs.Close()
	out := map[string][]string{}
	for rs.Next() {
		var no, st string
		require.NoError(t, rs.Scan(&no, &st))
		out[no] = append(out[no], st)
	}
	require.NoError(t, rs.Err())
	return out
}

func (w *hookWorld) place(t *testing.T, no, user string, expireAt time.Time, seats ...string) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: w.show, Seats: seats, ExpireAt: expireAt}
	require.NoError(t, w.svc.Place(context.Background(), p, w.store.Insert(w.db, nil)))
	w.placed = append(w.placed, p)
	return p
}

func (w *hookWorld) status(t *testing.T, no string) expiry.Status {
	o, err := w.store.Order(context.Background(), no)
	require.NoError(t, err)
	return o.Status
}

// seatOf returns who holds seat in Redis and how ("" free).
func (w *hookWorld) seatOf(t *testing.T, seat string) (cancel.SeatStatus, string) {
	all, err := w.seats.Show(context.Background(), w.show)
	require.NoError(t, err)
	st, ok := all[seat]
	if !ok {
		return 0, ""
	}
	return st.Status, st.OrderNo
}

func (w *hookWorld) refunded(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refunds[id]
}

// assertAgrees checks that the hook's rows are the order's transitions and
// that Redis agrees with SQL about its seats (I15 at settle, I2).
func (w *hookWorld) assertAgrees(t *testing.T, no string, seats ...string) {
	t.Helper()
	st := w.status(t, no)
	user := ""
	for _, p := range w.placed {
		if p.OrderNo == no {
			user = p.UserID
		}
	}
	if user != "" {
		// I8: the user's counter is its seats in pending and paid orders.
		want := 0
		for _, p := range w.placed {
			if p.UserID == user && w.status(t, p.OrderNo) != expiry.StatusCancelled {
				want += len(p.Seats)
			}
		}
		held, err := w.seats.Held(context.Background(), w.show, user)
		require.NoError(t, err)
		assert.Equal(t, want, held, "user %s: purchase-limit counter (I8)", user)
	}
	rows := w.rows(t)[no]
	switch {
	case st == expiry.StatusPending:
		assert.Empty(t, rows, "order %s is pending: the hook's rows must show no transition", no)
	case !w.partialRows:
		assert.Contains(t, rows, st.String(), "order %s is %s: the hook's rows must show that transition", no, st)
	}
	for _, seat := range seats {
		ss, holder := w.seatOf(t, seat)
		switch st {
		case expiry.StatusPending:
			assert.Equal(t, cancel.SeatLocked, ss, "seat %s of pending order %s must still be locked in Redis", seat, no)
			assert.Equal(t, no, holder)
		case expiry.StatusPaid:
			if holder == no {
				assert.NotEqual(t, cancel.SeatLocked, ss, "seat %s of paid order %s", seat, no)
			}
			assert.True(t, holder == no || holder == "", "seat %s of paid order %s held by %q", seat, no, holder)
		case expiry.StatusCancelled:
			assert.NotEqual(t, no, holder, "seat %s of cancelled order %s must be released", seat, no)
		}
	}
}

// TestHookAttackPanicRollsBack: a hook that panics (a host bug; a worker
// pool or an HTTP server that recovers panics keeps the process alive)
// must not leave its transaction open. Seen on the branch: the store's
// transaction helper rolls back only on an error, so the panic skips the
// rollback and the transaction stays open, holding its connection and the
// order's row (on SQLite the database's write lock) for as long as the
// caller's context lives: on SQLite every other order's cancel waits and
// fails (I3, I12: one stuck order holds the others back); on MariaDB and
// PostgreSQL the same order can never be cancelled again while it lasts.
// Expected: the panic rolls the transaction back (and goes on up), and the
// next transitions, of this order and of others, go through.
func TestHookAttackPanicRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		a := w.place(t, "panic-a", "u1", w.now.Add(time.Hour), "A1")
		b := w.place(t, "panic-b", "u2", w.now.Add(time.Hour), "B1")
		w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if r.Order.No == a.OrderNo && r.Order.Status == expiry.StatusCancelled {
				panic("host bug in the hook")
			}
			return w.write(ctx, tx, r)
		})
		// The caller's context outlives the call (a long-lived worker);
		// it ends at cleanup, before the database is dropped.
		callerCtx, endCaller := context.WithCancel(ctx)
		t.Cleanup(endCaller)
		panicked := func() (p any) {
			defer func() { p = recover() }()
			_, _ = w.svc.UserCancel(callerCtx, a.OrderNo, "u1")
			return nil
		}()
		require.NotNil(t, panicked, "the hook's panic goes up to the caller")

		ctx5, done := context.WithTimeout(ctx, time.Second)
		defer done()
		res, err := w.svc.UserCancel(ctx5, b.OrderNo, "u2")
		assert.NoError(t, err, "another order's cancel after a hook panicked")
		assert.True(t, res.Changed)
		res, err = w.svc.Pay(ctx5, cancel.Payment{OrderNo: a.OrderNo, UserID: "u1", PaymentID: "pay-panic-a"})
		assert.NoError(t, err, "the same order's payment after its cancel's hook panicked")
		assert.True(t, res.Changed)
		endCaller()
		w.assertAgrees(t, a.OrderNo, "A1")
		w.assertAgrees(t, b.OrderNo, "B1")
	})
}

// TestHookAttackRollbackThroughHandle: a hook that ends the transaction
// itself through its handle (ROLLBACK, as a host helper that "cleans up"
// might) and returns nil. Seen on MariaDB and PostgreSQL: the store's
// COMMIT then succeeds on an empty transaction, Pay answers Changed, the
// seats are sold in Redis, but SQL still has the order pending with the
// payment id undecided; the timeout then cancels the order the buyer was
// told was paid, and the payment is neither honoured nor refunded; the
// seat stays sold in Redis to the cancelled order and counts against the
// user's limit. Expected (I14, I15, I8): a payment id ends honoured or
// refunded once, and Redis agrees with SQL; a transition that did not commit is never
// reported as made.
func TestHookAttackRollbackThroughHandle(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		o := w.place(t, "rb-1", "u1", w.now.Add(-time.Second), "R1")
		w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if err := w.write(ctx, tx, r); err != nil {
				return err
			}
			if r.Order.Status == expiry.StatusPaid {
				_, err := tx.ExecContext(ctx, "ROLLBACK")
				return err
			}
			return nil
		})
		payment := cancel.Payment{OrderNo: o.OrderNo, UserID: "u1", PaymentID: "pay-rb-1"}
		res, payErr := w.svc.Pay(ctx, payment)
		t.Logf("pay: changed %v, err %v; SQL now says %s", res.Changed, payErr, w.status(t, o.OrderNo))
		if payErr == nil && res.Changed {
			assert.Equal(t, expiry.StatusPaid, w.status(t, o.OrderNo), "Pay reported the order paid: SQL must say so")
		}
		// The timeout fires (the order is due), then the provider repeats
		// its callback.
		_, _, err := w.svc.Timeout(ctx, o.OrderNo)
		require.NoError(t, err)
		_, _ = w.svc.Pay(ctx, payment)
		st := w.status(t, o.OrderNo)
		honoured := st == expiry.StatusPaid
		assert.True(t, honoured != (w.refunded(payment.PaymentID) == 1), "payment %s: honoured %v, refunded %d times: exactly one of the two (I14)", payment.PaymentID, honoured, w.refunded(payment.PaymentID))
		if payErr == nil && res.Changed {
			assert.True(t, honoured, "the buyer was told the order was paid (I1: never back)")
		}
		w.assertAgrees(t, o.OrderNo, "R1")
	})
}

// TestHookAttackCommitThroughHandle: a hook that commits through its
// handle (a host's COMMIT, or on MariaDB any DDL such as a lazy CREATE
// TABLE IF NOT EXISTS of its outbox, which commits implicitly) and then
// fails. The hook's doc promises that an error rolls the whole transition
// back and the payment id stays undecided. Seen on SQLite, MariaDB and
// PostgreSQL: Pay returns ErrHook (the host answers the provider "failed") while SQL
// has the order paid by that payment; the repeated callback then finds the
// order paid and sells nothing in Redis. Expected: an ErrHook answer
// means nothing committed (the order pending, the payment undecided), or
// the transition is reported as made. The store now tells the two apart
// by a savepoint around the hook and reports what committed.
func TestHookAttackCommitThroughHandle(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		o := w.place(t, "cm-1", "u1", w.now.Add(time.Hour), "C1")
		fail := true
		w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if err := w.write(ctx, tx, r); err != nil {
				return err
			}
			if fail {
				if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
					return err
				}
				return errors.New("the hook's later step failed")
			}
			return nil
		})
		payment := cancel.Payment{OrderNo: o.OrderNo, UserID: "u1", PaymentID: "pay-cm-1"}
		first, err := w.svc.Pay(ctx, payment)
		if errors.Is(err, cancel.ErrHook) {
			assert.Equal(t, expiry.StatusPending, w.status(t, o.OrderNo), "Pay answered ErrHook: nothing may have committed")
			assert.Empty(t, w.rows(t)[o.OrderNo], "Pay answered ErrHook: the hook's rows rolled back")
		} else {
			require.NoError(t, err)
			assert.True(t, first.Changed, "the hook committed the payment: Pay reports it made")
			assert.Equal(t, expiry.StatusPaid, w.status(t, o.OrderNo))
			w.assertAgrees(t, o.OrderNo, "C1") // sold in Redis at once, not left to the repeat
		}
		fail = false
		res, err := w.svc.Pay(ctx, payment) // the provider repeats
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		w.assertAgrees(t, o.OrderNo, "C1")
	})
}

// TestHookAttackReinstateRunsTheHook: with AcceptLatePayments, a late
// payment moves a cancelled order to paid (ReinstateCancelled) and claims
// its seats again: a transition, the only way back from a terminal state.
// The hook is "the host's own work in the transaction of a transition"
// (return a coupon, write an outbox row). It first ran for none of it
// (hook.go said so and asked the host to act on Pay's answer, outside the
// transaction, so a crash between the COMMIT and the host's write left its
// rows saying "cancelled" for a paid order for good); it now runs in the
// reinstatement's transaction. Expected: the hook's rows show the
// transition that committed last (the order's final state, I1, I14), in
// its transaction, as on every other path.
func TestHookAttackReinstateRunsTheHook(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, true)
		w.store.SetHook(w.write)
		o := w.place(t, "late-1", "u1", w.now.Add(-time.Second), "L1")
		cancelled, _, err := w.svc.Timeout(ctx, o.OrderNo)
		require.NoError(t, err)
		require.True(t, cancelled)
		res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, UserID: "u1", PaymentID: "pay-late-1"})
		require.NoError(t, err)
		require.True(t, res.Changed, "reinstated")
		require.Equal(t, expiry.StatusPaid, w.status(t, o.OrderNo))
		assert.Contains(t, w.rows(t)[o.OrderNo], expiry.StatusPaid.String(), "the order is paid: the hook's rows must say so")
		w.assertAgrees(t, o.OrderNo, "L1")
	})
}

// sendNothing is a DelaySender for a Handler whose re-arms are not looked at.
type sendNothing struct{}

func (sendNothing) Send(context.Context, expiry.Message, time.Duration) error { return nil }

// hookGate is a hook that writes its row and then fails for the orders
// marked failing, and counts its calls per order.
type hookGate struct {
	w     *hookWorld
	mu    sync.Mutex
	fail  map[string]bool
	calls map[string]int
}

func newHookGate(w *hookWorld) *hookGate {
	return &hookGate{w: w, fail: map[string]bool{}, calls: map[string]int{}}
}

func (g *hookGate) hook(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
	if err := g.w.write(ctx, tx, r); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[r.Order.No]++
	if g.fail[r.Order.No] {
		return fmt.Errorf("the host's hook failed for order %s", r.Order.No)
	}
	return nil
}

func (g *hookGate) set(fail bool, nos ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, no := range nos {
		g.fail[no] = fail
	}
}

func (g *hookGate) count(no string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[no]
}

// TestHookAttackFailureDecidesNothing: a failing hook on every entry point
// (user cancel, the timeout through expiry.Handler, ExpireNow, Pay)
// leaves the order pending, its seats locked by it in Redis, no hook row,
// no refund, the payment id undecided, and the timeout message not acked;
// once the hook works, the same payment id pays, another id is refunded
// once, and a payment whose order timed out meanwhile is refunded once
// however often it is repeated (I1, I2, I9, I14, I15).
func TestHookAttackFailureDecidesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		g := newHookGate(w)
		w.store.SetHook(g.hook)
		u := w.place(t, "f-user", "u1", w.now.Add(time.Hour), "F1")
		due := w.place(t, "f-due", "u2", w.now.Add(-time.Second), "F2", "F3")
		x := w.place(t, "f-expire", "u3", w.now.Add(time.Hour), "F4")
		p := w.place(t, "f-pay", "u4", w.now.Add(time.Hour), "F5")
		q := w.place(t, "f-pay-late", "u5", w.now.Add(time.Second), "F6")
		all := []cancel.Placement{u, due, x, p, q}
		for _, o := range all {
			g.set(true, o.OrderNo)
		}
		h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: sendNothing{}})
		require.NoError(t, err)

		_, err = w.svc.UserCancel(ctx, u.OrderNo, "u1")
		assert.ErrorIs(t, err, cancel.ErrHook)
		out, err := h.Handle(ctx, expiry.Message{OrderNo: due.OrderNo})
		assert.Error(t, err, "a timeout whose hook failed must be redelivered, not acked")
		assert.Equal(t, expiry.OutcomeFailed, out)
		assert.ErrorIs(t, err, cancel.ErrHook)
		_, err = w.svc.ExpireNow(ctx, x.OrderNo)
		assert.ErrorIs(t, err, cancel.ErrHook)
		payP := cancel.Payment{OrderNo: p.OrderNo, UserID: "u4", PaymentID: "pay-f-1"}
		_, err = w.svc.Pay(ctx, payP)
		assert.ErrorIs(t, err, cancel.ErrHook)
		assert.NotErrorIs(t, err, cancel.ErrDiscrepancy)
		payQ := cancel.Payment{OrderNo: q.OrderNo, UserID: "u5", PaymentID: "pay-f-late"}
		_, err = w.svc.Pay(ctx, payQ)
		assert.ErrorIs(t, err, cancel.ErrHook)

		assert.Empty(t, w.rows(t), "no hook row for transitions that rolled back")
		for _, o := range all {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
			assert.Equal(t, 1, g.count(o.OrderNo), "one hook call for %s", o.OrderNo)
		}
		assert.Zero(t, w.refunded(payP.PaymentID))
		assert.Zero(t, w.refunded(payQ.PaymentID))

		// The hook works again.
		g.set(false, u.OrderNo, due.OrderNo, x.OrderNo, p.OrderNo)
		res, err := w.svc.Pay(ctx, payP) // the provider repeats
		require.NoError(t, err)
		assert.True(t, res.Changed, "a payment whose hook failed was undecided: its repeat pays")
		_, err = w.svc.Pay(ctx, payP)
		require.NoError(t, err, "a repeated callback")
		payP2 := cancel.Payment{OrderNo: p.OrderNo, UserID: "u4", PaymentID: "pay-f-2"}
		for range 2 {
			_, err = w.svc.Pay(ctx, payP2)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}
		res, err = w.svc.UserCancel(ctx, u.OrderNo, "u1")
		require.NoError(t, err)
		assert.True(t, res.Changed)
		out, err = h.Handle(ctx, expiry.Message{OrderNo: due.OrderNo}) // redelivered
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeCancelled, out)
		res, err = w.svc.ExpireNow(ctx, x.OrderNo)
		require.NoError(t, err)
		assert.True(t, res.Changed)

		// q's payment failed in its hook; its order times out (the hook
		// works for the cancel), then the provider repeats the payment.
		g.set(false, q.OrderNo)
		require.Eventually(t, func() bool {
			c, _, err := w.svc.Timeout(ctx, q.OrderNo)
			return err == nil && c
		}, 10*time.Second, 200*time.Millisecond)
		for range 3 {
			_, err = w.svc.Pay(ctx, payQ)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}

		for _, o := range all {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
			assert.Len(t, w.rows(t)[o.OrderNo], 1, "one hook row for the one transition of %s", o.OrderNo)
		}
		assert.Equal(t, expiry.StatusPaid, w.status(t, p.OrderNo))
		assert.Zero(t, w.refunded(payP.PaymentID), "honoured, never refunded")
		assert.Equal(t, 1, w.refunded(payP2.PaymentID), "a second payment refunded once")
		assert.Equal(t, 1, w.refunded(payQ.PaymentID), "a payment for an order that timed out refunded once")
		ss, holder := w.seatOf(t, "F5")
		assert.Equal(t, cancel.SeatSold, ss)
		assert.Equal(t, p.OrderNo, holder)
	})
}

// TestHookAttackReconcilerSkipsOnlyTheFailing: a round of the reconciler
// where one expired order's hook fails cancels the others in the same
// round, leaves that one pending with its seats locked and no hook row,
// and backs it off; once the hook works a later round cancels it (I3, I12).
func TestHookAttackReconcilerSkipsOnlyTheFailing(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		g := newHookGate(w)
		w.store.SetHook(g.hook)
		var os []cancel.Placement
		for i := range 5 {
			os = append(os, w.place(t, fmt.Sprintf("rc-%d", i), fmt.Sprintf("u%d", i), w.now.Add(-time.Second), fmt.Sprintf("S%d", i)))
		}
		stuck := os[2]
		g.set(true, stuck.OrderNo)
		r, err := reconcile.New(reconcile.Config{Orders: w.store, Seats: w.seats, Service: w.svc})
		require.NoError(t, err)
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		assert.Equal(t, 4, rep.Expired)
		assert.Equal(t, 1, rep.Skipped)
		for _, o := range os {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}
		assert.Equal(t, expiry.StatusPending, w.status(t, stuck.OrderNo))
		tried := g.count(stuck.OrderNo) // in the round's batch (rolled back whole), then alone
		rep, err = r.Round(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, rep.Skipped, "the stuck order waits out its backoff")
		assert.Equal(t, tried, g.count(stuck.OrderNo), "backed off: not tried again at once")
		g.set(false, stuck.OrderNo)
		res, err := w.svc.Cancel(ctx, cancel.Request{OrderNo: stuck.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		for _, o := range os {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
			assert.Len(t, w.rows(t)[o.OrderNo], 1)
		}
	})
}

// TestHookAttackDeadlockBetweenHooks: two cancels whose hooks update the
// host's two counter rows in opposite orders deadlock for real; the store
// runs the loser's transition again, hook included. The outcome: both
// orders cancelled, each counter moved exactly once per committed
// transition, one hook row per order (the rolled-back attempt left
// nothing). SQLite serializes its writers, so it has no deadlock to show:
// MariaDB and PostgreSQL only.
func TestHookAttackDeadlockBetweenHooks(t *testing.T) {
	for _, c := range []struct {
		name string
		d    sqlstore.Dialect
		open func(testing.TB) *sql.DB
	}{{"MariaDB", sqlstore.MySQL, testenv.MySQL}, {"Postgres", sqlstore.Postgres, testenv.Postgres}} {
		t.Run(c.name, func(t *testing.T) { deadlockBetweenHooks(t, c.d, c.open(t), false) })
	}
}

// TestHookAttackSwallowedDeadlock: the same deadlock, but the hooks treat
// their second counter as best effort and ignore its error (a host's
// "audit counter, never fail the payment for it"). On MariaDB a deadlock
// rolls back the victim's whole transaction, the order's compare-and-set
// included, and the store's COMMIT then commits an empty transaction. Seen
// on MariaDB: UserCancel answers Changed and the Service releases the seats
// in Redis while SQL still has the order pending with its claims (I2, I15:
// "Redis released, DB still pending" is the state the design forbids).
// Expected: a call that answers Changed committed its transition.
func TestHookAttackSwallowedDeadlock(t *testing.T) {
	for _, c := range []struct {
		name string
		d    sqlstore.Dialect
		open func(testing.TB) *sql.DB
	}{{"MariaDB", sqlstore.MySQL, testenv.MySQL}, {"Postgres", sqlstore.Postgres, testenv.Postgres}} {
		t.Run(c.name, func(t *testing.T) { deadlockBetweenHooks(t, c.d, c.open(t), true) })
	}
}

// deadlockBetweenHooks runs the two deadlocking cancels; with swallow the
// hooks ignore the error of their second statement.
func deadlockBetweenHooks(t *testing.T, d sqlstore.Dialect, db *sql.DB, swallow bool) {
	ctx := context.Background()
	w := newHookWorld(t, d, db, false)
	_, err := db.ExecContext(ctx, "CREATE TABLE hook_counter (k VARCHAR(8) NOT NULL PRIMARY KEY, n INT NOT NULL)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO hook_counter (k, n) VALUES ('x', 0), ('y', 0)")
	require.NoError(t, err)
	a := w.place(t, "dl-a", "u1", w.now.Add(time.Hour), "D1")
	b := w.place(t, "dl-b", "u2", w.now.Add(time.Hour), "D2")
	arrived := make(chan string, 2)
	var mu sync.Mutex
	calls := map[string]int{}
	var deadlocks []error
	bump := bindQ(d, "UPDATE hook_counter SET n = n + 1 WHERE k = ?")
	w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		mu.Lock()
		calls[r.Order.No]++
		first := calls[r.Order.No] == 1
		mu.Unlock()
		if err := w.write(ctx, tx, r); err != nil {
			return err
		}
		order := []string{"x", "y"}
		if r.Order.No == b.OrderNo {
			order = []string{"y", "x"}
		}
		if _, err := tx.ExecContext(ctx, bump, order[0]); err != nil {
			return err
		}
		if first {
			// Both hooks hold their first row before either asks
			// for its second.
			arrived <- r.Order.No
			deadline := time.After(3 * time.Second)
			for len(arrived) < 2 {
				select {
				case <-deadline:
					return errors.New("the other hook never came")
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		if _, err := tx.ExecContext(ctx, bump, order[1]); err != nil {
			mu.Lock()
			deadlocks = append(deadlocks, err)
			mu.Unlock()
			if swallow {
				return nil
			}
			return err
		}
		return nil
	})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, o := range []cancel.Placement{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.svc.UserCancel(ctx, o.OrderNo, o.UserID)
		}()
	}
	wg.Wait()
	t.Logf("hook calls %v, the hooks' errors %v", calls, deadlocks)
	require.NotEmpty(t, deadlocks, "the attack needs a real deadlock")
	if swallow {
		for i, o := range []cancel.Placement{a, b} {
			st := w.status(t, o.OrderNo)
			t.Logf("order %s: err %v, SQL says %s", o.OrderNo, errs[i], st)
			if errs[i] == nil {
				assert.Equal(t, expiry.StatusCancelled, st, "UserCancel of %s answered without error: it must have committed", o.OrderNo)
			}
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}
		return
	}
	for i, o := range []cancel.Placement{a, b} {
		assert.NoError(t, errs[i], "the deadlock's loser is run again")
		w.assertAgrees(t, o.OrderNo, o.Seats...)
		assert.Len(t, w.rows(t)[o.OrderNo], 1)
	}
	for _, k := range []string{"x", "y"} {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, bindQ(d, "SELECT n FROM hook_counter WHERE k = ?"), k).Scan(&n))
		assert.Equal(t, 2, n, "counter %s: once per committed transition", k)
	}
}

// TestHookAttackSlowHookAndLateWrite: a hook that ignores its context and
// returns after the caller's deadline, and a hook that keeps the handle and
// writes through it after returning. Neither may commit a transition the
// caller was told failed, nor leave a row outside a transition.
func TestHookAttackSlowHookAndLateWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		slow := w.place(t, "slow-1", "u1", w.now.Add(time.Hour), "W1")
		late := w.place(t, "late-w-1", "u2", w.now.Add(time.Hour), "W2")
		lateErr := make(chan error, 1)
		w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if err := w.write(ctx, tx, r); err != nil {
				return err
			}
			switch r.Order.No {
			case slow.OrderNo:
				time.Sleep(400 * time.Millisecond) // past the caller's deadline
			case late.OrderNo:
				go func() {
					time.Sleep(300 * time.Millisecond)
					_, err := tx.ExecContext(context.Background(), bindQ(w.d, "INSERT INTO hook_rows (order_no, status, payment_id) VALUES (?, 'late', '')"), r.Order.No)
					lateErr <- err
				}()
			}
			return nil
		})
		short, done := context.WithTimeout(ctx, 100*time.Millisecond)
		res, err := w.svc.Pay(short, cancel.Payment{OrderNo: slow.OrderNo, UserID: "u1", PaymentID: "pay-slow"})
		done()
		t.Logf("slow hook: changed %v, err %v", res.Changed, err)
		if err != nil {
			assert.Equal(t, expiry.StatusPending, w.status(t, slow.OrderNo), "the caller was told the payment failed: nothing committed")
		} else {
			assert.Equal(t, expiry.StatusPaid, w.status(t, slow.OrderNo))
		}
		w.assertAgrees(t, slow.OrderNo, slow.Seats...)

		res, err = w.svc.UserCancel(ctx, late.OrderNo, "u2")
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.Error(t, <-lateErr, "a write through the handle after the hook returned")
		assert.Equal(t, []string{"cancelled"}, w.rows(t)[late.OrderNo], "only the transition's row")
		w.assertAgrees(t, late.OrderNo, late.Seats...)
	})
}

// TestHookAttackTwoInstancesRace: two Services on two Stores (each with its
// own hook; the second's fails for every third order) race a payment
// against a cancel on each order, then a settle (the timeout by the first
// instance). For every order: one hook row, matching its final status;
// its payment honoured or refunded exactly once; Redis agrees (I1, I9, I14,
// I15).
func TestHookAttackTwoInstancesRace(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { twoInstancesRace(t, d, db, false) })
}

// TestHookAttackMixedRolloutRace: the same race while a rollout is half
// done: the first instance has no hook (on PostgreSQL its transitions are
// one statement each), the second has one. Exactly one transition per
// order; a hook row only for what the second instance committed, matching
// the final status; each payment honoured or refunded once.
func TestHookAttackMixedRolloutRace(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { twoInstancesRace(t, d, db, true) })
}

// twoInstancesRace races Pay against Timeout on each order across two
// instances; with mixed the first instance has no hook.
func twoInstancesRace(t *testing.T, d sqlstore.Dialect, db *sql.DB, mixed bool) {
	ctx := context.Background()
	w := newHookWorld(t, d, db, false)
	w.partialRows = mixed
	if !mixed {
		w.store.SetHook(w.write)
	}
	s2, err := sqlstore.New(db, d)
	require.NoError(t, err)
	t.Cleanup(func() { s2.Close() })
	g := newHookGate(w)
	s2.SetHook(g.hook)
	svc2, err := cancel.New(cancel.Config{Store: s2, Seats: w.seats, OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.refunds[d.PaymentID]++
		return nil
	}})
	require.NoError(t, err)
	const n = 12
	var os []cancel.Placement
	for i := range n {
		o := w.place(t, fmt.Sprintf("race-%d", i), fmt.Sprintf("u%d", i), w.now.Add(-time.Second), fmt.Sprintf("R%d", i))
		os = append(os, o)
		if i%3 == 0 {
			g.set(true, o.OrderNo)
		}
	}
	var wg sync.WaitGroup
	for i, o := range os {
		pay := cancel.Payment{OrderNo: o.OrderNo, UserID: o.UserID, PaymentID: "pay-" + o.OrderNo}
		payer, canceller := w.svc, svc2
		if i%2 == 1 {
			payer, canceller = svc2, w.svc
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := payer.Pay(ctx, pay)
			if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) && !errors.Is(err, cancel.ErrHook) {
				t.Errorf("pay %s: %v", o.OrderNo, err)
			}
		}()
		go func() {
			defer wg.Done()
			_, _, err := canceller.Timeout(ctx, o.OrderNo)
			if err != nil && !errors.Is(err, cancel.ErrHook) {
				t.Errorf("timeout %s: %v", o.OrderNo, err)
			}
		}()
	}
	wg.Wait()
	for _, o := range os {
		// Settle: the first instance's hook works; the timeout is
		// redelivered, the provider repeats every payment (one whose
		// hook failed is undecided until then).
		_, _, err := w.svc.Timeout(ctx, o.OrderNo)
		require.NoError(t, err)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, UserID: o.UserID, PaymentID: "pay-" + o.OrderNo})
		if err != nil {
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}
	}
	rows := w.rows(t)
	for _, o := range os {
		st := w.status(t, o.OrderNo)
		assert.NotEqual(t, expiry.StatusPending, st, "settled")
		if mixed {
			assert.Subset(t, []string{st.String()}, rows[o.OrderNo], "order %s: a hook row only for its final status", o.OrderNo)
		} else {
			assert.Equal(t, []string{st.String()}, rows[o.OrderNo], "order %s: one hook row, its final status", o.OrderNo)
		}
		id := "pay-" + o.OrderNo
		honoured := st == expiry.StatusPaid
		assert.True(t, honoured != (w.refunded(id) == 1), "payment %s: honoured %v, refunded %d times", id, honoured, w.refunded(id))
		assert.LessOrEqual(t, w.refunded(id), 1)
		w.assertAgrees(t, o.OrderNo, o.Seats...)
	}
}

// TestHookAttackMappedStore: the hook on a host's own tables with neither
// a claims table nor a payment-id column (the side tables keep both), in
// a tenant's scope: a failing hook decides nothing (the order pending, its
// seats locked, the payment id undecided, no row); once it works, every
// transition leaves exactly its row, the repeated payment pays, another is
// refunded once, a payment for a timed-out order is refunded once (I9,
// I14, I15, I16).
// It runs again on the same tables with the host's claims table, whose
// claims keep their history in a state column (freed, not deleted).
func TestHookAttackMappedStore(t *testing.T) {
	t.Run("NoClaimsNoPaymentColumn", func(t *testing.T) { mappedStoreHooks(t, false) })
	t.Run("StateClaims", func(t *testing.T) { mappedStoreHooks(t, true) })
}

func mappedStoreHooks(t *testing.T, claims bool) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		m := shop.mapping
		if !claims {
			m.Claims = nil
			m.Orders.PaymentID = ""
		}
		w := newMappedHookWorld(t, d, db, false, &m)
		g := newHookGate(w)
		w.store.SetHook(g.hook)
		due := w.place(t, "m-due", "u1", w.now.Add(-2*time.Second), "M1", "M2")
		user := w.place(t, "m-user", "u2", w.now.Add(time.Hour), "M3")
		paid := w.place(t, "m-pay", "u3", w.now.Add(time.Hour), "M4")
		all := []cancel.Placement{due, user, paid}
		g.set(true, due.OrderNo, user.OrderNo, paid.OrderNo)
		_, _, err := w.svc.Timeout(ctx, due.OrderNo)
		assert.ErrorIs(t, err, cancel.ErrHook)
		_, err = w.svc.UserCancel(ctx, user.OrderNo, "u2")
		assert.ErrorIs(t, err, cancel.ErrHook)
		p1 := cancel.Payment{OrderNo: paid.OrderNo, PaymentID: "pay-m-1"}
		_, err = w.svc.Pay(ctx, p1)
		assert.ErrorIs(t, err, cancel.ErrHook)
		assert.NotErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Empty(t, w.rows(t))
		for _, o := range all {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}

		g.set(false, due.OrderNo, user.OrderNo, paid.OrderNo)
		res, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		assert.True(t, res.Changed, "the repeat of a payment whose hook failed pays")
		_, err = w.svc.Pay(ctx, p1)
		require.NoError(t, err, "a repeated callback")
		p2 := cancel.Payment{OrderNo: paid.OrderNo, PaymentID: "pay-m-2"}
		_, err = w.svc.Pay(ctx, p2)
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		c, _, err := w.svc.Timeout(ctx, due.OrderNo)
		require.NoError(t, err)
		assert.True(t, c)
		pd := cancel.Payment{OrderNo: due.OrderNo, PaymentID: "pay-m-due"}
		for range 2 {
			_, err = w.svc.Pay(ctx, pd)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}
		res, err = w.svc.UserCancel(ctx, user.OrderNo, "u2")
		require.NoError(t, err)
		assert.True(t, res.Changed)
		rows := w.rows(t)
		for _, o := range all {
			assert.Equal(t, []string{w.status(t, o.OrderNo).String()}, rows[o.OrderNo], "order %s: one row, its final status", o.OrderNo)
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}
		assert.Zero(t, w.refunded(p1.PaymentID))
		assert.Equal(t, 1, w.refunded(p2.PaymentID))
		assert.Equal(t, 1, w.refunded(pd.PaymentID))
	})
}

// TestHookAttackPaymentIDsAcrossOrders: with the hook on, one payment id
// sent for two orders (a provider's bug, or a replay against another
// order) pays the first only: the second order stays pending with no hook
// row and its seats locked, and the id, honoured, is never refunded; a
// payment naming another user pays nothing and leaves no row; a payment
// whose hook failed, then succeeded for another order under the same id,
// is not honoured twice (I14: once decided, never flips).
func TestHookAttackPaymentIDsAcrossOrders(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		g := newHookGate(w)
		w.store.SetHook(g.hook)
		a := w.place(t, "id-a", "u1", w.now.Add(time.Hour), "I1")
		b := w.place(t, "id-b", "u1", w.now.Add(time.Hour), "I2")
		c := w.place(t, "id-c", "u2", w.now.Add(time.Hour), "I3")
		e := w.place(t, "id-e", "u3", w.now.Add(time.Hour), "I4")

		res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, UserID: "u1", PaymentID: "pay-same"})
		require.NoError(t, err)
		require.True(t, res.Changed)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: b.OrderNo, UserID: "u1", PaymentID: "pay-same"})
		assert.Error(t, err, "an id that paid order a pays nothing else")
		assert.NotErrorIs(t, err, cancel.ErrHook)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: c.OrderNo, UserID: "u1", PaymentID: "pay-wrong-user"})
		assert.Error(t, err, "a payment naming another user")

		// e's payment fails in its hook; the same id then arrives for c
		// and pays it; e's provider repeats: the id paid c, so e is not
		// paid by it too.
		g.set(true, e.OrderNo)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: e.OrderNo, UserID: "u3", PaymentID: "pay-shared"})
		assert.ErrorIs(t, err, cancel.ErrHook)
		res, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: c.OrderNo, UserID: "u2", PaymentID: "pay-shared"})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		g.set(false, e.OrderNo)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: e.OrderNo, UserID: "u3", PaymentID: "pay-shared"})
		assert.Error(t, err, "pay-shared paid c: it pays nothing else")

		rows := w.rows(t)
		for _, o := range []cancel.Placement{a, b, c, e} {
			st := w.status(t, o.OrderNo)
			if st == expiry.StatusPending {
				assert.Empty(t, rows[o.OrderNo], "pending %s: no row", o.OrderNo)
			} else {
				assert.Equal(t, []string{st.String()}, rows[o.OrderNo])
			}
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}
		assert.Equal(t, expiry.StatusPaid, w.status(t, a.OrderNo))
		assert.Equal(t, expiry.StatusPending, w.status(t, b.OrderNo))
		assert.Equal(t, expiry.StatusPaid, w.status(t, c.OrderNo))
		assert.Equal(t, expiry.StatusPending, w.status(t, e.OrderNo))
		assert.Zero(t, w.refunded("pay-same"), "honoured (order a): never refunded")
		assert.Zero(t, w.refunded("pay-shared"), "honoured (order c): never refunded")
	})
}

// TestHookAttackErrorWrappingNotFound: a hook whose own error wraps
// expiry.ErrNotFound (the hook looked up a related record through a lookup
// that answers with the library's sentinel: a parent order, a bundle). The
// hook's doc says a failed hook's transition is tried again like any
// failed one: the timeout message redelivered, the reconciler counting the
// order skipped and backing it off; Pay checks ErrHook before anything the
// hook's error wraps. Seen: the Handler checks ErrNotFound first and acks
// the message as OutcomeMissing with no error (never redelivered, the order
// still pending and due), and the reconciler drops the order from its
// report (neither skipped nor backed off, I12: a failing order is skipped
// and counted). Expected: ErrHook decides first, as in Pay.
func TestHookAttackErrorWrappingNotFound(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		w.store.SetHook(func(context.Context, cancel.Querier, cancel.Result) error {
			return fmt.Errorf("the order's bundle: %w", expiry.ErrNotFound)
		})
		o := w.place(t, "nf-1", "u1", w.now.Add(-time.Second), "N1")
		h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: sendNothing{}})
		require.NoError(t, err)
		out, err := h.Handle(ctx, expiry.Message{OrderNo: o.OrderNo})
		assert.Error(t, err, "the hook failed: the message must be redelivered")
		assert.Equal(t, expiry.OutcomeFailed, out)
		r, err := reconcile.New(reconcile.Config{Orders: w.store, Seats: w.seats, Service: w.svc})
		require.NoError(t, err)
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, rep.Skipped, "the reconciler counts the order it could not cancel")
		assert.Equal(t, expiry.StatusPending, w.status(t, o.OrderNo))
		w.assertAgrees(t, o.OrderNo, o.Seats...)
	})
}

// TestHookAttackSeesTheTransitionInItsTransaction: the hook's doc says it
// runs after the compare-and-set matched and the claims were changed, in
// the same transaction. A hook that reads through its handle must then see
// the order in its new status and its claims deleted (a cancel) or sold (a
// payment), on every path: a user cancel (MariaDB's DELETE … RETURNING),
// a timeout, a payment.
func TestHookAttackSeesTheTransitionInItsTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newHookWorld(t, d, db, false)
		type seen struct {
			status       int
			locked, sold int
		}
		var mu sync.Mutex
		got := map[string]seen{}
		w.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			var s seen
			rs, err := tx.QueryContext(ctx, bindQ(w.d, "SELECT status FROM oe_order WHERE order_no = ?"), r.Order.No)
			if err != nil {
				return err
			}
			for rs.Next() {
				if err := rs.Scan(&s.status); err != nil {
					rs.Close()
					return err
				}
			}
			if err := rs.Close(); err != nil {
				return err
			}
			rs, err = tx.QueryContext(ctx, bindQ(w.d, "SELECT state FROM oe_order_seat WHERE order_no = ?"), r.Order.No)
			if err != nil {
				return err
			}
			for rs.Next() {
				var st int
				if err := rs.Scan(&st); err != nil {
					rs.Close()
					return err
				}
				if st == 2 {
					s.sold++
				} else {
					s.locked++
				}
			}
			if err := rs.Close(); err != nil {
				return err
			}
			mu.Lock()
			got[r.Order.No] = s
			mu.Unlock()
			return w.write(ctx, tx, r)
		})
		u := w.place(t, "see-user", "u1", w.now.Add(time.Hour), "E1", "E2")
		due := w.place(t, "see-due", "u2", w.now.Add(-time.Second), "E3")
		p := w.place(t, "see-pay", "u3", w.now.Add(time.Hour), "E4", "E5")
		_, err := w.svc.UserCancel(ctx, u.OrderNo, "u1")
		require.NoError(t, err)
		_, _, err = w.svc.Timeout(ctx, due.OrderNo)
		require.NoError(t, err)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u3", PaymentID: "pay-see"})
		require.NoError(t, err)
		assert.Equal(t, seen{status: int(expiry.StatusCancelled)}, got[u.OrderNo], "a user cancel: cancelled, claims deleted")
		assert.Equal(t, seen{status: int(expiry.StatusCancelled)}, got[due.OrderNo], "a timeout: cancelled, claims deleted")
		assert.Equal(t, seen{status: int(expiry.StatusPaid), sold: 2}, got[p.OrderNo], "a payment: paid, claims sold")
		for _, o := range []cancel.Placement{u, due, p} {
			w.assertAgrees(t, o.OrderNo, o.Seats...)
		}
	})
}
