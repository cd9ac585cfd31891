package cancel_test

// review12: adversarial review of 179acea (a user's cancel and an
// operator's ExpireNow closed the provider's session before the cancel) on
// the in-memory stores; it found two holes of closing before (see
// cancel/sqlstore/review12_test.go), and the close now follows the
// cancel's commit (closeAfter). The attacks that held are kept, judged the
// same way. Outcomes are judged by the invariants: who paid, who
// holds the seat, who was refunded and how often (I9, I14), whether a
// cancelled order's session was left open without an "unclosed" count
// (I18), and how long a cancel somebody asked for waits on the provider.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// r12Session is the provider's side of one order's payment.
type r12Session struct {
	closed   bool   // barred: no payment can complete any more
	paidWith string // the payment that completed, "" none
	paying   bool   // the buyer is on the provider's page
}

// r12Prov is a provider that keeps ClosePayment's contract: a close of a
// session whose payment completed answers paid with it; any other close
// bars the order for good. Closes may be made to fail (failClose) and a
// hook may run inside a close, before it answers (beforeClose).
type r12Prov struct {
	mu          sync.Mutex
	s           map[string]*r12Session
	failClose   func(no string) error
	beforeClose func(no string) // runs once
	closes      int
}

func newR12Prov() *r12Prov { return &r12Prov{s: map[string]*r12Session{}} }

func (p *r12Prov) sess(no string) *r12Session {
	if p.s[no] == nil {
		p.s[no] = &r12Session{}
	}
	return p.s[no]
}

func (p *r12Prov) QueryPayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sess(o.No)
	switch {
	case s.paidWith != "":
		return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: s.paidWith}, nil
	case s.paying && !s.closed:
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
	}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *r12Prov) ClosePayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	h, fail := p.beforeClose, p.failClose
	p.beforeClose = nil
	p.closes++
	p.mu.Unlock()
	if h != nil {
		h(o.No)
	}
	if fail != nil {
		if err := fail(o.No); err != nil {
			return cancel.PaymentAnswer{}, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sess(o.No)
	if s.paidWith != "" {
		return cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: s.paidWith}, nil
	}
	s.closed = true
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// complete is the buyer completing payment id at the provider: false when
// the session was closed (no money taken).
func (p *r12Prov) complete(no, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sess(no)
	if s.closed || s.paidWith != "" {
		return false
	}
	s.paidWith = id
	return true
}

func (p *r12Prov) state(no string) r12Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.sess(no)
}

type r12Env struct {
	*provEnv
	prov *r12Prov
}

func newR12Env(t *testing.T, more func(*cancel.Config)) *r12Env {
	e := &r12Env{provEnv: newProvEnv(t), prov: newR12Prov()}
	e.serveFrom(t, e.store, more)
	return e
}

// serveFrom makes e's Service anew on store (the in-memory store, or a
// wrapper of it), with e's provider and refund book; more edits the Config.
func (e *r12Env) serveFrom(t *testing.T, store cancel.OrderStore, more func(*cancel.Config)) {
	c := cancel.Config{Store: store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev, Logger: rfQuiet},
		Provider: e.prov, ProviderRetry: envRetry, MaxHold: envHold, ProviderTimeout: time.Second,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			e.refunds[d.PaymentID]++
			e.mu.Unlock()
			return nil
		}}
	if more != nil {
		more(&c)
	}
	var err error
	e.svc, err = cancel.New(c)
	require.NoError(t, err)
}

func (e *r12Env) place(t *testing.T, no string, in time.Duration) {
	p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: "s", Seats: []string{no + "-1"}, ExpireAt: e.clk.now().Add(in)}
	require.NoError(t, e.svc.Place(context.Background(), p, e.store.Place))
}

func (e *r12Env) count(no, reason string) int {
	n := 0
	for _, r := range e.answers(no) {
		if r == reason {
			n++
		}
	}
	return n
}

func (e *r12Env) cancelledEvents(no string) int {
	n := 0
	for _, ev := range e.ev.Of(expiry.KindCancelled) {
		if ev.OrderNo == no {
			n++
		}
	}
	return n
}

// judge checks order no's end state against the invariants, the buyer's
// callbacks all delivered.
func (e *r12Env) judge(t *testing.T, no string) {
	t.Helper()
	e.judgeAs(t, no, true)
}

