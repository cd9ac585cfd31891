package cancel_test

// Attacks on batched Timeout calls (timeouts.go): each test drives
// Service.Timeout concurrently, lines calls up behind the calls that hold
// every lane (cancel's timeoutLanes, two store calls at once) so that they
// go in a batch, and judges the outcomes only: at most one call reports an
// order cancelled, a paid order is never cancelled, a not-due order stays
// pending, each cancelled order has one KindCancelled event and its seats
// released once, the purchase-limit counters match, every call answers for
// its own order, and no goroutine outlives the calls.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

	_ "modernc.org/sqlite"
)

// a5clock is the stores' clock: fixed unless a test moves it.
type a5clock struct{ ms atomic.Int64 }

func newA5Clock() *a5clock {
	c := &a5clock{}
	c.ms.Store(time.Now().Truncate(time.Millisecond).UnixMilli())
	return c
}

func (c *a5clock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

type cancelDueFunc func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, reason cancel.Reason) ([]cancel.Result, error)

// a5store is a memstore.Store (every optional interface promoted) whose
// CancelPending and CancelDue an attack can slow down, fail or falsify.
type a5store struct {
	*memstore.Store
	beforePending atomic.Pointer[func(ctx context.Context, req cancel.Request) error]
	cancelDue     atomic.Pointer[cancelDueFunc]
	dueCalls      atomic.Int32
	dueErrs       atomic.Int32
	// inStore and maxInStore: the CancelPending and CancelDue calls in the
	// store now, and the most at once.
	inStore, maxInStore atomic.Int32
	// latency is slept in every CancelPending (ns), as a database takes.
	latency atomic.Int64
}

func (s *a5store) enter() func() {
	n := s.inStore.Add(1)
	for {
		m := s.maxInStore.Load()
		if n <= m || s.maxInStore.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { s.inStore.Add(-1) }
}

func (s *a5store) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	defer s.enter()()
	if f := s.beforePending.Load(); f != nil {
		if err := (*f)(ctx, req); err != nil {
			return cancel.Result{}, err
		}
	}
	if d := s.latency.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	return s.Store.CancelPending(ctx, req)
}

func (s *a5store) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	defer s.enter()()
	s.dueCalls.Add(1)
	var res []cancel.Result
	var err error
	if f := s.cancelDue.Load(); f != nil {
		res, err = (*f)(ctx, s.Store.CancelDue, nos, reason)
	} else {
		res, err = s.Store.CancelDue(ctx, nos, reason)
	}
	if err != nil {
		s.dueErrs.Add(1)
	}
	return res, err
}

func (s *a5store) setCancelDue(f cancelDueFunc) { s.cancelDue.Store(&f) }

// a5seats is a memstore.Seats whose Release an attack can fail or slow.
type a5seats struct {
	*memstore.Seats
	beforeRelease atomic.Pointer[func(ctx context.Context, h cancel.Hold) error]
	mu            sync.Mutex
	freed         map[string]int // seats freed per order, over all releases
}

func (s *a5seats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	if f := s.beforeRelease.Load(); f != nil {
		if err := (*f)(ctx, h); err != nil {
			return 0, err
		}
	}
	n, err := s.Seats.Release(ctx, h)
	if n > 0 {
		s.mu.Lock()
		if s.freed == nil {
			s.freed = map[string]int{}
		}
		s.freed[h.OrderNo] += n
		s.mu.Unlock()
	}
	return n, err
}

func (s *a5seats) freedOf(no string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed[no]
}

func (s *a5seats) setBeforeRelease(f func(ctx context.Context, h cancel.Hold) error) {
	s.beforeRelease.Store(&f)
}

// ReleaseAll is Release per hold, -1 for a hold whose Release failed, so
// that an attack's failures and counts see every release.
func (s *a5seats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	out := make([]int, len(holds))
	var errs []error
	for i, h := range holds {
		n, err := s.Release(ctx, h)
		if err != nil {
			out[i] = -1
			errs = append(errs, err)
			continue
		}
		out[i] = n
	}
	return out, errors.Join(errs...)
}

type a5env struct {
	clk    *a5clock
	mem    *memstore.Store
	store  *a5store
	seats  *a5seats
	svc    *cancel.Service
	ev     *expirytest.Recorder
	placed map[string]cancel.Placement
	// evCtx: per KindCancelled event's order, the a5key value of the
	// context the Observer got it with.
	evMu  sync.Mutex
	evCtx map[string][]any
	// obsPanic, when set, is called by the Observer after recording an
	// event (an attack's panicking host Observer).
	obsPanic atomic.Pointer[func(expiry.Event)]
	// pre counts, per order, the cancels reported before the attack (user
	// cancels of the setup).
	pre map[string]int
}

type a5opts struct {
	oneByOne bool // CancelDue one order at a time (oneByOne)
	clk      *a5clock
	// stalls keeps the library's lane stall (a call in the store past it
	// gives its lane up); without it the stall is an hour, so that the
	// calls a test holds in the store keep their lanes however slow the
	// machine.
	stalls bool
}

func newA5(t *testing.T, o a5opts) *a5env {
	t.Helper()
	if !o.stalls {
		t.Cleanup(cancel.SetLaneStall(time.Hour))
	}
	clk := o.clk
	if clk == nil {
		clk = newA5Clock()
	}
	e := &a5env{clk: clk, mem: memstore.NewStore(clk.now), ev: &expirytest.Recorder{}, placed: map[string]cancel.Placement{}, pre: map[string]int{}, evCtx: map[string][]any{}}
	e.store = &a5store{Store: e.mem}
	e.seats = &a5seats{Seats: memstore.NewSeats(clk.now)}
	var store cancel.OrderStore = e.store
	if o.oneByOne {
		store = onebyone.Store{OrderStore: e.store}
	}
	var seats cancel.SeatStore = e.seats
	var err error
	obs := expiry.ObserverFunc(func(ctx context.Context, ev expiry.Event) {
		e.ev.Observe(ctx, ev)
		if ev.Kind == expiry.KindCancelled {
			e.evMu.Lock()
			e.evCtx[ev.OrderNo] = append(e.evCtx[ev.OrderNo], ctx.Value(a5key{}))
			e.evMu.Unlock()
		}
		if f := e.obsPanic.Load(); f != nil {
			(*f)(ev)
		}
	})
	e.svc, err = cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: obs}})
	require.NoError(t, err)
	return e
}

// place places an order due in (store clock) d; negative: due already.
func (e *a5env) place(t *testing.T, no, user, show string, d time.Duration) {
	t.Helper()
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: []string{no + "a", no + "b"}, ExpireAt: e.clk.now().Add(d), Limit: 100}
	require.NoError(t, e.svc.Place(context.Background(), p, func(ctx context.Context, p cancel.Placement) error { return e.mem.Place(ctx, p) }))
	e.placed[no] = p
}

// a5call is one Timeout's answer.
type a5call struct {
	no        string
	cancelled bool
	o         expiry.Order
	err       error
	took      time.Duration
}

func (e *a5env) timeout(ctx context.Context, no string) a5call {
	start := time.Now()
	ok, o, err := e.svc.Timeout(ctx, no)
	return a5call{no: no, cancelled: ok, o: o, err: err, took: time.Since(start)}
}

// checkFinal checks the stores and the events once every call returned.
// wins counts, per order, the calls that reported it cancelled. strict: every
// cancelled order was reported by exactly one call (no caller gave up).
func (e *a5env) checkFinal(t *testing.T, wins map[string]int, strict bool) {
	t.Helper()
	ctx := context.Background()
	events := map[string]int{}
	for _, ev := range e.ev.Of(expiry.KindCancelled) {
		events[ev.OrderNo]++
	}
	relFailed := map[string]int{}
	for _, ev := range e.ev.Of(expiry.KindReleaseFailed) {
		relFailed[ev.OrderNo]++
	}
	held := map[[2]string]int{}
	owner := map[[2]string]string{}
	shows := map[string]bool{}
	all := map[string]int{}
	for no, n := range wins {
		all[no] += n
	}
	for no, n := range e.pre {
		all[no] += n
	}
	wins = all
	for no, p := range e.placed {
		shows[p.ShowID] = true
		key := [2]string{p.ShowID, p.UserID}
		held[key] += 0
		for _, seat := range p.Seats {
			owner[[2]string{p.ShowID, seat}] = no
		}
		o, err := e.mem.Order(ctx, no)
		require.NoError(t, err)
		st, err := e.seats.Show(ctx, p.ShowID)
		require.NoError(t, err)
		assert.LessOrEqual(t, wins[no], 1, "I1/I5: order %s reported cancelled by %d calls", no, wins[no])
		switch o.Status {
		case expiry.StatusPending:
			assert.Zero(t, e.seats.freedOf(no), "pending order %s: a release freed its seats", no)
			assert.Zero(t, wins[no], "order %s is pending but a call reported it cancelled", no)
			assert.Zero(t, events[no], "order %s is pending but has a KindCancelled event", no)
			for _, seat := range p.Seats {
				if s := st[seat]; s.Status != cancel.SeatLocked || s.OrderNo != no {
					t.Errorf("pending order %s: seat %s is %+v, want locked by it", no, seat, s)
				}
			}
			held[key] += len(p.Seats)
		case expiry.StatusPaid:
			assert.Zero(t, e.seats.freedOf(no), "paid order %s: a release freed its seats", no)
			assert.Zero(t, wins[no], "I1: paid order %s reported cancelled", no)
			assert.Zero(t, events[no], "I1: paid order %s has a KindCancelled event", no)
			for _, seat := range p.Seats {
				if s := st[seat]; s.Status != cancel.SeatSold || s.OrderNo != no {
					t.Errorf("paid order %s: seat %s is %+v, want sold to it", no, seat, s)
				}
			}
			held[key] += len(p.Seats)
		case expiry.StatusCancelled:
			assert.Equal(t, 1, events[no], "order %s: want exactly one KindCancelled event", no)
			assert.LessOrEqual(t, e.seats.freedOf(no), len(p.Seats), "order %s: seats freed more than once", no)
			if strict {
				assert.Equal(t, 1, wins[no], "cancelled order %s: want exactly one call reporting it", no)
			}
			for _, seat := range p.Seats {
				s, ok := st[seat]
				if !ok || s.OrderNo != no {
					continue
				}
				if s.Status == cancel.SeatLocked && relFailed[no] > 0 {
					held[key]++ // left to the reconciler, reported
					continue
				}
				t.Errorf("I2: cancelled order %s: seat %s still %+v and no release failure reported", no, seat, s)
			}
		}
	}
	for show := range shows {
		st, err := e.seats.Show(ctx, show)
		require.NoError(t, err)
		for seat, s := range st {
			if want := owner[[2]string{show, seat}]; want != s.OrderNo {
				t.Errorf("seat %s/%s is %+v, placed by %q", show, seat, s, want)
			}
		}
	}
	for key, n := range held {
		got, err := e.seats.Held(ctx, key[0], key[1])
		require.NoError(t, err)
		assert.Equal(t, n, got, "I8: Held(%s, %s)", key[0], key[1])
	}
}

