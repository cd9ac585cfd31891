package sqlstore_test

// Review 16 of d2be752 (PayPending answers a payment from its own decision
// row also when the order under the number is paid by another payment):
// the host deletes a paid order and reuses its number. Judged by outcomes:
// who paid (the order's row, the seat store), who was refunded (the refund
// hook's calls), and what the provider is told (Pay's error).

import (
	"context"
	"database/sql"
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

// r16World is one store (the library's schema, or a host's) with a Service
// whose refund hook counts its calls.
type r16World struct {
	d    sqlstore.Dialect
	db   *sql.DB
	s    *sqlstore.Store
	rs   *redisseat.Seats
	book *r6Book
	svc  *cancel.Service
	hs   *hostSchema
	u    string
	show string
}

// r16Schemas: the library's own (a payment column), seatflow (a payment
// column, case-folding ids on MariaDB), softdelete (no payment column: the
// payer is the least id among the number's status-0 decision rows).
var r16Schemas = []*hostSchema{nil, &seatflow, &softDelete}

func r16Name(hs *hostSchema) string {
	if hs == nil {
		return "library"
	}
	return hs.name
}

func newR16(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema, cfg func(*cancel.Config)) *r16World {
	ctx := context.Background()
	var s *sqlstore.Store
	if hs == nil {
		var err error
		s, err = sqlstore.New(db, d)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
	} else {
		s = hostStore(t, db, d, *hs)
	}
	base, err := redisseat.New(testenv.Redis(t), "r16"+testenv.Unique())
	require.NoError(t, err)
	w := &r16World{d: d, db: db, s: s, rs: base.Scoped(s.Scope()), book: &r6Book{}, hs: hs, u: testenv.Unique()}
	w.show = "ev" + w.u
	conf := cancel.Config{Store: s, Seats: w.rs, OnDiscrepancy: w.book.hook, Runtime: quiet}
	if cfg != nil {
		cfg(&conf)
	}
	w.svc, err = cancel.New(conf)
	require.NoError(t, err)
	return w
}

func (w *r16World) place(t *testing.T, no, user, seat string, in time.Duration) cancel.Placement {
	ctx := context.Background()
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: w.show, Seats: []string{seat}, ExpireAt: now.Add(in)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(w.db, nil)))
	return p
}

// del is the host hard-deleting the order (claims, then row).
func (w *r16World) del(t *testing.T, no string) {
	ctx := context.Background()
	if w.hs == nil {
		require.NoError(t, hostDelete(ctx, w.db, w.d, "oe_order", "order_no", "oe_order_seat", "order_no", no))
		return
	}
	o := w.hs.mapping.Orders
	if c := w.hs.mapping.Claims; c != nil {
		require.NoError(t, hostDelete(ctx, w.db, w.d, o.Table, o.OrderNo, c.Table, c.OrderNo, no))
		return
	}
	require.NoError(t, hostDelete(ctx, w.db, w.d, o.Table, o.OrderNo, "", "", no))
}

// reusedPaid: P1 pays the order N of u1; the host deletes N and places a
// new order of u2 under N, which P2 pays. Returns N, P1, P2.
func (w *r16World) reusedPaid(t *testing.T, p1ID, p2ID string) (string, cancel.Payment, cancel.Payment) {
	ctx := context.Background()
	no := "N" + w.u
	w.place(t, no, "u1", "s1", time.Hour)
	p1 := cancel.Payment{OrderNo: no, UserID: "u1", PaymentID: p1ID}
	r, err := w.svc.Pay(ctx, p1)
	require.NoError(t, err)
	require.True(t, r.Changed, "P1 pays the old order")
	w.del(t, no)
	w.place(t, no, "u2", "s2", time.Hour)
	p2 := cancel.Payment{OrderNo: no, UserID: "u2", PaymentID: p2ID}
	r, err = w.svc.Pay(ctx, p2)
	require.NoError(t, err)
	require.True(t, r.Changed, "P2 pays the new order")
	return no, p1, p2
}

