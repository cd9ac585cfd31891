package sqlstore_test

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

// review5World is a host schema with Paying statuses, its store, seats,
// service and refund book.
type review5World struct {
	c    payingCase
	d    sqlstore.Dialect
	db   *sql.DB
	s    *sqlstore.Store
	svc  *cancel.Service
	book *refundBook
	show string
	u    string
	rs   *redisseat.Seats
}

func redisSeatsOf(w *review5World) *redisseat.Seats { return w.rs }

func newReview5(t *testing.T, c payingCase, d sqlstore.Dialect, db *sql.DB, cfg func(*cancel.Config)) (*review5World, func(no, user, seat string, at time.Time) cancel.Placement) {
	ctx := context.Background()
	hs := c.hs
	hs.mapping.Orders.Statuses.Paying = c.paying[:]
	s := hostStore(t, db, d, hs)
	rs := redisSeats(t, s)
	book := &refundBook{}
	conf := cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook(s.Scope()), Runtime: quiet}
	if cfg != nil {
		cfg(&conf)
	}
	svc, err := cancel.New(conf)
	require.NoError(t, err)
	w := &review5World{c: c, d: d, db: db, s: s, svc: svc, book: book, show: "ev" + testenv.Unique(), u: testenv.Unique()}
	place := func(no, user, seat string, at time.Time) cancel.Placement {
		p := cancel.Placement{OrderNo: no + w.u, UserID: user, ShowID: w.show, Seats: []string{seat}, ExpireAt: at}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
		return p
	}
	w.rs = rs
	return w, place
}

// TestReview5RefundedPaymentNeverPaysAPayingOrderAfterSQLWentBack (I14,
// backintime.go): SQL went back in time (a restore, a promoted async
// replica) to when the order was in a Paying status, and lost the record of
// a refund the hook made afterwards (the host had closed the order, the
// payment came, it was refunded, the seat store marked it refunded). The
// provider repeats that payment: the seat store says refunded, so it must
// never be honoured. A pending order is never handed to PayPending for this
// reason (refusedBefore); a Paying one is (its status reads StatusHost),
// and PayPending now takes a Paying order: the refunded payment pays it.
func TestReview5RefundedPaymentNeverPaysAPayingOrderAfterSQLWentBack(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "x1", now.Add(time.Hour))
				c.setStatus(t, db, d, x.OrderNo, c.paying[0]) // the backup is taken here
				c.setStatus(t, db, d, x.OrderNo, c.cancelled) // the host closes it (the buyer abandoned)
				pay := cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u}
				_, err = w.svc.Pay(ctx, pay)
				require.ErrorIs(t, err, cancel.ErrDiscrepancy)
				require.Equal(t, 1, w.book.count(w.s.Scope(), pay.PaymentID), "refunded once")

				// SQL goes back to the backup: the order paying, no record of the refund.
				c.setStatus(t, db, d, x.OrderNo, c.paying[0])
				_, err = db.Exec(bindQ(d, "DELETE FROM oe_payment_discrepancy WHERE payment_id = ?"), pay.PaymentID)
				require.NoError(t, err)

				res, err := w.svc.Pay(ctx, pay)
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: a refunded payment is never honoured")
				assert.False(t, res.Changed && res.Order.Status == expiry.StatusPaid, "I14: it did not pay the order")
				assert.Equal(t, c.paying[0], c.rowStatus(t, db, d, x.OrderNo), "I14: the refunded payment did not pay the order")
				assert.Equal(t, 1, w.book.count(w.s.Scope(), pay.PaymentID), "refunded once")
			})
		})
	}
}