// a5lanes is cancel's timeoutLanes: how many Timeout store calls of a
// Service run at once; the calls made while every lane is busy queue.
const a5lanes = 2

// a5gate lines Timeout calls up behind the calls that hold every lane: the
// first CancelPending of the gate order and of lanes-1 filler orders (due,
// placed by hold for user uL in show sL) block (until open, or their ctx
// ends), so that calls made meanwhile queue, and go in one batch when the
// gate opens.
type a5gate struct {
	e       *a5env
	gctx    context.Context
	open    chan struct{}
	entered chan struct{}
	gateRes chan a5call
	fill    []string
	fillRes chan a5call
	wg      sync.WaitGroup
	mu      sync.Mutex
	res     []a5call
	n       int
}

// hold fills every lane: gate's call and lanes-1 fillers' wait in the store.
func (e *a5env) hold(t *testing.T, gctx context.Context, gate string) *a5gate {
	t.Helper()
	return e.holdLanes(t, gctx, gate, a5lanes)
}

// holdOne holds only gate's call in the store (one lane).
func (e *a5env) holdOne(t *testing.T, gctx context.Context, gate string) *a5gate {
	t.Helper()
	return e.holdLanes(t, gctx, gate, 1)
}

func (e *a5env) holdLanes(t *testing.T, gctx context.Context, gate string, lanes int) *a5gate {
	t.Helper()
	g := &a5gate{e: e, gctx: gctx, open: make(chan struct{}), entered: make(chan struct{}), gateRes: make(chan a5call, 1), fillRes: make(chan a5call, lanes)}
	for i := 1; i < lanes; i++ {
		no := fmt.Sprintf("%s-l%d", gate, i)
		e.place(t, no, "uL", "sL", -time.Minute)
		g.fill = append(g.fill, no)
	}
	blocked := map[string]*sync.Once{gate: {}}
	for _, no := range g.fill {
		blocked[no] = &sync.Once{}
	}
	var in atomic.Int32
	f := func(ctx context.Context, req cancel.Request) error {
		once := blocked[req.OrderNo]
		if once == nil {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		if int(in.Add(1)) == lanes {
			close(g.entered)
		}
		select {
		case <-g.open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.store.beforePending.Store(&f)
	go func() { g.gateRes <- e.timeout(gctx, gate) }()
	for _, no := range g.fill {
		go func() { g.fillRes <- e.timeout(gctx, no) }()
	}
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatalf("only %d of %d lane-holding calls reached the store", in.Load(), lanes)
	}
	require.Zero(t, cancel.QueuedTimeouts(e.svc), "nothing queued yet")
	return g
}

// fillers returns the fillers' answers, once they are back, and counts
// those that cancelled their order in e.pre (they are not the attack's
// calls). With the gate's context alive, each filler's order must be
// cancelled by it.
func (g *a5gate) fillers(t *testing.T) []a5call {
	t.Helper()
	var out []a5call
	for range g.fill {
		select {
		case c := <-g.fillRes:
			if g.gctx.Err() == nil {
				checkAnswer(t, kDue, c)
				assert.True(t, c.cancelled, "filler %s", c.no)
			}
			if c.cancelled {
				g.e.pre[c.no]++
			}
			out = append(out, c)
		case <-time.After(30 * time.Second):
			t.Fatal("a lane-holding call did not return")
		}
	}
	return out
}

// enqueue starts a Timeout call and returns its index in wait's answers.
func (g *a5gate) enqueue(ctx context.Context, no string) int {
	g.mu.Lock()
	i := g.n
	g.n++
	g.res = append(g.res, a5call{})
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		c := g.e.timeout(ctx, no)
		g.mu.Lock()
		g.res[i] = c
		g.mu.Unlock()
	}()
	return i
}

// queued waits until n calls wait for a batch.
func (g *a5gate) queued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for cancel.QueuedTimeouts(g.e.svc) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d calls queued", cancel.QueuedTimeouts(g.e.svc), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// returned waits until call i (enqueue's index) has returned.
func (g *a5gate) returned(t *testing.T, i int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		back := g.res[i].no != ""
		g.mu.Unlock()
		if back {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("call %d did not return", i)
		}
	}
}

func (g *a5gate) release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// wait returns the gate call's answer and the others', by index.
func (g *a5gate) wait(t *testing.T) (a5call, []a5call) {
	t.Helper()
	g.release()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("calls did not return")
	}
	gc := <-g.gateRes
	g.fillers(t)
	g.mu.Lock()
	defer g.mu.Unlock()
	return gc, append([]a5call(nil), g.res...)
}

// a5kind is what the test knows an order to be before the calls.
type a5kind int

const (
	kDue a5kind = iota
	kNotDue
	kPaid
	kUserCancelled
	kMissing
)

// checkAnswer judges one call's answer by what its order was.
func checkAnswer(t *testing.T, k a5kind, c a5call) {
	t.Helper()
	if k == kMissing {
		if !errors.Is(c.err, expiry.ErrNotFound) || c.cancelled {
			t.Errorf("missing order %s: got (%v, %+v, %v), want ErrNotFound", c.no, c.cancelled, c.o, c.err)
		}
		return
	}
	if c.err != nil {
		t.Errorf("order %s (kind %d): unexpected error %v", c.no, k, c.err)
		return
	}
	if c.o.No != c.no {
		t.Errorf("order %s: answered with order %q", c.no, c.o.No)
		return
	}
	switch k {
	case kDue:
		if c.o.Status != expiry.StatusCancelled {
			t.Errorf("due order %s: status %v after its timeout (cancelled=%v)", c.no, c.o.Status, c.cancelled)
		}
	case kNotDue:
		if c.cancelled || c.o.Status != expiry.StatusPending || c.o.Remaining() <= 0 {
			t.Errorf("I4: not-due order %s: got cancelled=%v status=%v remaining=%v", c.no, c.cancelled, c.o.Status, c.o.Remaining())
		}
	case kPaid:
		if c.cancelled || c.o.Status != expiry.StatusPaid {
			t.Errorf("paid order %s: got cancelled=%v status=%v", c.no, c.cancelled, c.o.Status)
		}
	case kUserCancelled:
		if c.cancelled || c.o.Status != expiry.StatusCancelled {
			t.Errorf("user-cancelled order %s: got cancelled=%v status=%v", c.no, c.cancelled, c.o.Status)
		}
	}
}

func winsOf(calls ...a5call) map[string]int {
	w := map[string]int{}
	for _, c := range calls {
		if c.cancelled {
			w[c.no]++
		}
	}
	return w
}

// a5mix places the storm's orders and returns each number's kind
// (missing ones included).
func (e *a5env) a5mix(t *testing.T, due, notDue, paid, userCancelled, missing int) map[string]a5kind {
	t.Helper()
	kinds := map[string]a5kind{}
	users := []string{"u0", "u1", "u2", "u3"}
	shows := []string{"s0", "s1", "s2"}
	i := 0
	add := func(prefix string, n int, k a5kind, d time.Duration) {
		for j := 0; j < n; j++ {
			no := fmt.Sprintf("%s%02d", prefix, j)
			kinds[no] = k
			if k != kMissing {
				e.place(t, no, users[i%len(users)], shows[i%len(shows)], d)
			}
			i++
		}
	}
	add("d", due, kDue, -time.Minute)
	add("n", notDue, kNotDue, time.Hour)
	add("p", paid, kPaid, -time.Minute)
	add("c", userCancelled, kUserCancelled, -time.Minute)
	add("m", missing, kMissing, 0)
	ctx := context.Background()
	for no, k := range kinds {
		switch k {
		case kPaid:
			res, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.NoError(t, err)
			require.True(t, res.Changed)
		case kUserCancelled:
			res, err := e.svc.UserCancel(ctx, no, e.placed[no].UserID)
			require.NoError(t, err)
			require.True(t, res.Changed)
			e.pre[no]++
		}
	}
	return kinds
}

func noLeak(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	goleak.VerifyNone(t, opts...)
}

// Attack 1: a storm of concurrent Timeout calls on due, not-due, paid,
// user-cancelled and missing orders, each due order called three times.
func TestAttackTimeoutStorm(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	var batches int32
	for round := 0; round < 8; round++ {
		e := newA5(t, a5opts{})
		kinds := e.a5mix(t, 24, 10, 6, 6, 6)
		preCancelled := len(e.ev.Of(expiry.KindCancelled))
		require.Equal(t, 6, preCancelled)
		var nos []string
		for no, k := range kinds {
			n := 2
			if k == kDue {
				n = 3
			}
			for j := 0; j < n; j++ {
				nos = append(nos, no)
			}
		}
		rand.Shuffle(len(nos), func(i, j int) { nos[i], nos[j] = nos[j], nos[i] })
		// A little latency in the store, as a database has, so calls overlap.
		slow := func(context.Context, cancel.Request) error { time.Sleep(200 * time.Microsecond); return nil }
		e.store.beforePending.Store(&slow)
		start := make(chan struct{})
		out := make([]a5call, len(nos))
		var wg sync.WaitGroup
		// 64 workers take the calls.
		var next atomic.Int32
		for w := 0; w < 64; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					i := int(next.Add(1)) - 1
					if i >= len(nos) {
						return
					}
					out[i] = e.timeout(context.Background(), nos[i])
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, c := range out {
			checkAnswer(t, kinds[c.no], c)
		}
		wins := winsOf(out...)
		for no, k := range kinds {
			if k == kDue {
				assert.Equal(t, 1, wins[no], "round %d: due order %s: calls reporting it cancelled", round, no)
			}
		}
		for _, ev := range e.ev.Of(expiry.KindCancelled) {
			if kinds[ev.OrderNo] == kDue {
				assert.Equal(t, "timeout", ev.Reason)
			}
		}
		e.checkFinal(t, wins, false)
		batches += e.store.dueCalls.Load()
	}
	require.Positive(t, batches, "no batch ever ran: the storm did not test batching")
	t.Logf("CancelDue batches over all rounds: %d", batches)
	noLeak(t, ign)
}

