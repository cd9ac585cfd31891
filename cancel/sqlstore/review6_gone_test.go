package sqlstore_test

// Review of 6d60c3e (PayPending answers a deleted order's payment from its
// decision row, status 0, as paid) and of the caveat that status 0 also
// marks a refund (refusedBefore's, payLate's refuse of an order it reads
// pending). Outcomes judged: what Pay answered (nil error = the host is told
// the payment was honoured), the refund book, the seat store.

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// r6Seats is the Redis seat store with a switch: while down, the refund
// record cannot be read (a Redis outage, a failover: "SQL decides alone").
type r6Seats struct {
	*redisseat.Seats
	down atomic.Bool
}

func (f *r6Seats) Refunded(ctx context.Context, id string) (bool, error) {
	if f.down.Load() {
		return false, errors.New("dial tcp: connection refused")
	}
	return f.Seats.Refunded(ctx, id)
}

// r6Book is a refund hook the provider can take down.
type r6Book struct {
	mu   sync.Mutex
	down bool
	n    map[string]int
}

func (b *r6Book) hook(_ context.Context, d cancel.Discrepancy) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return errors.New("provider: 503")
	}
	if b.n == nil {
		b.n = map[string]int{}
	}
	b.n[d.PaymentID]++
	return nil
}

func (b *r6Book) setDown(v bool) { b.mu.Lock(); b.down = v; b.mu.Unlock() }
func (b *r6Book) count(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[id]
}

type r6World struct {
	d    sqlstore.Dialect
	db   *sql.DB
	s    *sqlstore.Store
	rs   *r6Seats
	root string
	book *r6Book
	svc  *cancel.Service
	u    string
}

func newR6(t *testing.T, d sqlstore.Dialect, db *sql.DB, cfg func(*cancel.Config)) *r6World {
	ctx := context.Background()
	s, err := sqlstore.New(db, d)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	root := "r6" + testenv.Unique()
	base, err := redisseat.New(testenv.Redis(t), root)
	require.NoError(t, err)
	w := &r6World{d: d, db: db, s: s, rs: &r6Seats{Seats: base.Scoped(s.Scope())}, root: root, book: &r6Book{}, u: testenv.Unique()}
	conf := cancel.Config{Store: s, Seats: w.rs, OnDiscrepancy: w.book.hook, Runtime: quiet}
	if cfg != nil {
		cfg(&conf)
	}
	w.svc, err = cancel.New(conf)
	require.NoError(t, err)
	return w
}

func (w *r6World) place(t *testing.T, no, user, seat string) cancel.Placement {
	ctx := context.Background()
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no + w.u, UserID: user, ShowID: "ev" + w.u, Seats: []string{seat}, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(w.db, nil)))
	return p
}

func (w *r6World) exec(t *testing.T, q string, args ...any) {
	_, err := w.db.Exec(bindQ(w.d, q), args...)
	require.NoError(t, err, q)
}

// hostDeletes is the host removing the order (the buyer deletes it from
// their list, the host archives it): its claims, then its row.
func (w *r6World) hostDeletes(t *testing.T, no string) {
	w.exec(t, "DELETE FROM oe_order_seat WHERE order_no = ?", no)
	w.exec(t, "DELETE FROM oe_order WHERE order_no = ?", no)
}

