package cancel_test

// Attacks on the read-first answer of a queued Timeout (timeouts.go, commit
// 0ed424f): a call whose order its batch did not cancel reads the order
// (OrderStore.Order) and, when the read says paid or cancelled, answers
// from the read instead of running the one-order compare-and-set. The claim
// under attack: the read answers what the compare-and-set would have, so a
// host (the Handler, its transport, the seat store, the observers) cannot
// tell the difference. Each test judges outcomes: what each call answered
// and what the Handler did with it (outcome, re-arms), who holds which seat,
// how many KindCancelled events each order has and with which reason, the
// purchase-limit counters, and, where a twin world runs the one-order path
// over equal data, that both worlds end the same.
//
// The helpers of timeouts_attack_test.go (a5env, a5gate, a5store, a5seats,
// checkFinal) are reused; the Service here is wired to rfStore, an a5store
// whose Order an attack can replace and whose reads and compare-and-sets are
// counted per order, so each test can also show that the read path ran.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/internal/onebyone"
)

// rfQuiet is the Services' logger: the storms log thousands of lines.
var rfQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rfOrderFunc replaces rfStore's Order; inner is the memstore's.
type rfOrderFunc func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error)

// rfStore is an a5store whose Order an attack can replace, counting, per
// order, the reads and the one-order compare-and-sets.
type rfStore struct {
	*a5store
	order atomic.Pointer[rfOrderFunc]
	mu    sync.Mutex
	reads map[string]int
	cas   map[string]int
}

func (s *rfStore) count(m *map[string]int, no string) {
	s.mu.Lock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[no]++
	s.mu.Unlock()
}

func (s *rfStore) Order(ctx context.Context, no string) (expiry.Order, error) {
	s.count(&s.reads, no)
	if f := s.order.Load(); f != nil {
		return (*f)(ctx, no, s.a5store.Store.Order)
	}
	return s.a5store.Store.Order(ctx, no)
}

func (s *rfStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	s.count(&s.cas, req.OrderNo)
	return s.a5store.CancelPending(ctx, req)
}

func (s *rfStore) setOrder(f rfOrderFunc) { s.order.Store(&f) }

func (s *rfStore) resetCounts() {
	s.mu.Lock()
	s.reads, s.cas = nil, nil
	s.mu.Unlock()
}

func (s *rfStore) counts(no string) (reads, cas int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[no], s.cas[no]
}

// rfSender records the Handler's re-arms.
type rfSender struct {
	mu   sync.Mutex
	sent map[string][]time.Duration
}

func (s *rfSender) Send(_ context.Context, m expiry.Message, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent == nil {
		s.sent = map[string][]time.Duration{}
	}
	s.sent[m.OrderNo] = append(s.sent[m.OrderNo], d)
	return nil
}

func (s *rfSender) of(no string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.sent[no]...)
}

// rfCanceller is the Service as the Handler's Canceller, keeping every
// answer.
type rfCanceller struct {
	svc *cancel.Service
	mu  sync.Mutex
	ans map[string][]a5call
}

func (c *rfCanceller) Timeout(ctx context.Context, no string) (bool, expiry.Order, error) {
	ok, o, err := c.svc.Timeout(ctx, no)
	c.mu.Lock()
	if c.ans == nil {
		c.ans = map[string][]a5call{}
	}
	c.ans[no] = append(c.ans[no], a5call{no: no, cancelled: ok, o: o, err: err})
	c.mu.Unlock()
	return ok, o, err
}

func (c *rfCanceller) answers(no string) []a5call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]a5call(nil), c.ans[no]...)
}

type rfEnv struct {
	*a5env
	rs     *rfStore
	sender *rfSender
	canc   *rfCanceller
	h      *expiry.Handler
}

type rfOpts struct {
	oneByOne bool
	late     bool // Config.AcceptLatePayments
	clk      *a5clock
}

// newRF is newA5 with an rfStore (which records discrepancies), the late-payment
// policy when asked, and a Handler over the Service.
func newRF(t *testing.T, o rfOpts) *rfEnv {
	t.Helper()
	t.Cleanup(cancel.SetLaneStall(time.Hour))
	clk := o.clk
	if clk == nil {
		clk = newA5Clock()
	}
	e := &a5env{clk: clk, mem: memstore.NewStore(clk.now), ev: &expirytest.Recorder{}, placed: map[string]cancel.Placement{}, pre: map[string]int{}, evCtx: map[string][]any{}}
	e.store = &a5store{Store: e.mem}
	rs := &rfStore{a5store: e.store}
	e.seats = &a5seats{Seats: memstore.NewSeats(clk.now)}
	var store cancel.OrderStore = rs
	if o.oneByOne {
		store = onebyone.Store{OrderStore: rs}
	}
	obs := expiry.ObserverFunc(func(ctx context.Context, ev expiry.Event) { e.ev.Observe(ctx, ev) })
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: store, Seats: e.seats, AcceptLatePayments: o.late, Runtime: expiry.Runtime{Observer: obs, Logger: rfQuiet}})
	require.NoError(t, err)
	r := &rfEnv{a5env: e, rs: rs, sender: &rfSender{}, canc: &rfCanceller{svc: e.svc}}
	r.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: r.canc, Sender: r.sender, Runtime: expiry.Runtime{Observer: obs, Logger: rfQuiet}})
	require.NoError(t, err)
	return r
}

// rfOut is one message's handling.
type rfOut struct {
	no      string
	outcome expiry.Outcome
	err     error
}

func (r *rfEnv) handle(ctx context.Context, no string) rfOut {
	out, err := r.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1})
	return rfOut{no: no, outcome: out, err: err}
}

// handleQueued hands nos to the Handler concurrently while g holds every
// lane, waits until all of them queue, opens the gate and returns the
// outcomes (in nos's order) once every call and the gate's are back.
func (r *rfEnv) handleQueued(t *testing.T, g *a5gate, ctxs []context.Context, nos []string) []rfOut {
	t.Helper()
	out := make([]rfOut, len(nos))
	var wg sync.WaitGroup
	for i, no := range nos {
		ctx := context.Background()
		if ctxs != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = r.handle(ctx, no) }()
	}
	g.queued(t, len(nos))
	g.release()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("queued calls did not return")
	}
	if gc := <-g.gateRes; gc.cancelled {
		r.pre[gc.no]++ // the gate's own cancel, not the attack's
	}
	g.fillers(t)
	return out
}

// passOver makes the Timeout batches (reason timeout; the reconciler's
// ExpireDue goes through unchanged) pass over the orders held names, as
// SKIP LOCKED passes over rows another transaction holds, and then runs
// after (nil: nothing) with the batch's list, before the batch returns.
func (r *rfEnv) passOver(held func(no string) bool, after func(in []string)) {
	r.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), in []string, reason cancel.Reason) ([]cancel.Result, error) {
		if reason != cancel.ReasonTimeout {
			return inner(ctx, in, reason)
		}
		var keep []string
		for _, no := range in {
			if !held(no) {
				keep = append(keep, no)
			}
		}
		res, err := inner(ctx, keep, reason)
		if after != nil {
			after(in)
		}
		return res, err
	})
}

// cancelEvents returns, per order, the reasons of its KindCancelled events.
func (r *rfEnv) cancelEvents() map[string][]string {
	out := map[string][]string{}
	for _, ev := range r.ev.Of(expiry.KindCancelled) {
		out[ev.OrderNo] = append(out[ev.OrderNo], ev.Reason)
	}
	return out
}

// seatView is what the seat store says of an order's seats: per seat,
// "free", or its status and holder.
func (r *rfEnv) seatView(t *testing.T, no string) []string {
	t.Helper()
	p := r.placed[no]
	st, err := r.seats.Show(context.Background(), p.ShowID)
	require.NoError(t, err)
	var out []string
	for _, seat := range p.Seats {
		s, ok := st[seat]
		if !ok {
			out = append(out, seat+":free")
			continue
		}
		out = append(out, fmt.Sprintf("%s:%v:%s", seat, s.Status, s.OrderNo))
	}
	return out
}

// answerKey is a Timeout answer as a host sees it (cancelled, the order's
// fields, the error's class), for comparing two worlds.
func answerKey(c a5call) string {
	class := "nil"
	switch {
	case errors.Is(c.err, expiry.ErrNotFound):
		class = "notfound"
	case c.err != nil:
		class = "error"
	}
	o := c.o
	return fmt.Sprintf("cancelled=%v no=%s user=%s show=%s status=%v expire=%d read=%d err=%s",
		c.cancelled, o.No, o.UserID, o.ShowID, o.Status, o.ExpireAt.UnixMilli(), o.ReadAt.UnixMilli(), class)
}

func sortedKeys(cs []a5call) []string {
	var out []string
	for _, c := range cs {
		out = append(out, answerKey(c))
	}
	sort.Strings(out)
	return out
}