// Attack 1b: a forced batch with every kind of order and duplicates in it.
func TestAttackTimeoutForcedBatchMix(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 8, 4, 3, 3, 3)
	e.place(t, "g0", "u0", "s0", -time.Minute)
	kinds["g0"] = kDue
	g := e.hold(t, context.Background(), "g0")
	n := 0
	for no, k := range kinds {
		if no == "g0" {
			continue
		}
		reps := 1
		if k == kDue {
			reps = 3
		}
		for j := 0; j < reps; j++ {
			g.enqueue(context.Background(), no)
			n++
		}
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	checkAnswer(t, kDue, gc)
	assert.True(t, gc.cancelled)
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
	}
	wins := winsOf(append(out, gc)...)
	for no, k := range kinds {
		if k == kDue {
			assert.Equal(t, 1, wins[no], "due order %s", no)
		}
	}
	assert.EqualValues(t, 1, e.store.dueCalls.Load(), "one batch")
	e.checkFinal(t, wins, true)
	noLeak(t, ign)
}

// Attack 2a: the batch's CancelDue fails before changing anything.
func TestAttackTimeoutBatchFails(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 6, 3, 2, 2, 2)
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.store.setCancelDue(func(context.Context, func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), []string, cancel.Reason) ([]cancel.Result, error) {
		return nil, errors.New("connection reset")
	})
	g := e.hold(t, context.Background(), "g0")
	n := 0
	for no := range kinds {
		g.enqueue(context.Background(), no)
		g.enqueue(context.Background(), no)
		n += 2
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
	}
	wins := winsOf(append(out, gc)...)
	for no, k := range kinds {
		if k == kDue {
			assert.Equal(t, 1, wins[no], "due order %s", no)
		}
	}
	assert.EqualValues(t, 1, e.store.dueErrs.Load())
	e.checkFinal(t, wins, true)
	noLeak(t, ign)
}

// Attack 2b: the batch commits and its acknowledgement is lost, and the
// store says so (the error wraps expiry.ErrCommitUnknown, as cancel/sqlstore's
// does when a COMMIT fails on the wire). Every cancel that landed is
// reported by a call or answered with an error by every call for its
// order: none is answered "decided already" (whose Handler would then ack
// the message as somebody else's cancel, reported by nobody). Nothing is
// freed: the seats are the reconciler's, as after the one-order path's
// lost COMMIT.
func TestAttackTimeoutBatchCommitUnknown(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 6, 3, 2, 2, 2)
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		if _, err := inner(ctx, nos, r); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("connection reset during COMMIT: %w", expiry.ErrCommitUnknown)
	})
	g := e.hold(t, context.Background(), "g0")
	n := 0
	for no := range kinds {
		g.enqueue(context.Background(), no)
		n++
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	ctx := context.Background()
	for _, c := range out {
		o, err := e.mem.Order(ctx, c.no)
		if kinds[c.no] == kMissing {
			continue
		}
		require.NoError(t, err)
		if kinds[c.no] == kDue {
			require.Equal(t, expiry.StatusCancelled, o.Status, "the batch's commit landed")
			if !c.cancelled && c.err == nil {
				t.Errorf("order %s: the batch's own cancel answered as decided by somebody else (%+v)", c.no, c.o)
			}
		}
		if c.err != nil {
			assert.ErrorIs(t, c.err, expiry.ErrCommitUnknown, "order %s", c.no)
		}
		assert.False(t, c.cancelled, "order %s: nobody learnt it cancelled the order", c.no)
		if k := kinds[c.no]; k == kNotDue || k == kPaid {
			checkAnswer(t, k, c) // an order the batch cannot have cancelled gets its own answer
		}
	}
	st, err := e.seats.Show(ctx, "s0")
	require.NoError(t, err)
	for seat, s := range st {
		assert.True(t, strings.HasPrefix(seat, s.OrderNo), "seat %s held by %s", seat, s.OrderNo)
	}
	noLeak(t, ign)
}

// Attack 2b': the batch commits but its acknowledgement is lost and the
// store breaks its contract (a plain error, as if nothing changed): the
// damage is no worse than the one-order path's lost ack: answers that are
// true of each order, none reported twice, and seats left to the
// reconciler, never another order's freed.
func TestAttackTimeoutBatchLostAck(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 6, 3, 2, 2, 2)
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		if _, err := inner(ctx, nos, r); err != nil {
			return nil, err
		}
		return nil, errors.New("commit acknowledgement lost")
	})
	g := e.hold(t, context.Background(), "g0")
	n := 0
	for no := range kinds {
		g.enqueue(context.Background(), no)
		n++
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
		assert.False(t, c.cancelled, "nobody learnt it cancelled the order")
	}
	// The due orders are cancelled in the store; their seats stay locked
	// (no release ran), as after a lost ack of the one-order path, for the
	// reconciler. Nobody else's seat moved.
	ctx := context.Background()
	for no, k := range kinds {
		if k != kDue {
			continue
		}
		o, err := e.mem.Order(ctx, no)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status)
	}
	st, err := e.seats.Show(ctx, "s0")
	require.NoError(t, err)
	for seat, s := range st {
		assert.True(t, strings.HasPrefix(seat, s.OrderNo), "seat %s held by %s", seat, s.OrderNo)
	}
	noLeak(t, ign)
}

// Attack 2c: the store answers for an order it was not asked about (a
// pending, not-due order): the batch must not act on it.
func TestAttackTimeoutBatchForeignResult(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.place(t, "d1", "u1", "s0", -time.Minute)
	e.place(t, "d2", "u2", "s0", -time.Minute)
	e.place(t, "x9", "u3", "s0", time.Hour) // nobody's timeout: pending, not due
	x := e.placed["x9"]
	ctx := context.Background()
	st, _ := e.seats.Show(ctx, "s0")
	xLock := st["x9a"].LockID
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		res, err := inner(ctx, nos, r)
		if err != nil {
			return nil, err
		}
		// The buggy store's extra row: x9 as if cancelled.
		return append(res, cancel.Result{Changed: true, Order: expiry.Order{No: "x9", UserID: x.UserID, ShowID: x.ShowID, Status: expiry.StatusCancelled, ExpireAt: x.ExpireAt},
			Seats: x.Seats, LockID: xLock, Reason: r}), nil
	})
	g := e.hold(t, ctx, "g0")
	g.enqueue(ctx, "d1")
	g.enqueue(ctx, "d2")
	g.queued(t, 2)
	_, out := g.wait(t)
	for _, c := range out {
		checkAnswer(t, kDue, c)
	}
	o, err := e.mem.Order(ctx, "x9")
	require.NoError(t, err)
	require.Equal(t, expiry.StatusPending, o.Status)
	st, _ = e.seats.Show(ctx, "s0")
	assert.Equal(t, cancel.SeatLocked, st["x9a"].Status, "I2: the batch freed seat x9a of pending order x9, which it was never asked about")
	assert.Equal(t, cancel.SeatLocked, st["x9b"].Status, "I2: the batch freed seat x9b of pending order x9")
	e.checkFinal(t, winsOf(out...), false)
	noLeak(t, ign)
}

// Attack 2d: the store answers twice for one order.
func TestAttackTimeoutBatchDuplicateResult(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.place(t, "d1", "u1", "s0", -time.Minute)
	e.place(t, "d2", "u2", "s1", -time.Minute)
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		res, err := inner(ctx, nos, r)
		if err != nil || len(res) == 0 {
			return res, err
		}
		return append(res, res[0]), nil
	})
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	g.enqueue(ctx, "d1")
	g.enqueue(ctx, "d2")
	g.queued(t, 2)
	gc, out := g.wait(t)
	for _, c := range out {
		checkAnswer(t, kDue, c)
	}
	e.checkFinal(t, winsOf(append(out, gc)...), true)
	noLeak(t, ign)
}

