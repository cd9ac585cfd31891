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

// A payment id that paid another order, repeated by the provider for a
// timed-out one, is answered the same with the late-payment policy on as
// off: a discrepancy "recorded before" (the refund was decided already),
// never refunded again, nothing reinstated. A host that logs or matches the
// answer sees one answer for one fate.
func TestLatePaymentOfADecidedIDIsRefusedAsRecorded(t *testing.T) {
	for _, accept := range []bool{false, true} {
		t.Run(fmt.Sprintf("AcceptLatePayments=%v", accept), func(t *testing.T) {
			ctx := context.Background()
			e := newLateEnv(t, accept, 0)
			e.placeAt(t, "o1", "u1", time.Hour, "a1")
			_, err := e.svc.Pay(ctx, pay("o1", "u1", "pay-1"))
			require.NoError(t, err)
			e.placeAt(t, "o2", "u1", time.Minute, "a2")
			e.clock.Advance(time.Minute)
			cancelled, _, err := e.svc.Timeout(ctx, "o2")
			require.NoError(t, err)
			require.True(t, cancelled)

			res, err := e.svc.Pay(ctx, pay("o2", "u1", "pay-1"))
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			assert.EqualError(t, err, "cancel: order o2: payment pay-1 (recorded before): orderexpiry: payment for a cancelled order")
			assert.Equal(t, expiry.StatusCancelled, res.Order.Status)
			assert.Empty(t, e.hooked(), "I9: pay-1 paid o1, nothing to refund")
			assert.Zero(t, e.ev.Count(expiry.KindReinstated))
			assert.Empty(t, e.seat(t, "a2").OrderNo, "o2's seat stays free")
		})
	}
}

// A late payment whose reinstatement failed for a reason the provider's
// retry decides (a store outage, the host's hook) is answered with an error
// naming the payment and the order, in that order, and wrapping the cause:
// nothing refunded, nothing reinstated.
func TestLatePaymentStoreFailureNamesPaymentAndOrder(t *testing.T) {
	outage := errors.New("connection reset")
	for _, tc := range []struct {
		name   string
		inject func(e *lateEnv)
		want   string
		is     []error
	}{
		{"store outage", func(e *lateEnv) {
			e.store.Fail = func(op string) error {
				if op == "ReinstateCancelled" {
					return outage
				}
				return nil
			}
		}, "cancel: late payment pay-9 of order o1: connection reset", []error{outage}},
		{"host hook fails", func(e *lateEnv) {
			e.store.SetHook(func(context.Context, cancel.Querier, cancel.Result) error { return outage })
		}, "cancel: late payment pay-9 of order o1: memstore: reinstate o1: " + cancel.ErrHook.Error() + ": connection reset", []error{cancel.ErrHook, outage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newLateEnv(t, true, 0)
			e.placeAt(t, "o1", "u1", time.Minute, "a1")
			e.clock.Advance(time.Minute)
			cancelled, _, err := e.svc.Timeout(ctx, "o1")
			require.NoError(t, err)
			require.True(t, cancelled)
			tc.inject(e)

			_, err = e.svc.Pay(ctx, pay("o1", "u1", "pay-9"))
			for _, target := range tc.is {
				require.ErrorIs(t, err, target)
			}
			assert.NotErrorIs(t, err, cancel.ErrDiscrepancy, "the retry decides: not refused")
			assert.EqualError(t, err, tc.want)
			assert.Empty(t, e.hooked(), "nothing refunded")
			assert.Zero(t, e.ev.Count(expiry.KindReinstated))
			assert.Empty(t, e.seat(t, "a1").OrderNo, "the claimed seat given back")
		})
	}
}

// Two callbacks of one late payment race: the first finds the seat still
// held by another order and goes to refuse it, the second (after that
// order let the seat go) reinstates the order. The first must then answer
// the order as paid by its payment, without an error and without a refund:
// the payment id's fate is honoured, never both (I14).
func TestLatePaymentLoserOfARaceAnswersThePaidOrder(t *testing.T) {
	ctx := context.Background()
	e := newLateEnv(t, true, 0)
	e.placeAt(t, "o1", "u1", time.Minute, "a1")
	e.clock.Advance(time.Minute)
	cancelled, _, err := e.svc.Timeout(ctx, "o1")
	require.NoError(t, err)
	require.True(t, cancelled)
	e.placeAt(t, "o2", "u2", time.Hour, "a1")

	// The store's Fail hook runs outside its lock, just before the first
	// callback records the discrepancy: the race's other side runs there.
	var raced atomic.Bool
	var winner cancel.Result
	var winnerErr error
	e.store.Fail = func(op string) error {
		if op == "RecordDiscrepancy" && raced.CompareAndSwap(false, true) {
			_, err := e.svc.UserCancel(ctx, "o2", "u2")
			require.NoError(t, err)
			winner, winnerErr = e.svc.Pay(ctx, pay("o1", "u1", "late-1"))
		}
		return nil
	}

	res, err := e.svc.Pay(ctx, pay("o1", "u1", "late-1"))
	require.True(t, raced.Load(), "the first callback went to refuse")
	require.NoError(t, winnerErr)
	require.True(t, winner.Changed, "the second callback reinstated o1")
	require.NoError(t, err, "the loser answers the order its payment paid")
	assert.Equal(t, expiry.StatusPaid, res.Order.Status)
	assert.Equal(t, "late-1", res.PaymentID)
	assert.Empty(t, e.hooked(), "I14: honoured, never refunded")
	assert.Zero(t, e.ev.Count(expiry.KindDiscrepancy))
	assert.Equal(t, cancel.SeatSold, e.seat(t, "a1").Status)
	assert.Equal(t, "o1", e.seat(t, "a1").OrderNo)
}

