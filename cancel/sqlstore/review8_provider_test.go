package sqlstore_test

// Review of 1012ced (cancel: ask the payment provider before a timeout
// cancels). Outcomes judged by invariants: who paid, who holds which seat,
// who was refunded, when (and whether) an order was cancelled, and whether
// the provider was asked before a cancel (I18). Four of these failed on
// 1012ced and hold since the fix: the reconciler's one-by-one fallback
// cancelled without asking (Cancel with OnlyIfDue asks now), a paid answer
// for a row with a legacy user id was refused for ever (the provider's
// payment is taken without the owner check), a provider ignoring its
// context held Timeout (the Service stops waiting at ProviderTimeout), and
// hanging asks held a batch back 16 at a time (a batch asks all at once).

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// r8Provider answers by a function of the order and its context.
type r8Provider struct {
	fn    func(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error)
	mu    sync.Mutex
	calls map[string]int
}

func (p *r8Provider) QueryPayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[o.No]++
	p.mu.Unlock()
	return p.fn(ctx, o)
}

// ClosePayment closes as a real provider does: a session the query would
// call paid refuses, with its payment; any other answer closes it, except
// an error or a hang, which the close meets too.
func (p *r8Provider) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	a, err := p.fn(ctx, o)
	if err != nil || a.State == cancel.PaymentPaid {
		return a, err
	}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *r8Provider) asked(no string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[no]
}

func newR8World(t *testing.T, d sqlstore.Dialect, db *sql.DB, p cancel.PaymentProvider, more func(*cancel.Config)) *r6World {
	return newR6(t, d, db, func(c *cancel.Config) {
		c.Provider, c.ProviderTimeout, c.ProviderRetry, c.MaxHold = p, provTimeout, provRetry, provHold
		if more != nil {
			more(c)
		}
	})
}

func r8PlaceDue(t *testing.T, w *r6World, no, seat string) cancel.Placement {
	ctx := context.Background()
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no + w.u, UserID: "u-" + no, ShowID: "ev" + w.u, Seats: []string{seat}, ExpireAt: now.Add(-time.Second)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(w.db, nil)))
	return p
}

func r8Status(t *testing.T, w *r6World, no string) expiry.Status {
	o, err := w.s.Order(context.Background(), no)
	require.NoError(t, err)
	return o.Status
}

// TestReview8ReconcilerCancelsOrdersItNeverHeardFrom (I18, I14): the
// reconciler bounds each ExpireDue by OrderTimeout. When asking the
// provider takes longer than that (here: each answer takes 150 ms, 16 at a
// time, 160 orders in one batch; in production: ProviderTimeoutDefault 5 s,
// a provider that is down, 33+ due orders in one of the reconciler's
// batches against OrderTimeoutDefault 10 s), the asks of the batch's last
// orders are cut off by the expired context (no answer: askProvider's
// SetDeadline then fails on the same context, so nothing is re-armed), and
// the batch's CancelDue fails too; the reconciler then cancels the batch's
// orders one by one with Service.Cancel, which never asks the provider.
// Orders the provider says are paid (their callback lost: the very case
// I18's query exists for), well before placement + MaxHold, are cancelled,
// their seats freed, and the buyer's payment can only be refunded.
func TestReview8ReconcilerCancelsOrdersItNeverHeardFrom(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		prov := &r8Provider{}
		// A long maximum hold: every cancel here is before it.
		w := newR8World(t, d, db, prov, func(c *cancel.Config) { c.MaxHold = time.Hour })
		const n = 160
		var notPaid string
		var amu sync.Mutex
		answered := map[string]bool{}
		paidID := func(no string) string { return "pay-" + no }
		prov.fn = func(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
			if o.No == notPaid {
				return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
			}
			select { // a provider a little slow, well within ProviderTimeout
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return cancel.PaymentAnswer{}, ctx.Err()
			}
			amu.Lock()
			answered[o.No] = true
			amu.Unlock()
			return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: paidID(o.No)}, nil
		}
		// One order whose buyer never paid, first in the batch (the
		// earliest deadline): its cancel is what the batch's CancelDue is
		// for.
		np := r8PlaceDue(t, w, "RA", "sn")
		notPaid = np.OrderNo
		var placed []cancel.Placement
		for i := 0; i < n; i++ {
			placed = append(placed, r8PlaceDue(t, w, fmt.Sprintf("RP%03d", i), fmt.Sprintf("s%03d", i)))
		}

		r, err := reconcile.New(reconcile.Config{Orders: w.s, Seats: w.rs, Service: w.svc, Batch: 200, Workers: 1,
			OrderTimeout: time.Second, Runtime: quiet})
		require.NoError(t, err)
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		t.Logf("round: %+v", rep)

		var cancelled []cancel.Placement
		unasked, unanswered := 0, 0
		for _, p := range placed {
			if r8Status(t, w, p.OrderNo) != expiry.StatusCancelled {
				continue
			}
			cancelled = append(cancelled, p)
			if prov.asked(p.OrderNo) == 0 {
				unasked++
			}
			amu.Lock()
			if !answered[p.OrderNo] {
				unanswered++
			}
			amu.Unlock()
		}
		assert.Zero(t, len(cancelled), "I18: %d of %d orders the provider says are paid were cancelled an hour before their maximum hold "+
			"(%d never asked, %d asked but the answer cut off)", len(cancelled), n, unasked, unanswered)
		if len(cancelled) > 0 {
			p := cancelled[0]
			assert.Empty(t, holder(t, w.rs.Seats, p.ShowID, p.Seats[0]), "its seat is free for another buyer")
			// The buyer's callback finally arrives: refunded, the seat gone.
			_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: paidID(p.OrderNo)})
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.Equal(t, 1, w.book.count(paidID(p.OrderNo)), "the paying buyer is refunded instead")
		}
	})
}

