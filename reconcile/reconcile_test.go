package reconcile_test

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
	"github.com/seatflow/orderexpiry/reconcile"
)

type env struct {
	now   time.Time
	mu    sync.Mutex
	store *memstore.Store
	seats *memstore.Seats
	svc   *cancel.Service
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func newEnv(t *testing.T) *env {
	e := &env{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	e.store, e.seats = memstore.NewStore(e.clock), memstore.NewSeats(e.clock)
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats})
	require.NoError(t, err)
	return e
}

func (e *env) reconciler(t *testing.T, batch, max int) *reconcile.Reconciler {
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: batch, MaxPerRound: max, Grace: time.Minute})
	require.NoError(t, err)
	return r
}

func (e *env) place(t *testing.T, no string, ttl time.Duration) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "s", Seats: []string{no + "a", no + "b"}, ExpireAt: e.clock().Add(ttl)}
	require.NoError(t, e.svc.Place(context.Background(), p, func(ctx context.Context, p cancel.Placement) error { return e.store.Place(ctx, p) }))
	return p
}

func (e *env) status(t *testing.T, no string) expiry.Status {
	o, err := e.store.Order(context.Background(), no)
	require.NoError(t, err)
	return o.Status
}

// I3: an order whose message was lost is cancelled by the next round.
func TestExpiredOrdersAreCancelled(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 7; i++ {
		e.place(t, fmt.Sprintf("old%d", i), time.Minute)
	}
	e.place(t, "young", time.Hour)
	e.advance(2 * time.Minute)
	rep, err := e.reconciler(t, 2, 100).Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 7, rep.Expired)
	for i := 0; i < 7; i++ {
		assert.Equal(t, expiry.StatusCancelled, e.status(t, fmt.Sprintf("old%d", i)))
	}
	assert.Equal(t, expiry.StatusPending, e.status(t, "young"), "I4: not before expire_at")
	show, _ := e.seats.Show(context.Background(), "s")
	assert.Len(t, show, 2, "only young's seats are still locked")
}

func TestRoundsAreBounded(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 10; i++ {
		e.place(t, fmt.Sprintf("o%d", i), time.Second)
	}
	e.advance(time.Minute)
	r := e.reconciler(t, 3, 4)
	rep, err := r.Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Expired, "MaxPerRound")
	rep, err = r.Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Expired)
	rep, err = r.Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Expired)
}

func TestSeatLocksAreRepaired(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	// Cancelled in SQL while Redis was down: still locked.
	e.seats.Fail = func(op string) error {
		if op == "Release" {
			return errors.New("redis down")
		}
		return nil
	}
	lost := e.place(t, "lost", time.Hour)
	_, err := e.svc.UserCancel(ctx, "lost", "u1")
	require.NoError(t, err)
	// Paid, but the sell in Redis failed.
	e.seats.Fail = func(op string) error {
		if op == "Sell" {
			return errors.New("redis down")
		}
		return nil
	}
	paid := e.place(t, "paid", time.Hour)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "paid", UserID: "u1", PaymentID: "pay-paid"})
	require.NoError(t, err)
	e.seats.Fail = nil
	// Locked in Redis, but the SQL transaction never committed (crash).
	ghost := cancel.Hold{ShowID: "s", OrderNo: "ghost", UserID: "u2", Seats: []string{"g1"}}
	_, err = e.seats.Lock(ctx, ghost, 0)
	require.NoError(t, err)
	live := e.place(t, "live", time.Hour)

	r := e.reconciler(t, 2, 1000)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.True(t, rep.Complete)
	assert.Zero(t, rep.Released, "decided moments ago: left to their decider; the ghost is within its grace period")
	assert.Equal(t, 4, rep.Settling, "the cancelled and the paid order's locks")
	// The paid order's locks become sales in the claims pass: its claims say paid.
	assert.Equal(t, 2, rep.Restored)

	e.advance(reconcile.SettleDefault)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Released, "the cancelled order's seats, its canceller's release lost")
	assert.Zero(t, rep.Settling)

	e.advance(2 * time.Minute)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Released, "the ghost, past its grace period")
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Released+rep.Sold, "I5: nothing left to do")

	show, _ := e.seats.Show(ctx, "s")
	for _, s := range lost.Seats {
		assert.NotContains(t, show, s)
	}
	assert.NotContains(t, show, "g1")
	for _, s := range paid.Seats {
		assert.Equal(t, cancel.SeatSold, show[s].Status)
	}
	for _, s := range live.Seats {
		assert.Equal(t, cancel.SeatLocked, show[s].Status, "a pending order's locks are left alone")
	}
	for user, want := range map[string]int{"u1": 4, "u2": 0} {
		n, _ := e.seats.Held(ctx, "s", user)
		assert.Equal(t, want, n, "I8 for %s", user)
	}
}