// TestReview5RefundedPaymentControlPending is the control of the test
// above: the same back-in-time story with the order restored pending is
// refused (refusedBefore never hands a pending order to PayPending).
func TestReview5RefundedPaymentControlPending(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "x1", now.Add(time.Hour))
				c.setStatus(t, db, d, x.OrderNo, c.cancelled)
				pay := cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u}
				_, err = w.svc.Pay(ctx, pay)
				require.ErrorIs(t, err, cancel.ErrDiscrepancy)
				c.setStatus(t, db, d, x.OrderNo, c.pending)
				_, err = db.Exec(bindQ(d, "DELETE FROM oe_payment_discrepancy WHERE payment_id = ?"), pay.PaymentID)
				require.NoError(t, err)
				_, err = w.svc.Pay(ctx, pay)
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
				assert.Equal(t, c.pending, c.rowStatus(t, db, d, x.OrderNo))
				assert.Equal(t, 1, w.book.count(w.s.Scope(), pay.PaymentID))
			})
		})
	}
}

// TestReview5PayingLookalikesAreTheHosts (I10): on the shop's strings,
// values that differ from a Paying one by case or a trailing blank (equal
// under MariaDB's case- and pad-insensitive collation) are the host's: a
// payment is refunded, the row is left.
func TestReview5PayingLookalikesAreTheHosts(t *testing.T) {
	c := payingCases[1]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w, place := newReview5(t, c, d, db, nil)
		now, err := w.s.Now(ctx)
		require.NoError(t, err)
		for i, v := range []string{"PAYING ", "Paying", "AT_PSP ", "at_psp", "NEW "} {
			p := place("L"+string(rune('a'+i)), "u1", "l"+string(rune('a'+i)), now.Add(time.Hour))
			c.setStatus(t, db, d, p.OrderNo, v)
			pid := "pay-" + p.OrderNo
			_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: pid})
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "%q is the host's", v)
			assert.Equal(t, v, c.rowStatus(t, db, d, p.OrderNo), "%q left as it is", v)
			assert.Equal(t, 1, w.book.count(w.s.Scope(), pid), "%q: refunded once", v)
		}
	})
}

// TestReview5MappingRejectsAmbiguousPaying: a Paying value that is
// another status's, of the other kind, missing, or named by CancelledBy is
// refused by sqlstore.New with an error, never taken silently.
func TestReview5MappingRejectsAmbiguousPaying(t *testing.T) {
	db := openSQLite(t)
	base := shop.mapping
	cases := map[string]func(st *sqlstore.Statuses){
		"equals pending":        func(st *sqlstore.Statuses) { st.Paying = []any{"NEW"} },
		"equals paid":           func(st *sqlstore.Statuses) { st.Paying = []any{"PAID"} },
		"equals a later paid":   func(st *sqlstore.Statuses) { st.Paying = []any{"USED"} },
		"equals cancelled":      func(st *sqlstore.Statuses) { st.Paying = []any{"EXPIRED"} },
		"integer among strings": func(st *sqlstore.Statuses) { st.Paying = []any{4} },
		"nil":                   func(st *sqlstore.Statuses) { st.Paying = []any{nil} },
		"blank":                 func(st *sqlstore.Statuses) { st.Paying = []any{"PAYING "} },
		"cancelled by a paying value": func(st *sqlstore.Statuses) {
			st.Paying = []any{"PAYING"}
			st.CancelledBy = map[cancel.Reason]any{cancel.ReasonUser: "PAYING"}
		},
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			m := base
			st := m.Orders.Statuses
			st.CancelledBy = map[cancel.Reason]any{}
			for k, v := range base.Orders.Statuses.CancelledBy {
				st.CancelledBy[k] = v
			}
			mod(&st)
			m.Orders.Statuses = st
			_, err := sqlstore.New(db, sqlstore.SQLite, m)
			assert.Error(t, err, "%s must be refused", name)
		})
	}
	// And integers among integers, a string among them.
	m := seatflow.mapping
	m.Orders.Statuses.Paying = []any{"4"}
	_, err := sqlstore.New(db, sqlstore.SQLite, m)
	assert.Error(t, err, "a string Paying among integer statuses")
	m.Orders.Statuses.Paying = []any{1}
	_, err = sqlstore.New(db, sqlstore.SQLite, m)
	assert.Error(t, err, "a Paying value equal to Paid")
}