// judgeAs is judge; with eventOnce false a cancel may have counted no
// expiry.KindCancelled (one whose COMMIT reply was lost: review13).
func (e *r12Env) judgeAs(t *testing.T, no string, eventOnce bool) {
	t.Helper()
	o := e.order(t, no)
	s := e.prov.state(no)
	e.mu.Lock()
	refunds := map[string]int{}
	for k, v := range e.refunds {
		refunds[k] = v
	}
	e.mu.Unlock()
	for id, n := range refunds {
		assert.LessOrEqual(t, n, 1, "I9: payment %s refunded %d times", id, n)
	}
	switch o.Status {
	case expiry.StatusPaid:
		assert.Equal(t, "sold:"+no, e.holder(t, no), "I14: a paid order's seat is sold to it")
		require.NotEmpty(t, s.paidWith, "paid without a payment at the provider")
		r, err := e.svc.Pay(context.Background(), cancel.Payment{OrderNo: no, PaymentID: s.paidWith})
		require.NoError(t, err)
		assert.Equal(t, s.paidWith, r.PaymentID, "paid with the buyer's payment")
		assert.Zero(t, refunds[s.paidWith], "I9: an honoured payment is never refunded")
	case expiry.StatusCancelled:
		assert.Empty(t, e.holder(t, no), "a cancelled order's seat is free")
		if s.paidWith != "" {
			assert.Equal(t, 1, refunds[s.paidWith], "I9: the payment of a cancelled order is refunded once")
		}
		if !s.closed && s.paidWith == "" {
			// Still payable at the provider. (A session whose payment
			// completed is not: its payment is refunded, judged above.)
			assert.GreaterOrEqual(t, e.count(no, "unclosed"), 1, "I18: cancelled with its session open, no unclosed counted")
		}
		if eventOnce {
			assert.Equal(t, 1, e.cancelledEvents(no), "cancelled once")
		} else {
			assert.LessOrEqual(t, e.cancelledEvents(no), 1, "cancelled once")
		}
	default:
		assert.Equal(t, expiry.StatusPending, o.Status)
		assert.Equal(t, "locked:"+no, e.holder(t, no))
		assert.Empty(t, s.paidWith, "I9: a payment completed for a pending order (its callback delivered)")
	}
}

// TestReview12CallbackLandsDuringTheUsersClose (I9, I14): the buyer's
// payment completes and its callback arrives while the user's cancel,
// committed, is closing the session: the close answers paid, the payment
// is refunded once (callback and close both hand it on), the seat stays
// free, nothing is counted unclosed.
func TestReview12CallbackLandsDuringTheUsersClose(t *testing.T) {
	ctx := context.Background()
	for _, op := range []string{"user", "operator"} {
		t.Run(op, func(t *testing.T) {
			e := newR12Env(t, nil)
			e.place(t, "A", time.Minute)
			e.prov.beforeClose = func(no string) {
				require.True(t, e.prov.complete(no, "pay-a"))
				_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-a"})
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "the order is cancelled: refunded")
			}
			var res cancel.Result
			var err error
			if op == "user" {
				res, err = e.svc.UserCancel(ctx, "A", "u-A")
			} else {
				res, err = e.svc.ExpireNow(ctx, "A")
			}
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
			e.judge(t, "A")
			assert.Equal(t, 1, e.refunded("pay-a"))
			assert.Zero(t, e.count("A", "unclosed"))
		})
	}
}

// TestReview12TimeoutDuringTheUsersClose: a due order's timeout runs while
// its user's cancel, committed, is closing the session: it finds the order
// decided; the reverse (the user's cancel inside the timeout's close,
// before the timeout's cancel) cancels it and the timeout finds it
// decided. Cancelled once, its seat freed once, nothing counted unclosed.
func TestReview12TimeoutDuringTheUsersClose(t *testing.T) {
	ctx := context.Background()
	for _, inner := range []string{"timeout inside the user's close", "user inside the timeout's close"} {
		t.Run(inner, func(t *testing.T) {
			e := newR12Env(t, nil)
			e.place(t, "A", -time.Second)
			if inner == "timeout inside the user's close" {
				e.prov.beforeClose = func(no string) {
					c, _, err := e.svc.Timeout(ctx, no)
					assert.NoError(t, err)
					assert.False(t, c, "the user's cancel committed before its close")
				}
				res, err := e.svc.UserCancel(ctx, "A", "u-A")
				require.NoError(t, err)
				assert.True(t, res.Changed)
			} else {
				e.prov.beforeClose = func(no string) {
					r, err := e.svc.UserCancel(ctx, no, "u-A")
					assert.NoError(t, err)
					assert.True(t, r.Changed)
				}
				c, _, err := e.svc.Timeout(ctx, "A")
				require.NoError(t, err)
				assert.False(t, c)
			}
			e.judge(t, "A")
			assert.Zero(t, e.count("A", "unclosed"))
		})
	}
}