// TestReview8ProviderIgnoringItsContext (I18, I12): "no answer within
// ProviderTimeout" re-arms the order; an adapter whose HTTP call does not
// honour its context (a client without a request context) holds Timeout
// for as long as it blocks: the Service never bounds the call itself.
func TestReview8ProviderIgnoringItsContext(t *testing.T) {
	d, db := sqlstore.SQLite, openSQLite(t)
	ctx := context.Background()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	prov := &r8Provider{fn: func(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
	}}
	w := newR8World(t, d, db, prov, nil)
	o := r8PlaceDue(t, w, "I", "i1")
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = w.svc.Timeout(ctx, o.OrderNo)
	}()
	select {
	case <-done:
		t.Logf("Timeout returned after %v", time.Since(start))
	case <-time.After(4 * provTimeout):
		t.Errorf("Timeout still blocked after %v on a provider call bounded by ProviderTimeout %v", time.Since(start), provTimeout)
	}
}

// TestReview8HangingProviderHoldsTheBatchBack (I12): ExpireDue asked the
// orders of a slice 16 at a time before it cancelled any, so an order the
// provider answers "not paid" at once waited behind hanging asks, one
// ProviderTimeout per 16 (with the defaults and a 500-order slice: 32 x 5
// s = 160 s). Judged without a clock: the provider's 48 hanging calls
// block until the test lets them go, and every ask of the slice must be
// in flight at once before any of them is answered (so the batch waits
// for its slowest ask only), and the fast order is then cancelled.
func TestReview8HangingProviderHoldsTheBatchBack(t *testing.T) {
	d, db := sqlstore.SQLite, openSQLite(t)
	ctx := context.Background()
	var fast string
	letGo := make(chan struct{})
	var inFlight atomic.Int32
	allIn := make(chan struct{})
	const hanging = 48
	prov := &r8Provider{}
	prov.fn = func(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
		if o.No == fast {
			return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
		}
		if inFlight.Add(1) == hanging {
			close(allIn)
		}
		select {
		case <-letGo:
		case <-ctx.Done():
			return cancel.PaymentAnswer{}, ctx.Err()
		}
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
	}
	w := newR8World(t, d, db, prov, func(c *cancel.Config) { c.ProviderTimeout = time.Minute })
	var nos []string
	for i := 0; i < hanging; i++ {
		nos = append(nos, r8PlaceDue(t, w, fmt.Sprintf("H%02d", i), fmt.Sprintf("h%02d", i)).OrderNo)
	}
	f := r8PlaceDue(t, w, "F", "f1")
	fast = f.OrderNo
	nos = append(nos, fast)
	type answer struct {
		res []cancel.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := w.svc.ExpireDue(ctx, nos, cancel.ReasonReconcile)
		done <- answer{res, err}
	}()
	select {
	case <-allIn: // every hanging ask started while none was answered
	case <-time.After(time.Minute):
		t.Fatalf("I12: only %d of %d asks were in flight at once; the others waited behind them", inFlight.Load(), hanging)
	}
	close(letGo)
	got := <-done
	require.NoError(t, got.err)
	require.Len(t, got.res, 1)
	assert.Equal(t, fast, got.res[0].Order.No)
}

