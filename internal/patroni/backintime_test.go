package patroni_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// When SQL goes back in time: an asynchronous failover promotes a replica
// that lacks the last commits, while Redis (the seat store) and the payment
// provider (the refund hook) keep what those commits did. These tests build
// each case deterministically on a plain PostgreSQL database (OE_PG_DSN, a
// schema of the test's own): they snapshot the library's tables, run what
// the lost commits did, and put the snapshot back, which is exactly what
// the promoted replica has. Then they run what follows a failover (the
// timeout, a repeated callback, reconcile rounds) and judge:
//
//   - hard invariants, asserted: a seat sold in the seat store is never
//     freed (I2, I15); no seat has two holders in the seat store; no seat is
//     released more than once (I2); the reconciler converges (a round that
//     repairs nothing); no order stays pending past its deadline plus a
//     round (I3);
//   - what SQL cannot tell any more (a payment id it no longer has, a refund
//     it forgot) must be counted and reported to the host, never guessed.
//     The library does not do that yet: those expectations are the known
//     gaps of issue 23, logged as "GAP" lines; OE_BACK_IN_TIME_STRICT=1
//     makes them fail (the failing tests of the gaps).

// timeMachine snapshots and restores the library's tables in w's schema.
type timeMachine struct {
	t  *testing.T
	db *sql.DB
	n  int
}

var libTables = []string{"oe_order", "oe_order_seat", "oe_payment_discrepancy", "oe_order_side"}

// snapshot copies every table; it returns the snapshot's name.
func (m *timeMachine) snapshot() string {
	m.t.Helper()
	m.n++
	name := fmt.Sprintf("snap%d", m.n)
	for _, tb := range libTables {
		_, err := m.db.Exec(fmt.Sprintf("CREATE TABLE %s_%s AS SELECT * FROM %s", name, tb, tb))
		require.NoError(m.t, err)
	}
	return name
}

// restore puts snapshot name back, as a promoted replica that lacks every
// commit made after it.
func (m *timeMachine) restore(name string) {
	m.t.Helper()
	tx, err := m.db.Begin()
	require.NoError(m.t, err)
	defer func() { _ = tx.Rollback() }()
	for _, tb := range libTables {
		_, err := tx.Exec(fmt.Sprintf("DELETE FROM %s", tb))
		require.NoError(m.t, err)
		_, err = tx.Exec(fmt.Sprintf("INSERT INTO %s SELECT * FROM %s_%s", tb, name, tb))
		require.NoError(m.t, err)
	}
	require.NoError(m.t, tx.Commit())
}

// bitWorld is one world on a fresh schema of OE_PG_DSN.
func bitWorld(t *testing.T) (*e2e.World, *timeMachine) {
	t.Helper()
	db := testenv.Postgres(t)
	w := e2e.NewWorld(t, db, sqlstore.Postgres, testenv.Redis(t), "bit-"+testenv.Unique())
	return w, &timeMachine{t: t, db: db}
}

// gap records an expectation the library does not meet yet.
func gap(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("OE_BACK_IN_TIME_STRICT") == "1" {
		t.Errorf("GAP: %s", msg)
		return
	}
	t.Logf("GAP (known, issue 23; OE_BACK_IN_TIME_STRICT=1 fails on it): %s", msg)
}

// seatsOf reads the seat store's state of the world's show.
func seatsOf(t *testing.T, w *e2e.World) map[string]cancel.SeatState {
	t.Helper()
	st, err := w.Seats.Show(context.Background(), w.ShowID)
	require.NoError(t, err)
	return st
}

// converge runs reconcile rounds until one repairs nothing (at most 10) and
// requires that it comes.
func converge(t *testing.T, w *e2e.World) (rounds int, total string) {
	t.Helper()
	ctx := context.Background()
	r := reconciler(t, w)
	var expired, released, sold, restored, refunds int
	for rounds = 1; rounds <= 10; rounds++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		expired += rep.Expired
		released += rep.Released
		sold += rep.Sold
		restored += rep.Restored
		refunds += rep.Refunds
		if rep.Expired+rep.Released+rep.Sold+rep.Restored+rep.Refunds == 0 && rep.Settling == 0 && !rep.More {
			return rounds, fmt.Sprintf("expired %d, released %d, sold %d, restored %d, refunds %d", expired, released, sold, restored, refunds)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("the reconciler did not converge in 10 rounds (expired %d, released %d, sold %d, restored %d)", expired, released, sold, restored)
	return
}

// place places an order of two seats due in d by the database's clock.
func place(t *testing.T, w *e2e.World, no, user string, d time.Duration, seats ...string) cancel.Placement {
	t.Helper()
	ctx := context.Background()
	now, err := w.Store.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: w.ShowID, Seats: seats, ExpireAt: now.Add(d)}
	require.NoError(t, w.Place(ctx, p))
	return p
}