func sortedOutcomes(os []rfOut, no string) []string {
	var out []string
	for _, o := range os {
		if o.no == no {
			out = append(out, fmt.Sprintf("%v/%v", o.outcome, o.err != nil))
		}
	}
	sort.Strings(out)
	return out
}

// rfWorld is the attack R1's orders, placed and brought to their states
// the same way in each world. Each order has its own user and show.
type rfKind struct {
	no    string
	calls int
	setup func(t *testing.T, r *rfEnv, no string)
}

func rfKinds() []rfKind {
	ctx := context.Background()
	place := func(d time.Duration) func(t *testing.T, r *rfEnv, no string) {
		return func(t *testing.T, r *rfEnv, no string) { r.place(t, no, "u-"+no, "s-"+no, d) }
	}
	then := func(d time.Duration, f func(t *testing.T, r *rfEnv, no string)) func(t *testing.T, r *rfEnv, no string) {
		return func(t *testing.T, r *rfEnv, no string) { place(d)(t, r, no); f(t, r, no) }
	}
	return []rfKind{
		{"due1", 3, place(-time.Minute)},
		{"due2", 2, place(-time.Millisecond)},
		{"edge", 2, place(0)}, // due exactly now by the store's clock
		{"nd1", 2, place(time.Hour)},
		{"nd2", 2, place(time.Millisecond)},
		{"ext1", 2, then(time.Minute, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.Extend(ctx, no, "", 30*time.Minute)
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"short1", 2, then(time.Hour, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.mem.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: no, In: 0, Shorten: true})
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"paid1", 2, then(-time.Minute, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"paidnd", 2, then(time.Hour, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"user1", 2, then(time.Hour, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.UserCancel(ctx, no, "u-"+no)
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"rec1", 2, then(-time.Minute, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.ExpireDue(ctx, []string{no}, "")
			require.NoError(t, err)
			require.Len(t, res, 1)
		})},
		{"tmo1", 2, then(-time.Minute, func(t *testing.T, r *rfEnv, no string) {
			ok, _, err := r.svc.Timeout(ctx, no) // a lane is free: the one-order path
			require.NoError(t, err)
			require.True(t, ok)
		})},
		{"now1", 2, then(time.Hour, func(t *testing.T, r *rfEnv, no string) {
			res, err := r.svc.ExpireNow(ctx, no)
			require.NoError(t, err)
			require.True(t, res.Changed)
		})},
		{"late1", 2, then(-time.Minute, func(t *testing.T, r *rfEnv, no string) {
			ok, _, err := r.svc.Timeout(ctx, no)
			require.NoError(t, err)
			require.True(t, ok)
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.NoError(t, err)
			require.True(t, res.Changed, "the late payment reinstates it")
			require.Equal(t, expiry.StatusPaid, res.Order.Status)
		})},
		{"refund1", 2, then(-time.Minute, func(t *testing.T, r *rfEnv, no string) {
			_, err := r.svc.UserCancel(ctx, no, "u-"+no)
			require.NoError(t, err)
			_, err = r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a payment after the user's cancel is refunded")
		})},
		{"miss1", 2, func(*testing.T, *rfEnv, string) {}},
	}
}

// Attack R1: the two worlds. The same orders in every state a Timeout can
// meet (due, due exactly now, not due, extended, shortened to due, paid,
// paid before its deadline, cancelled by its user, by the reconciler, by an
// earlier timeout, by ExpireNow, reinstated by a late payment, cancelled
// with a refunded late payment, missing), each handed to the Handler two or
// three times: in one world all the messages queue behind busy lanes and
// go in one batch (the decided ones then answered from the read), in the
// other each goes by the one-order path. Every answer (as a multiset per
// order), every Handler outcome and re-arm, every event, seat and
// purchase-limit counter must be the same in both.
func TestAttackReadFirstSameAsOneByOne(t *testing.T) {
	// It asserts that decided orders were answered from their reads: a
	// read slowed past the budget by a loaded machine (SQLite waiting on a
	// batch's write lock) would rightly go by the compare-and-set instead.
	t.Cleanup(cancel.SetReadBudget(time.Minute))
	ign := goleak.IgnoreCurrent()
	clk := newA5Clock()
	batched := newRF(t, rfOpts{late: true, clk: clk})
	single := newRF(t, rfOpts{late: true, clk: clk, oneByOne: true})
	kinds := rfKinds()
	for _, r := range []*rfEnv{batched, single} {
		for _, k := range kinds {
			k.setup(t, r, k.no)
		}
		r.rs.resetCounts()
	}
	preEvents := len(batched.ev.Of(expiry.KindCancelled))
	require.Equal(t, preEvents, len(single.ev.Of(expiry.KindCancelled)))
	var nos []string
	for _, k := range kinds {
		for j := 0; j < k.calls; j++ {
			nos = append(nos, k.no)
		}
	}
	rand.Shuffle(len(nos), func(i, j int) { nos[i], nos[j] = nos[j], nos[i] })

	batched.place(t, "g0", "uG", "sG", -time.Minute)
	g := batched.hold(t, context.Background(), "g0")
	dues := batched.store.dueCalls.Load() // the setup's ExpireDue
	bOut := batched.handleQueued(t, g, nil, nos)
	assert.EqualValues(t, 1, batched.store.dueCalls.Load()-dues, "the queued messages went in one batch")
	var sOut []rfOut
	for _, no := range nos {
		sOut = append(sOut, single.handle(context.Background(), no))
	}

	bEv, sEv := batched.cancelEvents(), single.cancelEvents()
	for _, k := range kinds {
		no := k.no
		assert.Equal(t, sortedKeys(single.canc.answers(no)), sortedKeys(batched.canc.answers(no)), "order %s: Timeout answers", no)
		assert.Equal(t, sortedOutcomes(sOut, no), sortedOutcomes(bOut, no), "order %s: Handler outcomes", no)
		assert.Equal(t, single.sender.of(no), batched.sender.of(no), "order %s: re-arms", no)
		assert.Equal(t, sEv[no], bEv[no], "order %s: KindCancelled events (reasons)", no)
		if no == "miss1" {
			continue
		}
		so, err := single.mem.Order(context.Background(), no)
		require.NoError(t, err)
		bo, err := batched.mem.Order(context.Background(), no)
		require.NoError(t, err)
		assert.Equal(t, so, bo, "order %s: the order at the end", no)
		assert.Equal(t, single.seatView(t, no), batched.seatView(t, no), "order %s: its seats", no)
		p := batched.placed[no]
		sh, err := single.seats.Held(context.Background(), p.ShowID, p.UserID)
		require.NoError(t, err)
		bh, err := batched.seats.Held(context.Background(), p.ShowID, p.UserID)
		require.NoError(t, err)
		assert.Equal(t, sh, bh, "order %s: I8 Held", no)
		assert.Equal(t, single.seats.freedOf(no), batched.seats.freedOf(no), "order %s: seats freed", no)
		// The read path ran: an order decided before the messages was
		// answered from reads, with no compare-and-set of a queued call.
		if bo.Status != expiry.StatusPending && !strings.HasPrefix(no, "due") && no != "edge" && no != "short1" {
			reads, cas := batched.rs.counts(no)
			assert.Equal(t, k.calls, reads, "order %s: decided, each message read it", no)
			assert.Zero(t, cas, "order %s: decided, no compare-and-set", no)
		}
	}
	// And the answers are true: a due order cancelled by exactly one
	// message, everything else untouched by the messages.
	for _, r := range []*rfEnv{batched, single} {
		ev := r.cancelEvents()
		for _, no := range []string{"due1", "due2", "edge", "short1"} {
			assert.Equal(t, []string{"timeout"}, ev[no], "order %s", no)
			n := 0
			for _, c := range r.canc.answers(no) {
				if c.cancelled {
					n++
				}
			}
			assert.Equal(t, 1, n, "order %s: calls that cancelled it", no)
		}
	}
	assert.Empty(t, batched.ev.Of(expiry.KindReleaseFailed))
	noLeak(t, ign)
}

// Attack R2: a storm on due orders with the late-payment policy on: three
// timeout messages per order through the Handler, the buyer's payment
// (repeated, and for some orders a second payment id), the user's cancel
// for some, the reconciler's ExpireDue three times, Extend (refused: due):
// all at once, the store a little slow so that lanes fill and batches form,
// and many messages find their order decided by another racer after their
// batch passed it over. Judged at the end: each order decided once (one
// KindCancelled event, one more KindReinstated when a late payment brought
// it back), a Handler outcome "cancelled" exactly for the order whose
// cancel event says "timeout", never a re-arm or a failure, seats sold to
// paid orders and free for cancelled ones, the counters right.
func TestAttackReadFirstLatePaymentStorm(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	var batches, readAnswered int
	for round := 0; round < 6; round++ {
		r := newRF(t, rfOpts{late: true})
		ctx := context.Background()
		var nos []string
		for i := 0; i < 30; i++ {
			no := fmt.Sprintf("o%02d", i)
			r.place(t, no, fmt.Sprintf("u%d", i%4), fmt.Sprintf("s%d", i%3), -time.Minute)
			nos = append(nos, no)
		}
		r.rs.resetCounts()
		slow := func(context.Context, cancel.Request) error { time.Sleep(300 * time.Microsecond); return nil }
		r.store.beforePending.Store(&slow)
		var mu sync.Mutex
		var outs []rfOut
		paidBy := map[string][]string{}
		var jobs []func()
		for i, no := range nos {
			for j := 0; j < 3; j++ {
				jobs = append(jobs, func() {
					o := r.handle(ctx, no)
					mu.Lock()
					outs = append(outs, o)
					mu.Unlock()
				})
			}
			pays := []string{"pay-" + no, "pay-" + no}
			if i%3 == 0 {
				pays = append(pays, "pay2-"+no)
			}
			for _, pid := range pays {
				jobs = append(jobs, func() {
					time.Sleep(time.Duration(rand.Intn(3)) * time.Millisecond) // late, often after a cancel
					res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: pid})
					if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
						t.Errorf("Pay(%s, %s): %v", no, pid, err)
					}
					if err == nil && res.Changed {
						mu.Lock()
						paidBy[no] = append(paidBy[no], pid)
						mu.Unlock()
					}
				})
			}
			if i%4 == 1 {
				jobs = append(jobs, func() {
					if _, err := r.svc.UserCancel(ctx, no, r.placed[no].UserID); err != nil {
						t.Errorf("UserCancel(%s): %v", no, err)
					}
				})
			}
			if i%5 == 2 {
				jobs = append(jobs, func() {
					res, err := r.svc.Extend(ctx, no, "", 30*time.Minute)
					if err != nil || res.Changed {
						t.Errorf("Extend(%s) of a due order: %+v, %v", no, res, err)
					}
				})
			}
		}
		for k := 0; k < 3; k++ {
			jobs = append(jobs, func() {
				if _, err := r.svc.ExpireDue(ctx, nos, ""); err != nil {
					t.Errorf("ExpireDue: %v", err)
				}
			})
		}
		rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, job := range jobs {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; job() }()
		}
		close(start)
		wg.Wait()

		ev := r.cancelEvents()
		reinstated := map[string]int{}
		for _, e := range r.ev.Of(expiry.KindReinstated) {
			reinstated[e.OrderNo]++
		}
		timeoutWins := map[string]int{}
		for _, o := range outs {
			switch {
			case o.err != nil:
				t.Errorf("round %d: order %s: Handler failed: %v", round, o.no, o.err)
			case o.outcome == expiry.OutcomeCancelled:
				timeoutWins[o.no]++
			case o.outcome != expiry.OutcomeFinal:
				t.Errorf("round %d: order %s (due): Handler outcome %v", round, o.no, o.outcome)
			}
		}
		held := map[[2]string]int{}
		for _, no := range nos {
			p := r.placed[no]
			key := [2]string{p.ShowID, p.UserID}
			held[key] += 0
			o, err := r.mem.Order(ctx, no)
			require.NoError(t, err)
			st, err := r.seats.Show(ctx, p.ShowID)
			require.NoError(t, err)
			assert.LessOrEqual(t, len(paidBy[no]), 1, "round %d: order %s paid by %v", round, no, paidBy[no])
			assert.LessOrEqual(t, reinstated[no], 1, "round %d: order %s reinstated twice", round, no)
			switch o.Status {
			case expiry.StatusPaid:
				assert.Len(t, ev[no], reinstated[no], "round %d: paid order %s: cancel events %v, reinstated %d", round, no, ev[no], reinstated[no])
				for _, seat := range p.Seats {
					if s := st[seat]; s.Status != cancel.SeatSold || s.OrderNo != no {
						t.Errorf("round %d: paid order %s: seat %s is %+v", round, no, seat, s)
					}
				}
				held[key] += len(p.Seats)
			case expiry.StatusCancelled:
				assert.Len(t, ev[no], 1, "round %d: cancelled order %s: cancel events %v", round, no, ev[no])
				assert.Zero(t, reinstated[no])
				for _, seat := range p.Seats {
					if s, ok := st[seat]; ok {
						t.Errorf("I2: round %d: cancelled order %s: seat %s still %+v", round, no, seat, s)
					}
				}
			default:
				t.Errorf("I3: round %d: order %s still pending after everything", round, no)
			}
			wantWins := 0
			if len(ev[no]) > 0 && ev[no][0] == string(cancel.ReasonTimeout) {
				wantWins = 1
			}
			assert.Equal(t, wantWins, timeoutWins[no], "round %d: order %s: messages told cancelled, events %v", round, no, ev[no])
			assert.LessOrEqual(t, r.seats.freedOf(no), len(p.Seats), "round %d: order %s: seats freed more than once", round, no)
			reads, cas := r.rs.counts(no)
			if cas < 3 && reads > 0 {
				readAnswered++ // some message answered from a read
			}
		}
		for key, n := range held {
			got, err := r.seats.Held(ctx, key[0], key[1])
			require.NoError(t, err)
			assert.Equal(t, n, got, "I8: round %d: Held(%s, %s)", round, key[0], key[1])
		}
		assert.Empty(t, r.sender.sent, "round %d: a due order was re-armed", round)
		batches += int(r.store.dueCalls.Load())
		lanesIdle(t, r.svc)
	}
	t.Logf("batches %d; orders with a message answered from a read: %d", batches, readAnswered)
	require.Positive(t, batches, "no batch formed: the storm did not test the read path")
	require.Positive(t, readAnswered, "no message was answered from a read")
	noLeak(t, ign)
}