// Attack 3: Timeout racing Pay, UserCancel and the reconciler's ExpireDue on
// the same due orders: each order ends paid or cancelled, decided by one
// call.
func TestAttackTimeoutRacesPayUserCancelExpireDue(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	for round := 0; round < 6; round++ {
		e := newA5(t, a5opts{})
		var nos []string
		for i := 0; i < 30; i++ {
			no := fmt.Sprintf("r%02d", i)
			e.place(t, no, fmt.Sprintf("u%d", i%3), fmt.Sprintf("s%d", i%2), -time.Minute)
			nos = append(nos, no)
		}
		var mu sync.Mutex
		winner := map[string][]string{}
		win := func(no, who string) {
			mu.Lock()
			winner[no] = append(winner[no], who)
			mu.Unlock()
		}
		ctx := context.Background()
		var jobs []func()
		for i, no := range nos {
			no, user := no, e.placed[no].UserID
			for j := 0; j < 2; j++ {
				jobs = append(jobs, func() {
					ok, o, err := e.svc.Timeout(ctx, no)
					if err != nil || o.No != no || o.Status == expiry.StatusPending {
						t.Errorf("Timeout(%s) = (%v, %+v, %v)", no, ok, o, err)
					}
					if ok {
						win(no, "timeout")
					}
				})
			}
			jobs = append(jobs, func() {
				res, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
				if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
					t.Errorf("Pay(%s): %v", no, err)
				}
				if err == nil && res.Changed {
					win(no, "pay")
				}
			})
			if i%2 == 0 {
				jobs = append(jobs, func() {
					res, err := e.svc.UserCancel(ctx, no, user)
					if err != nil {
						t.Errorf("UserCancel(%s): %v", no, err)
					}
					if res.Changed {
						win(no, "user")
					}
				})
			}
		}
		for k := 0; k < 3; k++ {
			jobs = append(jobs, func() {
				res, err := e.svc.ExpireDue(ctx, nos, "")
				if err != nil {
					t.Errorf("ExpireDue: %v", err)
				}
				for _, r := range res {
					win(r.Order.No, "reconcile")
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
		cancelWins := map[string]int{}
		reasons := map[string]string{}
		for _, ev := range e.ev.Of(expiry.KindCancelled) {
			reasons[ev.OrderNo] = ev.Reason
		}
		for _, no := range nos {
			ws := winner[no]
			if len(ws) != 1 {
				t.Errorf("round %d: order %s decided by %v, want exactly one", round, no, ws)
				continue
			}
			if ws[0] != "pay" {
				cancelWins[no] = 1
				assert.Equal(t, ws[0], reasons[no], "order %s: the event's reason is the winner's", no)
			}
		}
		e.checkFinal(t, cancelWins, true)
	}
	noLeak(t, ign)
}

// Attack 4: the seat store's Release fails for one show and is slow for
// the others while batches run.
func TestAttackTimeoutReleaseFailsOrSlow(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 12, 3, 2, 2, 0)
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.seats.setBeforeRelease(func(_ context.Context, h cancel.Hold) error {
		if h.ShowID == "s1" {
			return errors.New("redis shard s1 down")
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	n := 0
	for no := range kinds {
		g.enqueue(ctx, no)
		g.enqueue(ctx, no)
		n += 2
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
	}
	wins := winsOf(append(out, gc)...)
	for no, k := range kinds {
		if k == kDue {
			assert.Equal(t, 1, wins[no], "due order %s", no)
			if e.placed[no].ShowID == "s1" {
				assert.Equal(t, 1, countOf(e.ev.Of(expiry.KindReleaseFailed), no), "order %s: one release failure reported", no)
			}
		}
	}
	e.checkFinal(t, wins, true)
	noLeak(t, ign)
}

func countOf(evs []expiry.Event, no string) int {
	n := 0
	for _, ev := range evs {
		if ev.OrderNo == no {
			n++
		}
	}
	return n
}

// Attack 5a: callers whose ctx ends while they wait return promptly with
// ctx.Err(), and the system still ends consistent.
func TestAttackTimeoutWaitersGiveUp(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	var nos []string
	for i := 0; i < 10; i++ {
		no := fmt.Sprintf("w%02d", i)
		e.place(t, no, fmt.Sprintf("u%d", i%3), "s0", -time.Minute)
		nos = append(nos, no)
	}
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	wctx, stop := context.WithCancel(ctx)
	for _, no := range nos {
		g.enqueue(wctx, no)
		g.enqueue(ctx, no) // a duplicate that does not give up
	}
	g.queued(t, 2*len(nos))
	stop()
	// The abandoned ones return at once, the gate still closed.
	deadline := time.Now().Add(2 * time.Second)
	for {
		g.mu.Lock()
		back := 0
		for i, c := range g.res {
			if i%2 == 0 && c.no != "" {
				back++
			}
		}
		g.mu.Unlock()
		if back == len(nos) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d abandoned calls returned while the store was busy", back, len(nos))
		}
		time.Sleep(time.Millisecond)
	}
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	for i, c := range out {
		if i%2 == 0 {
			assert.ErrorIs(t, c.err, context.Canceled, "abandoned call for %s", c.no)
			assert.Less(t, c.took, 2*time.Second)
		} else {
			checkAnswer(t, kDue, c)
		}
	}
	e.checkFinal(t, winsOf(append(out, gc)...), false)
	noLeak(t, ign)
}

// Attack 5b: the first call of a batch has a deadline that passes while it
// waits; the store honours the batch's context. The others, with time to
// spare, must still get their orders cancelled.
func TestAttackTimeoutBatchHeadDeadlinePassed(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	for i := 0; i < 8; i++ {
		e.place(t, fmt.Sprintf("h%02d", i), fmt.Sprintf("u%d", i%3), "s0", -time.Minute)
	}
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return inner(ctx, nos, r)
	})
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	short, stop := context.WithTimeout(ctx, 5*time.Millisecond)
	defer stop()
	g.enqueue(short, "h00")
	g.queued(t, 1)
	for i := 1; i < 8; i++ {
		g.enqueue(ctx, fmt.Sprintf("h%02d", i))
	}
	g.queued(t, 8)
	<-short.Done()
	g.returned(t, 0) // h00's caller is gone before the batch starts
	gc, out := g.wait(t)
	require.True(t, gc.cancelled)
	assert.ErrorIs(t, out[0].err, context.DeadlineExceeded)
	for _, c := range out[1:] {
		checkAnswer(t, kDue, c)
		assert.True(t, c.cancelled, "order %s", c.no)
	}
	// By design (timeouts.go take): a waiter whose ctx ended before its
	// batch started is skipped; its order stays pending for redelivery.
	o, err := e.mem.Order(ctx, "h00")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status, "h00's caller left before the batch: skipped")
	e.checkFinal(t, winsOf(append(out, gc)...), false)
	re := e.timeout(ctx, "h00")
	assert.True(t, re.cancelled, "h00's redelivery cancels it")
	noLeak(t, ign)
}

// Attack 5c: the first call of a batch has a short deadline that passes
// while the batch is in the store. The other calls of the batch have ten
// seconds each: their orders' seats must be released as their own calls
// would have released them (the one-order path releases with each
// caller's context).
func TestAttackTimeoutBatchHeadDeadlineFailsOthersRelease(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	for i := 0; i < 6; i++ {
		e.place(t, fmt.Sprintf("k%02d", i), fmt.Sprintf("u%d", i%3), "s0", -time.Minute)
	}
	// The database commits in 40ms whatever the context; the seat store
	// (a Redis client) honours the context.
	e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		time.Sleep(40 * time.Millisecond)
		return inner(ctx, nos, r)
	})
	e.seats.setBeforeRelease(func(ctx context.Context, _ cancel.Hold) error { return ctx.Err() })
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	g.enqueue(short, "k00")
	g.queued(t, 1)
	var long []context.CancelFunc
	for i := 1; i < 6; i++ {
		lctx, stop := context.WithTimeout(ctx, 10*time.Second)
		long = append(long, stop)
		g.enqueue(lctx, fmt.Sprintf("k%02d", i))
	}
	g.queued(t, 6)
	gc, out := g.wait(t)
	for _, s := range long {
		s()
	}
	require.True(t, gc.cancelled)
	for _, c := range out[1:] {
		checkAnswer(t, kDue, c)
		assert.True(t, c.cancelled)
		assert.Zero(t, countOf(e.ev.Of(expiry.KindReleaseFailed), c.no),
			"order %s (its call had 10s): its seats' release failed on the deadline of another call (k00's 20ms)", c.no)
	}
	st, _ := e.seats.Show(ctx, "s0")
	for i := 1; i < 6; i++ {
		no := fmt.Sprintf("k%02d", i)
		assert.NotContains(t, st, no+"a", "seat of cancelled order %s still locked", no)
	}
	noLeak(t, ign)
}

// Attack 5d: every caller gives up (their contexts are cancelled) while the
// store is slow; once all have returned, nothing of theirs may keep
// running. "queued": they leave while queued behind the busy lanes (the
// batch then skips them, by design); "in CancelDue": they leave while
// their batch is in the store; "in release": while their batch's seat
// release runs (the orders are cancelled then: the release may fail, but
// must be reported, and nothing may run on).
func TestAttackTimeoutNoWorkAfterAllCallersLeft(t *testing.T) {
	for _, when := range []string{"queued", "in CancelDue", "in release"} {
		t.Run(when, func(t *testing.T) {
			e := newA5(t, a5opts{})
			e.place(t, "g0", "u0", "s0", -time.Minute)
			var qs []string
			for i := 0; i < 4; i++ {
				qs = append(qs, fmt.Sprintf("q%02d", i))
				e.place(t, qs[i], "u1", "s0", -time.Minute)
			}
			unblock := make(chan struct{})
			var inDue, inRelease atomic.Int32
			// A database call and a seat release that end when their
			// context ends (or the test does).
			e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
				inDue.Add(1)
				if when == "in release" {
					return inner(ctx, nos, r)
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-unblock:
					return nil, errors.New("test over")
				}
			})
			e.seats.setBeforeRelease(func(ctx context.Context, h cancel.Hold) error {
				if h.UserID != "u1" {
					return nil
				}
				inRelease.Add(1)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-unblock:
					return errors.New("test over")
				}
			})
			ign := goleak.IgnoreCurrent()
			ctx, stop := context.WithCancel(context.Background())
			gctx := ctx
			if when != "queued" {
				gctx = context.Background() // the lanes' calls stay
			}
			g := e.hold(t, gctx, "g0")
			for _, no := range qs {
				g.enqueue(ctx, no)
			}
			g.queued(t, len(qs))
			switch when {
			case "in CancelDue":
				g.release()
				require.Eventually(t, func() bool { return inDue.Load() > 0 }, 5*time.Second, time.Millisecond)
			case "in release":
				g.release()
				require.Eventually(t, func() bool { return inRelease.Load() > 0 }, 5*time.Second, time.Millisecond)
			}
			stop() // every queued caller (with "queued", the lanes' too) gives up
			done := make(chan struct{})
			go func() { g.wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatal("callers did not return after their contexts were cancelled")
			}
			gc := <-g.gateRes
			g.fillers(t)
			if when == "queued" {
				require.ErrorIs(t, gc.err, context.Canceled)
			} else {
				require.True(t, gc.cancelled)
			}
			defer func() {
				close(unblock) // the test's end: let the batch go, and wait for it
				goleak.VerifyNone(t, ign)
			}()
			var err error
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
				if err = goleak.Find(ign); err == nil {
					break
				}
			}
			assert.NoError(t, err, "a goroutine still runs a batch for callers that all returned (CancelDue entered %d times)", inDue.Load())
			require.Eventually(t, func() bool { return cancel.TimeoutLanesInUse(e.svc) == 0 }, 2*time.Second, time.Millisecond, "every lane free again")
			g.mu.Lock()
			out := append([]a5call(nil), g.res...)
			g.mu.Unlock()
			for _, c := range out {
				assert.ErrorIs(t, c.err, context.Canceled, "order %s", c.no)
			}
			switch when {
			case "queued", "in CancelDue":
				for _, no := range qs {
					o, err := e.mem.Order(context.Background(), no)
					require.NoError(t, err)
					assert.Equal(t, expiry.StatusPending, o.Status, "order %s: its callers left before anything committed", no)
				}
			}
			e.checkFinal(t, winsOf(append(out, gc)...), false)
		})
	}
}

