package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// An outside review of memstore's ReleaseAll (fbc1d86: its "Release" fault
// asked once per show) and of ExpireDue's release through it: one show of
// three fails. Outcomes: the other shows' seats are freed at once and
// counted in their Results; only the failing show's orders are reported as
// failed releases; the reconciler frees the rest once the store answers,
// every counter back to zero (I2, I3, I8).
func TestReviewReleaseAllOneShowOfThreeFails(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var clockNow atomic.Int64
	clockNow.Store(now.UnixNano())
	clock := func() time.Time { return time.Unix(0, clockNow.Load()).UTC() }
	store, seats := memstore.NewStore(clock), memstore.NewSeats(clock)
	rec := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	shows := []string{"A", "B", "C"}
	var nos []string
	for i := 0; i < 12; i++ {
		p := cancel.Placement{OrderNo: fmt.Sprintf("o%02d", i), UserID: fmt.Sprintf("u%d", i%2), ShowID: shows[i%3],
			Seats: []string{fmt.Sprintf("x%02d", i), fmt.Sprintf("y%02d", i)}, ExpireAt: clock().Add(time.Minute)}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
		nos = append(nos, p.OrderNo)
	}
	clockNow.Add(int64(2 * time.Minute))
	var asked atomic.Int32
	seats.Fail = func(op string) error {
		if op == "Release" && asked.Add(1) == 2 { // the second show asked: B, as the holds come sorted by show
			return errors.New("show B's shard is down")
		}
		return nil
	}
	res, err := svc.ExpireDue(ctx, nos, "")
	require.NoError(t, err, "a failed release is no error: the orders are cancelled")
	require.Len(t, res, 12)
	assert.EqualValues(t, 3, asked.Load(), "asked once per show")
	failed := map[string]bool{}
	for _, ev := range rec.Of(expiry.KindReleaseFailed) {
		failed[ev.OrderNo] = true
	}
	for _, r := range res {
		if r.Order.ShowID == "B" {
			assert.True(t, failed[r.Order.No], "%s: its failed release is reported", r.Order.No)
			continue
		}
		assert.False(t, failed[r.Order.No], "%s of show %s was freed; not a failed release", r.Order.No, r.Order.ShowID)
		assert.Equal(t, 2, r.Released, "%s", r.Order.No)
	}
	for _, show := range []string{"A", "C"} {
		st, err := seats.Show(ctx, show)
		require.NoError(t, err)
		assert.Empty(t, st, "I2: show %s freed beside the failing show", show)
	}
	st, err := seats.Show(ctx, "B")
	require.NoError(t, err)
	assert.Len(t, st, 8, "show B's step wrote nothing")

	seats.Fail = nil
	r, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Grace: time.Minute})
	require.NoError(t, err)
	clockNow.Add(int64(time.Minute)) // past Settle
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 8, rep.Released, "I3: the reconciler frees show B's seats")
	for _, show := range shows {
		st, err := seats.Show(ctx, show)
		require.NoError(t, err)
		assert.Empty(t, st, "show %s", show)
		for _, u := range []string{"u0", "u1"} {
			n, err := seats.Held(ctx, show, u)
			require.NoError(t, err)
			assert.Zero(t, n, "I8: %s in %s", u, show)
		}
	}
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Released, "I2: released once")
}