// TestReview5PayingEveryPaymentPath: the payment of an order in a Paying
// status, on every path that decides one: with a hook (the transaction
// path, also on PostgreSQL), by its owner, on a mapping without claims
// (PostgreSQL's plain one statement, the side table's seats), without a
// payment column (decision rows only), with a claims State but no Sold
// value. Each time: the row paid, its seat sold in the seat store, a repeat
// answered without an error, nothing refunded, and a user's cancel and a
// timeout before it changed nothing.
func TestReview5PayingEveryPaymentPath(t *testing.T) {
	type variant struct {
		name  string
		c     payingCase
		mod   func(m *sqlstore.Mapping)
		hook  bool
		owner bool
	}
	var vs []variant
	for _, c := range payingCases {
		vs = append(vs,
			variant{name: c.hs.name + "/hook", c: c, hook: true},
			variant{name: c.hs.name + "/hook-owner", c: c, hook: true, owner: true},
			variant{name: c.hs.name + "/owner", c: c, owner: true},
			variant{name: c.hs.name + "/noclaims", c: c, mod: func(m *sqlstore.Mapping) { m.Claims = nil }},
			variant{name: c.hs.name + "/noclaims-hook", c: c, hook: true, mod: func(m *sqlstore.Mapping) { m.Claims = nil }},
			variant{name: c.hs.name + "/nopaymentcol", c: c, mod: func(m *sqlstore.Mapping) { m.Orders.PaymentID = "" }},
			variant{name: c.hs.name + "/nopaymentcol-hook", c: c, hook: true, mod: func(m *sqlstore.Mapping) { m.Orders.PaymentID = "" }},
		)
	}
	vs = append(vs, variant{name: "shop/nosold", c: payingCases[1], mod: func(m *sqlstore.Mapping) {
		cl := *m.Claims
		cl.Sold = nil
		m.Claims = &cl
	}})
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				c := v.c
				if v.mod != nil {
					m := c.hs.mapping
					v.mod(&m)
					c.hs.mapping = m
				}
				w, place := newReview5(t, c, d, db, nil)
				hooked := 0
				if v.hook {
					w.s.SetHook(func(ctx context.Context, q cancel.Querier, r cancel.Result) error {
						hooked++
						return nil
					})
				}
				rs := redisSeatsOf(w)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				due := now.Add(-2 * time.Second)
				x := place("X", "u1", "x1", due)
				c.setStatus(t, db, d, x.OrderNo, c.paying[1])
				untilDue(t, w.s, due)
				changed, _, err := w.svc.Timeout(ctx, x.OrderNo)
				assert.NoError(t, err)
				assert.False(t, changed, "a timeout leaves a paying order")
				ures, err := w.svc.UserCancel(ctx, x.OrderNo, x.UserID)
				assert.NoError(t, err)
				assert.False(t, ures.Changed, "a user's cancel leaves a paying order")
				pay := cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u}
				if v.owner {
					pay.UserID = x.UserID
				}
				res, err := w.svc.Pay(ctx, pay)
				if assert.NoError(t, err) {
					assert.True(t, res.Changed)
				}
				res, err = w.svc.Pay(ctx, pay)
				assert.NoError(t, err, "a repeated callback is answered")
				assert.False(t, res.Changed)
				assert.Equal(t, c.paid, c.rowStatus(t, db, d, x.OrderNo), "paid")
				if rs != nil {
					assert.Equal(t, "sold:"+x.OrderNo, holder(t, rs, w.show, "x1"), "I15: sold to it")
				}
				assert.Zero(t, w.book.count(w.s.Scope(), pay.PaymentID), "nothing refunded")
				if v.hook {
					assert.Equal(t, 1, hooked, "the hook ran for the payment")
				}
			})
		})
	}
}

