package cancel_test

// Attacks on the Handler's second compare-and-set of a warning (commit
// 1837feb): a store whose MarkWarned is two statements, the compare-and-set
// then the read of the order, each reading the store's clock, as sqlstore's
// is; things happen between them and between the Handler's two calls.

import (
	"context"
	"errors"
	"fmt"
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

// twoStmtStore is a memstore whose MarkWarned is the compare-and-set, then
// (after between) a separate read of the order, like sqlstore's. before runs
// before the compare-and-set; fail makes a call fail before (lostAck false)
// or after (lostAck true) the compare-and-set.
type twoStmtStore struct {
	*memstore.Store
	mu      sync.Mutex
	calls   int
	fired   map[string]bool
	before  func(call int)
	between func(call int)
	fail    func(call int) (err error, lostAck bool)
}

func (s *twoStmtStore) MarkWarned(ctx context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.mu.Unlock()
	if s.before != nil {
		s.before(call)
	}
	var ferr error
	lostAck := false
	if s.fail != nil {
		ferr, lostAck = s.fail(call)
		if ferr != nil && !lostAck {
			return expiry.WarnResult{}, ferr
		}
	}
	res, err := s.Store.MarkWarned(ctx, no, lead)
	if err != nil {
		return res, err
	}
	s.mu.Lock()
	if res.Fired {
		s.fired[no] = true
	}
	warned := s.fired[no]
	s.mu.Unlock()
	if ferr != nil {
		return expiry.WarnResult{}, ferr
	}
	if s.between != nil {
		s.between(call)
	}
	o, err := s.Store.Order(ctx, no) // the second statement: the store's clock read again
	if err != nil {
		return expiry.WarnResult{}, err
	}
	if res.Fired {
		o.Status = expiry.StatusPending // as the compare-and-set saw it (sqlstore does this)
		return expiry.WarnResult{Fired: true, Order: o}, nil
	}
	return expiry.WarnResult{Warned: warned, Order: o}, nil
}

type warnAttackEnv struct {
	clock  *expirytest.FakeClock
	store  *twoStmtStore
	svc    *cancel.Service
	h      *expiry.Handler
	sent   *capture
	mu     sync.Mutex
	hooked []hookCall // every run of the warning hook
}

type hookCall struct {
	no     string
	at     time.Time // the store's clock when the hook ran
	status expiry.Status
}

const attackLead = 2 * time.Minute

func newWarnAttackEnv(t *testing.T) *warnAttackEnv {
	clock := expirytest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	inner := memstore.NewStore(clock.Now)
	e := &warnAttackEnv{clock: clock, store: &twoStmtStore{Store: inner, fired: map[string]bool{}}, sent: &capture{}}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: e.sent, Runtime: expiry.Runtime{Clock: clock}, WarnBefore: attackLead})
	require.NoError(t, err)
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: memstore.NewSeats(clock.Now), AcceptLatePayments: true, Scheduler: sched,
		OnWarning: func(ctx context.Context, o expiry.Order) error {
			cur, _ := inner.Order(ctx, o.No)
			e.mu.Lock()
			defer e.mu.Unlock()
			e.hooked = append(e.hooked, hookCall{no: o.No, at: clock.Now(), status: cur.Status})
			return nil
		}})
	require.NoError(t, err)
	e.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: e.svc, Warner: e.svc, Sender: e.sent})
	require.NoError(t, err)
	return e
}

// place places o1 due in 10 minutes and returns its warning and expiry
// messages and its deadline.
func (e *warnAttackEnv) place(t *testing.T) (warning, exp sentMsg, deadline time.Time) {
	deadline = e.clock.Now().Add(10 * time.Minute)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a1"}, ExpireAt: deadline}
	require.NoError(t, e.svc.Place(context.Background(), p, e.store.Place))
	msgs := e.sent.take()
	require.Len(t, msgs, 2)
	require.True(t, msgs[0].m.Warning)
	return msgs[0], msgs[1], deadline
}

// atTheEdge moves the clock to 1 ms before o1's warning window opens and
// makes the store's clock move 2 ms between the first call's
// compare-and-set and its read: the window opens between them.
func (e *warnAttackEnv) atTheEdge() {
	e.clock.Advance(10*time.Minute - attackLead - time.Millisecond)
	e.store.between = func(call int) {
		if call == 1 {
			e.clock.Advance(2 * time.Millisecond)
		}
	}
}