// countingReleaser counts the seats every release actually freed.
type countingReleaser struct {
	*memstore.Seats
	mu    sync.Mutex
	freed int
}

func (c *countingReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := c.Seats.Release(ctx, h)
	c.mu.Lock()
	c.freed += n
	c.mu.Unlock()
	return n, err
}

func (c *countingReleaser) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := c.Seats.ReleaseAll(ctx, holds)
	c.mu.Lock()
	for _, n := range ns {
		c.freed += max(n, 0)
	}
	c.mu.Unlock()
	return ns, err
}

// instanceReleaser records which instance freed which order's seats.
type instanceReleaser struct {
	*countingReleaser
	name string
	by   *sync.Map // order number → map[instance]seats, under mu
	mu   *sync.Mutex
}

func (r instanceReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	n, err := r.countingReleaser.Release(ctx, h)
	r.record(h, n)
	return n, err
}

func (r instanceReleaser) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	ns, err := r.countingReleaser.ReleaseAll(ctx, holds)
	for i, n := range ns {
		r.record(holds[i], n)
	}
	return ns, err
}

func (r instanceReleaser) record(h cancel.Hold, n int) {
	if n > 0 {
		r.mu.Lock()
		m, _ := r.by.LoadOrStore(h.OrderNo, map[string]int{})
		m.(map[string]int)[r.name] += n
		r.mu.Unlock()
	}
}

// Several instances' reconcilers at once release each seat once (I2), keep
// the counter right (I8), and free each order's seats from one instance:
// the one whose cancel decided it. Another instance's lock scan that sees
// the order cancelled moments ago leaves its locks to that cancel.
func TestConcurrentReconcilers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for i := 0; i < 50; i++ {
		e.place(t, fmt.Sprintf("o%d", i), time.Second)
	}
	e.advance(time.Minute)
	counting := &countingReleaser{Seats: e.seats}
	var by sync.Map
	var byMu sync.Mutex
	var wg sync.WaitGroup
	var mu sync.Mutex
	expired := 0
	for i := 0; i < 8; i++ {
		seats := instanceReleaser{countingReleaser: counting, name: fmt.Sprintf("instance-%d", i), by: &by, mu: &byMu}
		svc, err := cancel.New(cancel.Config{Store: e.store, Seats: seats})
		require.NoError(t, err)
		r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: seats, Service: svc, Batch: 5, Grace: time.Minute})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := r.Round(ctx)
			assert.NoError(t, err)
			mu.Lock()
			expired += rep.Expired
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 50, expired, "each order cancelled by exactly one reconciler")
	assert.Equal(t, 100, counting.freed, "I2: each of the 100 seats freed exactly once")
	orders := 0
	by.Range(func(no, m any) bool {
		orders++
		assert.Len(t, m, 1, "order %s's seats freed by one instance: %v", no, m)
		return true
	})
	assert.Equal(t, 50, orders)
	n, _ := e.seats.Held(ctx, "s", "u1")
	assert.Zero(t, n)
	show, _ := e.seats.Show(ctx, "s")
	assert.Empty(t, show)
}

func TestErrorsStopTheRound(t *testing.T) {
	e := newEnv(t)
	e.store.Fail = func(op string) error {
		if op == "Expired" {
			return errors.New("db down")
		}
		return nil
	}
	_, err := e.reconciler(t, 0, 0).Round(context.Background())
	assert.ErrorContains(t, err, "db down")
	_, err = reconcile.New(reconcile.Config{})
	assert.ErrorContains(t, err, "Orders")
}