func eachSchema(t *testing.T, fn func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema)) {
	for _, hs := range r16Schemas {
		t.Run(r16Name(hs), func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { fn(t, d, db, hs) })
		})
	}
}

// TestReview16ThirdPaymentOfReusedPaidNumberIsRefunded (I9, I14): a third
// payment P3 for the new order (paid by P2) never paid anything: it is
// refunded once however often it is repeated, and never answered as
// paid; P1 and P2 are never refunded. Both orders of ids (P1 < P2 and
// P1 > P2, which decides the payer read without a payment column), and P3
// a case variant of P1 and of P2 (I10).
func TestReview16ThirdPaymentOfReusedPaidNumberIsRefunded(t *testing.T) {
	eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
		ctx := context.Background()
		for i, ids := range [][2]string{{"pay-a", "pay-z"}, {"pay-z", "pay-a"}} {
			if i > 0 {
				db = openDB(t, d) // the host's tables are created again
			}
			w := newR16(t, d, db, hs, nil)
			no, p1, p2 := w.reusedPaid(t, ids[0]+w.u, ids[1]+w.u)
			for _, p3 := range []cancel.Payment{
				{OrderNo: no, UserID: "u2", PaymentID: "pay-m" + w.u},
				{OrderNo: no, PaymentID: "PAY-A" + w.u},
				{OrderNo: no, PaymentID: "PAY-Z" + w.u},
				{OrderNo: no, UserID: "u1", PaymentID: "pay-b" + w.u},
			} {
				for i := 0; i < 3; i++ {
					a, err := w.svc.Pay(ctx, p3)
					if p3.UserID == "u1" && i == 0 {
						// u1 does not own the new order: not decided, nothing refunded.
						assert.ErrorIs(t, err, cancel.ErrNotOwner, "%s", p3.PaymentID)
						break
					}
					assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "%s (repeat %d) is not the payment of any order (answer %+v)", p3.PaymentID, i, a)
					assert.NotEqual(t, p3.PaymentID, a.PaymentID, "%s is never answered as the payer", p3.PaymentID)
				}
				if p3.UserID != "u1" {
					assert.Equal(t, 1, w.book.count(p3.PaymentID), "I9: %s refunded once", p3.PaymentID)
				} else {
					assert.Equal(t, 0, w.book.count(p3.PaymentID))
				}
			}
			for _, p := range []cancel.Payment{p1, p2, {OrderNo: no, PaymentID: p1.PaymentID}, {OrderNo: no, PaymentID: p2.PaymentID}} {
				a, err := w.svc.Pay(ctx, p)
				assert.NoError(t, err, "%s's repeat is answered", p.PaymentID)
				assert.Equal(t, p.PaymentID, a.PaymentID)
			}
			assert.Equal(t, 0, w.book.count(p1.PaymentID), "P1 never refunded")
			assert.Equal(t, 0, w.book.count(p2.PaymentID), "P2 never refunded")
			o, err := w.s.Order(ctx, no)
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPaid, o.Status)
			assert.Equal(t, "u2", o.UserID)
			assert.Equal(t, "sold:"+no, holder(t, w.rs, w.show, "s2"))
		}
	})
}

// TestReview16OldPaymentAnswerNamesItsOwnBuyer (contract: "the user the
// record names"): after reuse, the old payment P1's repeat is answered as
// the payment of the order it paid, for its buyer u1, never as the payer
// of the new buyer u2's order; and a P1 callback that names u2 (the wrong
// user) is never answered as u2's paid order. Without a payment column,
// when P1 < P2, the payer read by number is P1, so the new order (u2's)
// is answered as paid by P1.
func TestReview16OldPaymentAnswerNamesItsOwnBuyer(t *testing.T) {
	eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
		ctx := context.Background()
		w := newR16(t, d, db, hs, nil)
		no, p1, _ := w.reusedPaid(t, "pay-a"+w.u, "pay-z"+w.u)

		a, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: p1.PaymentID})
		require.NoError(t, err)
		assert.Equal(t, p1.PaymentID, a.PaymentID)
		assert.Equal(t, "u1", a.Order.UserID, "P1 paid u1's order; answered as paying u2's (answer %+v)", a)

		a, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: no, UserID: "u2", PaymentID: p1.PaymentID})
		paidForU2 := err == nil && a.PaymentID == p1.PaymentID && a.Order.UserID == "u2"
		assert.False(t, paidForU2, "P1 (u1's payment) named with u2 is answered as paying u2's order (answer %+v, err %v)", a, err)
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
	})
}