// Attack R3: a row the batch passed over because another transaction held
// it (MariaDB's SKIP LOCKED in sqlstore's CancelDue), that transaction
// being a reconciler's cancel, a payment, a user's cancel, an extension, a
// shortening to due, or nothing that changes the order; committed while the
// batch ran (before the read), between the read and the one-order
// compare-and-set, or concurrently. Each order's seats must be released
// exactly once and only by the cancel that won, the timeout message must
// be told "cancelled" exactly when its cancel won, a paid order's seats
// stay sold, an extended order is re-armed for its new deadline, a
// shortened one is cancelled by the message (I3), and nothing is answered
// from a read taken before a change that the answer then contradicts in a
// way the host acts on.
func TestAttackReadFirstSkippedRowRacers(t *testing.T) {
	type racer struct {
		name    string
		d       time.Duration // the order's deadline at placement (store clock)
		run     func(t *testing.T, r *rfEnv, no string, mustWin bool)
		status  expiry.Status
		reason  string // the KindCancelled event's reason ("" none)
		outcome expiry.Outcome
		rearm   time.Duration // the re-arm's delay, for OutcomeRearmed
	}
	ctx := context.Background()
	// Each racer commits its change; mustWin: it runs where nothing else
	// can decide first (inBatch, afterRead), so it must change the order.
	changed := func(t *testing.T, mustWin bool, what string, ok bool, err error) {
		switch {
		case err != nil && !(errors.Is(err, cancel.ErrDiscrepancy) && !mustWin):
			t.Errorf("%s: %v", what, err)
		case mustWin && !ok:
			t.Errorf("%s changed nothing", what)
		}
	}
	racers := []racer{
		{"reconciler", -time.Minute, func(t *testing.T, r *rfEnv, no string, mustWin bool) {
			res, err := r.svc.ExpireDue(ctx, []string{no}, "")
			changed(t, mustWin, "ExpireDue "+no, len(res) == 1, err)
		}, expiry.StatusCancelled, "reconcile", expiry.OutcomeFinal, 0},
		{"payment", -time.Minute, func(t *testing.T, r *rfEnv, no string, mustWin bool) {
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			changed(t, mustWin, "Pay "+no, res.Changed, err)
		}, expiry.StatusPaid, "", expiry.OutcomeFinal, 0},
		{"user", -time.Minute, func(t *testing.T, r *rfEnv, no string, mustWin bool) {
			res, err := r.svc.UserCancel(ctx, no, r.placed[no].UserID)
			changed(t, mustWin, "UserCancel "+no, res.Changed, err)
		}, expiry.StatusCancelled, "user", expiry.OutcomeFinal, 0},
		{"extend", time.Minute, func(t *testing.T, r *rfEnv, no string, mustWin bool) {
			res, err := r.svc.Extend(ctx, no, "", 30*time.Minute)
			changed(t, mustWin, "Extend "+no, res.Changed, err)
		}, expiry.StatusPending, "", expiry.OutcomeRearmed, 30 * time.Minute},
		{"shorten", time.Hour, func(t *testing.T, r *rfEnv, no string, mustWin bool) {
			res, err := r.mem.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: no, In: 0, Shorten: true})
			changed(t, mustWin, "shorten "+no, res.Changed, err)
		}, expiry.StatusCancelled, "timeout", expiry.OutcomeCancelled, 0},
		{"nothing", -time.Minute, func(*testing.T, *rfEnv, string, bool) {}, expiry.StatusCancelled, "timeout", expiry.OutcomeCancelled, 0},
	}
	for _, when := range []string{"inBatch", "afterRead", "concurrent"} {
		t.Run(when, func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			r := newRF(t, rfOpts{late: true})
			skip := map[string]racer{}
			var nos []string
			for _, rc := range racers {
				no := "k-" + rc.name
				r.place(t, no, "u-"+no, "s-"+no, rc.d)
				skip[no] = rc
				nos = append(nos, no)
			}
			// A bystander the batch does cancel.
			r.place(t, "b1", "u-b1", "s-b1", -time.Minute)
			nos = append(nos, "b1")
			r.rs.resetCounts()
			var racing sync.WaitGroup
			race := func(no string) {
				rc := skip[no]
				switch when {
				case "concurrent":
					racing.Add(1)
					go func() { defer racing.Done(); rc.run(t, r, no, false) }()
				default:
					rc.run(t, r, no, true)
				}
			}
			isHeld := func(no string) bool { _, held := skip[no]; return held }
			var after func([]string)
			if when != "afterRead" {
				after = func(in []string) {
					for _, no := range in {
						if isHeld(no) {
							race(no) // committed while the batch ran: before the read
						}
					}
				}
			}
			r.passOver(isHeld, after)
			if when == "afterRead" {
				var once sync.Map
				r.rs.setOrder(func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
					o, err := inner(ctx, no)
					if _, held := skip[no]; held {
						if _, done := once.LoadOrStore(no, true); !done {
							race(no) // commits after the read, before the compare-and-set
						}
					}
					return o, err
				})
			}
			r.place(t, "g0", "uG", "sG", -time.Minute)
			g := r.hold(t, ctx, "g0")
			outs := r.handleQueued(t, g, nil, nos)
			racing.Wait()
			ev := r.cancelEvents()
			for _, o := range outs {
				no := o.no
				p := r.placed[no]
				cur, err := r.mem.Order(ctx, no)
				require.NoError(t, err)
				want := racer{status: expiry.StatusCancelled, reason: "timeout", outcome: expiry.OutcomeCancelled}
				if rc, ok := skip[no]; ok {
					want = rc
				}
				if when == "concurrent" && (want.name == "extend" || want.name == "shorten") {
					// The change may land after the message's compare-and-set:
					// then the message re-arms by the deadline it read.
					require.NoError(t, o.err, "order %s", no)
					switch {
					case o.outcome == expiry.OutcomeCancelled:
						assert.Equal(t, "shorten", want.name, "order %s", no)
						assert.Equal(t, []string{"timeout"}, ev[no], "order %s", no)
						assert.Equal(t, expiry.StatusCancelled, cur.Status)
					case o.outcome == expiry.OutcomeRearmed:
						assert.Empty(t, ev[no], "order %s", no)
						assert.Equal(t, expiry.StatusPending, cur.Status)
						d := r.sender.of(no)
						require.Len(t, d, 1, "order %s", no)
						assert.Contains(t, []time.Duration{want.d, want.rearm}, d[0], "order %s: re-armed by the deadline before or after the change", no)
					default:
						t.Errorf("order %s (%s): outcome %v", no, want.name, o.outcome)
					}
				} else if when == "concurrent" && (want.name == "reconciler" || want.name == "user" || want.name == "payment") {
					// The racer and the message race for real: either may
					// decide, never both.
					require.NoError(t, o.err, "order %s", no)
					switch {
					case o.outcome == expiry.OutcomeCancelled:
						assert.Equal(t, []string{"timeout"}, ev[no], "order %s", no)
						if want.name == "payment" && cur.Status == expiry.StatusPaid {
							// The payment came after the cancel: late, it
							// reinstated the order (AcceptLatePayments).
							assert.Equal(t, 1, r.ev.Count(expiry.KindReinstated), "order %s paid after its cancel", no)
						} else {
							assert.Equal(t, expiry.StatusCancelled, cur.Status)
						}
					default:
						assert.Equal(t, expiry.OutcomeFinal, o.outcome, "order %s", no)
						assert.Equal(t, want.status, cur.Status, "order %s", no)
						if want.reason == "" {
							assert.Empty(t, ev[no], "order %s", no)
						} else {
							assert.Equal(t, []string{want.reason}, ev[no], "order %s", no)
						}
					}
				} else {
					require.NoError(t, o.err, "order %s (%s)", no, want.name)
					assert.Equal(t, want.outcome, o.outcome, "order %s (%s): Handler outcome", no, want.name)
					assert.Equal(t, want.status, cur.Status, "order %s (%s)", no, want.name)
					if want.reason == "" {
						assert.Empty(t, ev[no], "order %s (%s)", no, want.name)
					} else {
						assert.Equal(t, []string{want.reason}, ev[no], "order %s (%s): cancel events", no, want.name)
					}
					if want.outcome == expiry.OutcomeRearmed {
						assert.Equal(t, []time.Duration{want.rearm}, r.sender.of(no), "order %s: re-armed for its new deadline", no)
					}
				}
				st, err := r.seats.Show(ctx, p.ShowID)
				require.NoError(t, err)
				switch cur.Status {
				case expiry.StatusCancelled:
					assert.Equal(t, len(p.Seats), r.seats.freedOf(no), "I2: order %s: seats freed once", no)
					assert.Empty(t, st, "order %s: its seats are free", no)
				case expiry.StatusPaid:
					if len(ev[no]) == 0 {
						assert.Zero(t, r.seats.freedOf(no), "I2: paid order %s: a seat freed", no)
					} else { // cancelled, released, then reinstated by its late payment
						assert.Equal(t, len(p.Seats), r.seats.freedOf(no), "I2: reinstated order %s: seats freed once", no)
					}
					for _, seat := range p.Seats {
						assert.Equal(t, cancel.SeatSold, st[seat].Status, "paid order %s: seat %s", no, seat)
					}
				case expiry.StatusPending:
					assert.Zero(t, r.seats.freedOf(no), "pending order %s: a seat freed", no)
					for _, seat := range p.Seats {
						assert.Equal(t, cancel.SeatLocked, st[seat].Status, "pending order %s: seat %s", no, seat)
					}
				}
				held, err := r.seats.Held(ctx, p.ShowID, p.UserID)
				require.NoError(t, err)
				if cur.Status == expiry.StatusCancelled {
					assert.Zero(t, held, "I8: order %s", no)
				} else {
					assert.Equal(t, len(p.Seats), held, "I8: order %s", no)
				}
			}
			// Each passed-over order was read by its message.
			for no := range skip {
				reads, _ := r.rs.counts(no)
				assert.Positive(t, reads, "order %s: the message did not read it", no)
			}
			assert.Empty(t, r.ev.Of(expiry.KindReleaseFailed))
			lanesIdle(t, r.svc)
			noLeak(t, ign)
		})
	}
}