// Attack 6: sequential calls behave exactly as the one-order path.
func TestAttackTimeoutSequentialSameAsOneByOne(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	clk := newA5Clock()
	a := newA5(t, a5opts{clk: clk})
	b := newA5(t, a5opts{clk: clk, oneByOne: true})
	for _, e := range []*a5env{a, b} {
		e.a5mix(t, 4, 3, 2, 2, 0)
		e.place(t, "e-1", "u9", "s9", -time.Millisecond)
		e.place(t, "e0", "u9", "s9", 0)
		e.place(t, "e1", "u9", "s9", time.Millisecond)
	}
	nos := []string{"d00", "d01", "d00", "n00", "p00", "c00", "m00", "m01", "e-1", "e0", "e1", "bad id!", "", "d02", "n01", "d03", "d03", "p01"}
	ctx := context.Background()
	setupA, setupB := len(a.ev.Of(expiry.KindCancelled)), len(b.ev.Of(expiry.KindCancelled))
	for _, no := range nos {
		ca, cb := a.timeout(ctx, no), b.timeout(ctx, no)
		assert.Equal(t, cb.cancelled, ca.cancelled, "order %q", no)
		assert.Equal(t, cb.o, ca.o, "order %q", no)
		assert.Equal(t, fmt.Sprint(cb.err), fmt.Sprint(ca.err), "order %q", no)
		for _, target := range []error{expiry.ErrNotFound, expiry.ErrInvalidID, cancel.ErrHook} {
			assert.Equal(t, errors.Is(cb.err, target), errors.Is(ca.err, target), "order %q: errors.Is %v", no, target)
		}
	}
	assert.Equal(t, b.ev.Of(expiry.KindCancelled)[setupB:], a.ev.Of(expiry.KindCancelled)[setupA:])
	assert.Zero(t, a.store.dueCalls.Load(), "sequential calls never batch")
	a.checkFinal(t, nil, false)
	noLeak(t, ign)
}

// Attack 7: orders at the due instant, one millisecond either side, in one
// batch, with the store's clock fixed.
func TestAttackTimeoutDueBoundaryInBatch(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.place(t, "e-1", "u1", "s0", -time.Millisecond)
	e.place(t, "e0", "u2", "s0", 0)
	e.place(t, "e1", "u3", "s0", time.Millisecond)
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	for _, no := range []string{"e1", "e0", "e-1", "e1", "e0", "e-1"} {
		g.enqueue(ctx, no)
	}
	g.queued(t, 6)
	_, out := g.wait(t)
	for _, c := range out {
		switch c.no {
		case "e1":
			checkAnswer(t, kNotDue, c)
			assert.Equal(t, time.Millisecond, c.o.Remaining())
		default:
			checkAnswer(t, kDue, c)
		}
	}
	wins := winsOf(out...)
	assert.Equal(t, 1, wins["e-1"])
	assert.Equal(t, 1, wins["e0"])
	assert.Equal(t, 0, wins["e1"])
	assert.EqualValues(t, 1, e.store.dueCalls.Load())
	e.checkFinal(t, wins, false)
	noLeak(t, ign)
}

// Attack 8a: a host's transition hook panics in a lone Timeout (the
// one-order path, in the caller's goroutine). A consumer that recovers a
// handler's panic (asynq, river and most do) goes on serving; the Service
// must too: the next Timeout of another, due order cancels it.
func TestAttackTimeoutHookPanicWedgesService(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "boom", "u0", "s0", -time.Minute)
	e.place(t, "d1", "u1", "s0", -time.Minute)
	var panicked atomic.Bool
	e.mem.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if r.Order.No == "boom" && panicked.CompareAndSwap(false, true) {
			panic("host hook bug")
		}
		return nil
	})
	func() {
		defer func() { _ = recover() }() // the consumer's recover
		_, _, _ = e.svc.Timeout(context.Background(), "boom")
	}()
	require.True(t, panicked.Load())
	ctx, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	c := e.timeout(ctx, "d1")
	assert.NoError(t, c.err, "after one recovered panic every later Timeout waits for a batch that never runs")
	assert.True(t, c.cancelled)
	noLeak(t, ign)
}

// Attack 8b: a host's hook panics inside a batch. With the one-order path
// the panic is the caller's (its consumer recovers it); in a batch it runs
// in the Service's own goroutine and kills the process. Run in a child
// process.
func TestAttackTimeoutHookPanicInBatchKillsProcess(t *testing.T) {
	if os.Getenv("A5_CHILD") == "1" {
		e := newA5(t, a5opts{})
		e.place(t, "g0", "u0", "s0", -time.Minute)
		e.place(t, "boom", "u0", "s0", -time.Minute)
		e.place(t, "d1", "u1", "s0", -time.Minute)
		e.mem.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
			if r.Order.No == "boom" {
				panic("host hook bug")
			}
			return nil
		})
		ctx := context.Background()
		g := e.hold(t, ctx, "g0")
		recovered := func(no string) {
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer func() { _ = recover() }() // the consumer's recover
				_, _, _ = e.svc.Timeout(ctx, no)
			}()
		}
		recovered("boom")
		recovered("d1")
		g.queued(t, 2)
		g.release()
		g.wg.Wait()
		<-g.gateRes
		g.fillers(t)
		time.Sleep(100 * time.Millisecond)
		o, err := e.mem.Order(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, expiry.StatusCancelled, o.Status, "d1, batched with boom, is cancelled")
		require.EqualValues(t, 1, e.store.dueCalls.Load(), "boom and d1 went in a batch")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackTimeoutHookPanicInBatchKillsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "A5_CHILD=1")
	out, err := cmd.CombinedOutput()
	lines := strings.Split(string(out), "\n")
	first := lines[:min(len(lines), 8)]
	assert.NoError(t, err, "a hook's panic in a batch killed the process:\n%s", strings.Join(first, "\n"))
}

// Attack 8c: one order's cancel is slow in the store (its row locked by a
// concurrent transaction: a payment whose hook is slow, a lock wait). Other
// due orders' timeouts must not wait for it: by the one-order path they
// do not.
func TestAttackTimeoutHeadOfLineBlocking(t *testing.T) {
	for _, oneByOne := range []bool{true, false} {
		t.Run(fmt.Sprintf("oneByOne=%v", oneByOne), func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			e := newA5(t, a5opts{oneByOne: oneByOne})
			e.place(t, "slow", "u0", "s0", -time.Minute)
			var others []string
			for i := 0; i < 5; i++ {
				no := fmt.Sprintf("f%02d", i)
				e.place(t, no, "u1", "s1", -time.Minute)
				others = append(others, no)
			}
			g := e.holdOne(t, context.Background(), "slow") // its row is locked for a while: it holds one lane
			var wg sync.WaitGroup
			out := make([]a5call, len(others))
			for i, no := range others {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
					defer stop()
					out[i] = e.timeout(ctx, no)
				}()
			}
			wg.Wait()
			g.release()
			<-g.gateRes
			for _, c := range out {
				assert.NoError(t, c.err, "order %s waited %v for another order's cancel", c.no, c.took.Round(time.Millisecond))
				assert.True(t, c.cancelled, "order %s", c.no)
			}
			noLeak(t, ign)
		})
	}
}

// Attack 3b: Timeout racing Extend while the store's clock runs: an order
// whose deadline passes during the race is either extended (and then never
// cancelled by a timeout) or cancelled (and then not extended), never both.
func TestAttackTimeoutRacesExtend(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	// The stores read a clock that runs: a5clock moved by a ticker goroutine.
	stopTick := make(chan struct{})
	var tick sync.WaitGroup
	tick.Add(1)
	go func() {
		defer tick.Done()
		for {
			select {
			case <-stopTick:
				return
			case <-time.After(time.Millisecond):
				e.clk.ms.Add(1)
			}
		}
	}()
	var nos []string
	for i := 0; i < 24; i++ {
		no := fmt.Sprintf("x%02d", i)
		e.place(t, no, fmt.Sprintf("u%d", i%3), "s0", time.Duration(i%8)*time.Millisecond)
		nos = append(nos, no)
	}
	ctx := context.Background()
	var mu sync.Mutex
	extended := map[string]bool{}
	var out []a5call
	var wg sync.WaitGroup
	for i, no := range nos {
		wg.Add(3)
		for j := 0; j < 2; j++ {
			go func() {
				defer wg.Done()
				for k := 0; k < 200; k++ {
					c := e.timeout(ctx, no)
					if c.err != nil || c.o.No != no {
						t.Errorf("Timeout(%s) = %+v", no, c)
						return
					}
					if !c.cancelled && c.o.Status == expiry.StatusPending && c.o.Remaining() <= 0 {
						t.Errorf("I4: Timeout(%s) left a due order pending: %+v", no, c)
					}
					if c.cancelled || c.o.Status != expiry.StatusPending || c.o.Remaining() > 10*time.Minute {
						mu.Lock()
						out = append(out, c)
						mu.Unlock()
						return
					}
					time.Sleep(500 * time.Microsecond)
				}
			}()
		}
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%5) * 2 * time.Millisecond)
			res, err := e.svc.Extend(ctx, no, "", 30*time.Minute)
			if err != nil {
				t.Errorf("Extend(%s): %v", no, err)
				return
			}
			if res.Changed {
				mu.Lock()
				extended[no] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopTick)
	tick.Wait()
	wins := winsOf(out...)
	for _, no := range nos {
		o, err := e.mem.Order(ctx, no)
		require.NoError(t, err)
		switch {
		case extended[no] && o.Status != expiry.StatusPending:
			t.Errorf("order %s extended and then %v (wins %d)", no, o.Status, wins[no])
		case !extended[no] && o.Status != expiry.StatusCancelled:
			t.Errorf("order %s neither extended nor cancelled: %v", no, o.Status)
		}
	}
	e.checkFinal(t, wins, true)
	t.Logf("extended %d of %d; CancelDue batches %d", len(extended), len(nos), e.store.dueCalls.Load())
	noLeak(t, ign)
}

// Attack 8d: a transition hook that fails for one order of a batch (its
// error wrapping expiry.ErrNotFound, a host's lookup): that order's call
// gets ErrHook and not ErrNotFound (the Handler must not ack it as gone),
// the batch's other orders are cancelled.
func TestAttackTimeoutBatchHookFailsOneOrder(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	e.place(t, "h1", "u1", "s0", -time.Minute)
	e.place(t, "d1", "u2", "s0", -time.Minute)
	e.place(t, "d2", "u3", "s1", -time.Minute)
	e.mem.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if r.Order.No == "h1" {
			return fmt.Errorf("coupon lookup: %w", expiry.ErrNotFound)
		}
		return nil
	})
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	for _, no := range []string{"h1", "d1", "d2", "h1"} {
		g.enqueue(ctx, no)
	}
	g.queued(t, 4)
	gc, out := g.wait(t)
	for _, c := range out {
		if c.no == "h1" {
			assert.ErrorIs(t, c.err, cancel.ErrHook)
			assert.NotErrorIs(t, c.err, expiry.ErrNotFound, "a failed hook must not read as a missing order")
			assert.False(t, c.cancelled)
			continue
		}
		checkAnswer(t, kDue, c)
	}
	e.checkFinal(t, winsOf(append(out, gc)...), true)
	noLeak(t, ign)
}

