package reconcile_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// When SQL goes back in time: a database that fails over to an
// asynchronous replica (or is restored from a backup) loses its last
// commits, while the seat store and the payment provider keep what those
// commits did. Each case below puts a snapshot of the order store back
// after the commits it must lose, then runs what follows (the timeout, the
// provider's repeated callback, reconcile rounds), on the in-memory stores
// and on SQLite with the in-memory seat store. internal/patroni runs the
// same cases on PostgreSQL and Redis. What is judged:
//
//   - a sold seat is never freed nor sold to another order (I2, I15);
//   - no payment id is both honoured and refunded, and the refund hook runs
//     once per payment id (I9, I14);
//   - the reconciler converges;
//   - what cannot be repaired is reported as expiry.KindDiverged, with the
//     order and a reason, never guessed.

// orderStore is what the back-in-time cases need of an order store.
type orderStore interface {
	cancel.OrderStore
	cancel.OrderStore
	Now(ctx context.Context) (time.Time, error)
}

// bitEnv is one world of the back-in-time cases.
type bitEnv struct {
	store    orderStore
	insert   func(ctx context.Context, p cancel.Placement) error
	snapshot func(t *testing.T) (restore func())
	seats    *memstore.Seats
	svc      *cancel.Service
	log      *expirytest.Recorder
	rec      *reconcile.Reconciler
	advance  func(d time.Duration)
	settle   time.Duration
	grace    time.Duration
	fake     bool // advance moves a fake clock (free), not the real one

	mu      sync.Mutex
	refunds map[string]int
}

// diverged returns the KindDiverged events of order no with reason.
func (e *bitEnv) diverged(no, reason string) []expiry.Event {
	var out []expiry.Event
	for _, ev := range e.log.Of(expiry.KindDiverged) {
		if ev.OrderNo == no && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

func (e *bitEnv) refund(_ context.Context, d cancel.Discrepancy) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.refunds[d.PaymentID]++
	return nil
}

func (e *bitEnv) refunded(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refunds[id]
}

func (e *bitEnv) wire(t *testing.T, grace time.Duration) {
	t.Helper()
	e.log, e.refunds = &expirytest.Recorder{}, map[string]int{}
	rt := expiry.Runtime{Observer: e.log}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, OnDiscrepancy: e.refund, Runtime: rt})
	require.NoError(t, err)
	e.grace = grace
	e.rec, err = reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 100,
		Grace: grace, Settle: e.settle, Runtime: rt})
	require.NoError(t, err)
}

// memBIT is a world on the in-memory stores, on a fake clock.
func memBIT(t *testing.T) *bitEnv {
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store := memstore.NewStore(clock)
	e := &bitEnv{store: store, seats: memstore.NewSeats(clock), settle: 5 * time.Second, fake: true,
		insert:   store.Place,
		snapshot: func(*testing.T) func() { return store.Snapshot() },
		advance:  func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }}
	e.wire(t, time.Minute)
	return e
}

// sqliteBIT is a world on SQLite (its own file) and the in-memory seat
// store, on the real clock; a snapshot copies the library's tables.
func sqliteBIT(t *testing.T) *bitEnv {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	tables := []string{"oe_order", "oe_order_seat", "oe_payment_discrepancy", "oe_order_side"}
	n := 0
	e := &bitEnv{store: store, seats: memstore.NewSeats(nil), settle: 300 * time.Millisecond,
		insert: store.Insert(db, nil),
		snapshot: func(t *testing.T) func() {
			n++
			name := fmt.Sprintf("snap%d", n)
			for _, tb := range tables {
				_, err := db.Exec(fmt.Sprintf("CREATE TABLE %s_%s AS SELECT * FROM %s", name, tb, tb))
				require.NoError(t, err)
			}
			return func() {
				tx, err := db.Begin()
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				for _, tb := range tables {
					_, err := tx.Exec(fmt.Sprintf("DELETE FROM %s", tb))
					require.NoError(t, err)
					_, err = tx.Exec(fmt.Sprintf("INSERT INTO %s SELECT * FROM %s_%s", tb, name, tb))
					require.NoError(t, err)
				}
				require.NoError(t, tx.Commit())
			}
		},
		advance: time.Sleep}
	e.wire(t, 2*time.Second)
	return e
}

// forEachBIT runs a case on both worlds.
func forEachBIT(t *testing.T, run func(t *testing.T, e *bitEnv)) {
	t.Run("memstore", func(t *testing.T) { run(t, memBIT(t)) })
	t.Run("sqlite", func(t *testing.T) { run(t, sqliteBIT(t)) })
}

func (e *bitEnv) place(t *testing.T, no, user string, ttl time.Duration, seats ...string) cancel.Placement {
	t.Helper()
	now, err := e.store.Now(context.Background())
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "show", Seats: seats, ExpireAt: now.Add(ttl)}
	require.NoError(t, e.svc.Place(context.Background(), p, e.insert))
	return p
}