// TestReview8PaidAnswerForALegacyUserID (I18, I17, I14, I13): a row a
// host's old code wrote with a user id the library's ids do not allow (a
// space): without a provider the timeout cancels it as any other. With a
// provider answering paid, askProvider pays with UserID: o.UserID, which
// Payment.Validate refuses: every Timeout errors and every ExpireDue
// leaves it out, so the order is neither paid nor cancelled, past
// placement + MaxHold, for ever: its seat held, the payment neither
// honoured nor refunded.
func TestReview8PaidAnswerForALegacyUserID(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		prov := &r8Provider{fn: func(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
			return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-" + o.No}, nil
		}}
		w := newR8World(t, d, db, prov, nil)
		o := r8PlaceDue(t, w, "L", "l1")
		w.exec(t, "UPDATE oe_order SET user_id = ? WHERE order_no = ?", "legacy user", o.OrderNo)
		deadline := time.Now().Add(provHold + time.Second)
		var lastErr error
		for time.Now().Before(deadline) {
			_, _, lastErr = w.svc.Timeout(ctx, o.OrderNo)
			_, _ = w.svc.ExpireDue(ctx, []string{o.OrderNo}, cancel.ReasonReconcile)
			if r8Status(t, w, o.OrderNo) != expiry.StatusPending {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("last Timeout error: %v", lastErr)
		assert.NotEqual(t, expiry.StatusPending, r8Status(t, w, o.OrderNo),
			"I17/I18: still pending past placement + MaxHold, the provider's paid answer never honoured")
	})
}

// TestReview8PaidAnswerRacesTheCallback (I9, I14, I15): the provider's paid
// answer and the real callback arrive at once, with the same payment id:
// honoured once, never refunded, the seat sold to the buyer.
func TestReview8PaidAnswerRacesTheCallback(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		for i := 0; i < 5; i++ {
			gate := make(chan struct{})
			prov := &r8Provider{fn: func(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
				<-gate
				return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-" + o.No}, nil
			}}
			w := newR8World(t, d, db, prov, nil)
			o := r8PlaceDue(t, w, "C", "c1")
			var wg sync.WaitGroup
			wg.Add(3)
			go func() {
				defer wg.Done()
				_, _, err := w.svc.Timeout(ctx, o.OrderNo)
				assert.NoError(t, err)
			}()
			go func() {
				defer wg.Done()
				_, err := w.svc.ExpireDue(ctx, []string{o.OrderNo}, cancel.ReasonReconcile)
				assert.NoError(t, err)
			}()
			go func() {
				defer wg.Done()
				close(gate)
				_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-" + o.OrderNo})
				assert.NoError(t, err)
			}()
			wg.Wait()
			assert.Equal(t, expiry.StatusPaid, r8Status(t, w, o.OrderNo))
			assert.Equal(t, "sold:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "c1"))
			assert.Zero(t, w.book.count("pay-"+o.OrderNo), "never refunded")
		}
	})
}

// TestReview8PaidAnswerRacesAnotherPayment: the callback of payment Y pays
// the order while the provider answers with payment X (two payments of one
// order): Y honoured, X refunded exactly once, also when X's own callback
// comes later; the seat sold to the buyer.
func TestReview8PaidAnswerRacesAnotherPayment(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		gate := make(chan struct{})
		prov := &r8Provider{fn: func(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
			<-gate
			return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "payX-" + o.No}, nil
		}}
		w := newR8World(t, d, db, prov, nil)
		o := r8PlaceDue(t, w, "Y", "y1")
		done := make(chan error, 1)
		go func() { _, _, err := w.svc.Timeout(ctx, o.OrderNo); done <- err }()
		require.Eventually(t, func() bool { return prov.asked(o.OrderNo) == 1 }, 5*time.Second, time.Millisecond)
		_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: "payY-" + o.OrderNo})
		require.NoError(t, err)
		close(gate)
		require.NoError(t, <-done)
		_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: "payX-" + o.OrderNo})
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, expiry.StatusPaid, r8Status(t, w, o.OrderNo))
		assert.Equal(t, "sold:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "y1"))
		assert.Zero(t, w.book.count("payY-"+o.OrderNo))
		assert.Equal(t, 1, w.book.count("payX-"+o.OrderNo), "I9: refunded once")
	})
}