// a5sqlDue counts a sqlstore's CancelDue calls.
type a5sqlDue struct {
	*sqlstore.Store
	n atomic.Int32
}

func (s *a5sqlDue) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	s.n.Add(1)
	return s.Store.CancelDue(ctx, nos, reason)
}

// CancelPending takes a few milliseconds more before the store, as a
// database under load does, while no batch has run yet: the storm's lone
// calls then fill both lanes and the next calls queue into a batch, which
// a fast machine could otherwise never form (CI run 36).
func (s *a5sqlDue) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if s.n.Load() == 0 {
		time.Sleep(3 * time.Millisecond)
	}
	return s.Store.CancelPending(ctx, req)
}

// Attack 1c: the storm on a real SQL store (SQLite, file database): every
// answer checked against the order it asked about, and the batched answers
// against what the one-order path reads.
func TestAttackTimeoutStormSQLite(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	defer noLeak(t, ign) // after the database is closed
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	defer db.Close()
	ss, err := sqlstore.New(db, sqlstore.SQLite)
	require.NoError(t, err)
	defer ss.Close()
	require.NoError(t, ss.Migrate(ctx))
	store := &a5sqlDue{Store: ss}
	seats := memstore.NewSeats(nil)
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	now, err := ss.Now(ctx)
	require.NoError(t, err)
	kinds := map[string]a5kind{}
	placed := map[string]cancel.Placement{}
	for i := 0; i < 30; i++ {
		no := fmt.Sprintf("q%02d", i)
		k := []a5kind{kDue, kDue, kDue, kNotDue, kPaid, kMissing}[i%6]
		kinds[no] = k
		if k == kMissing {
			continue
		}
		d := -time.Minute
		if k == kNotDue {
			d = time.Hour
		}
		p := cancel.Placement{OrderNo: no, UserID: fmt.Sprintf("u%d", i%4), ShowID: fmt.Sprintf("s%d", i%3), Seats: []string{no + "a", no + "b"}, ExpireAt: now.Add(d)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := ss.Place(ctx, tx, p); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}))
		placed[no] = p
		if k == kPaid {
			res, err := svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
			require.NoError(t, err)
			require.True(t, res.Changed)
		}
	}
	var nos []string
	for no, k := range kinds {
		for j := 0; j < map[bool]int{true: 3, false: 2}[k == kDue]; j++ {
			nos = append(nos, no)
		}
	}
	rand.Shuffle(len(nos), func(i, j int) { nos[i], nos[j] = nos[j], nos[i] })
	out := make([]a5call, len(nos))
	var next atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				i := int(next.Add(1)) - 1
				if i >= len(nos) {
					return
				}
				st := time.Now()
				ok, o, err := svc.Timeout(ctx, nos[i])
				out[i] = a5call{no: nos[i], cancelled: ok, o: o, err: err, took: time.Since(st)}
			}
		}()
	}
	close(start)
	wg.Wait()
	wins := winsOf(out...)
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
		if p, ok := placed[c.no]; ok && c.err == nil {
			assert.Equal(t, p.UserID, c.o.UserID, "order %s", c.no)
			assert.Equal(t, p.ShowID, c.o.ShowID, "order %s", c.no)
			assert.True(t, p.ExpireAt.Truncate(time.Millisecond).Equal(c.o.ExpireAt), "order %s: ExpireAt %v, placed %v", c.no, c.o.ExpireAt, p.ExpireAt)
			assert.False(t, c.o.ReadAt.IsZero(), "order %s: no ReadAt", c.no)
		}
	}
	events := map[string]int{}
	for _, e := range ev.Of(expiry.KindCancelled) {
		events[e.OrderNo]++
		assert.Equal(t, "timeout", e.Reason)
	}
	held := map[[2]string]int{}
	for no, p := range placed {
		key := [2]string{p.ShowID, p.UserID}
		held[key] += 0
		st, _ := seats.Show(ctx, p.ShowID)
		switch kinds[no] {
		case kDue:
			assert.Equal(t, 1, wins[no], "order %s", no)
			assert.Equal(t, 1, events[no], "order %s", no)
			for _, seat := range p.Seats {
				assert.NotContains(t, st, seat, "seat %s of cancelled %s", seat, no)
			}
		default:
			assert.Zero(t, wins[no], "order %s", no)
			assert.Zero(t, events[no], "order %s", no)
			held[key] += len(p.Seats)
		}
	}
	for key, n := range held {
		got, _ := seats.Held(ctx, key[0], key[1])
		assert.Equal(t, n, got, "I8: Held(%s, %s)", key[0], key[1])
	}
	t.Logf("CancelDue batches: %d", store.n.Load())
	assert.Positive(t, store.n.Load(), "no batch ran: the storm did not test batching")
}

// Attack 1d: more calls queue than one batch takes (MaxBatch).
func TestAttackTimeoutBatchOverMax(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	n := cancel.MaxBatch + 77
	for i := 0; i < n; i++ {
		e.place(t, fmt.Sprintf("o%04d", i), fmt.Sprintf("u%d", i%7), fmt.Sprintf("s%d", i%5), -time.Minute)
	}
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	for i := 0; i < n; i++ {
		g.enqueue(ctx, fmt.Sprintf("o%04d", i))
	}
	g.queued(t, n)
	gc, out := g.wait(t)
	for _, c := range out {
		checkAnswer(t, kDue, c)
		assert.True(t, c.cancelled, "order %s", c.no)
	}
	assert.EqualValues(t, 2, e.store.dueCalls.Load(), "two batches")
	assert.Zero(t, e.store.dueErrs.Load())
	e.checkFinal(t, winsOf(append(out, gc)...), true)
	noLeak(t, ign)
}

type a5key struct{}

// Attack 8e (now documenting, as timeouts.go and Service.Timeout say): a
// batch's store call, with the host's hook, runs under one context that
// carries the values of the batch's first call (one transaction cannot
// carry several), whereas each call's own KindCancelled event is observed
// under that call's own context. A lone call's hook sees its own context.
func TestAttackTimeoutBatchHookSeesFirstCallsContext(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	for _, no := range []string{"v1", "v2", "v3"} {
		e.place(t, no, "u1", "s0", -time.Minute)
	}
	var mu sync.Mutex
	seen := map[string]any{}
	e.mem.SetHook(func(ctx context.Context, _ cancel.Querier, r cancel.Result) error {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Order.No] = ctx.Value(a5key{})
		return nil
	})
	bg := context.Background()
	g := e.hold(t, context.WithValue(bg, a5key{}, "g0"), "g0")
	for i, no := range []string{"v1", "v2", "v3"} {
		g.enqueue(context.WithValue(bg, a5key{}, no), no)
		g.queued(t, i+1) // v1 is the batch's first call
	}
	gc, out := g.wait(t)
	for _, c := range out {
		checkAnswer(t, kDue, c)
		assert.True(t, c.cancelled, "order %s", c.no)
	}
	assert.EqualValues(t, 1, e.store.dueCalls.Load(), "v1..v3 went in one batch")
	mu.Lock()
	assert.Equal(t, "g0", seen["g0"], "a lone call's hook sees its own context")
	for _, no := range []string{"v1", "v2", "v3"} {
		assert.Equal(t, "v1", seen[no], "documented: the hook of batched order %s sees the batch's first call's context", no)
	}
	mu.Unlock()
	e.evMu.Lock()
	for _, no := range []string{"g0", "v1", "v2", "v3"} {
		assert.Equal(t, []any{no}, e.evCtx[no], "order %s's KindCancelled event is observed under its own call's context", no)
	}
	e.evMu.Unlock()
	e.checkFinal(t, winsOf(append(out, gc)...), true)
	noLeak(t, ign)
}

// ---- Attacks on the lanes of 08908e8 (timeouts.go) ----

// lanesIdle waits until every lane is free and nothing is queued.
func lanesIdle(t *testing.T, svc *cancel.Service) {
	t.Helper()
	assert.Eventually(t, func() bool {
		return cancel.TimeoutLanesInUse(svc) == 0 && cancel.QueuedTimeouts(svc) == 0
	}, 5*time.Second, time.Millisecond, "lanes in use %d, queued %d after every call returned",
		cancel.TimeoutLanesInUse(svc), cancel.QueuedTimeouts(svc))
}

// recoveredTimeout is a consumer's call: it recovers a handler's panic.
func (e *a5env) recoveredTimeout(ctx context.Context, no string) (c a5call, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			c, panicked = a5call{no: no, err: fmt.Errorf("panic: %v", p)}, true
		}
	}()
	return e.timeout(ctx, no), false
}

// Attack L1: hook panics in lone calls (many at once) and in batches; the
// lanes must all come back: afterwards two calls again find a lane each
// (hold fails if one leaked), and the innocent orders are cancelled.
func TestAttackTimeoutLanesAfterPanics(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	var boom, good []string
	for i := 0; i < 24; i++ {
		boom = append(boom, fmt.Sprintf("boom%02d", i))
		e.place(t, boom[i], "u0", "s0", -time.Minute)
		good = append(good, fmt.Sprintf("d%02d", i))
		e.place(t, good[i], "u1", "s1", -time.Minute)
	}
	e.mem.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if strings.HasPrefix(r.Order.No, "boom") {
			panic("host hook bug " + r.Order.No)
		}
		return nil
	})
	e.place(t, "g0", "u9", "s9", -time.Minute)
	e.place(t, "g1", "u9", "s9", -time.Minute)
	e.store.latency.Store(int64(100 * time.Microsecond))
	ctx := context.Background()
	// Storm: lone calls and batches, all mixed.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var out []a5call
	for round := 0; round < 3; round++ {
		for i := range boom {
			for _, no := range []string{boom[i], good[i]} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, p := e.recoveredTimeout(ctx, no)
					if !p {
						mu.Lock()
						out = append(out, c)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
	}
	lanesIdle(t, e.svc)
	// Forced batch with the panicking orders in it.
	e.place(t, "b-d", "u2", "s2", -time.Minute)
	e.place(t, "b-boom", "u2", "s2", -time.Minute)
	e.mem.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
		if strings.Contains(r.Order.No, "boom") {
			panic("host hook bug " + r.Order.No)
		}
		return nil
	})
	g := e.hold(t, ctx, "g0") // fails if a lane leaked up
	for _, no := range []string{"b-boom", "b-d", "boom00", "boom01"} {
		wg.Add(1)
		g.wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.wg.Done()
			c, p := e.recoveredTimeout(ctx, no)
			if !p {
				mu.Lock()
				out = append(out, c)
				mu.Unlock()
			}
		}()
	}
	g.queued(t, 4)
	gc, _ := g.wait(t)
	wg.Wait()
	out = append(out, gc)
	lanesIdle(t, e.svc)
	g2 := e.hold(t, ctx, "g1") // both lanes free again
	gc2, _ := g2.wait(t)
	out = append(out, gc2)
	for _, c := range out {
		if strings.Contains(c.no, "boom") {
			t.Errorf("a call for %s returned without its hook's panic: %+v", c.no, c)
			continue
		}
	}
	wins := winsOf(out...)
	for _, no := range append(good, "b-d") {
		assert.Equal(t, 1, wins[no], "order %s", no)
	}
	e.checkFinal(t, wins, true)
	lanesIdle(t, e.svc)
	noLeak(t, ign)
}