// TestReview16RefundedPaymentOfOldOrderStaysRefunded (I14): P3 was a second
// payment of the old order (refunded, decision status 1). After reuse, with
// the new order pending and then paid by P2, P3's repeat is never answered
// as paid, never pays the new order, and is not refunded again.
func TestReview16RefundedPaymentOfOldOrderStaysRefunded(t *testing.T) {
	eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
		ctx := context.Background()
		w := newR16(t, d, db, hs, nil)
		no := "N" + w.u
		w.place(t, no, "u1", "s1", time.Hour)
		p1 := cancel.Payment{OrderNo: no, PaymentID: "pay-b" + w.u}
		_, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		p3 := cancel.Payment{OrderNo: no, PaymentID: "pay-a" + w.u} // the least id
		_, err = w.svc.Pay(ctx, p3)
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		require.Equal(t, 1, w.book.count(p3.PaymentID))
		w.del(t, no)
		w.place(t, no, "u2", "s2", time.Hour)

		a, err := w.svc.Pay(ctx, p3)
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "new order pending: refunded P3 (answer %+v)", a)
		o, err := w.s.Order(ctx, no)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status, "P3 pays nothing")

		p2 := cancel.Payment{OrderNo: no, PaymentID: "pay-c" + w.u}
		r, err := w.svc.Pay(ctx, p2)
		require.NoError(t, err)
		require.True(t, r.Changed)
		for _, p := range []cancel.Payment{p3, {OrderNo: no, UserID: "u2", PaymentID: p3.PaymentID}} {
			a, err = w.svc.Pay(ctx, p)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "new order paid: refunded P3 (answer %+v)", a)
		}
		a, err = w.svc.Pay(ctx, p2)
		assert.NoError(t, err)
		assert.Equal(t, p2.PaymentID, a.PaymentID)
		assert.Equal(t, 1, w.book.count(p3.PaymentID), "I9")
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
		assert.Equal(t, 0, w.book.count(p2.PaymentID))
	})
}

// TestReview16OldPaymentRepeatWhenNewOrderCancelled (I14, the change's
// aim): the new order under the reused number is cancelled (its buyer
// cancels, or its timeout), not pending or paid. P1, honoured for the old
// order, is repeated: it pays nothing and is never refunded, and is
// answered as the payment that paid the order it paid, not an error the
// provider repeats for ever. With AcceptLatePayments, P1 never reinstates
// the new order.
func TestReview16OldPaymentRepeatWhenNewOrderCancelled(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "strict"
		if late {
			name = "late"
		}
		t.Run(name, func(t *testing.T) {
			eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
				ctx := context.Background()
				w := newR16(t, d, db, hs, func(c *cancel.Config) { c.AcceptLatePayments = late })
				no := "N" + w.u
				w.place(t, no, "u1", "s1", time.Hour)
				p1 := cancel.Payment{OrderNo: no, UserID: "u1", PaymentID: "pay-a" + w.u}
				r, err := w.svc.Pay(ctx, p1)
				require.NoError(t, err)
				require.True(t, r.Changed)
				w.del(t, no)
				w.place(t, no, "u2", "s2", time.Hour)
				r, err = w.svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout})
				require.NoError(t, err)
				require.True(t, r.Changed, "the new order is cancelled by its timeout")

				for _, p := range []cancel.Payment{p1, {OrderNo: no, PaymentID: p1.PaymentID}} {
					a, err := w.svc.Pay(ctx, p)
					assert.NoError(t, err, "I14: honoured P1's repeat is answered, not ErrDiscrepancy for ever (answer %+v)", a)
				}
				o, err := w.s.Order(ctx, no)
				require.NoError(t, err)
				assert.Equal(t, expiry.StatusCancelled, o.Status, "P1 pays nothing of the new order")
				assert.Equal(t, "", holder(t, w.rs, w.show, "s2"), "the new order's seat stays free")
				assert.Equal(t, 0, w.book.count(p1.PaymentID), "P1 never refunded")
			})
		})
	}
}