// Attack R4: stores whose Order disagrees with CancelPending, for an order
// the batch passed over: Order answers a zero Order, another (decided)
// order, an error wrapping expiry.ErrNotFound although the order exists, a
// transient error, a stale pending copy from a cache, or is slow (20ms).
// The read must never stop the due order from being cancelled by its
// message (exactly once, seats freed once), nor make a decided order (paid,
// here) look anything but decided.
func TestAttackReadFirstOrderDisagrees(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		f    func(r *rfEnv) rfOrderFunc
	}{
		{"zeroOrder", func(*rfEnv) rfOrderFunc {
			return func(context.Context, string, func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				return expiry.Order{}, nil
			}
		}},
		{"anotherOrder", func(*rfEnv) rfOrderFunc {
			return func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				return inner(ctx, "x-paid") // a decided order under another number
			}
		}},
		{"notFoundWhileThere", func(*rfEnv) rfOrderFunc {
			return func(context.Context, string, func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				return expiry.Order{}, fmt.Errorf("replica lag: %w", expiry.ErrNotFound)
			}
		}},
		{"transientError", func(*rfEnv) rfOrderFunc {
			return func(context.Context, string, func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				return expiry.Order{}, errors.New("read replica down")
			}
		}},
		{"stalePendingCache", func(r *rfEnv) rfOrderFunc {
			var mu sync.Mutex
			cache := map[string]expiry.Order{}
			for _, no := range []string{"x-due", "x-paid"} {
				o, err := r.mem.Order(ctx, no)
				if err == nil {
					cache[no] = o
				}
			}
			return func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				mu.Lock()
				defer mu.Unlock()
				if o, ok := cache[no]; ok {
					return o, nil
				}
				return inner(ctx, no)
			}
		}},
		{"slow", func(*rfEnv) rfOrderFunc {
			return func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
				time.Sleep(20 * time.Millisecond)
				return inner(ctx, no)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			r := newRF(t, rfOpts{})
			r.place(t, "x-due", "u1", "s1", -time.Minute)
			r.place(t, "x-paid", "u2", "s2", -time.Minute)
			// x-paid is paid after the cache was filled: the stale cache
			// says pending for it too.
			f := tc.f(r)
			res, err := r.svc.Pay(ctx, cancel.Payment{OrderNo: "x-paid", PaymentID: "pay-x"})
			require.NoError(t, err)
			require.True(t, res.Changed)
			r.passOver(func(no string) bool { return no == "x-due" }, nil) // x-due's row held by another transaction
			r.place(t, "g0", "uG", "sG", -time.Minute)
			g := r.hold(t, ctx, "g0")
			r.rs.setOrder(f) // after the placements: Place reads too
			r.rs.resetCounts()
			outs := r.handleQueued(t, g, nil, []string{"x-due", "x-paid", "x-due"})
			wins := 0
			for _, o := range outs {
				require.NoError(t, o.err, "order %s", o.no)
				switch o.no {
				case "x-due":
					if o.outcome == expiry.OutcomeCancelled {
						wins++
					} else {
						assert.Equal(t, expiry.OutcomeFinal, o.outcome)
					}
				case "x-paid":
					assert.Equal(t, expiry.OutcomeFinal, o.outcome)
				}
			}
			assert.Equal(t, 1, wins, "x-due: messages told cancelled")
			for _, c := range r.canc.answers("x-due") {
				assert.Equal(t, "x-due", c.o.No, "answered for another order")
				assert.Equal(t, expiry.StatusCancelled, c.o.Status)
			}
			for _, c := range r.canc.answers("x-paid") {
				assert.Equal(t, "x-paid", c.o.No)
				assert.Equal(t, expiry.StatusPaid, c.o.Status)
				assert.False(t, c.cancelled)
			}
			ev := r.cancelEvents()
			assert.Equal(t, []string{"timeout"}, ev["x-due"])
			assert.Empty(t, ev["x-paid"])
			r.checkFinal(t, map[string]int{"x-due": wins}, true)
			lanesIdle(t, r.svc)
			noLeak(t, ign)
		})
	}
}