func status(t *testing.T, w *e2e.World, no string) string {
	t.Helper()
	o, err := w.Store.Order(context.Background(), no)
	if errors.Is(err, expiry.ErrNotFound) {
		return "missing"
	}
	require.NoError(t, err)
	return o.Status.String()
}

// Case 1a: an order paid, its seats sold in Redis; SQL lost the payment and
// has the order pending again. The provider got its answer and does not
// call again. The deadline passes: the timeout (or the reconciler) cancels
// the order in SQL, but its seats stay sold in Redis (the release frees
// only locks): a sold seat is never freed. SQL and Redis now disagree for
// good, and only the host can settle it (honour the payment by hand, or
// refund it): the library must count and report it.
func TestBackInTimePaidOrderPendingAgain(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-1a", "u1", 1500*time.Millisecond, "s1", "s2")
	snap := tm.snapshot()
	_, err := w.Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-1a"})
	require.NoError(t, err)
	require.Equal(t, "paid", status(t, w, p.OrderNo))
	tm.restore(snap) // the failover
	require.Equal(t, "pending", status(t, w, p.OrderNo))

	time.Sleep(1600 * time.Millisecond)
	changed, _, err := w.Service.Timeout(ctx, p.OrderNo)
	require.NoError(t, err)
	rounds, rep := converge(t, w)
	seats := seatsOf(t, w)
	for _, s := range p.Seats {
		require.Equal(t, cancel.SeatState{OrderNo: p.OrderNo, UserID: p.UserID, Status: cancel.SeatSold}, seats[s],
			"I15: seat %s was sold; a sold seat is never freed", s)
	}
	require.Zero(t, w.Ledger.Released[p.OrderNo], "I2: nothing released")
	t.Logf("FIGURE back in time, paid order pending again: timeout cancelled it in SQL: %v; SQL %s, seats sold in Redis; reconciler converged in %d rounds (%s)",
		changed, status(t, w, p.OrderNo), rounds, rep)
	gap(t, changed == false || w.Ledger.Kind(expiry.KindDiscrepancy) > 0,
		"order %s: cancelled in SQL while its seats are sold in the seat store (a payment SQL lost); nothing tells the host (no event, no reconcile.Report count)", p.OrderNo)

	// The provider repeats the callback after all: the payment is refunded,
	// never honoured, and the seats stay sold.
	_, err = w.Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-1a"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, w.Ledger.Refunded["pay-1a"], "I9: refunded once")
	require.Equal(t, "cancelled", status(t, w, p.OrderNo), "I14: refunded, so not honoured")
	converge(t, w)
	require.Equal(t, cancel.SeatSold, seatsOf(t, w)["s1"].Status, "a sold seat is never freed")
}

// Case 1a': the provider repeats the callback before the deadline (it was
// lost with the failover's connection errors): the order is paid again in
// SQL by the same payment id, the seats are already sold to it, and the
// world is whole: nothing to report.
func TestBackInTimePaidOrderRepaidBeforeDeadline(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-1b", "u1", time.Hour, "s1", "s2")
	snap := tm.snapshot()
	pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-1b"}
	_, err := w.Service.Pay(ctx, pay)
	require.NoError(t, err)
	tm.restore(snap)
	res, err := w.Service.Pay(ctx, pay)
	require.NoError(t, err)
	require.True(t, res.Changed)
	converge(t, w)
	bad := judgeOne(t, w, []cancel.Placement{p}, map[string]bool{"pay-1b": true})
	require.Empty(t, bad)
}

