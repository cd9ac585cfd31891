package patroni_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
//   - what SQL cannot tell any more (an order it lost, a payment id it no
//     longer has, a refund it forgot) is either repaired from the seat
//     store's records (a refund is never made twice, a refunded payment
//     never honoured) or reported to the host as an expiry.KindDiverged
//     event, never guessed. reconcile's backintime_test.go runs the same
//     cases on the in-memory stores and on SQLite.

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
			return rounds, fmt.Sprintf("expired %d, released %d, sold %d, restored %d, refunds %d; diverged seats %d, events %d",
				expired, released, sold, restored, refunds, rep.Diverged, w.Ledger.Kind(expiry.KindDiverged))
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
// refund it): the library counts and reports it (expiry.KindDiverged).
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
	require.True(t, changed, "SQL has it pending: its deadline cancels it")
	require.Positive(t, w.Ledger.Kind(expiry.KindDiverged),
		"order %s: cancelled in SQL while its seats are sold in the seat store (a payment SQL lost): reported to the host", p.OrderNo)

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
	require.Zero(t, w.Ledger.Kind(expiry.KindDiverged), "whole again: nothing to report")
}

// Case 1b: SQL lost the order altogether (placed and paid after the
// snapshot). Its seats are sold in Redis to an order SQL does not know.
// The reconciler never frees a sold seat (its lock scan reads locks only),
// so the seat stays sold; the reconciler's sold pass reports it.
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
	require.Positive(t, w.Ledger.Kind(expiry.KindDiverged),
		"order %s: its seats are sold in the seat store and SQL has no such order (placement and payment lost): reported to the host", p.OrderNo)
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

	kinds := w.Ledger.Kind(expiry.KindDiverged)
	res, err := w.Service.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, UserID: a.UserID, PaymentID: "pay-2b-a"})
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.Greater(t, w.Ledger.Kind(expiry.KindDiverged), kinds,
		"order %s: paid in SQL with seat s2, which the seat store sold to %s (a sale SQL lost): the payment reports it", a.OrderNo, b.OrderNo)
	converge(t, w)
	seats = seatsOf(t, w)
	require.Equal(t, b.OrderNo, seats["s2"].OrderNo, "the seat sold to b stays b's in the seat store")
	require.Equal(t, cancel.SeatState{OrderNo: a.OrderNo, UserID: a.UserID, Status: cancel.SeatSold}, seats["s1"])
}

// Case 3a: a payment came for a cancelled order, the discrepancy was
// recorded and the refund hook ran (the money went back); SQL lost the
// record. The provider repeats the callback: SQL records it as new, but the
// seat store recorded the refund too (cancel.SeatStore.MarkRefunded), so the hook is
// not called again (I9) and the repeat is reported.
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
	require.Equal(t, 1, w.Ledger.Refunded["pay-3a"],
		"payment %s: I9: SQL forgot the first refund, the seat store's record of it keeps the hook from running again", pay.PaymentID)
	require.Positive(t, w.Ledger.Kind(expiry.KindDiverged), "the repeated refund is reported")
}

// Case 3b: as 3a, but SQL also lost the cancel: the order is pending again,
// and the provider repeats the refunded payment. It is refused, never
// honoured (I14: never both), and reported; the order expires at its
// deadline and its seat is freed.
func TestBackInTimeRefundAndCancelGone(t *testing.T) {
	ctx := context.Background()
	w, tm := bitWorld(t)
	p := place(t, w, "bit-3b", "u1", 3*time.Second, "s1")
	snap := tm.snapshot()
	_, err := w.Service.UserCancel(ctx, p.OrderNo, p.UserID)
	require.NoError(t, err)
	pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-3b"}
	_, err = w.Service.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	tm.restore(snap)

	converge(t, w) // the claim scan locks s1 for the pending order again
	_, err = w.Service.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: refunded before, never honoured")
	require.Equal(t, "pending", status(t, w, p.OrderNo))
	require.Positive(t, w.Ledger.Kind(expiry.KindDiverged), "the refused payment is reported")
	time.Sleep(time.Until(p.ExpireAt) + 200*time.Millisecond)
	converge(t, w)
	bad := judgeOne(t, w, []cancel.Placement{p}, map[string]bool{"pay-3b": true})
	t.Logf("FIGURE back in time, refund and cancel gone: repeated callback refused (order %s), refunds %d; ledger violations: %v",
		status(t, w, p.OrderNo), w.Ledger.Refunded["pay-3b"], bad)
	require.Equal(t, "cancelled", status(t, w, p.OrderNo), "I3: it expires")
	require.Empty(t, seatsOf(t, w), "its seat is free again")
	require.Equal(t, 1, w.Ledger.Refunded["pay-3b"], "I9")
	require.Empty(t, bad)
}

// judgeOne judges one world's orders with fresh Books, settled.
func judgeOne(t *testing.T, w *e2e.World, placed []cancel.Placement, answered map[string]bool) []string {
	t.Helper()
	return judge(t, context.Background(), w.DB, []*e2e.World{w}, placed, answered)
}