// Attack R5: Order panics for one order (a host store's bug on one legacy
// row). Before the read path, the one-order path never called Order, so a
// message for that order cancelled it. The panic is the caller's (the
// consumer recovers it); it must not wedge the lanes or touch the other
// orders of the batch, and must not leave the order half-cancelled.
func TestAttackReadFirstOrderPanics(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	ctx := context.Background()
	r := newRF(t, rfOpts{})
	r.place(t, "p-due", "u1", "s1", -time.Minute)
	r.place(t, "d1", "u2", "s2", -time.Minute)
	r.place(t, "d2", "u3", "s3", -time.Minute)
	r.rs.setOrder(func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
		if no == "p-due" {
			panic("legacy row")
		}
		return inner(ctx, no)
	})
	r.passOver(func(no string) bool { return no == "p-due" }, nil)
	r.place(t, "g0", "uG", "sG", -time.Minute)
	g := r.hold(t, ctx, "g0")
	var wg sync.WaitGroup
	var panicked atomic.Int32
	outs := make([]a5call, 3)
	for i, no := range []string{"p-due", "d1", "d2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, p := r.recoveredTimeout(ctx, no)
			if p {
				panicked.Add(1)
			}
			outs[i] = c
		}()
	}
	g.queued(t, 3)
	g.release()
	wg.Wait()
	if gc := <-g.gateRes; gc.cancelled {
		r.pre[gc.no]++
	}
	g.fillers(t)
	lanesIdle(t, r.svc)
	for _, c := range outs[1:] {
		checkAnswer(t, kDue, c)
		assert.True(t, c.cancelled, "order %s", c.no)
	}
	o, err := r.mem.Order(ctx, "p-due")
	require.NoError(t, err)
	if panicked.Load() == 1 {
		t.Logf("the panic of Order reached the caller: %v", outs[0].err)
		assert.Equal(t, expiry.StatusPending, o.Status, "a panicked call left the order as it was")
		st, _ := r.seats.Show(ctx, "s1")
		assert.Len(t, st, 2, "its seats stay locked")
	} else {
		checkAnswer(t, kDue, outs[0])
	}
	// The lanes still work: a lone call (a lane is free) cancels it by the
	// one-order path, which does not read first.
	c := r.timeout(ctx, "p-due")
	checkAnswer(t, kDue, c)
	r.checkFinal(t, winsOf(append(outs, c)...), false)
	noLeak(t, ign)
}

// Attack R6: the caller's context ends between its batch and the read (a
// consumer shutting down; the batch passed the order over), with a store
// whose Order and compare-and-set honour contexts as a SQL store's do, and
// with one that ignores them. Each call either fails with its context's
// error, leaving its order as it was (a redelivery then decides it), or
// answers truthfully; no order is cancelled twice or told cancelled by a
// call that did not cancel it, and a redelivery cancels every due order
// left pending.
func TestAttackReadFirstContextEndsBeforeRead(t *testing.T) {
	for _, honour := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeHonoursCtx=%v", honour), func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			ctx := context.Background()
			r := newRF(t, rfOpts{})
			kinds := r.a5mix(t, 6, 2, 2, 2, 0)
			r.rs.resetCounts()
			if honour {
				r.rs.setOrder(func(ctx context.Context, no string, inner func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
					if err := ctx.Err(); err != nil {
						return expiry.Order{}, err
					}
					return inner(ctx, no)
				})
			}
			stops := map[string]context.CancelFunc{}
			ctxs := map[string]context.Context{}
			var nos []string
			for no := range kinds {
				c, stop := context.WithCancel(ctx)
				ctxs[no], stops[no] = c, stop
				nos = append(nos, no)
			}
			sort.Strings(nos)
			passOver := map[string]bool{}
			for i, no := range nos {
				passOver[no] = i%2 == 0
			}
			r.passOver(func(no string) bool { return passOver[no] }, func(in []string) {
				for _, no := range in {
					stops[no]() // every caller leaves before the batch returns
				}
			})
			r.place(t, "g0", "uG", "sG", -time.Minute)
			g := r.hold(t, ctx, "g0")
			if honour {
				inner := r.store.beforePending.Load()
				f := func(c context.Context, req cancel.Request) error {
					if err := (*inner)(c, req); err != nil {
						return err
					}
					return c.Err()
				}
				r.store.beforePending.Store(&f)
			}
			var cs []context.Context
			for _, no := range nos {
				cs = append(cs, ctxs[no])
			}
			outs := r.handleQueued(t, g, cs, nos)
			// Callers that left do not wait for their batch: it settles
			// (events, releases) on its own lane, which comes back after.
			lanesIdle(t, r.svc)
			failed := map[string]bool{}
			for _, o := range outs {
				cur, err := r.mem.Order(ctx, o.no)
				require.NoError(t, err)
				switch {
				case o.err != nil:
					assert.ErrorIs(t, o.err, context.Canceled, "order %s", o.no)
					assert.Equal(t, expiry.OutcomeFailed, o.outcome)
					failed[o.no] = true
					if kinds[o.no] == kDue && passOver[o.no] {
						assert.Equal(t, expiry.StatusPending, cur.Status, "order %s: the failed call left it as it was", o.no)
					}
				case o.outcome == expiry.OutcomeCancelled:
					assert.Equal(t, kDue, kinds[o.no], "order %s", o.no)
				case o.outcome == expiry.OutcomeFinal:
					assert.NotEqual(t, expiry.StatusPending, cur.Status, "order %s answered final", o.no)
					assert.Contains(t, []a5kind{kPaid, kUserCancelled}, kinds[o.no], "order %s: answered final but was %v (its own cancel not reported)", o.no, kinds[o.no])
				case o.outcome == expiry.OutcomeRearmed:
					assert.Equal(t, kNotDue, kinds[o.no], "order %s", o.no)
				default:
					t.Errorf("order %s: %+v", o.no, o)
				}
			}
			// Redelivery, with live contexts: every due order ends cancelled.
			r.store.beforePending.Store(nil)
			var again []rfOut
			for _, no := range nos {
				again = append(again, r.handle(ctx, no))
			}
			wins := map[string]int{}
			for _, o := range append(outs, again...) {
				require.NoError(t, func() error {
					if o.err != nil && !errors.Is(o.err, context.Canceled) {
						return o.err
					}
					return nil
				}())
				if o.outcome == expiry.OutcomeCancelled {
					wins[o.no]++
				}
			}
			ev := r.cancelEvents()
			t.Cleanup(func() {
				if t.Failed() {
					for _, o := range append(outs, again...) {
						cur, _ := r.mem.Order(ctx, o.no)
						t.Logf("on failure: %s kind=%v passOver=%v outcome=%v err=%v status=%v events=%v freed=%d seats=%v", o.no, kinds[o.no], passOver[o.no], o.outcome, o.err, cur.Status, ev[o.no], r.seats.freedOf(o.no), r.seatView(t, o.no))
					}
					for _, e := range r.ev.Of(expiry.KindReleaseFailed) {
						t.Logf("on failure: release failed %+v", e)
					}
				}
			})
			for no, k := range kinds {
				if k != kDue {
					continue
				}
				assert.Equal(t, []string{"timeout"}, ev[no], "due order %s: cancel events", no)
				switch {
				case passOver[no]:
					// Its batch passed it over: whoever cancelled it, by the
					// one-order path, was told so.
					assert.Equal(t, 1, wins[no], "due order %s: messages told cancelled", no)
				case wins[no] == 0:
					// Its batch cancelled it while its caller left: the
					// caller got its context's error (a documented loss of
					// the answer, not of the cancel).
					assert.True(t, failed[no], "due order %s cancelled but nobody told and no call failed", no)
				default:
					assert.Equal(t, 1, wins[no], "due order %s", no)
				}
			}
			r.checkFinal(t, wins, false)
			lanesIdle(t, r.svc)
			noLeak(t, ign)
		})
	}
}