func (e *warnAttackEnv) hooks() []hookCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]hookCall(nil), e.hooked...)
}

func (e *warnAttackEnv) calls() int {
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	return e.store.calls
}

// The edge the commit fixes, through the Service and memstore: the window
// opens between the compare-and-set and the read; the retry fires it once,
// inside the window, and redeliveries end.
func TestAttackWarnRetryAtEdgeFiresOnce(t *testing.T) {
	ctx := context.Background()
	e := newWarnAttackEnv(t)
	w, _, deadline := e.place(t)
	e.atTheEdge()
	out, err := e.h.Handle(ctx, w.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeWarned, out)
	assert.Equal(t, 2, e.calls())
	for i := 0; i < 3; i++ {
		out, err = e.h.Handle(ctx, w.m)
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeFinal, out)
	}
	h := e.hooks()
	require.Len(t, h, 1, "warned once")
	assert.False(t, h[0].at.Before(deadline.Add(-attackLead)), "not before the window")
	assert.True(t, h[0].at.Before(deadline), "before the deadline")
	assert.Equal(t, expiry.StatusPending, h[0].status)
}

// Paid between the first compare-and-set and its read: the read says paid,
// no retry, no warning.
func TestAttackWarnRetryPaidBetweenCASAndRead(t *testing.T) {
	ctx := context.Background()
	e := newWarnAttackEnv(t)
	w, _, _ := e.place(t)
	e.clock.Advance(10*time.Minute - attackLead - time.Millisecond)
	e.store.between = func(call int) {
		if call == 1 {
			e.clock.Advance(2 * time.Millisecond)
			_, err := e.svc.Pay(ctx, pay("o1", "u1", "p1"))
			require.NoError(t, err)
		}
	}
	out, err := e.h.Handle(ctx, w.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeFinal, out)
	assert.Equal(t, 1, e.calls(), "no second call for a paid order")
	assert.Empty(t, e.hooks())
}

// Paid (or cancelled, or due) between the first read and the second
// compare-and-set: the second call refuses it, Final, no warning.
func TestAttackWarnRetryStateChangesBeforeSecondCAS(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, e *warnAttackEnv){
		"paid": func(t *testing.T, e *warnAttackEnv) {
			_, err := e.svc.Pay(context.Background(), pay("o1", "u1", "p1"))
			require.NoError(t, err)
		},
		"cancelled": func(t *testing.T, e *warnAttackEnv) {
			_, err := e.svc.UserCancel(context.Background(), "o1", "u1")
			require.NoError(t, err)
		},
		"due": func(t *testing.T, e *warnAttackEnv) { e.clock.Advance(attackLead) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newWarnAttackEnv(t)
			w, _, _ := e.place(t)
			e.atTheEdge()
			e.store.before = func(call int) {
				if call == 2 {
					change(t, e)
				}
			}
			out, err := e.h.Handle(ctx, w.m)
			require.NoError(t, err)
			assert.Equal(t, expiry.OutcomeFinal, out)
			assert.Equal(t, 2, e.calls())
			assert.Empty(t, e.hooks())
		})
	}
}

// Extended between the first read and the second compare-and-set: the
// second read re-arms for the new deadline, which then fires once.
func TestAttackWarnRetryExtendedBeforeSecondCAS(t *testing.T) {
	ctx := context.Background()
	e := newWarnAttackEnv(t)
	w, _, deadline := e.place(t)
	e.atTheEdge()
	e.store.before = func(call int) {
		if call == 2 {
			res, err := e.svc.Extend(ctx, "o1", "u1", 10*time.Minute)
			require.NoError(t, err)
			require.True(t, res.Changed)
			deadline = res.Order.ExpireAt
		}
	}
	out, err := e.h.Handle(ctx, w.m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeRearmed, out)
	re := e.sent.take()
	require.Len(t, re, 1)
	assert.Equal(t, deadline.Add(-attackLead).Sub(e.clock.Now()), re[0].delay)
	e.store.before, e.store.between = nil, nil
	e.clock.Advance(re[0].delay)
	out, err = e.h.Handle(ctx, re[0].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeWarned, out)
	assert.Len(t, e.hooks(), 1)
}