// refundedThenBackInTime: P is refunded (the order was closed when it
// came), then SQL goes back in time to when the order was pending, without
// the record of that refund (a restore, a promoted async replica). The
// provider repeats P: the seat store says refunded, so refusedBefore
// refuses it and records the refund again, with the order's status then:
// pending, the status 0 that also marks an honoured payment.
func (w *r6World) refundedThenBackInTime(t *testing.T) (cancel.Placement, cancel.Payment) {
	ctx := context.Background()
	o := w.place(t, "G", "u1", "g1")
	_, err := w.svc.UserCancel(ctx, o.OrderNo, "u1")
	require.NoError(t, err)
	pay := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-g" + w.u}
	_, err = w.svc.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, w.book.count(pay.PaymentID), "refunded once")

	w.exec(t, "UPDATE oe_order SET status = 0, cancel_reason = NULL WHERE order_no = ?", o.OrderNo)
	w.exec(t, "DELETE FROM oe_payment_discrepancy WHERE payment_id = ?", pay.PaymentID)

	_, err = w.svc.Pay(ctx, pay)
	require.ErrorIs(t, err, cancel.ErrDiscrepancy, "refusedBefore: refunded, never honoured")
	require.Equal(t, 1, w.book.count(pay.PaymentID), "not refunded twice")
	return o, pay
}

// TestReview6RefundedPaymentOfDeletedOrderIsNeverAnsweredPaid (I14, the
// caveat): after refusedBefore recorded P's refund with status 0 for an
// order SQL had pending, the host deletes that order (a pending order the
// buyer removed, or archived once it expired). The provider repeats P while
// the seat store's refund record cannot be read (an outage: Pay lets SQL
// decide alone) or after Redis lost it (a restart without persistence, I13
// "Redis losing data"). SQL's own record says P was refunded; yet
// PayPending's paidGone reads the status-0 row as "P paid this order" and
// Pay answers P honoured, without an error: a refunded payment answered as
// paid, its fate flipped. Before 6d60c3e the same call was ErrDiscrepancy
// (recorded before).
func TestReview6RefundedPaymentOfDeletedOrderIsNeverAnsweredPaid(t *testing.T) {
	for _, how := range []string{"seat store down", "redis lost the refund record"} {
		t.Run(how, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w := newR6(t, d, db, nil)
				o, pay := w.refundedThenBackInTime(t)
				w.hostDeletes(t, o.OrderNo)

				if how == "seat store down" {
					w.rs.down.Store(true)
				} else {
					rdb := testenv.Redis(t)
					keys, err := rdb.Keys(ctx, w.root+"*:refund:*").Result()
					require.NoError(t, err)
					require.NotEmpty(t, keys, "the refund record was in Redis")
					require.NoError(t, rdb.Del(ctx, keys...).Err())
				}

				res, err := w.svc.Pay(ctx, pay)
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: a refunded payment is never answered as honoured (answer %+v)", res)
				assert.NotEqual(t, expiry.StatusPaid, res.Order.Status, "I14: Pay says P paid the order; the hook refunded P")
				assert.Equal(t, 1, w.book.count(pay.PaymentID), "refunded once")
			})
		})
	}
}

// r6Reopen is the store with the host acting between Pay's read and the
// late payment's reinstatement: the host reopens the cancelled order
// (customer service puts it back pending) just before ReinstateCancelled.
type r6Reopen struct {
	*sqlstore.Store
	before func()
}

func (r *r6Reopen) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	if f := r.before; f != nil {
		r.before = nil
		f()
	}
	return r.Store.ReinstateCancelled(ctx, p, claim)
}