// TestReview12TwoUserCancelsOneCloseFails: a second cancel (a double
// click) runs inside the first's close; one of the two closes fails. The
// order is cancelled once, and "unclosed" is counted only if the session
// really stayed open at the cancel.
func TestReview12TwoUserCancelsOneCloseFails(t *testing.T) {
	ctx := context.Background()
	for _, failing := range []int{1, 2} { // which close fails: the outer's (1) or the inner's (2)
		t.Run(fmt.Sprint("close ", failing, " fails"), func(t *testing.T) {
			e := newR12Env(t, nil)
			e.place(t, "A", time.Minute)
			var mu sync.Mutex
			calls := 0
			e.prov.failClose = func(string) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				// The outer's close answers after the inner's: the inner's is call 1.
				if (failing == 2 && calls == 1) || (failing == 1 && calls == 2) {
					return errors.New("provider: 503")
				}
				return nil
			}
			e.prov.beforeClose = func(no string) {
				_, err := e.svc.UserCancel(ctx, no, "u-A")
				assert.NoError(t, err)
			}
			_, err := e.svc.UserCancel(ctx, "A", "u-A")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
			e.judge(t, "A")
			assert.LessOrEqual(t, e.count("A", "unclosed"), 1, "counted once at most")
			if failing == 1 {
				// The inner cancel finds the order decided and closes
				// nothing; the outer's close succeeds.
				assert.Zero(t, e.count("A", "unclosed"), "the cancel that committed closed the session")
			}
		})
	}
}

// TestReview12CloseNamesAPaymentDecidedBefore (I9, I14): the user's close
// answers paid with a payment id that honoured another order (Y), or that
// was refunded before (X's): nothing pays A, Y's payment is never
// refunded, X's is refunded once, Y keeps its seat.
func TestReview12CloseNamesAPaymentDecidedBefore(t *testing.T) {
	ctx := context.Background()
	e := newR12Env(t, nil)
	e.place(t, "Y", time.Minute)
	require.True(t, e.prov.complete("Y", "pay-y"))
	_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "Y", PaymentID: "pay-y"})
	require.NoError(t, err)
	e.place(t, "X", time.Minute)
	_, err = e.svc.UserCancel(ctx, "X", "u-X")
	require.NoError(t, err)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "X", PaymentID: "pay-x"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, e.refunded("pay-x"))
	for _, id := range []string{"pay-y", "pay-x"} {
		no := "A" + id
		e.place(t, no, time.Minute)
		e.prov.mu.Lock()
		e.prov.sess(no).paidWith = id // the provider names it for A
		e.prov.mu.Unlock()
		res, err := e.svc.UserCancel(ctx, no, "u-"+no)
		require.NoError(t, err)
		assert.NotEqual(t, expiry.StatusPaid, e.order(t, no).Status, "%s pays nothing", id)
		assert.NotEqual(t, "sold:"+no, e.holder(t, no))
		_ = res
	}
	assert.Zero(t, e.refunded("pay-y"), "I9: Y's honoured payment is never refunded")
	assert.Equal(t, 1, e.refunded("pay-x"), "I9: refunded once")
	assert.Equal(t, expiry.StatusPaid, e.order(t, "Y").Status)
	assert.Equal(t, "sold:Y", e.holder(t, "Y"))
}

// r12Deaf ignores its context; each call blocks until released.
type r12Deaf struct{ release chan struct{} }