// TestReview5PayingRaces: payments racing on orders in Paying statuses.
// The same payment id on two paying orders pays at most one of them and is
// never both honoured and refunded (I14); two payment ids racing on one
// paying order: exactly one pays it, the other is refunded once (I9); each
// seat is sold to at most the order that paid (I15).
func TestReview5PayingRaces(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				for i := 0; i < 6; i++ {
					tag := string(rune('a' + i))
					a := place("A"+tag, "u1", "a"+tag, now.Add(time.Hour))
					b := place("B"+tag, "u2", "b"+tag, now.Add(time.Hour))
					c.setStatus(t, db, d, a.OrderNo, c.paying[0])
					c.setStatus(t, db, d, b.OrderNo, c.paying[1])
					shared := "pay-s" + tag + w.u
					one, two := "pay-1"+tag+w.u, "pay-2"+tag+w.u
					pays := []cancel.Payment{
						{OrderNo: a.OrderNo, PaymentID: shared},
						{OrderNo: b.OrderNo, PaymentID: shared},
						{OrderNo: b.OrderNo, PaymentID: one},
						{OrderNo: b.OrderNo, PaymentID: two},
					}
					var wg sync.WaitGroup
					for _, p := range pays {
						wg.Add(1)
						go func(p cancel.Payment) {
							defer wg.Done()
							_, _ = w.svc.Pay(ctx, p)
						}(p)
					}
					wg.Wait()
					// Repeat each, sequentially: the settled answer.
					for _, p := range pays {
						_, _ = w.svc.Pay(ctx, p)
					}
					var paidBy = map[string]string{}
					for _, no := range []string{a.OrderNo, b.OrderNo} {
						o, pid := readPaid(t, w, no)
						if o == c.paid {
							paidBy[no] = pid
						}
					}
					for _, id := range []string{shared, one, two} {
						honoured := 0
						for _, pid := range paidBy {
							if pid == id {
								honoured++
							}
						}
						refunded := w.book.count(w.s.Scope(), id)
						assert.LessOrEqual(t, honoured, 1, "%s honoured once at most", id)
						assert.LessOrEqual(t, refunded, 1, "%s refunded once at most", id)
						assert.Equal(t, 1, honoured+refunded, "I9/I14: %s is either honoured or refunded, once (honoured %d, refunded %d)", id, honoured, refunded)
					}
					assert.Contains(t, paidBy, b.OrderNo, "B had three payments: one of them pays it")
					for _, p := range []cancel.Placement{a, b} {
						h := holder(t, w.rs, w.show, p.Seats[0])
						if _, ok := paidBy[p.OrderNo]; ok {
							assert.Equal(t, "sold:"+p.OrderNo, h)
						} else {
							assert.Equal(t, "locked:"+p.OrderNo, h)
						}
					}
				}
			})
		})
	}
}

// readPaid is order no's status and payment id as the host's row holds them.
func readPaid(t *testing.T, w *review5World, no string) (any, string) {
	m := w.c.hs.mapping.Orders
	v := w.c.statusScan()
	var pid sql.NullString
	require.NoError(t, w.db.QueryRow(bindQ(w.d, "SELECT "+m.Status+", "+m.PaymentID+" FROM "+m.Table+" WHERE "+m.OrderNo+" = ?"+w.c.where), no).Scan(v, &pid))
	return w.c.readStatus(v), pid.String
}

func reopenedAfterTimeout(t *testing.T, c payingCase, d sqlstore.Dialect, db *sql.DB, noClaims, late bool, reopen string) {
	ctx := context.Background()
	if noClaims {
		m := c.hs.mapping
		m.Claims = nil
		c.hs.mapping = m
	}
	w, place := newReview5(t, c, d, db, func(cfg *cancel.Config) { cfg.AcceptLatePayments = late })
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	due := now.Add(-2 * time.Second)
	x := place("X", "u1", "s1", due)
	untilDue(t, w.s, due)
	changed, _, err := w.svc.Timeout(ctx, x.OrderNo)
	require.NoError(t, err)
	require.True(t, changed)
	require.Empty(t, holder(t, w.rs, w.show, "s1"))
	y := place("Y", "u2", "s1", now.Add(time.Hour))
	v := c.paying[0]
	if reopen == "pending" {
		v = c.pending
	}
	c.setStatus(t, db, d, x.OrderNo, v)
	pay := cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u}
	res, err := w.svc.Pay(ctx, pay)
	st, _ := readPaid(t, w, x.OrderNo)
	refunded := w.book.count(w.s.Scope(), pay.PaymentID)
	t.Logf("pay: changed=%v seats=%v err=%v; X row %v; refunded %d; s1 %s", res.Changed, res.Seats, err, st, refunded, holder(t, w.rs, w.show, "s1"))
	if st == c.paid {
		assert.Zero(t, refunded, "paid and refunded")
		assert.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "s1"), "I9/I15: X was paid, yet its seat is %s's", y.OrderNo)
	} else {
		assert.Equal(t, 1, refunded, "I9: not paid: refunded once")
	}
}