// TestReview8ProviderNamesAnotherOrdersPayment: a confused provider answers
// B paid by the payment that paid A: A stays paid and is not refunded; B is
// not paid by it and is cancelled (not held for ever by a paid answer that
// can never pay it).
func TestReview8ProviderNamesAnotherOrdersPayment(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		var pid string
		prov := &r8Provider{fn: func(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
			return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: pid}, nil
		}}
		w := newR8World(t, d, db, prov, nil)
		a := w.place(t, "A", "ua", "a1")
		pid = "pay-a" + w.u
		_, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: a.OrderNo, PaymentID: pid})
		require.NoError(t, err)
		b := r8PlaceDue(t, w, "B", "b1")
		cancelled, _, err := w.svc.Timeout(ctx, b.OrderNo)
		require.NoError(t, err)
		assert.True(t, cancelled)
		assert.Equal(t, expiry.StatusPaid, r8Status(t, w, a.OrderNo))
		assert.Equal(t, "sold:"+a.OrderNo, holder(t, w.rs.Seats, a.ShowID, "a1"))
		assert.Zero(t, w.book.count(pid), "I14: the payment that paid A is never refunded")
		assert.Equal(t, expiry.StatusCancelled, r8Status(t, w, b.OrderNo))
		assert.Empty(t, holder(t, w.rs.Seats, b.ShowID, "b1"))
	})
}

// TestReview8UserCancelsWhileTheProviderAnswers: the buyer cancels while
// the provider is being asked, then the provider answers paid: the order
// stays cancelled (the user's), the payment refunded exactly once, also
// when its own callback comes later; the seat free.
func TestReview8UserCancelsWhileTheProviderAnswers(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		for _, late := range []bool{false, true} {
			gate := make(chan struct{})
			prov := &r8Provider{fn: func(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
				<-gate
				return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-" + o.No}, nil
			}}
			w := newR8World(t, d, db, prov, func(c *cancel.Config) { c.AcceptLatePayments = late })
			o := r8PlaceDue(t, w, "U", "u1")
			done := make(chan error, 1)
			go func() { _, _, err := w.svc.Timeout(ctx, o.OrderNo); done <- err }()
			require.Eventually(t, func() bool { return prov.asked(o.OrderNo) == 1 }, 5*time.Second, time.Millisecond)
			r, err := w.svc.UserCancel(ctx, o.OrderNo, o.UserID)
			require.NoError(t, err)
			require.True(t, r.Changed)
			close(gate)
			require.NoError(t, <-done)
			_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: o.OrderNo, PaymentID: "pay-" + o.OrderNo})
			assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.Equal(t, expiry.StatusCancelled, r8Status(t, w, o.OrderNo))
			assert.Empty(t, holder(t, w.rs.Seats, o.ShowID, "u1"))
			assert.Equal(t, 1, w.book.count("pay-"+o.OrderNo), "I9: refunded once (late=%v)", late)
		}
	})
}

// TestReview8ConcurrentAsksOneOrder: Timeout and ExpireDue ask at once,
// the provider answering "open" to one and "not paid" to the other; and
// many asks of one open order at once: the order is either cancelled (its
// seat free) or pending and not due (its seat locked), never past its cap,
// and concurrent re-arms never move it past placement + MaxHold.
func TestReview8ConcurrentAsksOneOrder(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		var k atomic.Int32
		prov := &r8Provider{fn: func(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
			if k.Add(1)%2 == 0 {
				return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
			}
			return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
		}}
		w := newR8World(t, d, db, prov, nil)
		now, err := w.s.Now(ctx)
		require.NoError(t, err)
		o := r8PlaceDue(t, w, "K", "k1")
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(2)
			go func() { defer wg.Done(); _, _, err := w.svc.Timeout(ctx, o.OrderNo); assert.NoError(t, err) }()
			go func() {
				defer wg.Done()
				_, err := w.svc.ExpireDue(ctx, []string{o.OrderNo, o.OrderNo}, cancel.ReasonReconcile)
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		got, err := w.s.Order(ctx, o.OrderNo)
		require.NoError(t, err)
		switch got.Status {
		case expiry.StatusCancelled:
			assert.Empty(t, holder(t, w.rs.Seats, o.ShowID, "k1"))
		case expiry.StatusPending:
			assert.Equal(t, "locked:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "k1"))
			assert.False(t, got.ExpireAt.After(now.Add(provHold+50*time.Millisecond)), "I17: %v past placement %v + MaxHold", got.ExpireAt, now)
		default:
			t.Fatalf("status %v", got.Status)
		}
	})
}