func (d r12Deaf) QueryPayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	<-d.release
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (d r12Deaf) ClosePayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	<-d.release
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// TestReview12DeafCloseBoundsTheUsersCancel (I12): a provider whose close
// ignores its context never holds a user's cancel or ExpireNow past
// ProviderTimeout: both cancel, count "unclosed" once each, and leave no
// goroutine behind once the adapter returns.
func TestReview12DeafCloseBoundsTheUsersCancel(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	store, seats := memstore.NewStore(clk.now), memstore.NewSeats(clk.now)
	release := make(chan struct{})
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Provider: r12Deaf{release}, ProviderTimeout: 30 * time.Millisecond,
		Runtime: expiry.Runtime{Observer: ev, Logger: rfQuiet}})
	require.NoError(t, err)
	for _, no := range []string{"A", "B"} {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: clk.now().Add(time.Minute)}
		require.NoError(t, svc.Place(ctx, p, store.Place))
	}
	before := runtime.NumGoroutine()
	start := time.Now()
	r, err := svc.UserCancel(ctx, "A", "u")
	require.NoError(t, err)
	assert.True(t, r.Changed)
	r, err = svc.ExpireNow(ctx, "B")
	require.NoError(t, err)
	assert.True(t, r.Changed)
	assert.Less(t, time.Since(start), 5*time.Second, "waited on a deaf provider")
	unclosed := 0
	for _, e := range ev.Of(expiry.KindProviderAnswered) {
		if e.Reason == "unclosed" {
			unclosed++
		}
	}
	assert.Equal(t, 2, unclosed)
	close(release)
	n := runtime.NumGoroutine()
	for end := time.Now().Add(5 * time.Second); n > before && time.Now().Before(end); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, n, before, "the abandoned closes' goroutines end")
}

// TestReview12LatePaymentAfterAnUnclosedUserCancel (I9): the close finds
// the payment processing; the user's cancel goes on, counted unclosed; the
// payment completes and its callback arrives (twice), with
// AcceptLatePayments on: a user's cancel is never reinstated, so it is
// refunded, once, and the seat stays free.
func TestReview12LatePaymentAfterAnUnclosedUserCancel(t *testing.T) {
	ctx := context.Background()
	e := newR12Env(t, func(c *cancel.Config) { c.AcceptLatePayments = true })
	e.place(t, "A", time.Minute)
	e.prov.failClose = func(string) error { return errors.New("provider: processing") }
	r, err := e.svc.UserCancel(ctx, "A", "u-A")
	require.NoError(t, err)
	require.True(t, r.Changed)
	require.True(t, e.prov.complete("A", "pay-late"))
	for i := 0; i < 2; i++ {
		_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "pay-late"})
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
	}
	assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
	e.judge(t, "A")
	assert.Equal(t, 1, e.count("A", "unclosed"))
}

// TestReview12RacingActors: one order, a random mix of actors at once (its
// user's cancel, another user's cancel, the operator's ExpireNow, its
// timeout, the buyer paying at the provider and its callback), closes
// failing at random; all callbacks delivered at the end. Every end state
// is judged.
func TestReview12RacingActors(t *testing.T) {
	ctx := context.Background()
	for seed := int64(0); seed < 400; seed++ {
		rng := rand.New(rand.NewSource(seed))
		e := newR12Env(t, nil)
		due := rng.Intn(2) == 0
		in := time.Minute
		if due {
			in = -time.Second
		}
		e.place(t, "A", in)
		var fmu sync.Mutex
		frng := rand.New(rand.NewSource(seed * 7))
		e.prov.failClose = func(string) error {
			fmu.Lock()
			defer fmu.Unlock()
			if frng.Intn(3) == 0 {
				return errors.New("provider: 503")
			}
			return nil
		}
		if rng.Intn(2) == 0 {
			e.prov.mu.Lock()
			e.prov.sess("A").paying = true
			e.prov.mu.Unlock()
		}
		var wg sync.WaitGroup
		n := 2 + rng.Intn(4)
		for i := 0; i < n; i++ {
			act := rng.Intn(5)
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch act {
				case 0:
					_, _ = e.svc.UserCancel(ctx, "A", "u-A")
				case 1:
					_, err := e.svc.UserCancel(ctx, "A", "u-B")
					assert.ErrorIs(t, err, cancel.ErrNotOwner)
				case 2:
					_, _ = e.svc.ExpireNow(ctx, "A")
				case 3:
					_, _, _ = e.svc.Timeout(ctx, "A")
				case 4:
					if e.prov.complete("A", "pay-a") {
						_, _ = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "pay-a"})
					}
				}
			}()
		}
		wg.Wait()
		if s := e.prov.state("A"); s.paidWith != "" { // the provider repeats its callback
			_, _ = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: s.paidWith})
		}
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { e.judge(t, "A") })
		if t.Failed() {
			return
		}
	}
}