// TestReview5PayingInBatches: due orders in Paying statuses beside pending
// ones in a CancelDue batch, the reconciler's rounds with a small batch,
// and concurrent timeouts (the group commit's batches): only the pending
// ones are cancelled and freed; the paying ones keep their rows and locks,
// the reconciler counts them as the host's, and their payment then sells
// their seats (I2, I15, I19).
func TestReview5PayingInBatches(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				due := now.Add(-2 * time.Second)
				var pend, paying []cancel.Placement
				for i := 0; i < 12; i++ {
					tag := string(rune('a' + i))
					p := place("O"+tag, "u"+tag, "s"+tag, due)
					if i%2 == 0 {
						c.setStatus(t, db, d, p.OrderNo, c.paying[i%4/2])
						paying = append(paying, p)
					} else {
						pend = append(pend, p)
					}
				}
				untilDue(t, w.s, due)
				// A batch of the first six directly.
				var nos []string
				for _, p := range append(append([]cancel.Placement{}, pend[:3]...), paying[:3]...) {
					nos = append(nos, p.OrderNo)
				}
				res, err := w.s.CancelDue(ctx, nos, cancel.ReasonTimeout)
				require.NoError(t, err)
				for _, r := range res {
					for _, p := range paying {
						assert.False(t, r.Changed && r.Order.No == p.OrderNo, "the batch cancelled paying %s", p.OrderNo)
					}
				}
				// Concurrent timeouts of all, then reconciler rounds.
				var wg sync.WaitGroup
				for _, p := range append(append([]cancel.Placement{}, pend...), paying...) {
					wg.Add(1)
					go func(no string) { defer wg.Done(); _, _, _ = w.svc.Timeout(ctx, no) }(p.OrderNo)
				}
				wg.Wait()
				const settle = 100 * time.Millisecond
				time.Sleep(2 * settle)
				r, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Settle: settle, Batch: 3, Runtime: quiet})
				require.NoError(t, err)
				host := 0
				for round := 0; round < 3; round++ {
					rep, err := r.Round(ctx)
					assert.NoError(t, err)
					host = rep.HostStatus
				}
				assert.Positive(t, host, "the paying orders are counted as the host's")
				for i, p := range paying {
					assert.Equal(t, c.paying[(2*i)%4/2], c.rowStatus(t, db, d, p.OrderNo), "%s left paying", p.OrderNo)
					assert.Equal(t, "locked:"+p.OrderNo, holder(t, w.rs, w.show, p.Seats[0]), "I15: %s keeps its seat", p.OrderNo)
				}
				for _, p := range pend {
					assert.Equal(t, c.libCancel, c.rowStatus(t, db, d, p.OrderNo), "%s expired", p.OrderNo)
					assert.Empty(t, holder(t, w.rs, w.show, p.Seats[0]), "I2: %s's seat freed", p.OrderNo)
				}
				for _, p := range paying {
					pr, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "pay-" + p.OrderNo})
					if assert.NoError(t, err) {
						assert.True(t, pr.Changed)
					}
					assert.Equal(t, "sold:"+p.OrderNo, holder(t, w.rs, w.show, p.Seats[0]))
				}
				n, _, err := w.s.Overdue(ctx)
				require.NoError(t, err)
				assert.Zero(t, n)
			})
		})
	}
}

