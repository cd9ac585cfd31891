package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// gatedStore is memstore's order store whose CancelPending waits at a gate
// until it is closed, so that the Timeout calls that find every lane busy
// queue; it records the size of every CancelDue.
type gatedStore struct {
	*memstore.Store
	entered   atomic.Int32
	gateOnly  int32 // >0: only the first gateOnly calls wait at the gate
	gate      chan struct{}
	mu        sync.Mutex
	batches   []int
	failBatch error
}

func newGatedStore() *gatedStore {
	return &gatedStore{Store: memstore.NewStore(nil), gate: make(chan struct{})}
}

func (g *gatedStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if n := g.entered.Add(1); g.gateOnly == 0 || n <= g.gateOnly {
		<-g.gate
	}
	return g.Store.CancelPending(ctx, req)
}

// lanes is how many lone Timeout calls a Service runs at once before the
// next ones queue for a batch (cancel's timeoutLanes).
const lanes = 2

func (g *gatedStore) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	g.mu.Lock()
	g.batches = append(g.batches, len(nos))
	err := g.failBatch
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g.Store.CancelDue(ctx, nos, reason)
}

// timeoutAnswer is what one Timeout call answered.
type timeoutAnswer struct {
	no        string
	cancelled bool
	order     expiry.Order
	err       error
}

// TestTimeoutsGoInBatches: Timeout calls that arrive while one is in the
// store are cancelled together, and every call still answers for its own
// order as the one-order path would: due orders cancelled once each, an
// order not yet due left pending for the Handler to re-arm, a paid order
// left paid, a missing one not found, a duplicate delivery not cancelled
// twice. Judged by the outcome (orders, seats, events), with a batch that
// fails in the second case: then every call goes alone and the outcome is
// the same.
func TestTimeoutsGoInBatches(t *testing.T) {
	defer cancel.SetLaneStall(time.Hour)() // the calls held in the store keep their lanes
	for _, failBatch := range []bool{false, true} {
		t.Run(map[bool]string{false: "batched", true: "batch fails"}[failBatch], func(t *testing.T) {
			ctx := context.Background()
			g := newGatedStore()
			if failBatch {
				g.failBatch = errors.New("deadlock found when trying to get lock")
			}
			ev := &expirytest.Recorder{}
			seats := &batchSeats{Seats: memstore.NewSeats(nil)}
			svc, err := cancel.New(cancel.Config{Store: g, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
			require.NoError(t, err)
			kind := map[string]string{}
			place := func(no, k string, ttl time.Duration) {
				kind[no] = k
				p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: fmt.Sprintf("s%d", len(kind)%3), Seats: []string{no + "a", no + "b"}, ExpireAt: time.Now().Add(ttl)}
				require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return g.Store.Place(ctx, p) }))
			}
			for i := 0; i < 30; i++ {
				place(fmt.Sprintf("due%02d", i), "due", -time.Second)
			}
			for i := 0; i < 6; i++ {
				place(fmt.Sprintf("early%d", i), "early", time.Hour)
			}
			for i := 0; i < 4; i++ {
				no := fmt.Sprintf("paid%d", i)
				place(no, "paid", -time.Second)
				_, err := svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "p-" + no})
				require.NoError(t, err)
			}
			kind["missing0"], kind["missing1"] = "missing", "missing"

			var calls []string
			for no := range kind {
				calls = append(calls, no)
			}
			for i := 0; i < 5; i++ {
				calls = append(calls, fmt.Sprintf("due%02d", i)) // duplicate deliveries
			}
			answers := make(chan timeoutAnswer, len(calls)+lanes)
			call := func(no string) {
				c, o, err := svc.Timeout(ctx, no)
				answers <- timeoutAnswer{no, c, o, err}
			}
			var wg sync.WaitGroup
			for i := 0; i < lanes; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); call(fmt.Sprintf("due%02d", 29-i)) }() // held at the gate, in the store: every lane busy
			}
			require.Eventually(t, func() bool { return g.entered.Load() == lanes }, 5*time.Second, time.Millisecond)
			for _, no := range calls {
				wg.Add(1)
				go func() { defer wg.Done(); call(no) }()
			}
			require.Eventually(t, func() bool { return cancel.QueuedTimeouts(svc) == len(calls) }, 5*time.Second, time.Millisecond,
				"every later call waits behind the one in the store")
			close(g.gate)
			wg.Wait()
			close(answers)

			yes := map[string]int{}
			for a := range answers {
				if a.cancelled {
					yes[a.no]++
				}
				switch kind[a.no] {
				case "missing":
					assert.ErrorIs(t, a.err, expiry.ErrNotFound, a.no)
					continue
				default:
					require.NoError(t, a.err, a.no)
				}
				assert.Equal(t, a.no, a.order.No, "each call answers for its own order")
				switch kind[a.no] {
				case "early":
					assert.False(t, a.cancelled, "I4: %s is not due", a.no)
					assert.Equal(t, expiry.StatusPending, a.order.Status)
					assert.Greater(t, a.order.Remaining(), 50*time.Minute, "the Handler re-arms for the time left")
				case "paid":
					assert.False(t, a.cancelled)
					assert.Equal(t, expiry.StatusPaid, a.order.Status)
				case "due":
					if !a.cancelled {
						assert.Equal(t, expiry.StatusCancelled, a.order.Status, "a duplicate finds its order cancelled")
					}
				}
			}
			for no, k := range kind {
				o, err := g.Order(ctx, no)
				if k == "missing" {
					assert.ErrorIs(t, err, expiry.ErrNotFound)
					continue
				}
				require.NoError(t, err)
				st, err := seats.Show(ctx, o.ShowID)
				require.NoError(t, err)
				_, held := st[no+"a"]
				switch k {
				case "due":
					assert.Equal(t, 1, yes[no], "I1: %s cancelled by exactly one call", no)
					assert.Equal(t, expiry.StatusCancelled, o.Status)
					assert.False(t, held, "I2: %s's seats are free", no)
				case "early":
					assert.Equal(t, expiry.StatusPending, o.Status)
					assert.True(t, held, "%s still holds its seats", no)
				case "paid":
					assert.Equal(t, expiry.StatusPaid, o.Status)
					assert.Equal(t, cancel.SeatSold, st[no+"a"].Status, "a sold seat stays sold")
				}
			}
			assert.Equal(t, 30, ev.Count(expiry.KindCancelled), "one event per cancelled order")
			for _, e := range ev.Of(expiry.KindCancelled) {
				assert.Equal(t, string(cancel.ReasonTimeout), e.Reason)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			assert.Equal(t, []int{len(kind)}, g.batches,
				"one batch of the distinct orders that queued (due26..29's first calls went alone)")
			if !failBatch {
				assert.Equal(t, 1, seats.calls, "one seat-store call for the batch's releases")
			}
		})
	}
}

