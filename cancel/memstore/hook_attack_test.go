package memstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// hookRecord keeps, per order, the statuses of the transitions its hook
// saw: the in-memory store's stand-in for the host's outbox rows.
type hookRecord struct {
	mu   sync.Mutex
	seen map[string][]expiry.Status
}

func (h *hookRecord) hook(_ context.Context, _ cancel.Querier, r cancel.Result) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[r.Order.No] = append(h.seen[r.Order.No], r.Order.Status)
	return nil
}

func (h *hookRecord) of(no string) []expiry.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[no]
}

// TestHookAttackMemstorePanicReleasesLock: a hook that panics (the host
// recovers it) leaves the in-memory store usable: the store's lock is not
// held, the order is still pending and can be paid.
func TestHookAttackMemstorePanicReleasesLock(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "mp-1", UserID: "u1", ShowID: "s1", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, p, store.Place))
	rec := &hookRecord{seen: map[string][]expiry.Status{}}
	store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		if r.Order.Status == expiry.StatusCancelled {
			panic("host bug in the hook")
		}
		return rec.hook(ctx, tx, r)
	})
	func() {
		defer func() { assert.NotNil(t, recover(), "the panic goes up") }()
		_, _ = svc.UserCancel(ctx, p.OrderNo, "u1")
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u1", PaymentID: "pay-mp-1"})
		assert.NoError(t, err)
		assert.True(t, res.Changed, "still pending after the panic: paid now")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the store's lock is still held after the hook panicked")
	}
	assert.Equal(t, []expiry.Status{expiry.StatusPaid}, rec.of(p.OrderNo))
}

// TestHookAttackMemstoreReinstateRunsTheHook is sqlstore's
// TestHookAttackReinstateRunsTheHook on the in-memory store: with
// AcceptLatePayments a late payment moves the cancelled order to paid, and
// the hook sees that transition (it first did not; see the sqlstore test
// for why acting on Pay's answer instead is not enough). Expected: the
// hook sees the transition that made the order paid (I1, I14), as it does
// for every other transition.
func TestHookAttackMemstoreReinstateRunsTheHook(t *testing.T) {
	ctx := context.Background()
	store, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, AcceptLatePayments: true})
	require.NoError(t, err)
	rec := &hookRecord{seen: map[string][]expiry.Status{}}
	store.SetHook(rec.hook)
	p := cancel.Placement{OrderNo: "ml-1", UserID: "u1", ShowID: "s1", Seats: []string{"a1"}, ExpireAt: time.Now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, store.Place))
	cancelled, _, err := svc.Timeout(ctx, p.OrderNo)
	require.NoError(t, err)
	require.True(t, cancelled)
	res, err := svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u1", PaymentID: "pay-ml-1"})
	require.NoError(t, err)
	require.True(t, res.Changed, "reinstated")
	o, err := store.Order(ctx, p.OrderNo)
	require.NoError(t, err)
	require.Equal(t, expiry.StatusPaid, o.Status)
	assert.Contains(t, rec.of(p.OrderNo), expiry.StatusPaid, "the order is paid: the hook must have seen it")
}