// TestReview5PayingLockRestoredByClaimsPass: the seat store lost the lock
// of an order in a Paying status. The reconciler's claims pass restores it
// (never frees or sells it); another buyer cannot take the seat; the
// payment then sells it to the order (I15, I19).
func TestReview5PayingLockRestoredByClaimsPass(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				due := now.Add(-2 * time.Second)
				x := place("X", "u1", "s1", due)
				c.setStatus(t, db, d, x.OrderNo, c.paying[0])
				st, err := w.rs.Show(ctx, w.show)
				require.NoError(t, err)
				n, err := w.rs.Release(ctx, cancel.Hold{ShowID: w.show, OrderNo: x.OrderNo, UserID: x.UserID, Seats: x.Seats, LockID: st["s1"].LockID})
				require.NoError(t, err)
				require.Equal(t, 1, n)
				untilDue(t, w.s, due)
				// Another buyer tries the seat before the reconciler runs.
				y := cancel.Placement{OrderNo: "Y" + w.u, UserID: "u2", ShowID: w.show, Seats: []string{"s1"}, ExpireAt: now.Add(time.Hour)}
				yerr := w.svc.Place(ctx, y, w.s.Insert(db, nil))
				assert.Error(t, yerr, "I15: the seat is X's in SQL")
				const settle = 100 * time.Millisecond
				time.Sleep(2 * settle)
				r, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Settle: settle, Batch: 10, Runtime: quiet})
				require.NoError(t, err)
				for round := 0; round < 2; round++ {
					_, err := r.Round(ctx)
					assert.NoError(t, err)
				}
				assert.Equal(t, "locked:"+x.OrderNo, holder(t, w.rs, w.show, "s1"), "the claims pass restored X's lock")
				assert.Equal(t, c.paying[0], c.rowStatus(t, db, d, x.OrderNo))
				res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u})
				if assert.NoError(t, err) {
					assert.True(t, res.Changed)
				}
				assert.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "s1"))
				assert.Zero(t, w.book.count(w.s.Scope(), "pay-x"+w.u))
			})
		})
	}
}

// TestReview5LostPaymentOfPayingOrderIsReported (backintime.go, I9): a
// payment paid X (seat sold in the seat store), then SQL went back in time
// to when X was in its payment step: the payment is lost in SQL. For an
// order SQL has pending the sold pass reports it (Report.Diverged, a
// KindDiverged event: "a payment SQL lost", for the host to honour again);
// for one SQL has in a Paying status it is the same lost payment of an
// order the library knows is payable (cancel.OrderState.Paying), not the
// host's to judge. Control: the pending restore.
func TestReview5LostPaymentOfPayingOrderIsReported(t *testing.T) {
	c := payingCases[0]
	for _, restore := range []string{"paying", "pending"} {
		t.Run(restore, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "s1", now.Add(time.Hour))
				c.setStatus(t, db, d, x.OrderNo, c.paying[0])
				res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u})
				require.NoError(t, err)
				require.True(t, res.Changed)
				require.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "s1"))
				// SQL goes back to the payment step.
				v := c.paying[0]
				if restore == "pending" {
					v = c.pending
				}
				_, err = db.Exec(bindQ(d, "UPDATE order_info SET status = ?, pay_no = NULL WHERE order_no = ?"), v, x.OrderNo)
				require.NoError(t, err)
				_, err = db.Exec(bindQ(d, "DELETE FROM oe_payment_discrepancy WHERE payment_id = ?"), "pay-x"+w.u)
				require.NoError(t, err)
				ev := &events{}
				r, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Settle: 100 * time.Millisecond, Batch: 10, Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
				require.NoError(t, err)
				rep, err := r.Round(ctx)
				assert.NoError(t, err)
				assert.Equal(t, 1, rep.Diverged, "I9: the sale SQL lost (a payment) is reported")
				assert.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "s1"), "the sale stands")
			})
		})
	}
}