// TestTimeoutAloneIsTheOneOrderPath: calls that never overlap never batch.
func TestTimeoutAloneIsTheOneOrderPath(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore()
	close(g.gate)
	svc, err := cancel.New(cancel.Config{Store: g, Seats: memstore.NewSeats(nil)})
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		no := fmt.Sprintf("o%d", i)
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: time.Now().Add(-time.Second)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return g.Store.Place(ctx, p) }))
		c, _, err := svc.Timeout(ctx, no)
		require.NoError(t, err)
		assert.True(t, c)
	}
	assert.Empty(t, g.batches)
}

// TestTimeoutWaiterGivesUp: a call waiting for a lane returns when its
// context ends, and no batch then works on its order: the order stays
// pending for its redelivery (or the reconciler), decided once either way.
// The calls still waiting are served.
func TestTimeoutWaiterGivesUp(t *testing.T) {
	defer cancel.SetLaneStall(time.Hour)()
	ctx := context.Background()
	g := newGatedStore()
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: g, Seats: memstore.NewSeats(nil), Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	for _, no := range []string{"a0", "a1", "a2", "a3", "b", "c"} {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: time.Now().Add(-time.Second)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return g.Store.Place(ctx, p) }))
	}
	first := make(chan bool, lanes)
	for i := 0; i < lanes; i++ {
		go func() { c, _, _ := svc.Timeout(ctx, fmt.Sprintf("a%d", i)); first <- c }()
	}
	require.Eventually(t, func() bool { return g.entered.Load() == lanes }, 5*time.Second, time.Millisecond)
	short, cancelShort := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, _, err := svc.Timeout(short, "b"); gaveUp <- err }()
	other := make(chan bool, 1)
	go func() { c, _, _ := svc.Timeout(ctx, "c"); other <- c }()
	require.Eventually(t, func() bool { return cancel.QueuedTimeouts(svc) == 2 }, 5*time.Second, time.Millisecond)
	cancelShort()
	assert.ErrorIs(t, <-gaveUp, context.Canceled, "the waiter returns at once")
	close(g.gate)
	assert.True(t, <-other, "the call still waiting is served")
	for i := 0; i < lanes; i++ {
		assert.True(t, <-first, "the lone calls' orders are cancelled")
	}
	assert.Equal(t, lanes+1, ev.Count(expiry.KindCancelled))
	o, err := g.Order(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status, "no work for a caller who left")
	c, _, err := svc.Timeout(ctx, "b")
	require.NoError(t, err)
	assert.True(t, c, "its redelivery cancels it")
}

// TestTimeoutStalledLanesHandOver: four cancels stuck in the store (rows
// held by other transactions) take every lane; after the stall they give
// their lanes up and the other due orders are cancelled meanwhile, in
// batches, well before the stuck ones return.
func TestTimeoutStalledLanesHandOver(t *testing.T) {
	defer cancel.SetLaneStall(20 * time.Millisecond)()
	ctx := context.Background()
	g := newGatedStore()
	g.gateOnly = lanes // the first lone calls are the stuck ones
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: g, Seats: memstore.NewSeats(nil), Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	for i := 0; i < lanes+40; i++ {
		no := fmt.Sprintf("o%02d", i)
		p := cancel.Placement{OrderNo: no, UserID: "u" + no, ShowID: "s", Seats: []string{no}, ExpireAt: time.Now().Add(-time.Second)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return g.Store.Place(ctx, p) }))
	}
	stuck := make(chan bool, lanes)
	for i := 0; i < lanes; i++ {
		go func() { c, _, _ := svc.Timeout(ctx, fmt.Sprintf("o%02d", i)); stuck <- c }()
	}
	require.Eventually(t, func() bool { return g.entered.Load() == lanes }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // past the stall: the stuck calls gave their lanes up
	var wg sync.WaitGroup
	var cancelled atomic.Int32
	for i := lanes; i < lanes+40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := svc.Timeout(ctx, fmt.Sprintf("o%02d", i))
			assert.NoError(t, err)
			if c {
				cancelled.Add(1)
			}
		}()
	}
	wg.Wait() // with the stuck calls still in the store
	assert.Equal(t, int32(40), cancelled.Load(), "every other due order is cancelled while four are stuck")
	select {
	case <-stuck:
		t.Fatal("a stuck call returned before its row was let go")
	default:
	}
	close(g.gate)
	for i := 0; i < lanes; i++ {
		assert.True(t, <-stuck)
	}
	assert.Equal(t, lanes+40, ev.Count(expiry.KindCancelled))
}