func TestRunStopsWithContext(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", time.Second)
	e.advance(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := e.reconciler(t, 0, 0).Run(ctx, 10*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, expiry.StatusCancelled, e.status(t, "o1"))
}

// Run waits between rounds by the Runtime's clock (a fake one here): no
// round starts before the interval has passed on it, and one starts when it
// has. The store's clock is the one that makes the order due.
func TestRunWaitsByTheRuntimeClock(t *testing.T) {
	e := newEnv(t)
	e.place(t, "o1", time.Second)
	fake := expirytest.NewFakeClock(e.clock())
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Runtime: expiry.Runtime{Clock: fake}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, time.Hour) }()
	require.Eventually(t, func() bool { return fake.Pending() == 1 }, 5*time.Second, time.Millisecond, "the first round ran and Run waits")
	e.advance(time.Minute) // o1 is due by the store's clock
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, expiry.StatusPending, e.status(t, "o1"), "no round before the interval passed on the Runtime's clock")
	fake.Advance(time.Hour)
	require.Eventually(t, func() bool { return e.status(t, "o1") == expiry.StatusCancelled }, 5*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// After the seat store lost its data, a round rebuilds it from SQL's
// claims: pending orders' seats locked, paid orders' seats sold, counters
// right (I2, I8); then the store is marked restored and rounds stop
// rebuilding.
func TestRebuildAfterDataLoss(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	pending := e.place(t, "pending", time.Hour)
	paid := e.place(t, "paid", time.Hour)
	gone := e.place(t, "gone", time.Hour)
	_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "paid", UserID: "u1", PaymentID: "pay-paid"})
	require.NoError(t, err)
	_, err = e.svc.UserCancel(ctx, "gone", "u1")
	require.NoError(t, err)
	newRec := func(max int) *reconcile.Reconciler {
		r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 1, MaxPerRound: max})
		require.NoError(t, err)
		return r
	}
	rep, err := newRec(100).Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Restored, "a first pass over an intact store changes nothing")

	e.seats.Wipe() // Redis restarted without persistence
	r := newRec(2) // two claims per round: the rebuild spans rounds
	total := 0
	for i := 0; i < 5; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		total += rep.Restored
	}
	assert.Equal(t, 4, total, "2 seats of the pending order, 2 of the paid one")
	show, _ := e.seats.Show(ctx, "s")
	for _, s := range pending.Seats {
		assert.Equal(t, cancel.SeatLocked, show[s].Status)
	}
	for _, s := range paid.Seats {
		assert.Equal(t, cancel.SeatSold, show[s].Status)
	}
	for _, s := range gone.Seats {
		assert.NotContains(t, show, s)
	}
	n, _ := e.seats.Held(ctx, "s", "u1")
	assert.Equal(t, 4, n, "I8")
	_, lost, _ := e.seats.Lost(ctx)
	assert.False(t, lost)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Restored)
}

// racingClaims decides orders (through the full cancel or pay path, whose
// Redis step finds nothing to do after the wipe) right after the claims were
// read and before they are restored: the race a rebuild must not lose.
type racingClaims struct {
	*memstore.Store
	decide func()
	once   sync.Once
}

func (c *racingClaims) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	claims, next, err := c.Store.Claims(ctx, cursor, limit)
	c.once.Do(c.decide)
	return claims, next, err
}

// noLocks hides the seat store from the lock pass, so only the rebuild's own
// re-check can repair what the race left.
type noLocks struct{ *memstore.Seats }

func (noLocks) ScanLocks(context.Context, string, int) ([]cancel.SeatLock, string, error) {
	return nil, "", nil
}

func TestRebuildRacingDecisions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cancelled := e.place(t, "c", time.Hour)
	paid := e.place(t, "p", time.Hour)
	still := e.place(t, "k", time.Hour)
	e.seats.Wipe()
	claims := &racingClaims{Store: e.store, decide: func() {
		res, err := e.svc.UserCancel(ctx, "c", "u1")
		require.NoError(t, err)
		require.True(t, res.Changed)
		res, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "p", UserID: "u1", PaymentID: "pay-p"})
		require.NoError(t, err)
		require.True(t, res.Changed)
	}}
	r, err := reconcile.New(reconcile.Config{Orders: claims, Seats: noLocks{e.seats}, Service: e.svc})
	require.NoError(t, err)
	rep, err := r.Round(ctx)
	require.NoError(t, err)

	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	for _, s := range cancelled.Seats {
		assert.NotContains(t, show, s, "I2: the cancelled order's seat is free in the same round")
	}
	for _, s := range paid.Seats {
		assert.Equal(t, cancel.SeatSold, show[s].Status, "the paid order's restored lock became a sale")
	}
	for _, s := range still.Seats {
		assert.Equal(t, cancel.SeatLocked, show[s].Status, "the pending order keeps its locks")
	}
	held, err := e.seats.Held(ctx, "s", "u1")
	require.NoError(t, err)
	assert.Equal(t, 4, held, "I8: the counter counts the paid and the pending order's seats, not the cancelled one's")
	assert.Zero(t, rep.Released, "the cancelled order's seats were never restored: SQL was read again after the seat store")
	assert.Equal(t, 2, rep.Restored, "the pending order's locks (the payment's own Sell revived its seats as sold)")
	// The payment's own Sell found the seats free and sold them (Sell
	// revives lost locks), so there was no sale left to restore.
}