// After a batch's seat-store release panicked, each order is released
// alone; one whose lone release then fails is counted (KindReleaseFailed,
// with its seats) so that the operator's alert sees the seats left to the
// reconciler, and its call still reports the cancel.
func TestBatchLoneReleaseFailureIsCounted(t *testing.T) {
	e := newA5(t, a5opts{})
	e.place(t, "g0", "u0", "s0", -time.Minute)
	for _, no := range []string{"boom", "bad", "ok"} {
		e.place(t, no, "u1", "s1", -time.Minute)
	}
	redisDown := errors.New("redis: connection refused")
	e.seats.setBeforeRelease(func(_ context.Context, h cancel.Hold) error {
		switch h.OrderNo {
		case "boom":
			panic("seat store client bug")
		case "bad":
			return redisDown
		}
		return nil
	})
	ctx := context.Background()
	g := e.hold(t, ctx, "g0")
	var wg sync.WaitGroup
	out := map[string]*a5call{}
	for i, no := range []string{"boom", "bad", "ok"} {
		c := &a5call{}
		out[no] = c
		wg.Add(1)
		go func() { defer wg.Done(); *c, _ = e.recoveredTimeout(ctx, no) }()
		g.queued(t, i+1)
	}
	g.wait(t)
	wg.Wait()
	require.EqualValues(t, 1, e.store.dueCalls.Load(), "boom, bad and ok went in one batch")

	assert.True(t, out["bad"].cancelled, "the cancel is reported though its seats were not released")
	assert.NoError(t, out["bad"].err)
	failed := e.ev.Of(expiry.KindReleaseFailed)
	require.Len(t, failed, 1, "bad's lone release failed; boom's panicked (logged); ok's succeeded")
	assert.Equal(t, "bad", failed[0].OrderNo)
	assert.Equal(t, 2, failed[0].Seats)
	assert.ErrorIs(t, failed[0].Err, redisDown)
	assert.Zero(t, e.seats.freedOf("bad"))
	assert.Equal(t, 2, e.seats.freedOf("ok"))
	lanesIdle(t, e.svc)
}

// A placement without seats is refused before anything is locked or
// inserted: an order holding no seat would sell nothing when paid and have
// nothing to give back when cancelled, and a seat store answers a hold
// without seats with no lock id.
func TestPlacementWithoutSeatsIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, seats := range [][]string{nil, {}} {
		p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "show1", Seats: seats, ExpireAt: time.Now().Add(time.Hour)}
		err := p.Validate()
		require.ErrorIs(t, err, expiry.ErrInvalidID)
		assert.EqualError(t, err, "orderexpiry: invalid id: order o1 has no seats")

		store := memstore.NewStore(nil)
		seatStore := memstore.NewSeats(nil)
		svc, err := cancel.New(cancel.Config{Store: store, Seats: seatStore})
		require.NoError(t, err)
		inserted := false
		err = svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
			inserted = true
			return store.Place(ctx, p)
		})
		require.ErrorIs(t, err, expiry.ErrInvalidID)
		assert.False(t, inserted, "nothing inserted")
		_, err = store.Order(ctx, "o1")
		assert.ErrorIs(t, err, expiry.ErrNotFound, "no order")
		shows, err := seatStore.ListedShows(ctx)
		require.NoError(t, err)
		assert.Empty(t, shows, "nothing locked")
	}
}

// A user's cancel whose seat release fails is still a cancel (no error),
// and the failure is counted with the order and its seats
// (expiry.KindReleaseFailed): what an operator's alert on lost releases
// reads, and what the reconciler then frees.
func TestUserCancelReleaseFailureIsCountedWithItsSeats(t *testing.T) {
	ctx := context.Background()
	store, seats, ev := memstore.NewStore(nil), memstore.NewSeats(nil), &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: ev}})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "show1", Seats: []string{"a1", "a2"}, ExpireAt: time.Now().Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, p, store.Place))
	outage := errors.New("seat store unreachable")
	seats.Fail = func(op string) error {
		if op == "Release" {
			return outage
		}
		return nil
	}
	res, err := svc.UserCancel(ctx, "o1", "u1")
	require.NoError(t, err, "the order is cancelled whatever the seat store did")
	assert.True(t, res.Changed)
	assert.Zero(t, res.Released)
	got := ev.Of(expiry.KindReleaseFailed)
	require.Len(t, got, 1)
	assert.Equal(t, "o1", got[0].OrderNo)
	assert.Equal(t, 2, got[0].Seats, "the seats left locked")
	assert.ErrorIs(t, got[0].Err, outage)
}