// Attack L2: calls that queue just as the lanes free up, over and over:
// 16 goroutines make quick Timeout calls (most orders not due: the store
// answers fast), with bursts of a slow lane now and then. No call may be
// stranded in the queue; every lane comes back.
func TestAttackTimeoutQueuedAsLastLaneFrees(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	var nos []string
	for i := 0; i < 40; i++ {
		no := fmt.Sprintf("n%02d", i)
		d := time.Hour
		if i%10 == 0 {
			d = -time.Minute
		}
		e.place(t, no, fmt.Sprintf("u%d", i%4), "s0", d)
		nos = append(nos, no)
	}
	slow := func(_ context.Context, req cancel.Request) error {
		if rand.Intn(50) == 0 {
			time.Sleep(time.Duration(rand.Intn(300)) * time.Microsecond)
		}
		return nil
	}
	e.store.beforePending.Store(&slow)
	var wg sync.WaitGroup
	var calls, stuck atomic.Int32
	var mu sync.Mutex
	var out []a5call
	done := make(chan struct{})
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 400; k++ {
				ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
				c := e.timeout(ctx, nos[rand.Intn(len(nos))])
				stop()
				calls.Add(1)
				if c.err != nil {
					stuck.Add(1)
					t.Errorf("Timeout(%s): %v after %v", c.no, c.err, c.took)
				}
				mu.Lock()
				out = append(out, c)
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatalf("calls stranded: %d made, lanes %d, queued %d", calls.Load(), cancel.TimeoutLanesInUse(e.svc), cancel.QueuedTimeouts(e.svc))
	}
	lanesIdle(t, e.svc)
	t.Logf("%d calls, %d batches, max in store %d", calls.Load(), e.store.dueCalls.Load(), e.store.maxInStore.Load())
	kinds := map[string]a5kind{}
	for i, no := range nos {
		kinds[no] = map[bool]a5kind{true: kDue, false: kNotDue}[i%10 == 0]
	}
	for _, c := range out {
		checkAnswer(t, kinds[c.no], c)
	}
	e.checkFinal(t, winsOf(out...), true)
	noLeak(t, ign)
}

// a5honour makes the store's CancelPending honour its context, as a SQL
// store does (BeginTx on a done context fails).
func (e *a5env) honourCtx() {
	f := func(ctx context.Context, _ cancel.Request) error { return ctx.Err() }
	e.store.beforePending.Store(&f)
}

// Attack L3: queued callers give up at the moment their batch is taken
// (take closes the done of the calls it skips while their callers are in
// select): each such call either returns its context's error and leaves
// its order pending, or answers for its order truthfully; nothing is
// decided twice, lanes come back. With a store that ignores contexts
// (memstore) and one that honours them.
func TestAttackTimeoutSkippedWhileSelecting(t *testing.T) {
	for _, honour := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeHonoursCtx=%v", honour), func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			e := newA5(t, a5opts{})
			ctx := context.Background()
			var all []a5call
			var skippedRan int
			for it := 0; it < 30; it++ {
				gate := fmt.Sprintf("g%02d", it)
				e.place(t, gate, "u0", "s0", -time.Minute)
				var qs []string
				for i := 0; i < 8; i++ {
					qs = append(qs, fmt.Sprintf("i%02dq%d", it, i))
					e.place(t, qs[i], fmt.Sprintf("u%d-%d", it, i%3), "s1", -time.Minute)
				}
				g := e.hold(t, ctx, gate)
				if honour {
					inner := e.store.beforePending.Load()
					f := func(c context.Context, r cancel.Request) error {
						if err := (*inner)(c, r); err != nil {
							return err
						}
						return c.Err()
					}
					e.store.beforePending.Store(&f)
				}
				wctx, stop := context.WithCancel(ctx)
				for i, no := range qs {
					if i%2 == 0 {
						g.enqueue(wctx, no)
					} else {
						g.enqueue(ctx, no)
					}
				}
				g.queued(t, len(qs))
				stop()
				if it%2 == 0 {
					runtime.Gosched()
				}
				gc, out := g.wait(t)
				all = append(all, gc)
				for i, c := range out {
					o, err := e.mem.Order(ctx, c.no)
					require.NoError(t, err)
					if i%2 == 1 {
						checkAnswer(t, kDue, c)
						assert.True(t, c.cancelled, "order %s: its caller stayed", c.no)
						continue
					}
					switch {
					case errors.Is(c.err, context.Canceled):
						assert.Equal(t, expiry.StatusPending, o.Status, "order %s: its caller left before the batch, skipped", c.no)
					case c.err == nil && c.cancelled && o.Status == expiry.StatusCancelled:
						skippedRan++ // done won the select: it went alone on a done context
					default:
						t.Errorf("order %s: answer %+v, order %v", c.no, c, o.Status)
					}
				}
				all = append(all, out...)
				lanesIdle(t, e.svc)
			}
			t.Logf("calls that went alone on a done context and cancelled: %d", skippedRan)
			e.checkFinal(t, winsOf(all...), false)
			noLeak(t, ign)
		})
	}
}

// Attack L4: a batch of calls with and without deadlines. Its store call
// (which honours its context) takes 400ms: callers whose 200ms deadline
// passes leave, the others must get their orders cancelled: the batch's
// deadline is the latest of theirs, none when one call has none.
func TestAttackTimeoutBatchDeadlineMix(t *testing.T) {
	cases := []struct {
		name string
		ttl  []time.Duration // per queued call, 0: no deadline
	}{
		{"short-none-short", []time.Duration{200 * time.Millisecond, 0, 200 * time.Millisecond}},
		{"none-first", []time.Duration{0, 200 * time.Millisecond, 200 * time.Millisecond}},
		{"short-long-short", []time.Duration{200 * time.Millisecond, 5 * time.Second, 200 * time.Millisecond}},
		{"all-short-but-one-longer", []time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 3 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			e := newA5(t, a5opts{})
			e.place(t, "g0", "u0", "s0", -time.Minute)
			var seen []time.Time
			var seenOK []bool
			var mu sync.Mutex
			e.store.setCancelDue(func(ctx context.Context, inner func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
				d, ok := ctx.Deadline()
				mu.Lock()
				seen, seenOK = append(seen, d), append(seenOK, ok)
				mu.Unlock()
				select {
				case <-time.After(400 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return inner(ctx, nos, r)
			})
			e.seats.setBeforeRelease(func(ctx context.Context, _ cancel.Hold) error { return ctx.Err() })
			ctx := context.Background()
			g := e.hold(t, ctx, "g0")
			var latest time.Time
			none := false
			var stops []context.CancelFunc
			for i, ttl := range tc.ttl {
				no := fmt.Sprintf("m%d", i)
				e.place(t, no, fmt.Sprintf("u%d", i), "s1", -time.Minute)
				c := ctx
				if ttl > 0 {
					var stop context.CancelFunc
					c, stop = context.WithTimeout(ctx, ttl)
					stops = append(stops, stop)
					if d, _ := c.Deadline(); d.After(latest) {
						latest = d
					}
				} else {
					none = true
				}
				g.enqueue(c, no)
				g.queued(t, i+1)
			}
			gc, out := g.wait(t)
			for _, s := range stops {
				s()
			}
			require.True(t, gc.cancelled)
			mu.Lock()
			require.Len(t, seen, 1, "one batch")
			if none {
				assert.False(t, seenOK[0], "a call without a deadline: the batch has none")
			} else {
				assert.True(t, seenOK[0])
				assert.True(t, latest.Equal(seen[0]), "the batch's deadline %v, the latest call's %v", seen[0], latest)
			}
			mu.Unlock()
			for i, c := range out {
				if tc.ttl[i] == 0 || tc.ttl[i] > time.Second {
					checkAnswer(t, kDue, c)
					assert.True(t, c.cancelled, "order %s: its caller had time", c.no)
					assert.Zero(t, countOf(e.ev.Of(expiry.KindReleaseFailed), c.no), "order %s: release failed on a deadline", c.no)
				} else {
					assert.ErrorIs(t, c.err, context.DeadlineExceeded, "order %s", c.no)
				}
			}
			e.checkFinal(t, winsOf(append(out, gc)...), false)
			lanesIdle(t, e.svc)
			noLeak(t, ign)
		})
	}
}

// Attack L5: one order's cancel is slow (its row locked for 3s) and holds
// a lane; 300 other due orders' timeouts arrive from 32 goroutines, each
// with a 1s deadline: all must be cancelled, each within its deadline.
func TestAttackTimeoutSlowOrderLiveness(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{stalls: true})
	e.place(t, "slow", "u0", "s0", -time.Minute)
	var nos []string
	for i := 0; i < 300; i++ {
		no := fmt.Sprintf("f%03d", i)
		e.place(t, no, fmt.Sprintf("u%d", i%5), fmt.Sprintf("s%d", 1+i%3), -time.Minute)
		nos = append(nos, no)
	}
	g := e.holdOne(t, context.Background(), "slow")
	e.store.latency.Store(int64(200 * time.Microsecond))
	out := make([]a5call, len(nos))
	var next atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(nos) {
					return
				}
				ctx, stop := context.WithTimeout(context.Background(), time.Second)
				out[i] = e.timeout(ctx, nos[i])
				stop()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	g.release()
	gc := <-g.gateRes
	for _, c := range out {
		assert.NoError(t, c.err, "order %s waited %v", c.no, c.took.Round(time.Millisecond))
		assert.True(t, c.cancelled, "order %s", c.no)
	}
	t.Logf("300 orders in %v with a slow order holding a lane; %d batches", took.Round(time.Millisecond), e.store.dueCalls.Load())
	e.checkFinal(t, winsOf(append(out, gc)...), true)
	lanesIdle(t, e.svc)
	noLeak(t, ign)
}