// TestReview6UnsettledRefundOfDeletedOrderIsNotAnsweredPaid (I14, I9):
// no back in time, Redis healthy. A late payment P finds its order
// cancelled by a timeout (AcceptLatePayments); the host reopens the order
// before the reinstatement, which then reads it pending and refuses: P is
// recorded for refund with the order's status, pending (status 0). The
// refund provider is down, so the refund is not settled and the seat store
// has no refund record. The host then deletes the order. The provider
// repeats P: paidGone matches the unsettled status-0 row (sqlstore does not
// ask settled_at_ms, memstore does) and Pay answers P as honoured; the
// reconciler's retry then refunds P. P is both answered paid and refunded.
func TestReview6UnsettledRefundOfDeletedOrderIsNotAnsweredPaid(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		ctx2 := context.Background()
		var store *r6Reopen
		w := newR6(t, d, db, func(c *cancel.Config) {
			c.AcceptLatePayments = true
			c.DiscrepancyLease = 200 * time.Millisecond
			store = &r6Reopen{Store: c.Store.(*sqlstore.Store)}
			c.Store = store
		})
		o := w.place(t, "L", "u1", "l1")
		res, err := w.svc.Cancel(ctx, cancel.Request{OrderNo: o.OrderNo, Reason: cancel.ReasonTimeout})
		require.NoError(t, err)
		require.True(t, res.Changed)

		pay := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-l" + w.u}
		store.before = func() {
			w.exec(t, "UPDATE oe_order SET status = 0, cancel_reason = NULL WHERE order_no = ?", o.OrderNo)
		}
		w.book.setDown(true)
		_, err = w.svc.Pay(ctx, pay)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy, "refused: recorded for refund")
		var status int
		var settled sql.NullInt64
		require.NoError(t, db.QueryRow(bindQ(d, "SELECT status, settled_at_ms FROM oe_payment_discrepancy WHERE payment_id = ?"), pay.PaymentID).Scan(&status, &settled))
		t.Logf("P's record: status %d, settled %v (a refund owed)", status, settled.Valid)

		w.hostDeletes(t, o.OrderNo) // the buyer removes the reopened order

		ans, err := w.svc.Pay(ctx2, pay) // the provider repeats P
		answeredPaid := err == nil
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: a payment owed a refund is not answered as honoured (answer %+v)", ans)

		w.book.setDown(false)
		time.Sleep(300 * time.Millisecond)
		_, err = w.svc.RetryDiscrepancies(ctx, 10)
		require.NoError(t, err)
		refunded := w.book.count(pay.PaymentID)
		assert.Equal(t, 1, refunded, "I9: refunded once")
		assert.False(t, answeredPaid && refunded > 0, "I14: P answered honoured AND refunded")
	})
}

// TestReview6RefundedPaymentNeverOwnsAnOrderWithoutPaymentColumn (I14, the
// caveat, no deletion, Redis healthy): on a host table without a payment
// column, the payment that paid an order is MIN(payment_id) of its status-0
// rows. P1 was refunded (refusedBefore's status-0 row after SQL went back
// in time); the buyer then pays the pending order with P2 (honoured: the
// order paid, its seat sold). Now the order reads "paid by P1": P1's repeat
// is answered honoured (refusedBefore asks PayPending, which names P1), and
// P2's repeat, the payment that did pay, is a discrepancy on every repeat.
func TestReview6RefundedPaymentNeverOwnsAnOrderWithoutPaymentColumn(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, softDelete)
		root := "r6" + testenv.Unique()
		base, err := redisseat.New(testenv.Redis(t), root)
		require.NoError(t, err)
		rs := base.Scoped(s.Scope())
		book := &r6Book{}
		svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook, Runtime: quiet})
		require.NoError(t, err)
		u := testenv.Unique()
		now, err := s.Now(ctx)
		require.NoError(t, err)
		o := cancel.Placement{OrderNo: "M" + u, UserID: "u1", ShowID: "ev" + u, Seats: []string{"m1"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, svc.Place(ctx, o, s.Insert(db, nil)))
		set := func(v string) {
			_, err := db.Exec(bindQ(d, "UPDATE gorm_orders SET status = ? WHERE order_no = ?"), v, o.OrderNo)
			require.NoError(t, err)
		}
		// The backup is taken here (pending). The host closes the order, P1
		// comes and is refunded.
		set("cancelled")
		p1 := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-a" + u}
		_, err = svc.Pay(ctx, p1)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		require.Equal(t, 1, book.count(p1.PaymentID))
		// SQL goes back to the backup.
		set("pending")
		_, err = db.Exec(bindQ(d, "DELETE FROM oe_payment_discrepancy WHERE payment_id = ?"), p1.PaymentID)
		require.NoError(t, err)
		_, err = svc.Pay(ctx, p1) // repeated: refused, recorded again (status 0)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)

		// The buyer pays again, with P2: honoured.
		p2 := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-b" + u}
		r2, err := svc.Pay(ctx, p2)
		require.NoError(t, err)
		require.True(t, r2.Changed, "P2 paid the order")
		require.Equal(t, "sold:"+o.OrderNo, holder(t, rs, o.ShowID, "m1"))

		// The provider repeats both.
		a1, err1 := svc.Pay(ctx, p1)
		assert.ErrorIs(t, err1, cancel.ErrDiscrepancy, "I14: refunded P1 is never answered as the payment of the order (answer %+v)", a1)
		a2, err2 := svc.Pay(ctx, p2)
		assert.NoError(t, err2, "I14: P2, which paid the order, is answered (answer %+v)", a2)
		assert.Equal(t, 1, book.count(p1.PaymentID))
		assert.Equal(t, 0, book.count(p2.PaymentID))
	})
}

