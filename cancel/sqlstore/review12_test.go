package sqlstore_test

// review12: adversarial review of 179acea (a user's cancel and an
// operator's ExpireNow closed the provider's session first, closeFirst) and
// f1f3bb4 (the sold pass reports a lost payment of a Paying order), on the
// real SQL stores. Its two holes (the first two tests) came from judging
// the cancel in Go before the store did; the close now follows the
// cancel's commit (closeAfter), so only the store's checks decide it. Outcomes are judged by the invariants: whose session the
// provider closed, whether a cancelled order's session was closed before
// its cancel or counted "unclosed" (I18), who holds the seat, who was
// refunded (I9).

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// r12Prov is a provider that closes every session it is asked to close
// (never paid), recording each close with the order's status in SQL at
// that moment.
type r12Prov struct {
	mu       sync.Mutex
	s        *sqlstore.Store
	closedAs map[string][]expiry.Status
	queries  map[string]int
}

func newR12Prov() *r12Prov {
	return &r12Prov{closedAs: map[string][]expiry.Status{}, queries: map[string]int{}}
}

func (p *r12Prov) QueryPayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	p.queries[o.No]++
	p.mu.Unlock()
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *r12Prov) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	cur, err := p.s.Order(ctx, o.No)
	if err != nil {
		return cancel.PaymentAnswer{}, err
	}
	p.mu.Lock()
	p.closedAs[o.No] = append(p.closedAs[o.No], cur.Status)
	p.mu.Unlock()
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *r12Prov) closes(no string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.closedAs[no])
}

// afterRead is the host's store with a hook that runs once right after an
// Order read: what the host's own code writes between the Service's read
// and its cancel.
type afterRead struct {
	*sqlstore.Store
	mu   sync.Mutex
	hook func(no string)
}

func (a *afterRead) Order(ctx context.Context, no string) (expiry.Order, error) {
	o, err := a.Store.Order(ctx, no)
	a.mu.Lock()
	h := a.hook
	a.hook = nil
	a.mu.Unlock()
	if h != nil {
		h(no)
	}
	return o, err
}

// TestReview12PaddedUserIDIsNotTheOwnersClose (I10, I18): the host's row
// of X holds the buyer "u1 " (a legacy row, a padded id its old code
// wrote). By the store, ids compare byte for byte (I10): "u1" is another
// user, whose cancel is refused. closeFirst compares the id read through
// Order, whose trailing blanks are trimmed (unpad), so "u1" passes its
// owner check: the provider closes the session of X (barred for good), the
// store then refuses the cancel, and X stays pending, its buyer unable to
// pay. The README: "Another user's cancel is refused before anything is
// closed." It failed on every dialect and schema with closeFirst; the
// close after the commit leaves the owner check to the store alone.
func TestReview12PaddedUserIDIsNotTheOwnersClose(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				prov := newR12Prov()
				ev := &events{}
				w, place := newReview5(t, c, d, db, func(conf *cancel.Config) {
					conf.Provider, conf.ProviderTimeout = prov, 2*time.Second
					conf.Runtime = expiry.Runtime{Observer: ev, Logger: quiet.Logger}
				})
				prov.s = w.s
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "x1", now.Add(time.Hour))
				_, err = db.Exec(bindQ(d, "UPDATE "+c.table+" SET "+c.hs.mapping.Orders.UserID+" = ? WHERE "+c.no+" = ?"+c.where), "u1 ", x.OrderNo)
				require.NoError(t, err)

				res, err := w.svc.UserCancel(ctx, x.OrderNo, "u1")
				o, rerr := w.s.Order(ctx, x.OrderNo)
				require.NoError(t, rerr)
				if o.Status == expiry.StatusPending {
					// Refused (ErrNotOwner, or answered unchanged): "u1" is
					// not the owner of "u1 "'s order by the store.
					assert.False(t, err == nil && res.Changed)
					assert.Equal(t, "locked:"+x.OrderNo, holder(t, w.rs, w.show, "x1"), "the buyer still holds the seat")
					assert.Zero(t, prov.closes(x.OrderNo), "I18/I10: a cancel the store refused as another user's closed (barred for good) the session of the buyer's pending order")
					return
				}
				// The store took "u1" as the owner: then the cancel commits
				// after a close, or is counted.
				require.NoError(t, err)
				require.True(t, res.Changed)
				assert.True(t, prov.closes(x.OrderNo) == 1 || len(ev.of(expiry.KindProviderAnswered, "unclosed", x.OrderNo)) == 1,
					"I18: a cancelled order's session closed first, or counted unclosed")
			})
		})
	}
}