// I12: one stuck order neither stops the round nor holds back the other
// scans: the other expired orders are cancelled, and the stale lock of an
// order cancelled elsewhere is released in the same round.
func TestStuckOrderDoesNotStopTheRound(t *testing.T) {
	e := newEnv(t)
	e.place(t, "a-stuck", time.Minute) // oldest: first in every scan
	for i := 0; i < 5; i++ {
		e.place(t, fmt.Sprintf("b%d", i), 2*time.Minute)
	}
	stale := e.place(t, "stale", time.Hour)
	_, err := e.store.CancelPending(context.Background(), cancel.Request{OrderNo: "stale", Reason: cancel.ReasonUser})
	require.NoError(t, err) // cancelled in SQL, its release lost: still locked
	e.advance(3 * time.Minute)

	// The host holds the order's row (SELECT … FOR UPDATE while it talks
	// to its payment provider) through both rounds.
	defer e.store.HoldRow("a-stuck")()
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc,
		Grace: time.Minute, OrderTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancelRound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelRound()
	rep, err := r.Round(ctx)
	require.NoError(t, err, "a skipped order is counted, not an error of the round")
	require.NoError(t, ctx.Err(), "the round ended on its own, long before its context")
	assert.Equal(t, 5, rep.Expired, "the other expired orders were cancelled")
	assert.Equal(t, 1, rep.Skipped)
	// The next round passes it by again, as cheaply.
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Skipped)
	assert.Zero(t, rep.Expired)
	assert.Equal(t, expiry.StatusPending, e.status(t, "a-stuck"))
	show, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	for _, seat := range stale.Seats {
		assert.NotContains(t, show, seat, "the lock pass ran despite the stuck order")
	}
}

// Nonsense in the configuration is an error naming the field, not a panic or
// a silent default.
func TestConfigNonsenseIsRejected(t *testing.T) {
	e := newEnv(t)
	base := reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc}
	for name, mod := range map[string]func(*reconcile.Config){
		"Batch":        func(c *reconcile.Config) { c.Batch = -1 },
		"Workers":      func(c *reconcile.Config) { c.Workers = -2 },
		"MaxPerRound":  func(c *reconcile.Config) { c.MaxPerRound = -5 },
		"Grace":        func(c *reconcile.Config) { c.Grace = -time.Second },
		"Settle":       func(c *reconcile.Config) { c.Settle = -time.Second },
		"OrderTimeout": func(c *reconcile.Config) { c.OrderTimeout = -time.Second },
	} {
		c := base
		mod(&c)
		_, err := reconcile.New(c)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), name)
		}
	}
	r, err := reconcile.New(base)
	require.NoError(t, err)
	assert.NotPanics(t, func() {
		err = r.Run(context.Background(), 0)
	})
	assert.Error(t, err, "a zero interval is refused")
}

// failingStore fails the cancel of every order in fail, and every batch
// that lists one (one bad row fails its transaction).
type failingStore struct {
	*memstore.Store
	fail map[string]bool
}

func (f failingStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if f.fail[req.OrderNo] {
		return cancel.Result{}, errors.New("deadlock found when trying to get lock")
	}
	return f.Store.CancelPending(ctx, req)
}

func (f failingStore) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	for _, no := range nos {
		if f.fail[no] {
			return nil, errors.New("deadlock found when trying to get lock")
		}
	}
	return f.Store.CancelDue(ctx, nos, reason)
}

// I12 at scale (found by the model test): more failing orders than a round's
// bound, all due before the healthy ones. The first round fails them; the
// next, with all of them backing off, still reaches and cancels the rest.
func TestManySkippedOrdersDoNotHideTheRest(t *testing.T) {
	e := newEnv(t)
	fail := map[string]bool{}
	for i := 0; i < 9; i++ {
		no := fmt.Sprintf("a%d", i)
		e.place(t, no, time.Minute)
		fail[no] = true
	}
	for i := 0; i < 3; i++ {
		e.place(t, fmt.Sprintf("b%d", i), 2*time.Minute)
	}
	e.advance(3 * time.Minute)
	store := failingStore{e.store, fail}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: e.seats})
	require.NoError(t, err)
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: e.seats, Service: svc, Batch: 2, MaxPerRound: 4})
	require.NoError(t, err)
	ctx := context.Background()
	expired := 0
	for i := 0; i < 5; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		expired += rep.Expired
	}
	assert.Equal(t, 3, expired, "the healthy orders behind nine failing ones")
	for i := 0; i < 3; i++ {
		assert.Equal(t, expiry.StatusCancelled, e.status(t, fmt.Sprintf("b%d", i)))
	}
}