func (e *bitEnv) status(t *testing.T, no string) string {
	t.Helper()
	o, err := e.store.Order(context.Background(), no)
	if err != nil {
		require.ErrorIs(t, err, expiry.ErrNotFound)
		return "missing"
	}
	return o.Status.String()
}

func (e *bitEnv) seat(t *testing.T, seat string) cancel.SeatState {
	t.Helper()
	st, err := e.seats.Show(context.Background(), "show")
	require.NoError(t, err)
	return st[seat]
}

// converge runs rounds, each past the settle time, until one repairs
// nothing (at most 10), and returns the last round's report.
func (e *bitEnv) converge(t *testing.T) reconcile.Report {
	t.Helper()
	for i := 0; i < 10; i++ {
		e.advance(e.settle + 50*time.Millisecond)
		rep, err := e.rec.Round(context.Background())
		require.NoError(t, err)
		if rep.Expired+rep.Released+rep.Sold+rep.Restored+rep.Refunds+rep.Settling == 0 && !rep.More {
			return rep
		}
	}
	t.Fatal("the reconciler did not converge in 10 rounds")
	return reconcile.Report{}
}

func sold(no, user string) cancel.SeatState {
	return cancel.SeatState{Status: cancel.SeatSold, OrderNo: no, UserID: user}
}

// Case a: an order paid (its seats sold in the seat store) that SQL has
// pending again. Nothing the library holds says who paid (the payment id
// was in the lost commit), so it cannot pay the order again; the seats
// stay sold, and the order is reported while pending and again once its
// deadline cancelled it. A repeat of the callback after the cancel is
// refunded, once.
func TestBackInTimeSoldOrderPendingAgain(t *testing.T) {
	forEachBIT(t, func(t *testing.T, e *bitEnv) {
		ctx := context.Background()
		ttl := 10 * e.settle // longer than the rounds before the deadline
		p := e.place(t, "a1", "u1", ttl, "s1", "s2")
		restore := e.snapshot(t)
		pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-a1"}
		_, err := e.svc.Pay(ctx, pay)
		require.NoError(t, err)
		restore()
		require.Equal(t, "pending", e.status(t, p.OrderNo))

		rep := e.converge(t)
		require.Equal(t, 2, rep.Diverged, "both sold seats counted in the round")
		require.Len(t, e.diverged(p.OrderNo, "sold_pending"), 1, "reported once, while SQL has it pending")
		require.Equal(t, 2, e.diverged(p.OrderNo, "sold_pending")[0].Seats)

		e.advance(ttl)
		changed, _, err := e.svc.Timeout(ctx, p.OrderNo)
		require.NoError(t, err)
		require.True(t, changed, "SQL has it pending: its deadline cancels it")
		e.converge(t)
		for _, s := range p.Seats {
			require.Equal(t, sold(p.OrderNo, p.UserID), e.seat(t, s), "I15: a sold seat is never freed")
		}
		require.Len(t, e.diverged(p.OrderNo, "sold_cancelled"), 1, "reported again once SQL cancelled it")

		_, err = e.svc.Pay(ctx, pay)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "cancelled in SQL: the repeat is refunded, never honoured")
		require.Equal(t, 1, e.refunded("pay-a1"))
		e.converge(t)
		require.Equal(t, 1, e.refunded("pay-a1"), "I9")
		require.Equal(t, "cancelled", e.status(t, p.OrderNo))
		require.Equal(t, cancel.SeatSold, e.seat(t, "s1").Status, "a sold seat is never freed")
	})
}

// Case b: SQL lost the order altogether (placed and paid after the
// snapshot). Its seats stay sold, are never locked or sold for another
// order, and the order is reported once per reconciler; every round counts
// its seats.
func TestBackInTimeSoldOrderMissing(t *testing.T) {
	forEachBIT(t, func(t *testing.T, e *bitEnv) {
		ctx := context.Background()
		restore := e.snapshot(t)
		p := e.place(t, "b1", "u1", time.Hour, "s1", "s2")
		_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-b1"})
		require.NoError(t, err)
		restore()
		require.Equal(t, "missing", e.status(t, p.OrderNo))

		e.advance(e.grace + time.Second) // past the grace of locks without an order
		rep := e.converge(t)
		require.Equal(t, 2, rep.Diverged)
		rep = e.converge(t)
		require.Equal(t, 2, rep.Diverged, "counted in every round while it lasts")
		require.Len(t, e.diverged(p.OrderNo, "sold_missing"), 1, "reported once")
		for _, s := range p.Seats {
			require.Equal(t, sold(p.OrderNo, p.UserID), e.seat(t, s), "I15: a sold seat is never freed")
		}
		// Nobody else gets them.
		err = e.svc.Place(ctx, cancel.Placement{OrderNo: "b2", UserID: "u2", ShowID: "show", Seats: []string{"s1"}, ExpireAt: time.Now().Add(time.Hour)}, e.insert)
		require.ErrorIs(t, err, cancel.ErrSeatUnavailable)
	})
}