// TestReview12PayingBackToPendingDuringUserCancel (I18): X is in a Paying
// status (the host opened its payment session: the buyer is on the
// provider's page). The buyer cancels; closeFirst reads X in the host's
// status and closes nothing ("decided, or the host's: the cancel answers
// it"). Before the cancel's compare-and-set the host's payment step writes
// X back to pending (the buyer came back from the provider's page; the
// session is still open there). The cancel then committed: a cancelled
// order whose session was never closed, and no "unclosed" counted. It
// failed on every dialect and schema with closeFirst. Now no read precedes
// the cancel: the host's write lands before the compare-and-set (the
// "before" case: a pending order, cancelled, then closed) or after it
// (the cancel finds the host's status and changes nothing).
func TestReview12PayingBackToPendingDuringUserCancel(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				prov := newR12Prov()
				ev := &events{}
				var wrap *afterRead
				w, place := newReview5(t, c, d, db, func(conf *cancel.Config) {
					wrap = &afterRead{Store: conf.Store.(*sqlstore.Store)}
					conf.Store = wrap
					conf.Provider, conf.ProviderTimeout = prov, 2*time.Second
					conf.Runtime = expiry.Runtime{Observer: ev, Logger: quiet.Logger}
				})
				prov.s = w.s
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "x1", now.Add(time.Hour))
				c.setStatus(t, db, d, x.OrderNo, c.paying[0]) // the session is opened
				wrap.mu.Lock()
				wrap.hook = func(string) { c.setStatus(t, db, d, x.OrderNo, c.pending) } // the buyer is back
				wrap.mu.Unlock()

				res, err := w.svc.UserCancel(ctx, x.OrderNo, "u1")
				require.NoError(t, err)
				if !res.Changed {
					// The host's payment step held it: nothing closed.
					assert.Zero(t, prov.closes(x.OrderNo))
					// The buyer is back (the host's write), and cancels.
					c.setStatus(t, db, d, x.OrderNo, c.pending)
					res, err = w.svc.UserCancel(ctx, x.OrderNo, "u1")
					require.NoError(t, err)
					require.True(t, res.Changed, "a pending order's user cancels it")
					assert.Equal(t, []expiry.Status{expiry.StatusCancelled}, prov.closedAs[x.OrderNo], "closed once, after the cancel committed")
				}
				assert.Empty(t, holder(t, w.rs, w.show, "x1"), "cancelled: its seat is free")
				unclosed := len(ev.of(expiry.KindProviderAnswered, "unclosed", x.OrderNo))
				assert.True(t, prov.closes(x.OrderNo) > 0 || unclosed == 1,
					"I18: X was cancelled by its user with its payment session neither closed (%d closes) nor counted unclosed (%d)", prov.closes(x.OrderNo), unclosed)
			})
		})
	}
}

// TestReview12PayingOrderUserCancelTouchesNothing (I19, I18): a user's
// cancel and an operator's ExpireNow of an order in a Paying status neither
// close its session nor cancel it: its row, its seat, the provider are
// left as they are, and its payment still pays it.
func TestReview12PayingOrderUserCancelTouchesNothing(t *testing.T) {
	c := payingCases[1]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		prov := newR12Prov()
		w, place := newReview5(t, c, d, db, func(conf *cancel.Config) {
			conf.Provider, conf.ProviderTimeout = prov, 2*time.Second
		})
		prov.s = w.s
		now, err := w.s.Now(ctx)
		require.NoError(t, err)
		x := place("X", "u1", "x1", now.Add(time.Hour))
		c.setStatus(t, db, d, x.OrderNo, c.paying[1])
		r, err := w.svc.UserCancel(ctx, x.OrderNo, "u1")
		assert.False(t, err == nil && r.Changed, "a Paying order is not cancelled by its user")
		r, err = w.svc.ExpireNow(ctx, x.OrderNo)
		assert.False(t, err == nil && r.Changed, "nor by ExpireNow")
		assert.Zero(t, prov.closes(x.OrderNo), "its session is not closed")
		assert.Equal(t, c.paying[1], c.rowStatus(t, db, d, x.OrderNo))
		assert.Equal(t, "locked:"+x.OrderNo, holder(t, w.rs, w.show, "x1"))
		pid := "pay-x" + w.u
		res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: x.OrderNo, PaymentID: pid})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "x1"))
		assert.Zero(t, w.book.count(w.s.Scope(), pid))
	})
}

// TestReview12SoldPassNoFalseReportForPayingPaidLegitimately (f1f3bb4, I9):
// an order in a Paying status paid by its callback, its seat sold, is no
// payment SQL lost: the sold pass reports nothing, whether the round runs
// right after the sale or later; a Paying order whose seat is only locked
// is not a sale either.
func TestReview12SoldPassNoFalseReportForPayingPaidLegitimately(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				w, place := newReview5(t, c, d, db, nil)
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				x := place("X", "u1", "s1", now.Add(time.Hour))
				y := place("Y", "u2", "s2", now.Add(time.Hour))
				c.setStatus(t, db, d, x.OrderNo, c.paying[0])
				c.setStatus(t, db, d, y.OrderNo, c.paying[1])
				res, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: x.OrderNo, PaymentID: "pay-x" + w.u})
				require.NoError(t, err)
				require.True(t, res.Changed)
				ev := &events{}
				r, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Settle: 100 * time.Millisecond, Batch: 10, Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
				require.NoError(t, err)
				for i := 0; i < 2; i++ {
					rep, err := r.Round(ctx)
					assert.NoError(t, err)
					assert.Zero(t, rep.Diverged, "round %d: a legitimate sale, a locked Paying order: nothing lost", i)
					time.Sleep(150 * time.Millisecond)
				}
				assert.Empty(t, ev.of(expiry.KindDiverged, "", x.OrderNo))
				assert.Empty(t, ev.of(expiry.KindDiverged, "", y.OrderNo))
				assert.Equal(t, "sold:"+x.OrderNo, holder(t, w.rs, w.show, "s1"))
				assert.Equal(t, "locked:"+y.OrderNo, holder(t, w.rs, w.show, "s2"))
			})
		})
	}
}