// TestReview6PaidOrderNumberReused (the change's aim, I14): P1 paid order
// N; the host deletes N and places a new order under the same number. The
// provider repeats P1: it must not pay the new order, and it is the
// payment that paid N, so its repeat is answered as a deleted order's is.
// It failed on every repeat (ErrDiscrepancy, "recorded before") while the
// decision row was asked only when no order had the number. The store
// suite's PaidOrderNumberReused asks the same of every store.
func TestReview6PaidOrderNumberReused(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newR6(t, d, db, nil)
		o := w.place(t, "N", "u1", "n1")
		p1 := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-n1" + w.u}
		r, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		require.True(t, r.Changed)
		w.hostDeletes(t, o.OrderNo)
		_, err = w.svc.Pay(ctx, p1)
		require.NoError(t, err, "the change: the deleted order's payment is answered")

		// The host reuses the number for another buyer's order.
		now, err := w.s.Now(ctx)
		require.NoError(t, err)
		o2 := cancel.Placement{OrderNo: o.OrderNo, UserID: "u2", ShowID: o.ShowID, Seats: []string{"n2"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, w.svc.Place(ctx, o2, w.s.Insert(w.db, nil)))

		_, err = w.svc.Pay(ctx, p1)
		ord, oerr := w.s.Order(ctx, o.OrderNo)
		require.NoError(t, oerr)
		assert.Equal(t, expiry.StatusPending, ord.Status, "P1 did not pay the new order")
		assert.Equal(t, 0, w.book.count(p1.PaymentID), "P1 (honoured) is never refunded")
		assert.NoError(t, err, "I14: P1's repeat is answered as the payment of the order it paid, not an error for ever")

		// The new order is paid by its own payment P2; the provider
		// repeats both. Each is the payment of the order it paid: answered,
		// never refunded, never an error the provider repeats for ever
		// (P1's repeat was ErrDiscrepancy, "recorded before", once the
		// order under its number named P2).
		p2 := cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-z2" + w.u}
		r, err = w.svc.Pay(ctx, p2)
		require.NoError(t, err)
		require.True(t, r.Changed, "P2 pays the new order")
		for _, p := range []cancel.Payment{p1, p2, {OrderNo: o.OrderNo, UserID: "u2", PaymentID: p2.PaymentID}} {
			a, err := w.svc.Pay(ctx, p)
			assert.NoError(t, err, "I14: %s's repeat is answered (answer %+v)", p.PaymentID, a)
			assert.Equal(t, p.PaymentID, a.PaymentID)
		}
		assert.Equal(t, 0, w.book.count(p1.PaymentID), "P1 is never refunded")
		assert.Equal(t, 0, w.book.count(p2.PaymentID), "P2 is never refunded")
		assert.Equal(t, "sold:"+o.OrderNo, holder(t, w.rs.Seats, o2.ShowID, "n2"), "the new order holds its seat")
	})
}