// Case c: a cancelled order pending again, one of whose seats another
// order took and paid (an order SQL lost too). When the pending order is
// paid, SQL sells it a seat the seat store sold to the other: the seat
// stays the other's in the seat store, and the payment is reported as two
// buyers holding one seat.
func TestBackInTimeSeatSoldToAnother(t *testing.T) {
	forEachBIT(t, func(t *testing.T, e *bitEnv) {
		ctx := context.Background()
		a := e.place(t, "c-a", "u1", time.Hour, "s1", "s2")
		restore := e.snapshot(t)
		_, err := e.svc.UserCancel(ctx, a.OrderNo, a.UserID)
		require.NoError(t, err)
		b := e.place(t, "c-b", "u2", time.Hour, "s2", "s3")
		_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: b.OrderNo, UserID: b.UserID, PaymentID: "pay-c-b"})
		require.NoError(t, err)
		restore()

		e.converge(t)
		require.Equal(t, a.OrderNo, e.seat(t, "s1").OrderNo, "the free seat is locked for the pending order again")
		require.Equal(t, sold(b.OrderNo, b.UserID), e.seat(t, "s2"))
		require.Len(t, e.diverged(b.OrderNo, "sold_missing"), 1)

		res, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, UserID: a.UserID, PaymentID: "pay-c-a"})
		require.NoError(t, err)
		require.True(t, res.Changed)
		e.converge(t)
		require.Equal(t, sold(b.OrderNo, b.UserID), e.seat(t, "s2"), "the seat sold to b stays b's")
		require.Equal(t, sold(a.OrderNo, a.UserID), e.seat(t, "s1"))
		ev := e.diverged(a.OrderNo, "sold_to_another")
		require.Len(t, ev, 1, "the double sale is reported with the payment")
		require.Equal(t, 1, ev[0].Seats)
	})
}

// Case d: a refund the hook made, whose record SQL lost. The provider's
// repeat is recorded again in SQL, but the seat store's record of the
// refund keeps the hook from running a second time (I9); the repeat is
// reported.
func TestBackInTimeRefundRecordLost(t *testing.T) {
	forEachBIT(t, func(t *testing.T, e *bitEnv) {
		ctx := context.Background()
		p := e.place(t, "d1", "u1", time.Hour, "s1")
		_, err := e.svc.UserCancel(ctx, p.OrderNo, p.UserID)
		require.NoError(t, err)
		restore := e.snapshot(t)
		pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-d1"}
		_, err = e.svc.Pay(ctx, pay)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		require.Equal(t, 1, e.refunded("pay-d1"))
		restore()

		for i := 0; i < 2; i++ {
			_, err = e.svc.Pay(ctx, pay)
			require.ErrorIs(t, err, cancel.ErrDiscrepancy, "still not honoured")
		}
		if e.fake {
			e.advance(3 * time.Minute) // past the discrepancy lease: the retries find nothing to do
		}
		e.converge(t)
		require.Equal(t, 1, e.refunded("pay-d1"), "I9: the hook ran once for the payment id")
		require.Len(t, e.diverged(p.OrderNo, "refund_repeated"), 1)
		require.Equal(t, "cancelled", e.status(t, p.OrderNo))
	})
}

// Case e: the refund and the cancel before it both lost: SQL has the order
// pending again, and the provider repeats the refunded payment. It is
// refused (I14: a refunded id is never honoured) and reported; the order
// expires at its deadline and its seats are freed.
func TestBackInTimeRefundAndCancelLost(t *testing.T) {
	forEachBIT(t, func(t *testing.T, e *bitEnv) {
		ctx := context.Background()
		ttl := 10 * e.settle // longer than the rounds before the deadline
		p := e.place(t, "e1", "u1", ttl, "s1")
		restore := e.snapshot(t)
		_, err := e.svc.UserCancel(ctx, p.OrderNo, p.UserID)
		require.NoError(t, err)
		pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-e1"}
		_, err = e.svc.Pay(ctx, pay)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		restore()
		e.converge(t) // the claims pass locks s1 for the pending order again
		require.Equal(t, p.OrderNo, e.seat(t, "s1").OrderNo)

		_, err = e.svc.Pay(ctx, pay)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: refunded before, never honoured")
		require.Equal(t, "pending", e.status(t, p.OrderNo))
		require.Equal(t, 1, e.refunded("pay-e1"), "I9")
		require.Len(t, e.diverged(p.OrderNo, "refunded_payment"), 1)

		e.advance(ttl)
		e.converge(t)
		require.Equal(t, "cancelled", e.status(t, p.OrderNo), "I3: it expires")
		require.Equal(t, cancel.SeatState{}, e.seat(t, "s1"), "its seat is free again")
		require.Equal(t, 1, e.refunded("pay-e1"))
		require.Zero(t, e.log.Count(expiry.KindPaid), "never honoured")
	})
}