// gatedReleaser holds the release of one order until its gate opens: the
// instance that cancelled it, between its commit and its seat store call.
type gatedReleaser struct {
	*memstore.Seats
	order         string
	entered, gate chan struct{}
}

func (g *gatedReleaser) Release(ctx context.Context, h cancel.Hold) (int, error) {
	if h.OrderNo == g.order {
		close(g.entered)
		<-g.gate
	}
	return g.Seats.Release(ctx, h)
}

// The hostile interleaving of two instances: A's cancel has committed and
// not yet released, and B's reconciler scans the seat locks right then. B
// must leave the order to A: A frees both seats, B none. (Before
// Config.Settle, B released the seats it scanned and A the rest: each seat
// once, but one order freed seat by seat from two instances.)
func TestLockScanLeavesAJustCancelledOrderToItsCanceller(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p := e.place(t, "o1", time.Hour)
	gated := &gatedReleaser{Seats: e.seats, order: "o1", entered: make(chan struct{}), gate: make(chan struct{})}
	svcA, err := cancel.New(cancel.Config{Store: e.store, Seats: gated})
	require.NoError(t, err)
	done := make(chan cancel.Result)
	go func() {
		res, err := svcA.UserCancel(ctx, "o1", "u1")
		assert.NoError(t, err)
		done <- res
	}()
	<-gated.entered // A committed; its release waits

	b := &countingReleaser{Seats: e.seats}
	svcB, err := cancel.New(cancel.Config{Store: e.store, Seats: b})
	require.NoError(t, err)
	rB, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: b, Service: svcB, Grace: time.Minute})
	require.NoError(t, err)
	e.advance(reconcile.SettleDefault - time.Millisecond) // B's round, however slow, within the settle time
	rep, err := rB.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Locks, "B's scan saw both locks")
	assert.Equal(t, 2, rep.Settling, "and left them to the order's canceller")
	assert.Zero(t, b.freed, "B freed nothing")

	close(gated.gate)
	res := <-done
	assert.Equal(t, 2, res.Released, "A frees both seats")
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	for _, seat := range p.Seats {
		assert.NotContains(t, show, seat)
	}
	e.advance(time.Hour)
	rep, err = rB.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Released+rep.Settling+b.freed, "I5: nothing left")
}

// cancelledInSQLOnly places order no and cancels it in the store only: its
// canceller died after the commit, before the release.
func (e *env) cancelledInSQLOnly(t *testing.T, no string) {
	e.place(t, no, time.Hour)
	res, err := e.store.CancelPending(context.Background(), cancel.Request{OrderNo: no, Reason: cancel.ReasonUser})
	require.NoError(t, err)
	require.True(t, res.Changed)
}

// A canceller that crashed after its commit (its release never ran) is
// repaired by the first pass after the settle time, by the store's clock:
// one release frees both seats.
func TestLockScanRepairsACrashedCancellerAfterTheSettleTime(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cancelledInSQLOnly(t, "o1")

	counting := &countingReleaser{Seats: e.seats}
	const settle = 3 * time.Second
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: counting, Service: e.svc, Grace: time.Minute, Settle: settle})
	require.NoError(t, err)
	e.advance(settle - time.Millisecond)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Settling)
	assert.Zero(t, counting.freed, "within the settle time")
	e.advance(time.Millisecond)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Settling)
	assert.Equal(t, 2, rep.Released, "at the settle time both seats, in one release")
	n, err := e.seats.Held(ctx, "s", "u1")
	require.NoError(t, err)
	assert.Zero(t, n, "I8")
}

// unknownAges is an order store that does not record when an order was last
// written (a host's table mapped without an updated-at column).
type unknownAges struct{ *memstore.Store }

func (u unknownAges) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	st, err := u.Store.Statuses(ctx, nos)
	for no, s := range st {
		s.Age = cancel.AgeUnknown
		st[no] = s
	}
	return st, err
}

// Without ages the lock pass cannot wait for the decider: it releases at once.
func TestLockScanWithoutAgesReleasesAtOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cancelledInSQLOnly(t, "o1")
	r, err := reconcile.New(reconcile.Config{Orders: unknownAges{e.store}, Seats: e.seats, Service: e.svc, Grace: time.Minute})
	require.NoError(t, err)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Settling)
	assert.Equal(t, 2, rep.Released)
}