// Case 1b: SQL lost the order altogether (placed and paid after the
// snapshot). Its seats are sold in Redis to an order SQL does not know.
// The reconciler never frees a sold seat (its lock scan reads locks only),
// so the seat stays sold; but nobody hears of it.
func TestBackInTimePaidOrderMissing(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	snap := tm.snapshot()
	p := place(t, w, "bit-1c", "u1", time.Hour, "s1", "s2")
	_, err := w.Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-1c"})
	require.NoError(t, err)
	tm.restore(snap)
	require.Equal(t, "missing", status(t, w, p.OrderNo))
	time.Sleep(2100 * time.Millisecond) // past the reconciler's grace for locks of missing orders
	rounds, rep := converge(t, w)
	seats := seatsOf(t, w)
	for _, s := range p.Seats {
		require.Equal(t, cancel.SeatSold, seats[s].Status, "I15: seat %s was sold; a sold seat is never freed", s)
	}
	t.Logf("FIGURE back in time, paid order missing: seats stay sold in Redis; reconciler converged in %d rounds (%s)", rounds, rep)
	gap(t, false, "order %s: its seats are sold in the seat store and SQL has no such order (placement and payment lost); the reconciler never looks at sold seats, so nothing counts or reports it", p.OrderNo)
}

// Case 2a: an order cancelled and its seats released; SQL lost the cancel
// and has it pending again, with its claims. The reconciler's claim scan
// gives the seats back to it (they are free), so no other order can take
// them while SQL says they are this order's; the deadline then cancels it
// again and releases them once more. The user who cancelled sees the order
// live until its deadline: the library cannot know it was cancelled.
func TestBackInTimeCancelledPendingAgain(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-2a", "u1", 3*time.Second, "s1", "s2")
	snap := tm.snapshot()
	res, err := w.Service.UserCancel(ctx, p.OrderNo, p.UserID)
	require.NoError(t, err)
	require.Equal(t, 2, res.Released)
	tm.restore(snap)
	require.Equal(t, "pending", status(t, w, p.OrderNo))
	require.Empty(t, seatsOf(t, w))

	rounds, rep := converge(t, w)
	seats := seatsOf(t, w)
	for _, s := range p.Seats {
		require.Equal(t, p.OrderNo, seats[s].OrderNo, "seat %s: SQL says it is the pending order's: the claim scan locks it again", s)
	}
	t.Logf("FIGURE back in time, cancelled order pending again: reconciler locked its seats again in %d rounds (%s)", rounds, rep)
	time.Sleep(time.Until(p.ExpireAt) + 200*time.Millisecond)
	converge(t, w)
	require.Equal(t, "cancelled", status(t, w, p.OrderNo), "I3: it expires")
	require.Empty(t, seatsOf(t, w), "its seats are free again")
	require.Empty(t, judgeOne(t, w, []cancel.Placement{p}, nil))
}

// Case 2b: as 2a, but after the release another order took a seat and was
// paid, and SQL lost that order too (it came after the cancel). Redis has
// the seat sold to an order SQL does not know; SQL gives the seat to the
// pending order again. The sold seat is never freed and never locked for
// the pending order (no two holders in the seat store). If the pending
// order is then paid, SQL sells it a seat Redis sold to another buyer: that
// double sale is what SQL going back in time did, and the library must
// tell the host (the seat store's sale found the seat sold to another
// order), not stay silent.
func TestBackInTimeCancelledPendingAgainSeatResold(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	a := place(t, w, "bit-2b-a", "u1", time.Hour, "s1", "s2")
	snap := tm.snapshot()
	_, err := w.Service.UserCancel(ctx, a.OrderNo, a.UserID)
	require.NoError(t, err)
	b := place(t, w, "bit-2b-b", "u2", time.Hour, "s2", "s3")
	_, err = w.Service.Pay(ctx, cancel.Payment{OrderNo: b.OrderNo, UserID: b.UserID, PaymentID: "pay-2b-b"})
	require.NoError(t, err)
	tm.restore(snap)
	require.Equal(t, "pending", status(t, w, a.OrderNo))
	require.Equal(t, "missing", status(t, w, b.OrderNo))

	rounds, rep := converge(t, w)
	seats := seatsOf(t, w)
	require.Equal(t, cancel.SeatState{OrderNo: b.OrderNo, UserID: b.UserID, Status: cancel.SeatSold}, seats["s2"], "a sold seat is never freed, nor locked for another order")
	require.Equal(t, a.OrderNo, seats["s1"].OrderNo, "the free seat is locked again for the pending order")
	t.Logf("FIGURE back in time, seat resold after a lost cancel: reconciler converged in %d rounds (%s); s2 stays sold to the lost order", rounds, rep)

	kinds := w.Ledger.Kind(expiry.KindSellFailed) + w.Ledger.Kind(expiry.KindDiscrepancy)
	res, err := w.Service.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, UserID: a.UserID, PaymentID: "pay-2b-a"})
	require.NoError(t, err)
	require.True(t, res.Changed)
	converge(t, w)
	seats = seatsOf(t, w)
	require.Equal(t, b.OrderNo, seats["s2"].OrderNo, "the seat sold to b stays b's in the seat store")
	require.Equal(t, cancel.SeatState{OrderNo: a.OrderNo, UserID: a.UserID, Status: cancel.SeatSold}, seats["s1"])
	gap(t, w.Ledger.Kind(expiry.KindSellFailed)+w.Ledger.Kind(expiry.KindDiscrepancy) > kinds,
		"order %s: paid in SQL with seat s2, which the seat store sold to %s (a sale SQL lost); Pay and the reconciler say nothing (the sale's count is ignored)", a.OrderNo, b.OrderNo)
}