// TestReview16OldPaymentRepeatWhenNewOrderHostStatus (I14, I19): the new
// order under the reused number is in a status the host owns. P1's repeat
// is answered (it paid the old order), never refunded, and the host's
// order is untouched.
func TestReview16OldPaymentRepeatWhenNewOrderHostStatus(t *testing.T) {
	c := hostStatusCases[0] // seatflow
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newR16(t, d, db, &c.hs, nil)
		no := "N" + w.u
		w.place(t, no, "u1", "s1", time.Hour)
		p1 := cancel.Payment{OrderNo: no, PaymentID: "pay-a" + w.u}
		r, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		require.True(t, r.Changed)
		w.del(t, no)
		w.place(t, no, "u2", "s2", time.Hour)
		c.setStatus(t, db, d, no, c.hold)

		a, err := w.svc.Pay(ctx, p1)
		assert.NoError(t, err, "I14: honoured P1's repeat is answered, not ErrDiscrepancy for ever (answer %+v)", a)
		assert.Equal(t, c.hold, c.rowStatus(t, db, d, no), "I19: the host's order untouched")
		assert.Equal(t, 0, w.book.count(p1.PaymentID), "P1 never refunded")
	})
}

// TestReview16LatePaymentsOnReusedNumber (I14, I9): AcceptLatePayments.
// The new order under the reused number is cancelled by its timeout and
// reinstated by its own late payment P2. P1's and P2's repeats are
// answered, never refunded; a third payment P3 is refunded once.
func TestReview16LatePaymentsOnReusedNumber(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newR16(t, d, db, nil, func(c *cancel.Config) { c.AcceptLatePayments = true })
		no := "N" + w.u
		w.place(t, no, "u1", "s1", time.Hour)
		p1 := cancel.Payment{OrderNo: no, PaymentID: "pay-z" + w.u}
		r, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		require.True(t, r.Changed)
		w.del(t, no)
		w.place(t, no, "u2", "s2", time.Hour)
		r, err = w.svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout})
		require.NoError(t, err)
		require.True(t, r.Changed)
		p2 := cancel.Payment{OrderNo: no, PaymentID: "pay-a" + w.u}
		r, err = w.svc.Pay(ctx, p2)
		require.NoError(t, err)
		require.True(t, r.Changed, "P2 reinstates the new order")
		p3 := cancel.Payment{OrderNo: no, PaymentID: "pay-m" + w.u}
		for i := 0; i < 2; i++ {
			for _, p := range []cancel.Payment{p1, p2} {
				a, err := w.svc.Pay(ctx, p)
				assert.NoError(t, err, "%s answered", p.PaymentID)
				assert.Equal(t, p.PaymentID, a.PaymentID)
			}
			_, err := w.svc.Pay(ctx, p3)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		}
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
		assert.Equal(t, 0, w.book.count(p2.PaymentID))
		assert.Equal(t, 1, w.book.count(p3.PaymentID))
		assert.Equal(t, "sold:"+no, holder(t, w.rs, w.show, "s2"))
	})
}