// Attack R7: SQL goes back in time (a failover to a replica that lacked the
// last commits) between the batch and the read: an order the reconciler
// had cancelled is pending and due again. The message must find it pending
// and cancel it (I3), not answer "final" from anything older than the read.
func TestAttackReadFirstBackInTime(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	ctx := context.Background()
	r := newRF(t, rfOpts{})
	r.place(t, "bt1", "u1", "s1", -time.Minute)
	r.place(t, "bt2", "u2", "s2", -time.Minute)
	r.place(t, "g0", "uG", "sG", -time.Minute)
	g := r.hold(t, ctx, "g0")
	restore := r.mem.Snapshot() // every order pending
	res, err := r.svc.ExpireDue(ctx, []string{"bt1", "bt2"}, "")
	require.NoError(t, err)
	require.Len(t, res, 2)
	r.rs.resetCounts()
	var once sync.Once
	// The batch finds bt1 and bt2 cancelled and passes them over; the
	// failover lands before the calls read.
	r.passOver(func(string) bool { return false }, func([]string) { once.Do(restore) })
	outs := r.handleQueued(t, g, nil, []string{"bt1", "bt2"})
	for _, o := range outs {
		require.NoError(t, o.err)
		assert.Equal(t, expiry.OutcomeCancelled, o.outcome, "I3: order %s pending and due again after the failover", o.no)
		cur, err := r.mem.Order(ctx, o.no)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, cur.Status)
	}
	lanesIdle(t, r.svc)
	noLeak(t, ign)
}

// ---- SQLite ----

// rfSQL is a sqlstore.Store whose CancelPending can be held (to fill the
// lanes) and whose CancelDue can pass orders over, counting reads.
type rfSQL struct {
	*sqlstore.Store
	before  atomic.Pointer[func(ctx context.Context, req cancel.Request) error]
	passOff atomic.Pointer[map[string]bool]
	mu      sync.Mutex
	reads   map[string]int
	cas     map[string]int
	dues    atomic.Int32
}

func (s *rfSQL) Order(ctx context.Context, no string) (expiry.Order, error) {
	s.mu.Lock()
	s.reads[no]++
	s.mu.Unlock()
	return s.Store.Order(ctx, no)
}

func (s *rfSQL) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	s.mu.Lock()
	s.cas[req.OrderNo]++
	s.mu.Unlock()
	if f := s.before.Load(); f != nil {
		if err := (*f)(ctx, req); err != nil {
			return cancel.Result{}, err
		}
	}
	return s.Store.CancelPending(ctx, req)
}

func (s *rfSQL) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	s.dues.Add(1)
	if m := s.passOff.Load(); m != nil {
		var keep []string
		for _, no := range nos {
			if !(*m)[no] {
				keep = append(keep, no)
			}
		}
		nos = keep
	}
	return s.Store.CancelDue(ctx, nos, reason)
}

// rfTenantDDL is a host's tables shared by tenants: string statuses with
// several decided values (a ticket used at the door, a refund done by the
// host), a tenant column, claims deleted by a cancel.
var rfTenantDDL = []string{
	`CREATE TABLE t_order (
		tenant_id INT NOT NULL,
		order_no  VARCHAR(64) NOT NULL,
		user_id   VARCHAR(64) NOT NULL,
		show_id   VARCHAR(64) NOT NULL,
		state     VARCHAR(16) NOT NULL,
		due_ms    BIGINT NOT NULL,
		pay_ref   VARCHAR(64) NULL,
		reason    VARCHAR(16) NULL,
		PRIMARY KEY (tenant_id, order_no))`,
	"CREATE INDEX t_order_due ON t_order (tenant_id, state, due_ms, order_no)",
	`CREATE TABLE t_seat (
		tenant_id INT NOT NULL,
		show_id   VARCHAR(64) NOT NULL,
		seat_id   VARCHAR(64) NOT NULL,
		order_no  VARCHAR(64) NOT NULL,
		PRIMARY KEY (tenant_id, show_id, seat_id))`,
	"CREATE INDEX t_seat_order ON t_seat (tenant_id, order_no)",
}

func rfTenant(id int) sqlstore.Mapping {
	w := []sqlstore.Condition{{Column: "tenant_id", Value: id}}
	return sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "t_order", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "state",
			Statuses:     sqlstore.Statuses{Pending: "NEW", Paid: []any{"PAID", "USED", "REFUNDED"}, Cancelled: []any{"CANCELLED", "EXPIRED"}},
			Deadline:     sqlstore.Time{Column: "due_ms", Type: sqlstore.EpochMillis},
			PaymentID:    "pay_ref",
			CancelReason: "reason",
			Where:        w,
		},
		Claims: &sqlstore.Claims{Table: "t_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no", Where: w},
	}
}

// rfSQLWorld is one SQLite database with two tenants' stores on it, and
// tenant 7's Service (batched, or by the one-order path), its seats and a
// Handler.
type rfSQLWorld struct {
	db      *sql.DB
	stores  map[int]*sqlstore.Store
	s7      *rfSQL
	seats   *memstore.Seats
	ev      *expirytest.Recorder
	svc     *cancel.Service
	canc    *rfCanceller
	h       *expiry.Handler
	sender  *rfSender
	placed  map[string]cancel.Placement // tenant 7's
	placed8 map[string]cancel.Placement
}

func newRFSQL(t *testing.T, single bool) *rfSQLWorld {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	for _, q := range rfTenantDDL {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	w := &rfSQLWorld{db: db, stores: map[int]*sqlstore.Store{}, ev: &expirytest.Recorder{}, sender: &rfSender{}, placed: map[string]cancel.Placement{}, placed8: map[string]cancel.Placement{}}
	for _, id := range []int{7, 8} {
		s, err := sqlstore.New(db, sqlstore.SQLite, rfTenant(id))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Check(ctx))
		w.stores[id] = s
	}
	w.s7 = &rfSQL{Store: w.stores[7], reads: map[string]int{}, cas: map[string]int{}}
	w.seats = memstore.NewSeats(nil).Scoped(w.stores[7].Scope())
	var store cancel.OrderStore = w.s7
	if single {
		store = onebyone.Store{OrderStore: w.s7}
	}
	w.svc, err = cancel.New(cancel.Config{Store: store, Seats: w.seats, Runtime: expiry.Runtime{Observer: w.ev, Logger: rfQuiet}})
	require.NoError(t, err)
	w.canc = &rfCanceller{svc: w.svc}
	w.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: w.canc, Sender: w.sender, Runtime: expiry.Runtime{Observer: w.ev, Logger: rfQuiet}})
	require.NoError(t, err)
	return w
}

// place inserts an order of tenant id due in d (by the database's clock,
// read at now); tenant 7's through its Service (seats locked).
func (w *rfSQLWorld) place(t *testing.T, id int, no string, now time.Time, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	p := cancel.Placement{OrderNo: no, UserID: fmt.Sprintf("u%d-%s", id, no), ShowID: "ev", Seats: []string{no + "-a", no + "-b"}, ExpireAt: now.Add(d)}
	if id == 7 {
		require.NoError(t, w.svc.Place(ctx, p, w.stores[7].Insert(w.db, nil)))
		w.placed[no] = p
		return
	}
	require.NoError(t, w.stores[id].Insert(w.db, nil)(ctx, p))
	w.placed8[no] = p
}

func (w *rfSQLWorld) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := w.db.ExecContext(context.Background(), q, args...)
	require.NoError(t, err, q)
}