// Case 3a: a payment came for a cancelled order, the discrepancy was
// recorded and the refund hook ran (the money went back); SQL lost the
// record. The provider repeats the callback: SQL records it as new and the
// hook runs again, for the same payment id. I9 wants one refund per payment
// id; the library cannot see the first one any more, so the hook is the
// only place left to stop a second refund (the provider's idempotency key:
// the payment id), and the library must at least not claim otherwise.
func TestBackInTimeRefundGone(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-3a", "u1", time.Hour, "s1")
	_, err := w.Service.UserCancel(ctx, p.OrderNo, p.UserID)
	require.NoError(t, err)
	snap := tm.snapshot()
	pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-3a"}
	_, err = w.Service.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, w.Ledger.Refunded["pay-3a"])
	tm.restore(snap)

	_, err = w.Service.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "still not honoured")
	rounds, rep := converge(t, w)
	require.Equal(t, "cancelled", status(t, w, p.OrderNo), "I14: never honoured")
	t.Logf("FIGURE back in time, refund record gone: the repeated callback called the hook %d times in all for one payment id; reconciler converged in %d rounds (%s)",
		w.Ledger.Refunded["pay-3a"], rounds, rep)
	gap(t, w.Ledger.Refunded["pay-3a"] == 1,
		"payment %s: refund hook called %d times (I9 wants once); SQL forgot the first refund, and the hook is not told the refund may be a repeat", pay.PaymentID, w.Ledger.Refunded["pay-3a"])
}

// Case 3b: as 3a, but SQL also lost the cancel: the order is pending again,
// and the repeated callback pays it. The payment id is then honoured by SQL
// and was refunded by the hook: I14's "never both", broken by SQL going back
// in time, which the library has no record left to detect.
func TestBackInTimeRefundAndCancelGone(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-3b", "u1", time.Hour, "s1")
	snap := tm.snapshot()
	_, err := w.Service.UserCancel(ctx, p.OrderNo, p.UserID)
	require.NoError(t, err)
	pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-3b"}
	_, err = w.Service.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	tm.restore(snap)

	converge(t, w) // the claim scan locks s1 for the pending order again
	_, err = w.Service.Pay(ctx, pay)
	honoured := err == nil
	converge(t, w)
	bad := judgeOne(t, w, []cancel.Placement{p}, map[string]bool{"pay-3b": true})
	t.Logf("FIGURE back in time, refund and cancel gone: repeated callback honoured: %v (order %s), refunds %d; ledger violations: %v",
		honoured, status(t, w, p.OrderNo), w.Ledger.Refunded["pay-3b"], bad)
	require.Equal(t, cancel.SeatSold, seatsOf(t, w)["s1"].Status, "SQL says paid: the seat store follows, and the seat is never freed again")
	gap(t, len(bad) == 0, "payment %s: %v", pay.PaymentID, bad)
}

// judgeOne judges one world's orders with fresh Books, settled.
func judgeOne(t *testing.T, w *e2e.World, placed []cancel.Placement, answered map[string]bool) []string {
	t.Helper()
	return judge(t, context.Background(), w.DB, []*e2e.World{w}, placed, answered)
}