// TestReview16RepeatsRaceTheNewOrdersPayment (I14, I9): P1's repeats race
// the new order's payment P2 and a second payment P3. Exactly one of P2,
// P3 pays; the other is refunded once; P1 is never refunded, never pays,
// and every P1 answer is nil.
func TestReview16RepeatsRaceTheNewOrdersPayment(t *testing.T) {
	eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
		ctx := context.Background()
		w := newR16(t, d, db, hs, nil)
		no := "N" + w.u
		w.place(t, no, "u1", "s1", time.Hour)
		p1 := cancel.Payment{OrderNo: no, PaymentID: "pay-m" + w.u}
		r, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		require.True(t, r.Changed)
		w.del(t, no)
		w.place(t, no, "u2", "s2", time.Hour)
		p2 := cancel.Payment{OrderNo: no, PaymentID: "pay-a" + w.u}
		p3 := cancel.Payment{OrderNo: no, PaymentID: "pay-z" + w.u}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var p1Errs []error
		paid := map[string]bool{}
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := w.svc.Pay(ctx, p1)
				mu.Lock()
				p1Errs = append(p1Errs, err)
				mu.Unlock()
			}()
		}
		for _, p := range []cancel.Payment{p2, p3} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := w.svc.Pay(ctx, p)
				if err == nil && a.Changed {
					mu.Lock()
					paid[p.PaymentID] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, e := range p1Errs {
			assert.NoError(t, e, "P1's repeat")
		}
		require.Len(t, paid, 1, "exactly one of P2, P3 paid")
		winner, loser := p2, p3
		if paid[p3.PaymentID] {
			winner, loser = p3, p2
		}
		// Settle: repeat everything once more.
		for _, p := range []cancel.Payment{p1, winner} {
			a, err := w.svc.Pay(ctx, p)
			assert.NoError(t, err)
			assert.Equal(t, p.PaymentID, a.PaymentID)
		}
		_, err = w.svc.Pay(ctx, loser)
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
		assert.Equal(t, 0, w.book.count(winner.PaymentID))
		assert.Equal(t, 1, w.book.count(loser.PaymentID))
		o, err := w.s.Order(ctx, no)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, o.Status)
		assert.Equal(t, "sold:"+no, holder(t, w.rs, w.show, "s2"))
	})
}

// TestReview16ReconcilerAfterReuse (I14, I15): reconciler rounds after the
// reuse leave the new order paid, its seat sold, and refund nobody; the
// repeats that follow are answered as before.
func TestReview16ReconcilerAfterReuse(t *testing.T) {
	eachSchema(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB, hs *hostSchema) {
		ctx := context.Background()
		w := newR16(t, d, db, hs, func(c *cancel.Config) { c.DiscrepancyLease = 50 * time.Millisecond })
		no, p1, p2 := w.reusedPaid(t, "pay-a"+w.u, "pay-z"+w.u)
		rec, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Settle: time.Millisecond, Grace: time.Minute, Runtime: quiet})
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			_, err := rec.Round(ctx)
			require.NoError(t, err)
			time.Sleep(60 * time.Millisecond)
		}
		for _, p := range []cancel.Payment{p1, p2} {
			a, err := w.svc.Pay(ctx, p)
			assert.NoError(t, err)
			assert.Equal(t, p.PaymentID, a.PaymentID)
		}
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
		assert.Equal(t, 0, w.book.count(p2.PaymentID))
		assert.Equal(t, "sold:"+no, holder(t, w.rs, w.show, "s2"))
		assert.Equal(t, "sold:"+no, holder(t, w.rs, w.show, "s1"), "I15: the old order's sold seat is never freed")
	})
}