// The second call fails: before its compare-and-set (transient: Failed,
// redelivered, fires once then), after it (lost ack: marked, the hook never
// runs, a redelivery ends: at most once), or with ErrNotFound (Missing).
func TestAttackWarnRetrySecondCallFails(t *testing.T) {
	for name, tc := range map[string]struct {
		err         error
		lostAck     bool
		out         expiry.Outcome
		wantErr     bool
		redelivered expiry.Outcome
		hooks       int
	}{
		"transient": {errors.New("db down"), false, expiry.OutcomeFailed, true, expiry.OutcomeWarned, 1},
		"lost ack":  {errors.New("connection reset after commit"), true, expiry.OutcomeFailed, true, expiry.OutcomeFinal, 0},
		"not found": {fmt.Errorf("gone: %w", expiry.ErrNotFound), false, expiry.OutcomeMissing, false, expiry.OutcomeWarned, 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newWarnAttackEnv(t)
			w, _, _ := e.place(t)
			e.atTheEdge()
			e.store.fail = func(call int) (error, bool) {
				if call == 2 {
					return tc.err, tc.lostAck
				}
				return nil, false
			}
			out, err := e.h.Handle(ctx, w.m)
			assert.Equal(t, tc.out, out)
			assert.Equal(t, tc.wantErr, err != nil, "err %v", err)
			assert.Equal(t, 2, e.calls(), "tried twice, no more")
			assert.Empty(t, e.hooks())
			out, err = e.h.Handle(ctx, w.m)
			require.NoError(t, err)
			assert.Equal(t, tc.redelivered, out)
			assert.Len(t, e.hooks(), tc.hooks)
		})
	}
}

// Many duplicate deliveries at once, each seeing the window open between its
// two statements: the hook runs once.
func TestAttackWarnRetryConcurrentDuplicates(t *testing.T) {
	ctx := context.Background()
	e := newWarnAttackEnv(t)
	w, _, _ := e.place(t)
	e.clock.Advance(10*time.Minute - attackLead - 20*time.Millisecond)
	e.store.between = func(int) { e.clock.Advance(time.Millisecond) }
	var wg sync.WaitGroup
	outs := make([]expiry.Outcome, 16)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.h.Handle(ctx, w.m)
			assert.NoError(t, err)
			outs[i] = out
		}()
	}
	wg.Wait()
	warned := 0
	for _, o := range outs {
		if o == expiry.OutcomeWarned {
			warned++
		}
	}
	assert.LessOrEqual(t, warned, 1)
	assert.LessOrEqual(t, len(e.hooks()), 1, "at most once")
	assert.Equal(t, warned, len(e.hooks()))
}

// Property over arrival times around both edges of the window and delays
// between the two statements (sub-millisecond store clock, as memstore's
// real clock has): a delivery never ends Final for an order that is still
// pending, not warned and not due when Handle returns (the e2e model's
// checkWarning), never fires outside the window, and never calls the store
// more than twice.
func TestAttackWarnRetrySweep(t *testing.T) {
	ctx := context.Background()
	step := 100 * time.Microsecond
	for _, edge := range []time.Duration{attackLead, 0} { // window opens, deadline
		for off := -3 * time.Millisecond; off <= 3*time.Millisecond; off += step {
			for _, gap := range []time.Duration{0, 300 * time.Microsecond, time.Millisecond, 1700 * time.Microsecond, 3 * time.Millisecond} {
				e := newWarnAttackEnv(t)
				e.clock.Advance(700 * time.Microsecond) // not on a millisecond
				w, _, _ := e.place(t)
				o, err := e.store.Order(ctx, "o1")
				require.NoError(t, err)
				deadline := o.ExpireAt
				e.clock.Advance(deadline.Sub(e.clock.Now()) - edge + off)
				e.store.between = func(int) { e.clock.Advance(gap) }
				out, err := e.h.Handle(ctx, w.m)
				require.NoError(t, err)
				end := e.clock.Now()
				label := fmt.Sprintf("edge %v off %v gap %v: outcome %v", edge, off, gap, out)
				assert.LessOrEqual(t, e.calls(), 2, label)
				switch out {
				case expiry.OutcomeFinal:
					assert.False(t, deadline.After(end), "%s: Final, not warned, not due at the end", label)
				case expiry.OutcomeWarned:
					h := e.hooks()
					require.Len(t, h, 1, label)
					cas := h[0].at.Add(-gap) // the firing compare-and-set ran gap before the hook
					assert.True(t, cas.Before(deadline), "%s: fired when due", label)
					assert.False(t, cas.Add(attackLead).Before(deadline), "%s: fired before the window", label)
				case expiry.OutcomeRearmed:
					assert.Empty(t, e.hooks(), label)
				default:
					t.Errorf("%s", label)
				}
			}
		}
	}
}

