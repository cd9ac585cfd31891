package reconcile_test

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
	"github.com/seatflow/orderexpiry/reconcile"
)

// hostStatuses is an order store whose host has put some orders in a
// status of its own (as cancel/sqlstore reads a value its mapping does not
// name): Statuses and Claims answer them expiry.StatusHost, whatever the
// library last wrote.
type hostStatuses struct {
	*memstore.Store
	host map[string]bool
}

func (h hostStatuses) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	st, err := h.Store.Statuses(ctx, nos)
	for no, s := range st {
		if h.host[no] {
			s.Status = expiry.StatusHost
			st[no] = s
		}
	}
	return st, err
}

func (h hostStatuses) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	cs, next, err := h.Store.Claims(ctx, cursor, limit)
	for i := range cs {
		if h.host[cs[i].OrderNo] {
			cs[i].Status = expiry.StatusHost
		}
	}
	return cs, next, err
}

// skips records the skipped events by reason and order.
type skips struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (s *skips) Observe(_ context.Context, e expiry.Event) {
	if e.Kind != expiry.KindSkipped {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[[2]string]int{}
	}
	s.n[[2]string{e.Reason, e.OrderNo}]++
}

func (s *skips) of(reason, no string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[[2]string{reason, no}]
}

// I19: an order in a status the host owns is the host's. The lock pass
// neither frees nor sells its seats (even when the library last wrote it
// cancelled: the host took it over since), the claims pass locks them again
// when the seat store lost them (they are held as a pending order's, I8),
// and both count it; the orders beside it are repaired in
// the same round (I12). Given back a status of the library's, it is
// repaired as any other.
func TestHostStatusOrdersAreLeftToTheHost(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.cancelledInSQLOnly(t, "c1") // a crashed canceller's: freed
	e.cancelledInSQLOnly(t, "h1") // cancelled, then taken over by the host
	e.place(t, "h2", 3*time.Hour) // the host's; the seat store lost its lock
	e.place(t, "l1", 3*time.Hour) // pending; the seat store lost its lock
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	for _, no := range []string{"h2", "l1"} {
		n, err := e.seats.Release(ctx, cancel.Hold{ShowID: "s", OrderNo: no, UserID: "u1", Seats: []string{no + "a", no + "b"}, LockID: show[no+"a"].LockID})
		require.NoError(t, err)
		require.Equal(t, 2, n)
	}
	orders := hostStatuses{Store: e.store, host: map[string]bool{"h1": true, "h2": true}}
	obs := &skips{}
	r, err := reconcile.New(reconcile.Config{Orders: orders, Seats: e.seats, Service: e.svc, Grace: time.Minute, Runtime: expiry.Runtime{Observer: obs}})
	require.NoError(t, err)
	e.advance(time.Hour) // past Settle and Grace

	rep, err := r.Round(ctx)
	require.NoError(t, err)
	show, err = e.seats.Show(ctx, "s")
	require.NoError(t, err)
	holders := map[string]string{}
	for seat, st := range show {
		holders[seat] = st.Status.String() + ":" + st.OrderNo
	}
	assert.Equal(t, map[string]string{
		"h1a": "locked:h1", "h1b": "locked:h1", // the host's: left as they are
		"h2a": "locked:h2", "h2b": "locked:h2", // the host's, lost: locked again
		"l1a": "locked:l1", "l1b": "locked:l1", // restored beside them
	}, holders, "c1's seats freed, l1's and h2's restored, h1's kept")
	held, err := e.seats.Held(ctx, "s", "u1")
	require.NoError(t, err)
	assert.Equal(t, 6, held, "I8: h1's, h2's and l1's seats count for the buyer")
	assert.Equal(t, 2, rep.HostStatus, "h1 by the lock pass, h2 by the claims pass")
	assert.Equal(t, 1, obs.of("host_status", "h1"))
	assert.Equal(t, 1, obs.of("host_status", "h2"))

	// The host gives h1 back, cancelled: the next round frees its seats.
	delete(orders.host, "h1")
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Released)
	show, err = e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.NotContains(t, show, "h1a")
	assert.NotContains(t, show, "h1b")
}