// Attack R8: the two worlds on SQLite, with a host's mapped table shared by
// two tenants (Mapping.Where), statuses the host writes itself (USED: the
// ticket was scanned; REFUNDED; EXPIRED by the host's own job; a status
// the mapping does not know), and order numbers both tenants use, in every
// combination of states. Tenant 7's messages go in one batch (the batch
// passes two due orders over, as SKIP LOCKED does) in one world and one by
// one in the other: every answer, outcome, re-arm, event and seat must be
// the same, tenant 8's rows untouched in both (I16).
func TestAttackReadFirstSQLiteTenants(t *testing.T) {
	// It asserts that decided orders were answered from their reads: a
	// read slowed past the budget by a loaded machine (SQLite waiting on a
	// batch's write lock) would rightly go by the compare-and-set instead.
	t.Cleanup(cancel.SetReadBudget(time.Minute))
	ign := goleak.IgnoreCurrent()
	t.Cleanup(func() { noLeak(t, ign) }) // registered first: runs after the databases are closed
	ctx := context.Background()
	worlds := []*rfSQLWorld{newRFSQL(t, false), newRFSQL(t, true)}
	type row struct {
		no             string
		d7, d8         time.Duration
		state7, state8 string // "" leaves it NEW; "-" no such order
	}
	rows := []row{
		{"a1", -time.Minute, -time.Minute, "", ""},            // both due
		{"a2", -time.Minute, -time.Minute, "", "EXPIRED"},     // 7 due, 8 cancelled
		{"a3", -time.Minute, -time.Minute, "PAID", ""},        // 7 paid, 8 due
		{"a4", -time.Minute, time.Hour, "USED", ""},           // 7 used (paid), 8 not due
		{"a5", -time.Minute, -time.Minute, "REFUNDED", "-"},   // 7 refunded (paid)
		{"a6", -time.Minute, -time.Minute, "EXPIRED", "PAID"}, // 7 expired by the host
		{"a7", time.Hour, -time.Minute, "", "USED"},           // 7 not due
		{"a8", -time.Minute, -time.Minute, "DRAFT", ""},       // 7 in a status the mapping lacks
		{"a9", -time.Minute, -time.Minute, "-", ""},           // 7 missing, 8 due
		{"b1", -time.Minute, -time.Minute, "", "-"},           // 7 due (passed over by the batch)
		{"b2", -2 * time.Second, -time.Minute, "", "CANCELLED"},
		{"b3", -time.Minute, -time.Minute, "CANCELLED", ""},
	}
	passOver := map[string]bool{"b1": true, "b2": true}
	for _, w := range worlds {
		now, err := w.stores[7].Now(ctx)
		require.NoError(t, err)
		for _, rw := range rows {
			if rw.state7 != "-" {
				w.place(t, 7, rw.no, now, rw.d7)
				if rw.state7 != "" {
					w.exec(t, "UPDATE t_order SET state = ? WHERE tenant_id = 7 AND order_no = ?", rw.state7, rw.no)
				}
			}
			if rw.state8 != "-" {
				w.place(t, 8, rw.no, now, rw.d8)
				if rw.state8 != "" {
					w.exec(t, "UPDATE t_order SET state = ? WHERE tenant_id = 8 AND order_no = ?", rw.state8, rw.no)
				}
			}
		}
		w.s7.passOff.Store(&passOver)
		w.s7.mu.Lock()
		w.s7.reads, w.s7.cas = map[string]int{}, map[string]int{}
		w.s7.mu.Unlock()
	}
	var nos []string
	for _, rw := range rows {
		nos = append(nos, rw.no, rw.no)
	}
	rand.Shuffle(len(nos), func(i, j int) { nos[i], nos[j] = nos[j], nos[i] })

	// The batched world: two gate orders hold the lanes, the messages queue.
	bw, sw := worlds[0], worlds[1]
	now, err := bw.stores[7].Now(ctx)
	require.NoError(t, err)
	bw.place(t, 7, "g1", now, -time.Minute)
	bw.place(t, 7, "g2", now, -time.Minute)
	open := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(2)
	var gateOnce sync.Map
	hold := func(ctx context.Context, req cancel.Request) error {
		if req.OrderNo != "g1" && req.OrderNo != "g2" {
			return nil
		}
		if _, again := gateOnce.LoadOrStore(req.OrderNo, true); again {
			return nil
		}
		entered.Done()
		<-open
		return nil
	}
	bw.s7.before.Store(&hold)
	gates := make(chan rfOut, 2)
	for _, no := range []string{"g1", "g2"} {
		go func() { _, _, _ = bw.svc.Timeout(ctx, no); gates <- rfOut{no: no} }()
	}
	entered.Wait()
	bOut := make([]rfOut, len(nos))
	var wg sync.WaitGroup
	for i, no := range nos {
		wg.Add(1)
		go func() { defer wg.Done(); bOut[i] = rfHandleW(bw, ctx, no) }()
	}
	require.Eventually(t, func() bool { return cancel.QueuedTimeouts(bw.svc) == len(nos) }, 5*time.Second, time.Millisecond)
	close(open)
	wg.Wait()
	<-gates
	<-gates
	lanesIdle(t, bw.svc)
	assert.Positive(t, bw.s7.dues.Load(), "a batch ran")
	var sOut []rfOut
	for _, no := range nos {
		sOut = append(sOut, rfHandleW(sw, ctx, no))
	}

	evOf := func(w *rfSQLWorld) map[string][]string {
		out := map[string][]string{}
		for _, e := range w.ev.Of(expiry.KindCancelled) {
			out[e.OrderNo] = append(out[e.OrderNo], e.Reason)
		}
		return out
	}
	bEv, sEv := evOf(bw), evOf(sw)
	// A row as the database has it, its deadline relative to the one it
	// was placed with (each world read its own clock at placement).
	state := func(w *rfSQLWorld, id int, no string) string {
		var st string
		var due int64
		err := w.db.QueryRowContext(ctx, "SELECT state, due_ms FROM t_order WHERE tenant_id = ? AND order_no = ?", id, no).Scan(&st, &due)
		if errors.Is(err, sql.ErrNoRows) {
			return "-"
		}
		require.NoError(t, err)
		placed := w.placed
		if id == 8 {
			placed = w.placed8
		}
		var seats []string
		rs, err := w.db.QueryContext(ctx, "SELECT seat_id FROM t_seat WHERE tenant_id = ? AND order_no = ? ORDER BY seat_id", id, no)
		require.NoError(t, err)
		for rs.Next() {
			var s string
			require.NoError(t, rs.Scan(&s))
			seats = append(seats, s)
		}
		require.NoError(t, rs.Err())
		rs.Close()
		return fmt.Sprintf("%s moved=%d seats=%v", st, due-placed[no].ExpireAt.UnixMilli(), seats)
	}
	// An answer as the host acts on it; the deadline relative to the
	// placement, ReadAt left out (each world read at its own time).
	key := func(w *rfSQLWorld, cs []a5call) []string {
		var out []string
		for _, c := range cs {
			class := "nil"
			switch {
			case errors.Is(c.err, expiry.ErrNotFound):
				class = "notfound"
			case c.err != nil:
				class = "error"
			}
			moved := int64(0)
			if !c.o.ExpireAt.IsZero() {
				moved = c.o.ExpireAt.UnixMilli() - w.placed[c.no].ExpireAt.UnixMilli()
			}
			out = append(out, fmt.Sprintf("cancelled=%v no=%s user=%s show=%s status=%v moved=%d due=%v read=%v err=%s",
				c.cancelled, c.o.No, c.o.UserID, c.o.ShowID, c.o.Status, moved, c.o.Remaining() <= 0, !c.o.ReadAt.IsZero(), class))
		}
		sort.Strings(out)
		return out
	}
	for _, rw := range rows {
		no := rw.no
		assert.Equal(t, key(sw, sw.canc.answers(no)), key(bw, bw.canc.answers(no)), "order %s: Timeout answers", no)
		assert.Equal(t, sortedOutcomes(sOut, no), sortedOutcomes(bOut, no), "order %s: Handler outcomes", no)
		assert.Equal(t, len(sw.sender.of(no)), len(bw.sender.of(no)), "order %s: re-arms", no)
		assert.Equal(t, sEv[no], bEv[no], "order %s: KindCancelled events", no)
		assert.Equal(t, state(sw, 7, no), state(bw, 7, no), "order %s: tenant 7's row", no)
		for _, w := range worlds {
			want := "-"
			if rw.state8 != "-" {
				st := rw.state8
				if st == "" {
					st = "NEW"
				}
				want = fmt.Sprintf("%s moved=0 seats=%v", st, w.placed8[no].Seats)
			}
			assert.Equal(t, want, state(w, 8, no), "I16: order %s: tenant 8's row", no)
		}
		if p, ok := bw.placed[no]; ok {
			st, err := bw.seats.Show(ctx, "ev")
			require.NoError(t, err)
			sst, err := sw.seats.Show(ctx, "ev")
			require.NoError(t, err)
			for _, seat := range p.Seats {
				assert.Equal(t, sst[seat].Status, st[seat].Status, "order %s: seat %s", no, seat)
				assert.Equal(t, sst[seat].OrderNo, st[seat].OrderNo, "order %s: seat %s", no, seat)
			}
		}
	}
	// What the answers must be, whatever the path.
	for _, w := range worlds {
		ev := evOf(w)
		for _, no := range []string{"a1", "a2", "b1", "b2"} {
			assert.Equal(t, []string{"timeout"}, ev[no], "order %s", no)
		}
		for _, no := range []string{"a3", "a4", "a5", "a6", "a7", "a8", "b3"} {
			assert.Empty(t, ev[no], "order %s", no)
		}
	}
	for _, no := range []string{"a3", "a4", "a5", "a6", "b3"} {
		bw.s7.mu.Lock()
		reads, cas := bw.s7.reads[no], bw.s7.cas[no]
		bw.s7.mu.Unlock()
		assert.Equal(t, 2, reads, "order %s: decided, its messages read it", no)
		assert.Zero(t, cas, "order %s: decided, no compare-and-set", no)
	}
}