// Attack L7: as many orders' cancels as there are lanes are slow at once
// (each racing a payment whose transaction holds its row): they take every
// lane, and every
// other due order's timeout (500ms each) must still be cancelled, as by
// the one-order path.
func TestAttackTimeoutSlowOrdersInEveryLane(t *testing.T) {
	for _, oneByOne := range []bool{true, false} {
		t.Run(fmt.Sprintf("oneByOne=%v", oneByOne), func(t *testing.T) {
			ign := goleak.IgnoreCurrent()
			e := newA5(t, a5opts{oneByOne: oneByOne, stalls: true})
			for i := 0; i < a5lanes; i++ {
				e.place(t, fmt.Sprintf("slow%d", i), "u0", "s0", -time.Minute)
			}
			var others []string
			for i := 0; i < 8; i++ {
				others = append(others, fmt.Sprintf("f%02d", i))
				e.place(t, others[i], "u1", "s1", -time.Minute)
			}
			unlock := make(chan struct{})
			var in atomic.Int32
			f := func(ctx context.Context, r cancel.Request) error {
				if !strings.HasPrefix(r.OrderNo, "slow") {
					return nil
				}
				in.Add(1)
				select {
				case <-unlock:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			e.store.beforePending.Store(&f)
			ctx := context.Background()
			slowRes := make(chan a5call, a5lanes)
			for i := 0; i < a5lanes; i++ {
				go func() { slowRes <- e.timeout(ctx, fmt.Sprintf("slow%d", i)) }()
			}
			require.Eventually(t, func() bool { return in.Load() == a5lanes }, 5*time.Second, time.Millisecond)
			var wg sync.WaitGroup
			out := make([]a5call, len(others))
			for i, no := range others {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, stop := context.WithTimeout(ctx, 500*time.Millisecond)
					defer stop()
					out[i] = e.timeout(c, no)
				}()
			}
			wg.Wait()
			close(unlock)
			for i := 0; i < a5lanes; i++ {
				<-slowRes
			}
			for _, c := range out {
				assert.NoError(t, c.err, "order %s waited %v behind the slow orders in every lane", c.no, c.took.Round(time.Millisecond))
				assert.True(t, c.cancelled, "order %s", c.no)
			}
			lanesIdle(t, e.svc)
			noLeak(t, ign)
		})
	}
}

// Attack L8: a host's Observer, or the seat store, panics for one order
// after the batch's transaction committed. By the one-order path the panic
// is that order's call's alone; the other orders of the batch must still
// be cancelled by their calls, with their event and their seats freed.
func TestAttackTimeoutPanicAfterCommitInBatch(t *testing.T) {
	for _, where := range []string{"observer", "release"} {
		for _, oneByOne := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/oneByOne=%v", where, oneByOne), func(t *testing.T) {
				ign := goleak.IgnoreCurrent()
				e := newA5(t, a5opts{oneByOne: oneByOne})
				e.place(t, "g0", "u0", "s0", -time.Minute)
				e.place(t, "boom", "u1", "s1", -time.Minute)
				var ds []string
				for i := 0; i < 5; i++ {
					ds = append(ds, fmt.Sprintf("d%d", i))
					e.place(t, ds[i], fmt.Sprintf("u%d", 2+i%2), "s1", -time.Minute)
				}
				switch where {
				case "observer":
					f := func(ev expiry.Event) {
						if ev.Kind == expiry.KindCancelled && ev.OrderNo == "boom" {
							panic("host observer bug")
						}
					}
					e.obsPanic.Store(&f)
				case "release":
					e.seats.setBeforeRelease(func(_ context.Context, h cancel.Hold) error {
						if h.OrderNo == "boom" {
							panic("seat store client bug")
						}
						return nil
					})
				}
				ctx := context.Background()
				var g *a5gate
				if !oneByOne {
					g = e.hold(t, ctx, "g0")
				}
				var wg sync.WaitGroup
				out := make([]a5call, 1+len(ds))
				for i, no := range append([]string{"boom"}, ds...) {
					wg.Add(1)
					go func() { defer wg.Done(); out[i], _ = e.recoveredTimeout(ctx, no) }()
					if g != nil {
						g.queued(t, i+1) // boom first
					}
				}
				if g != nil {
					g.wait(t)
				}
				wg.Wait()
				if !oneByOne {
					assert.EqualValues(t, 1, e.store.dueCalls.Load(), "boom and d0..d4 went in one batch")
				}
				for _, c := range out[1:] {
					checkAnswer(t, kDue, c)
					assert.True(t, c.cancelled, "order %s: cancelled by its call (another order's %s panicked)", c.no, where)
					assert.Equal(t, 1, countOf(e.ev.Of(expiry.KindCancelled), c.no), "order %s: its KindCancelled event", c.no)
					assert.Equal(t, 2, e.seats.freedOf(c.no), "order %s: its seats freed", c.no)
				}
				lanesIdle(t, e.svc)
				noLeak(t, ign)
			})
		}
	}
}

// Attack L10: 96 goroutines, several rounds: Timeout calls (duplicates,
// some with a context already cancelled or a deadline of a few
// milliseconds) on due, not-due, paid, user-cancelled and missing orders,
// racing Pay, UserCancel and the reconciler's ExpireDue on the due ones.
// Every order is decided at most once, by the call that reports it (a
// cancelled order nobody reports only when a Timeout caller for it left);
// one event per cancelled order; no seat freed twice, no sold seat freed,
// the purchase-limit counters equal the seats held; every lane comes back,
// and a redelivery of each pending due order cancels it.
func TestAttackTimeoutContextStorm(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	for round := 0; round < 6; round++ {
		e := newA5(t, a5opts{})
		kinds := e.a5mix(t, 80, 20, 10, 10, 10)
		e.store.latency.Store(int64(100 * time.Microsecond))
		var mu sync.Mutex
		winner := map[string][]string{}
		gaveUp := map[string]bool{}
		win := func(no, who string) {
			mu.Lock()
			winner[no] = append(winner[no], who)
			mu.Unlock()
		}
		bg := context.Background()
		var jobs []func()
		var tcalls []a5call
		for no, k := range kinds {
			reps := 2
			if k == kDue {
				reps = 3
			}
			for j := 0; j < reps; j++ {
				jobs = append(jobs, func() {
					ctx := bg
					var stop context.CancelFunc = func() {}
					switch rand.Intn(6) {
					case 0:
						ctx, stop = context.WithCancel(bg)
						stop()
					case 1:
						ctx, stop = context.WithTimeout(bg, time.Duration(rand.Intn(3000))*time.Microsecond)
					case 2:
						ctx, stop = context.WithTimeout(bg, 10*time.Second)
					}
					defer stop()
					c := e.timeout(ctx, no)
					mu.Lock()
					tcalls = append(tcalls, c)
					if errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded) {
						gaveUp[no] = true
					}
					mu.Unlock()
					switch {
					case c.err != nil && ctx.Err() != nil:
					case k == kMissing:
						checkAnswer(t, k, c)
					case k == kDue:
						if c.err != nil || c.o.No != no || c.o.Status == expiry.StatusPending {
							t.Errorf("Timeout(%s) = %+v", no, c)
						}
					default:
						checkAnswer(t, k, c)
					}
					if c.cancelled {
						win(no, "timeout")
					}
				})
			}
			if k != kDue {
				continue
			}
			if rand.Intn(3) == 0 {
				jobs = append(jobs, func() {
					res, err := e.svc.Pay(bg, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
					if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
						t.Errorf("Pay(%s): %v", no, err)
					}
					if err == nil && res.Changed {
						win(no, "pay")
					}
				})
			}
			if rand.Intn(4) == 0 {
				user := e.placed[no].UserID
				jobs = append(jobs, func() {
					res, err := e.svc.UserCancel(bg, no, user)
					if err != nil {
						t.Errorf("UserCancel(%s): %v", no, err)
					}
					if res.Changed {
						win(no, "user")
					}
				})
			}
		}
		var dueNos []string
		for no, k := range kinds {
			if k == kDue {
				dueNos = append(dueNos, no)
			}
		}
		for k := 0; k < 2; k++ {
			jobs = append(jobs, func() {
				res, err := e.svc.ExpireDue(bg, dueNos, "")
				if err != nil {
					t.Errorf("ExpireDue: %v", err)
				}
				for _, r := range res {
					win(r.Order.No, "reconcile")
				}
			})
		}
		rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		var next atomic.Int32
		var wg sync.WaitGroup
		for w := 0; w < 96; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= len(jobs) {
						return
					}
					jobs[i]()
				}
			}()
		}
		wg.Wait()
		lanesIdle(t, e.svc)
		// Redelivery of the due orders still pending.
		for _, no := range dueNos {
			o, err := e.mem.Order(bg, no)
			require.NoError(t, err)
			if o.Status == expiry.StatusPending {
				c := e.timeout(bg, no)
				require.NoError(t, c.err)
				require.True(t, c.cancelled, "redelivery of %s", no)
				win(no, "timeout")
			}
		}
		reasons := map[string]string{}
		for _, ev := range e.ev.Of(expiry.KindCancelled) {
			reasons[ev.OrderNo] = ev.Reason
		}
		cancelWins := map[string]int{}
		for _, no := range dueNos {
			o, err := e.mem.Order(bg, no)
			require.NoError(t, err)
			ws := winner[no]
			switch {
			case len(ws) > 1:
				t.Errorf("round %d: order %s decided by %v", round, no, ws)
			case len(ws) == 0:
				if o.Status != expiry.StatusCancelled || !gaveUp[no] || reasons[no] != "timeout" {
					t.Errorf("round %d: order %s is %v and nobody reports deciding it (a caller gave up: %v)", round, no, o.Status, gaveUp[no])
				}
				e.pre[no]++ // decided by a batch for a caller who left
			case ws[0] == "pay":
				assert.Equal(t, expiry.StatusPaid, o.Status, "order %s", no)
			default:
				assert.Equal(t, expiry.StatusCancelled, o.Status, "order %s", no)
				assert.Equal(t, ws[0], reasons[no], "order %s: the event's reason is the winner's", no)
				cancelWins[no] = 1
			}
		}
		e.checkFinal(t, cancelWins, true)
		t.Logf("round %d: %d Timeout calls, %d batches, max in store %d", round, len(tcalls), e.store.dueCalls.Load(), e.store.maxInStore.Load())
	}
	noLeak(t, ign)
}