// TestReview16TenantsDoNotShareDecisions (I16, I9, I14): the shop schema's
// tenants 7 and 8 share tables. In tenant 7, payment id X paid order N,
// N was deleted and reused, and the new N is paid by P2. Tenant 8's order
// N is paid by its own Q. Tenant 8's provider sends a payment with id X
// (another account's payment) for its N: it never paid anything in tenant
// 8, so it is refunded once there, never answered from tenant 7's decision.
func TestReview16TenantsDoNotShareDecisions(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w7 := newR16(t, d, db, &shop, nil)
		m8 := shop.mapping
		m8.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: 8}}
		c8 := *m8.Claims
		c8.Where = []sqlstore.Condition{{Column: "tenant_id", Value: 8}}
		m8.Claims = &c8
		s8, err := sqlstore.New(db, d, m8)
		require.NoError(t, err)
		t.Cleanup(func() { s8.Close() })
		require.NoError(t, s8.Migrate(ctx))
		require.NotEqual(t, w7.s.Scope(), s8.Scope())
		base, err := redisseat.New(testenv.Redis(t), "r16t8"+testenv.Unique())
		require.NoError(t, err)
		book8 := &r6Book{}
		svc8, err := cancel.New(cancel.Config{Store: s8, Seats: base.Scoped(s8.Scope()), OnDiscrepancy: book8.hook, Runtime: quiet})
		require.NoError(t, err)

		no, p1, p2 := w7.reusedPaid(t, "pay-a"+w7.u, "pay-z"+w7.u)
		now, err := s8.Now(ctx)
		require.NoError(t, err)
		require.NoError(t, svc8.Place(ctx, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: w7.show, Seats: []string{"s1"}, ExpireAt: now.Add(time.Hour)}, s8.Insert(db, nil)))
		q := cancel.Payment{OrderNo: no, PaymentID: "pay-q" + w7.u}
		r, err := svc8.Pay(ctx, q)
		require.NoError(t, err)
		require.True(t, r.Changed)

		for _, x := range []cancel.Payment{{OrderNo: no, PaymentID: p1.PaymentID}, {OrderNo: no, UserID: "u1", PaymentID: p1.PaymentID}, {OrderNo: no, PaymentID: p2.PaymentID}} {
			a, err := svc8.Pay(ctx, x)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "tenant 8: %s paid nothing here (answer %+v)", x.PaymentID, a)
			assert.NotEqual(t, x.PaymentID, a.PaymentID)
		}
		assert.Equal(t, 1, book8.count(p1.PaymentID), "I9: tenant 8 refunds its X once")
		assert.Equal(t, 1, book8.count(p2.PaymentID))
		for _, p := range []cancel.Payment{p1, p2} {
			a, err := w7.svc.Pay(ctx, p)
			assert.NoError(t, err)
			assert.Equal(t, p.PaymentID, a.PaymentID)
		}
		assert.Equal(t, 0, w7.book.count(p1.PaymentID))
		assert.Equal(t, 0, w7.book.count(p2.PaymentID))
	})
}

// TestReview16CaseVariantNumberIsAnotherOrder (I10): on seatflow (ids
// folded by case on MariaDB) the host reuses the number as a case variant
// of the old one. P1 paid "N…"; the new order "n…" is paid by P2. P1 sent
// for "n…" paid nothing there: never answered as its payer, never
// refunded (it was honoured); P1 for "N…" is answered; a payment with a
// case variant of P1's id for "N…" is refunded once.
func TestReview16CaseVariantNumberIsAnotherOrder(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := newR16(t, d, db, &seatflow, nil)
		old := "Nab" + w.u
		w.place(t, old, "u1", "s1", time.Hour)
		p1 := cancel.Payment{OrderNo: old, PaymentID: "pay-a" + w.u}
		r, err := w.svc.Pay(ctx, p1)
		require.NoError(t, err)
		require.True(t, r.Changed)
		w.del(t, old)
		variant := "nAB" + w.u
		w.place(t, variant, "u2", "s2", time.Hour)
		p2 := cancel.Payment{OrderNo: variant, PaymentID: "pay-z" + w.u}
		r, err = w.svc.Pay(ctx, p2)
		require.NoError(t, err)
		require.True(t, r.Changed)

		a, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: variant, PaymentID: p1.PaymentID})
		assert.NotEqual(t, p1.PaymentID, a.PaymentID, "P1 did not pay %s (err %v)", variant, err)
		a, err = w.svc.Pay(ctx, p1)
		assert.NoError(t, err)
		assert.Equal(t, p1.PaymentID, a.PaymentID)
		pv := cancel.Payment{OrderNo: old, PaymentID: "PAY-A" + w.u}
		for i := 0; i < 2; i++ {
			a, err = w.svc.Pay(ctx, pv)
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "answer %+v", a)
		}
		assert.Equal(t, 0, w.book.count(p1.PaymentID))
		assert.Equal(t, 1, w.book.count(pv.PaymentID))
		assert.Equal(t, 0, w.book.count(p2.PaymentID))
	})
}