func rfHandleW(w *rfSQLWorld, ctx context.Context, no string) rfOut {
	out, err := w.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1})
	return rfOut{no: no, outcome: out, err: err}
}

// Attack R9: the read hangs (a read routed to a replica that stopped
// answering, a pool whose read connections are stuck) while the
// compare-and-set works; the store honours contexts as a SQL driver does.
// A message handled with a 300ms deadline whose batch passed its due order
// over must still cancel it: before the read path it did, by the one-order
// path, which never reads. A read that eats the caller's whole deadline
// leaves the compare-and-set nothing, and every redelivery meets the same
// hang while the lanes are busy: the order waits for the reconciler.
func TestAttackReadFirstHangingRead(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	ctx := context.Background()
	r := newRF(t, rfOpts{})
	r.place(t, "h-due", "u1", "s1", -time.Minute)
	r.place(t, "h-nd", "u2", "s2", time.Hour)
	r.passOver(func(no string) bool { return no == "h-due" }, nil)
	r.place(t, "g0", "uG", "sG", -time.Minute)
	g := r.hold(t, ctx, "g0")
	inner := r.store.beforePending.Load()
	honour := func(c context.Context, req cancel.Request) error {
		if err := (*inner)(c, req); err != nil {
			return err
		}
		return c.Err()
	}
	r.store.beforePending.Store(&honour)
	r.rs.setOrder(func(ctx context.Context, no string, _ func(context.Context, string) (expiry.Order, error)) (expiry.Order, error) {
		<-ctx.Done() // the read never answers
		return expiry.Order{}, ctx.Err()
	})
	var ctxs []context.Context
	for range 2 {
		c, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		defer stop()
		ctxs = append(ctxs, c)
	}
	start := time.Now()
	outs := r.handleQueued(t, g, ctxs, []string{"h-due", "h-nd"})
	took := time.Since(start)
	for _, o := range outs {
		switch o.no {
		case "h-due":
			assert.NoError(t, o.err, "h-due: a hanging read failed the timeout of a due order")
			assert.Equal(t, expiry.OutcomeCancelled, o.outcome, "h-due")
		case "h-nd":
			assert.NoError(t, o.err, "h-nd: a hanging read failed the message of a pending order")
			assert.Equal(t, expiry.OutcomeRearmed, o.outcome, "h-nd")
		}
	}
	cur, err := r.mem.Order(ctx, "h-due")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, cur.Status, "I3: h-due still pending after its message (took %v)", took.Round(time.Millisecond))
	r.rs.order.Store(nil)
	lanesIdle(t, r.svc)
	noLeak(t, ign)
}

// Attack R10: the read sees a decision that is not committed and then rolls
// back. A payment is in its transaction (its compare-and-set has set the
// order paid; the host's hook runs and will fail, rolling it back) when a
// queued timeout message of the due order reads it. A store that reads
// uncommitted rows answers "paid": the message is acknowledged as final,
// and once the payment rolls back the order is pending and due with no
// message left (the reconciler's round is its only way out, I3's slack).
// The compare-and-set never has this problem: it waits on the payment's
// lock (or fails and is redelivered) and then cancels. Reads of
// uncommitted rows are SQLite's shared cache with read_uncommitted here,
// and MySQL/MariaDB's READ UNCOMMITTED isolation (a session or global
// setting of the host's server) in production: sqlstore's Order runs at
// whatever isolation the connection has.
func TestAttackReadFirstUncommittedRead(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	t.Cleanup(func() { noLeak(t, ign) })
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "oe.db") + "?cache=shared&_pragma=busy_timeout(10000)&_pragma=read_uncommitted(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ss, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	require.NoError(t, ss.Migrate(ctx))
	store := &rfSQL{Store: ss, reads: map[string]int{}, cas: map[string]int{}}
	seats := memstore.NewSeats(nil)
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: ev, Logger: rfQuiet}})
	require.NoError(t, err)
	canc := &rfCanceller{svc: svc}
	sender := &rfSender{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: canc, Sender: sender, Runtime: expiry.Runtime{Observer: ev, Logger: rfQuiet}})
	require.NoError(t, err)
	now, err := ss.Now(ctx)
	require.NoError(t, err)
	insert := func(ctx context.Context, p cancel.Placement) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := ss.Place(ctx, tx, p); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	for _, no := range []string{"dirty", "g1", "g2"} {
		p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: "ev", Seats: []string{no + "-a"}, ExpireAt: now.Add(-time.Minute)}
		require.NoError(t, svc.Place(ctx, p, insert))
	}

	// The payment: its hook holds the transaction open, then fails.
	inHook, failHook := make(chan struct{}), make(chan struct{})
	ss.SetHook(func(ctx context.Context, _ cancel.Querier, r cancel.Result) error {
		if r.Order.No == "dirty" && r.Order.Status == expiry.StatusPaid {
			close(inHook)
			<-failHook
			return errors.New("fraud check refused the payment")
		}
		return nil
	})
	payErr := make(chan error, 1)
	go func() {
		_, err := svc.Pay(ctx, cancel.Payment{OrderNo: "dirty", PaymentID: "pay-dirty"})
		payErr <- err
	}()
	<-inHook
	o, err := ss.Order(ctx, "dirty")
	require.NoError(t, err)
	if o.Status != expiry.StatusPaid {
		t.Skipf("this SQLite build does not read uncommitted rows (read %v)", o.Status)
	}

	// Both lanes busy (two lone timeouts held before the store, past the
	// lane stall), so the message queues and goes alone: read first.
	open := make(chan struct{})
	hold := func(ctx context.Context, req cancel.Request) error {
		if req.OrderNo == "g1" || req.OrderNo == "g2" {
			<-open
		}
		return nil
	}
	store.before.Store(&hold)
	var gates sync.WaitGroup
	for _, no := range []string{"g1", "g2"} {
		gates.Add(1)
		go func() { defer gates.Done(); _, _, _ = svc.Timeout(ctx, no) }()
	}
	require.Eventually(t, func() bool { return cancel.TimeoutLanesInUse(svc) == 2 }, 5*time.Second, time.Millisecond)
	msg := make(chan rfOut, 1)
	go func() {
		out, err := h.Handle(ctx, expiry.Message{OrderNo: "dirty", Hop: 1})
		msg <- rfOut{no: "dirty", outcome: out, err: err}
	}()
	var got rfOut
	select {
	case got = <-msg:
	case <-time.After(time.Second):
		// Still waiting on the payment's lock: the one-order path.
	}
	close(failHook)
	require.ErrorIs(t, <-payErr, cancel.ErrHook, "the payment rolled back")
	if got.no == "" {
		got = <-msg
	}
	close(open)
	gates.Wait()
	ss.SetHook(nil)

	cur, err := ss.Order(ctx, "dirty")
	require.NoError(t, err)
	t.Logf("message: outcome %v, err %v; the order now %v; Timeout answered %+v", got.outcome, got.err, cur.Status, canc.answers("dirty"))
	// A store that reads uncommitted rows (documented on cancel.OrderStore's
	// Order) can answer the queued message from the payment's 'paid' that
	// then rolls back: the message is acknowledged and the order, pending
	// and due, is the reconciler's, as any order whose message was lost.
	// The outcome must hold either way: after the expired pass (the
	// reconciler's listing, then ExpireDue) the order is cancelled exactly
	// once and its seat is free.
	nos, _, err := ss.Expired(ctx, "", 10)
	require.NoError(t, err)
	if cur.Status == expiry.StatusPending {
		require.Contains(t, nos, "dirty", "a due order left pending is listed for the reconciler")
	}
	if len(nos) > 0 {
		_, err = svc.ExpireDue(ctx, nos, cancel.ReasonReconcile)
		require.NoError(t, err)
	}
	after, err := ss.Order(ctx, "dirty")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, after.Status, "I3: the due, unpaid order ends cancelled")
	n := 0
	for _, e := range ev.Of(expiry.KindCancelled) {
		if e.OrderNo == "dirty" {
			n++
		}
	}
	assert.Equal(t, 1, n, "the order is cancelled exactly once")
	st, err := seats.Show(ctx, "ev")
	require.NoError(t, err)
	_, held := st["dirty-a"]
	assert.False(t, held, "I2: the cancelled order's seat is free")
}
