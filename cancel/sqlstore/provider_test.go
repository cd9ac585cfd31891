package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// fakeProvider is a payment provider whose answer per order a test sets:
// an answer, an error, or no answer at all (it blocks until its context
// ends, a provider that hangs). Its close answers closeAns or closeErr
// when set, else closes: a session that is not paid (nor open) is closed,
// counted in closed; a paid one refuses with its payment.
type fakeProvider struct {
	mu       sync.Mutex
	ans      map[string]cancel.PaymentAnswer
	err      map[string]error
	hang     map[string]bool
	calls    map[string]int
	closeAns map[string]cancel.PaymentAnswer
	closeErr map[string]error
	closed   map[string]int
}

func newFakeProvider() *fakeProvider {
	return &fakeProvider{ans: map[string]cancel.PaymentAnswer{}, err: map[string]error{}, hang: map[string]bool{}, calls: map[string]int{},
		closeAns: map[string]cancel.PaymentAnswer{}, closeErr: map[string]error{}, closed: map[string]int{}}
}

func (f *fakeProvider) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.closeErr[o.No]; err != nil {
		return cancel.PaymentAnswer{}, err
	}
	if a, ok := f.closeAns[o.No]; ok {
		return a, nil
	}
	if a := f.ans[o.No]; a.State == cancel.PaymentPaid {
		return a, nil
	}
	f.closed[o.No]++
	f.ans[o.No] = cancel.PaymentAnswer{State: cancel.PaymentNotPaid}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (f *fakeProvider) closes(no string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed[no]
}

func (f *fakeProvider) QueryPayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	f.mu.Lock()
	f.calls[o.No]++
	a, err, hang := f.ans[o.No], f.err[o.No], f.hang[o.No]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return cancel.PaymentAnswer{}, ctx.Err()
	}
	if err != nil {
		return cancel.PaymentAnswer{}, err
	}
	if a.State == 0 {
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	}
	return a, nil
}

func (f *fakeProvider) set(no string, a cancel.PaymentAnswer) {
	f.mu.Lock()
	f.ans[no] = a
	f.mu.Unlock()
}

// provWorld is the r6 world (SQL, Redis seats, a refund book) with a
// provider wired: answers within 300 ms, re-arms 200 ms later, holds an
// order at most 1.5 s from its placement.
type provWorld struct {
	*r6World
	prov *fakeProvider
}

const (
	provTimeout = 300 * time.Millisecond
	provRetry   = 200 * time.Millisecond
	provHold    = 1500 * time.Millisecond
)

func newProvWorld(t *testing.T, d sqlstore.Dialect, db *sql.DB) *provWorld {
	prov := newFakeProvider()
	w := newR6(t, d, db, func(c *cancel.Config) {
		c.Provider, c.ProviderTimeout, c.ProviderRetry, c.MaxHold = prov, provTimeout, provRetry, provHold
	})
	return &provWorld{r6World: w, prov: prov}
}

// placeDue places an order whose deadline has passed: the timeout's, by
// the store's clock. It returns the store's clock read before the insert:
// the order's placement is not earlier.
func (w *provWorld) placeDue(t *testing.T, no, seat string) (cancel.Placement, time.Time) {
	ctx := context.Background()
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no + w.u, UserID: "u-" + no, ShowID: "ev" + w.u, Seats: []string{seat}, ExpireAt: now.Add(-time.Second)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(w.db, nil)))
	return p, now
}

func (w *provWorld) order(t *testing.T, no string) expiry.Order {
	o, err := w.s.Order(context.Background(), no)
	require.NoError(t, err)
	return o
}

