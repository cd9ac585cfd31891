package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The fakes pass the same suites as the real adapters, so they cannot drift.
func TestStoreConformance(t *testing.T) {
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		s := memstore.NewStore(nil)
		return canceltest.StoreHarness{Store: s, Place: s.Place, Now: s.Now, Delete: func(_ context.Context, no string) error {
			s.DeleteOrder(no)
			return nil
		}}
	})
}

func TestHooksConformance(t *testing.T) {
	canceltest.RunHooks(t, func(t *testing.T) canceltest.StoreHarness {
		s := memstore.NewStore(nil)
		return canceltest.StoreHarness{Store: s, Place: s.Place, Now: s.Now}
	})
}

func TestSeatsConformance(t *testing.T) {
	canceltest.RunSeats(t, func(t *testing.T) canceltest.SeatsHarness { return harness(memstore.NewSeats(nil)) })
}

func TestOverdue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := memstore.NewStore(func() time.Time { return now })
	n, oldest, err := s.Overdue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	assert.Zero(t, oldest, "none overdue: no age")
	place := func(no string, ttl time.Duration) {
		require.NoError(t, s.Place(ctx, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: now.Add(ttl)}))
	}
	place("due-long-ago", -90*time.Second)
	place("due-now", 0)
	place("not-due", time.Second)
	place("paid", -time.Hour)
	place("cancelled", -2*time.Hour)
	_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "paid", PaymentID: "p1"})
	require.NoError(t, err)
	_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "cancelled", Reason: cancel.ReasonUser})
	require.NoError(t, err)
	n, oldest, err = s.Overdue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "pending at or past expire_at; paid, cancelled and not yet due ones are not overdue")
	assert.Equal(t, 90*time.Second, oldest)

	s.Fail = func(op string) error {
		if op == "Overdue" {
			return errors.New("down")
		}
		return nil
	}
	_, _, err = s.Overdue(ctx)
	assert.Error(t, err)
}

// The host's part on its rows: a deleted order is gone with its claims, and
// a held row fails its writes as a lock wait does while the batch skips it
// (sqlstore's SKIP LOCKED) and expires the others.
func TestHostRows(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := memstore.NewStore(func() time.Time { return now })
	for _, no := range []string{"held", "free", "gone"} {
		require.NoError(t, s.Place(ctx, cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s", Seats: []string{no}, ExpireAt: now.Add(-time.Second)}))
	}
	assert.True(t, s.DeleteOrder("gone"))
	assert.False(t, s.DeleteOrder("gone"), "deleted once")
	_, err := s.Order(ctx, "gone")
	require.ErrorIs(t, err, expiry.ErrNotFound)
	cs, _, err := s.Claims(ctx, "", 10)
	require.NoError(t, err)
	assert.Len(t, cs, 2, "the deleted order's claim went with it")

	letGo := s.HoldRow("held")
	for name, write := range map[string]func() error{
		"CancelPending": func() error {
			_, err := s.CancelPending(ctx, cancel.Request{OrderNo: "held", Reason: cancel.ReasonUser})
			return err
		},
		"PayPending": func() error {
			_, err := s.PayPending(ctx, cancel.Payment{OrderNo: "held", PaymentID: "p1"})
			return err
		},
	} {
		assert.ErrorIs(t, write(), context.DeadlineExceeded, name)
	}
	res, err := s.CancelDue(ctx, []string{"held", "free"}, cancel.ReasonReconcile)
	require.NoError(t, err)
	require.Len(t, res, 1, "the held row is skipped, the other expired")
	assert.Equal(t, "free", res[0].Order.No)
	letGo()
	letGo() // once
	res, err = s.CancelDue(ctx, []string{"held"}, cancel.ReasonReconcile)
	require.NoError(t, err)
	assert.Len(t, res, 1, "let go: expired")
}