// TestReview8OpenUntilTheCapByTheReconciler (I17, I18): the reconciler's
// ExpireDue re-arms an open payment, never past placement + MaxHold, and
// cancels it there; the seat is locked until then and free after.
func TestReview8OpenUntilTheCapByTheReconciler(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		prov := &r8Provider{fn: func(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
			return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
		}}
		w := newR8World(t, d, db, prov, nil)
		before, err := w.s.Now(ctx)
		require.NoError(t, err)
		o := r8PlaceDue(t, w, "Q", "q1")
		for rounds := 0; ; rounds++ {
			require.Less(t, rounds, 200, "never cancelled")
			res, err := w.svc.ExpireDue(ctx, []string{o.OrderNo}, cancel.ReasonReconcile)
			require.NoError(t, err)
			if len(res) == 1 {
				assert.False(t, res[0].Order.ReadAt.Before(before.Add(provHold).Add(-time.Millisecond)), "I17: cancelled at %v before placement + MaxHold", res[0].Order.ReadAt)
				break
			}
			got, err := w.s.Order(ctx, o.OrderNo)
			require.NoError(t, err)
			require.Equal(t, expiry.StatusPending, got.Status)
			require.Equal(t, "locked:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "q1"))
			time.Sleep(20 * time.Millisecond)
		}
		assert.Empty(t, holder(t, w.rs.Seats, o.ShowID, "q1"))
	})
}

// TestReview8DueExtensionOnHostSchemas (I17, I18, I4): on host schemas
// whose deadline column keeps seconds (DATETIME, epoch seconds, an
// instant), an open payment re-arms the due order (extendDue), the message
// waits, and the order is cancelled only at its placement plus MaxHold (a
// cap rounded down to the second: never later), never held past it; a paid
// answer pays it with the provider's id and sells its seat.
func TestReview8DueExtensionOnHostSchemas(t *testing.T) {
	t.Parallel() // mostly waiting out deadlines of whole seconds
	const hold = 2500 * time.Millisecond
	for _, hs := range []hostSchema{seatflow, shop, instant} {
		t.Run(hs.name, func(t *testing.T) {
			t.Parallel()
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				if d == hs.notOn {
					t.Skip("not on this dialect")
				}
				ctx := context.Background()
				s := hostStore(t, db, d, hs)
				rs := redisSeats(t, s)
				book := &refundBook{}
				var mu sync.Mutex
				paid := map[string]string{}
				prov := &r8Provider{fn: func(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
					mu.Lock()
					defer mu.Unlock()
					if id, ok := paid[o.No]; ok {
						return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: id}, nil
					}
					return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
				}}
				svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook(s.Scope()), Runtime: quiet,
					Provider: prov, ProviderTimeout: provTimeout, ProviderRetry: provRetry, MaxHold: hold})
				require.NoError(t, err)
				show, u := "ev"+testenv.Unique(), testenv.Unique()
				before, err := s.Now(ctx)
				require.NoError(t, err)
				place := func(no, seat string) cancel.Placement {
					p := cancel.Placement{OrderNo: no + u, UserID: "u" + no, ShowID: show, Seats: []string{seat}, ExpireAt: before.Add(-2 * time.Second)}
					require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
					return p
				}
				open := place("O", "o1")
				pay := place("P", "p1")
				mu.Lock()
				paid[pay.OrderNo] = "pay-" + pay.OrderNo
				mu.Unlock()

				cancelled, o, err := svc.Timeout(ctx, pay.OrderNo)
				require.NoError(t, err)
				assert.False(t, cancelled)
				assert.Equal(t, expiry.StatusPaid, o.Status)
				assert.Equal(t, "sold:"+pay.OrderNo, holder(t, rs, show, "p1"))
				assert.Zero(t, book.count(s.Scope(), "pay-"+pay.OrderNo))

				rounds := 0
				for {
					cancelled, got, err := svc.Timeout(ctx, open.OrderNo)
					require.NoError(t, err)
					if cancelled {
						assert.False(t, got.ReadAt.Before(before.Add(hold-time.Second)),
							"I18: cancelled at %v, before its placement (>= %v) plus MaxHold (rounded down to the second)", got.ReadAt, before)
						assert.False(t, got.ReadAt.After(before.Add(hold+1500*time.Millisecond)), "I17: held till %v", got.ReadAt)
						break
					}
					rounds++
					require.Less(t, rounds, 100, "never cancelled")
					require.Equal(t, expiry.StatusPending, got.Status)
					require.Greater(t, got.Remaining(), time.Duration(0), "re-armed")
					require.Equal(t, "locked:"+open.OrderNo, holder(t, rs, show, "o1"))
					time.Sleep(got.Remaining() + 5*time.Millisecond)
				}
				assert.GreaterOrEqual(t, rounds, 1, "it waited")
				assert.Empty(t, holder(t, rs, show, "o1"))
			})
		})
	}
}