// TestProviderIsAskedBeforeATimeout (I18, I9, I14, I17, I12): with
// cancel.Config.Provider, a timeout asks before it cancels. Judged by who
// holds the seat, who paid, who was refunded, and when an order the
// provider could not settle was cancelled: a paid answer pays the order
// with the provider's payment id (seat sold, its callback then changes
// nothing, nothing refunded); not paid cancels (seat free); an open
// payment, an error, an unusable answer or no answer keep the order
// pending and not due, never cancelled before its placement plus MaxHold,
// and cancelled once there; a provider that hangs on one order does not
// hold another order's timeout back.
func TestProviderIsAskedBeforeATimeout(t *testing.T) {
	t.Parallel() // mostly waiting out maximum holds
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()

		t.Run("paid", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			p, _ := w.placeDue(t, "P", "p1")
			pid := "pay-p" + w.u
			w.prov.set(p.OrderNo, cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: pid})
			cancelled, o, err := w.svc.Timeout(ctx, p.OrderNo)
			require.NoError(t, err)
			assert.False(t, cancelled)
			assert.Equal(t, expiry.StatusPaid, o.Status, "the answer's order: paid")
			assert.Equal(t, expiry.StatusPaid, w.order(t, p.OrderNo).Status)
			assert.Equal(t, "sold:"+p.OrderNo, holder(t, w.rs.Seats, p.ShowID, "p1"), "the buyer holds the seat they paid")
			// The callback arrives late: the same payment, nothing new.
			r, err := w.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: pid})
			require.NoError(t, err)
			assert.False(t, r.Changed)
			assert.Zero(t, w.book.count(pid), "a paid order's payment is never refunded")
		})

		t.Run("not paid", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			n, _ := w.placeDue(t, "N", "n1")
			cancelled, _, err := w.svc.Timeout(ctx, n.OrderNo)
			require.NoError(t, err)
			assert.True(t, cancelled)
			assert.Equal(t, expiry.StatusCancelled, w.order(t, n.OrderNo).Status)
			assert.Empty(t, holder(t, w.rs.Seats, n.ShowID, "n1"), "its seat is free")
			assert.Equal(t, 1, w.prov.calls[n.OrderNo])
			assert.Equal(t, 1, w.prov.closes(n.OrderNo), "its session closed before the cancel")
		})

		t.Run("the close finds it paid", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			c, _ := w.placeDue(t, "C", "c1")
			pid := "pay-c" + w.u
			w.prov.mu.Lock()
			w.prov.closeAns[c.OrderNo] = cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: pid} // paid between the query and the close
			w.prov.mu.Unlock()
			cancelled, o, err := w.svc.Timeout(ctx, c.OrderNo)
			require.NoError(t, err)
			assert.False(t, cancelled)
			assert.Equal(t, expiry.StatusPaid, o.Status)
			assert.Equal(t, "sold:"+c.OrderNo, holder(t, w.rs.Seats, c.ShowID, "c1"))
			_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: c.OrderNo, PaymentID: pid})
			require.NoError(t, err)
			assert.Zero(t, w.book.count(pid), "never refunded")
		})

		t.Run("the close fails, then succeeds", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			c, _ := w.placeDue(t, "CF", "cf1")
			w.prov.mu.Lock()
			w.prov.closeErr[c.OrderNo] = errors.New("provider: 503")
			w.prov.mu.Unlock()
			cancelled, o, err := w.svc.Timeout(ctx, c.OrderNo)
			require.NoError(t, err)
			assert.False(t, cancelled, "no cancel without a closed session")
			assert.Greater(t, o.Remaining(), time.Duration(0), "re-armed")
			assert.Equal(t, "locked:"+c.OrderNo, holder(t, w.rs.Seats, c.ShowID, "cf1"))
			w.prov.mu.Lock()
			delete(w.prov.closeErr, c.OrderNo)
			w.prov.mu.Unlock()
			time.Sleep(o.Remaining() + 5*time.Millisecond)
			cancelled, _, err = w.svc.Timeout(ctx, c.OrderNo)
			require.NoError(t, err)
			assert.True(t, cancelled)
			assert.Equal(t, 1, w.prov.closes(c.OrderNo))
		})

		unsettled := map[string]func(w *provWorld, no string){
			"open": func(w *provWorld, no string) { w.prov.set(no, cancel.PaymentAnswer{State: cancel.PaymentOpen}) },
			"the close never succeeds": func(w *provWorld, no string) {
				w.prov.mu.Lock()
				w.prov.closeErr[no] = errors.New("provider: 503")
				w.prov.mu.Unlock()
			},
			"error": func(w *provWorld, no string) {
				w.prov.mu.Lock()
				w.prov.err[no] = errors.New("provider: 502")
				w.prov.mu.Unlock()
			},
			"paid without an id": func(w *provWorld, no string) { w.prov.set(no, cancel.PaymentAnswer{State: cancel.PaymentPaid}) },
			"unknown state":      func(w *provWorld, no string) { w.prov.set(no, cancel.PaymentAnswer{State: 9}) },
			"hangs": func(w *provWorld, no string) {
				w.prov.mu.Lock()
				w.prov.hang[no] = true
				w.prov.mu.Unlock()
			},
		}
		for name, answer := range unsettled {
			t.Run(name, func(t *testing.T) {
				t.Parallel() // each waits out the maximum hold
				w := newProvWorld(t, d, db)
				o, before := w.placeDue(t, "O", "o1")
				answer(w, o.OrderNo)
				rounds := 0
				prev := o.ExpireAt
				for {
					cancelled, got, err := w.svc.Timeout(ctx, o.OrderNo)
					require.NoError(t, err)
					if cancelled {
						// I17: only at the maximum hold, whatever the provider said.
						assert.False(t, got.ReadAt.Before(before.Add(provHold).Add(-time.Millisecond)),
							"cancelled at %v, before its placement (>= %v) plus the maximum hold", got.ReadAt, before)
						break
					}
					rounds++
					require.Less(t, rounds, 100, "never cancelled")
					assert.Equal(t, expiry.StatusPending, got.Status)
					// Re-armed: its deadline moved later. (Under load the move
					// may take longer than ProviderRetry, so that the order is
					// due again when read: it waited, and is asked again. CI
					// run 77 read it 172 ms past the moved deadline.)
					require.True(t, got.ExpireAt.After(prev), "re-armed: its deadline moved from %v to %v", prev, got.ExpireAt)
					prev = got.ExpireAt
					assert.Equal(t, "locked:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "o1"), "the paying buyer keeps the seat")
					time.Sleep(max(got.Remaining(), 0) + 5*time.Millisecond)
				}
				assert.GreaterOrEqual(t, rounds, 2, "waited ProviderRetry at a time, more than once")
				assert.Empty(t, holder(t, w.rs.Seats, o.ShowID, "o1"), "freed at the maximum hold")
				if name != "the close never succeeds" && name != "paid without an id" { // those cannot close
					assert.Equal(t, 1, w.prov.closes(o.OrderNo), "its session closed at the maximum hold, before the cancel")
				}
			})
		}

		t.Run("a hanging provider holds no other order back", func(t *testing.T) {
			// Judged by order, not by a clock: the slow order's provider
			// call hangs until the test lets it go, and the other order's
			// timeout must be done before that.
			prov := newFakeProvider()
			w := &provWorld{r6World: newR6(t, d, db, func(c *cancel.Config) {
				c.Provider, c.ProviderTimeout, c.ProviderRetry, c.MaxHold = prov, time.Minute, provRetry, provHold
			}), prov: prov}
			slow, _ := w.placeDue(t, "S", "s1")
			fast, _ := w.placeDue(t, "F", "f1")
			w.prov.mu.Lock()
			w.prov.hang[slow.OrderNo] = true
			w.prov.mu.Unlock()
			sctx, letGo := context.WithCancel(ctx)
			slowDone := make(chan struct{})
			go func() {
				defer close(slowDone)
				_, _, err := w.svc.Timeout(sctx, slow.OrderNo)
				assert.Error(t, err, "its provider never answered: the timeout gave up")
			}()
			require.Eventually(t, func() bool { w.prov.mu.Lock(); defer w.prov.mu.Unlock(); return w.prov.calls[slow.OrderNo] == 1 }, 5*time.Second, time.Millisecond)
			cancelled, _, err := w.svc.Timeout(ctx, fast.OrderNo)
			require.NoError(t, err)
			assert.True(t, cancelled, "cancelled while the other order's provider call hangs")
			select {
			case <-slowDone:
				t.Fatal("the hanging call returned before it was let go")
			default:
			}
			letGo()
			<-slowDone
			assert.Equal(t, expiry.StatusPending, w.order(t, slow.OrderNo).Status, "never cancelled without an answer")
		})

		t.Run("a refunded payment id pays nothing", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			x := w.place(t, "X", "ux", "x1")
			_, err := w.svc.UserCancel(ctx, x.OrderNo, "ux")
			require.NoError(t, err)
			pid := "pay-x" + w.u
			_, err = w.svc.Pay(ctx, cancel.Payment{OrderNo: x.OrderNo, PaymentID: pid})
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			require.Equal(t, 1, w.book.count(pid))
			// A confused provider names that payment for another order.
			r, _ := w.placeDue(t, "R", "r1")
			w.prov.set(r.OrderNo, cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: pid})
			cancelled, _, err := w.svc.Timeout(ctx, r.OrderNo)
			require.NoError(t, err)
			assert.True(t, cancelled, "no payment of its own: cancelled")
			assert.Equal(t, 1, w.book.count(pid), "refunded once, not twice")
			assert.Empty(t, holder(t, w.rs.Seats, r.ShowID, "r1"))
		})

		t.Run("the reconciler's batch asks too", func(t *testing.T) {
			w := newProvWorld(t, d, db)
			p, _ := w.placeDue(t, "BP", "bp1")
			n, _ := w.placeDue(t, "BN", "bn1")
			o, _ := w.placeDue(t, "BO", "bo1")
			pid := "pay-bp" + w.u
			w.prov.set(p.OrderNo, cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: pid})
			w.prov.set(o.OrderNo, cancel.PaymentAnswer{State: cancel.PaymentOpen})
			res, err := w.svc.ExpireDue(ctx, []string{p.OrderNo, n.OrderNo, o.OrderNo}, cancel.ReasonReconcile)
			require.NoError(t, err)
			require.Len(t, res, 1)
			assert.Equal(t, n.OrderNo, res[0].Order.No)
			assert.Equal(t, "sold:"+p.OrderNo, holder(t, w.rs.Seats, p.ShowID, "bp1"))
			assert.Empty(t, holder(t, w.rs.Seats, n.ShowID, "bn1"))
			assert.Equal(t, 1, w.prov.closes(n.OrderNo))
			assert.Zero(t, w.prov.closes(o.OrderNo), "an open payment is not closed before its maximum hold")
			assert.Equal(t, "locked:"+o.OrderNo, holder(t, w.rs.Seats, o.ShowID, "bo1"))
			got := w.order(t, o.OrderNo)
			assert.Equal(t, expiry.StatusPending, got.Status)
			assert.Greater(t, got.Remaining(), time.Duration(0))
			assert.Zero(t, w.book.count(pid))
		})
	})
}