// A Lead that is not whole milliseconds, handed to Handle directly (the
// message codecs refuse one; Handle does not), on memstore whose clock is
// not on a millisecond: the Handler's window (ReadAt, untruncated, plus the
// lead) and the store's (its clock truncated to the millisecond, plus the
// lead) disagree, the retry runs at the same instant, and the warning is
// dropped as Final for an order pending, not warned, not due, with nothing
// left in flight to warn it.
func TestAttackWarnSubMillisecondLeadDropped(t *testing.T) {
	ctx := context.Background()
	e := newWarnAttackEnv(t)
	w, _, _ := e.place(t)
	o, err := e.store.Order(ctx, "o1")
	require.NoError(t, err)
	lead := attackLead + 500*time.Microsecond
	// 0.3 ms inside the Handler's window, 0.7 ms past a millisecond.
	e.clock.Advance(o.ExpireAt.Sub(e.clock.Now()) - attackLead - time.Millisecond + 700*time.Microsecond)
	m := w.m
	m.Lead = lead
	out, err := e.h.Handle(ctx, m)
	require.NoError(t, err)
	now := e.clock.Now()
	t.Logf("outcome %v, %v before the deadline, warned %d, messages sent %d", out, o.ExpireAt.Sub(now), len(e.hooks()), len(e.sent.take()))
	if out == expiry.OutcomeFinal {
		assert.False(t, o.ExpireAt.After(now), "Final for a pending order %v before its deadline, never warned", o.ExpireAt.Sub(now))
	}
}

// cancelTwoStmt is a memstore whose CancelPending answers a refused cancel
// with the order read by a second statement, gap later by the store's clock.
type cancelTwoStmt struct {
	*memstore.Store
	clock *expirytest.FakeClock
	gap   time.Duration
}

func (s *cancelTwoStmt) CancelPending(ctx context.Context, r cancel.Request) (cancel.Result, error) {
	res, err := s.Store.CancelPending(ctx, r)
	if err != nil || res.Changed {
		return res, err
	}
	s.clock.Advance(s.gap)
	o, err := s.Store.Order(ctx, r.OrderNo)
	if err != nil {
		return cancel.Result{}, err
	}
	res.Order = o
	return res, nil
}

// The same two reads of the clock on the expiry message's path: the cancel
// refused 1 ms before the deadline, the read after it. The Handler re-arms
// for minRearm (never drops it, never cancels early), and the next delivery
// cancels.
func TestAttackCancelPathDeadlineBetweenCASAndRead(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC))
	inner := memstore.NewStore(clock.Now)
	store := &cancelTwoStmt{Store: inner, clock: clock, gap: 2 * time.Millisecond}
	sent := &capture{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: memstore.NewSeats(clock.Now)})
	require.NoError(t, err)
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sent})
	require.NoError(t, err)
	deadline := clock.Now().Add(time.Minute)
	require.NoError(t, svc.Place(ctx, cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "s", Seats: []string{"a1"}, ExpireAt: deadline}, inner.Place))
	clock.Advance(time.Minute - time.Millisecond)
	out, err := h.Handle(ctx, expiry.Message{OrderNo: "o1", Hop: 1})
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeRearmed, out)
	re := sent.take()
	require.Len(t, re, 1)
	assert.Equal(t, 100*time.Millisecond, re[0].delay)
	clock.Advance(re[0].delay)
	store.gap = 0
	out, err = h.Handle(ctx, re[0].m)
	require.NoError(t, err)
	assert.Equal(t, expiry.OutcomeCancelled, out)
}
