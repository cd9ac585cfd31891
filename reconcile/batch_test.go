package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// badBatch is the Service with a batch path whose batches fail while they
// hold the bad order, whose own Cancel fails too.
type badBatch struct {
	*cancel.Service
	bad     string
	unknown bool // the failing batch's error says its COMMIT's outcome is unknown
	batches atomic.Int32
}

func (b *badBatch) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	b.batches.Add(1)
	if slices.Contains(nos, b.bad) {
		if b.unknown {
			return nil, fmt.Errorf("COMMIT refused in a way the store does not recognise: %w", expiry.ErrCommitUnknown)
		}
		return nil, errors.New("a row of the batch is locked")
	}
	return b.Service.ExpireDue(ctx, nos, reason)
}

func (b *badBatch) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if req.OrderNo == b.bad {
		return cancel.Result{}, errors.New("row locked")
	}
	return b.Service.Cancel(ctx, req)
}

// The expired pass in batches: every due order is expired and its seats
// released; a batch that fails is tried order by order, so its bad order
// is skipped alone and the others of its batch expire in the same round
// (I12).
//
// Also when the failing batch's outcome is unknown (expiry.ErrCommitUnknown):
// its orders still pending were not cancelled by it, so an order whose
// batches always end so holds nobody back either.
func TestExpiredPassInBatches(t *testing.T) {
	for _, unknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("unknown=%v", unknown), func(t *testing.T) { testExpiredPassInBatches(t, unknown) })
	}
}

func testExpiredPassInBatches(t *testing.T, unknown bool) {
	e := newEnv(t)
	for i := 0; i < 40; i++ {
		e.place(t, fmt.Sprintf("o%02d", i), time.Minute)
	}
	e.place(t, "later", time.Hour)
	e.advance(2 * time.Minute)
	svc := &badBatch{Service: e.svc, bad: "o07", unknown: unknown}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc, Batch: 40, Workers: 2})
	require.NoError(t, err)
	rep, err := r.Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 39, rep.Expired)
	assert.Equal(t, 1, rep.Skipped)
	assert.Equal(t, int32(2), svc.batches.Load(), "40 orders, 2 workers: two batches")
	for i := 0; i < 40; i++ {
		no := fmt.Sprintf("o%02d", i)
		want := expiry.StatusCancelled
		if no == "o07" {
			want = expiry.StatusPending
		}
		assert.Equal(t, want, e.status(t, no), no)
	}
	assert.Equal(t, expiry.StatusPending, e.status(t, "later"), "I4")
	show, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	var holders []string
	for _, st := range show {
		holders = append(holders, st.OrderNo)
	}
	slices.Sort(holders)
	holders = slices.Compact(holders)
	assert.Equal(t, []string{"later", "o07"}, holders, "every expired order's seats were released")
	rep, err = r.Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Skipped, "the bad order backs off")
	assert.Zero(t, rep.Expired)
}

// lostAck is the Service with a batch path whose COMMIT lands and whose
// acknowledgement is lost: the orders are cancelled (their seats not yet
// released), and the error says the outcome is unknown.
type lostAck struct {
	*cancel.Service
	store   cancel.OrderStore
	batches atomic.Int32
}

func (l *lostAck) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	if l.batches.Add(1) > 1 {
		return l.Service.ExpireDue(ctx, nos, reason)
	}
	if _, err := l.store.CancelDue(ctx, nos, reason); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("connection reset during COMMIT: %w", expiry.ErrCommitUnknown)
}

// A batch whose COMMIT's outcome is unknown: its orders were cancelled by
// this reconciler, so none of them is a race somebody else won, and their
// seats are free within a round past Settle (I3), with nobody's freed
// twice (I2).
func TestExpiredPassBatchCommitUnknown(t *testing.T) {
	e := newEnv(t)
	var nos []string
	for i := 0; i < 20; i++ {
		nos = append(nos, e.place(t, fmt.Sprintf("o%02d", i), time.Minute).OrderNo)
	}
	e.place(t, "later", time.Hour)
	e.advance(2 * time.Minute)
	svc := &lostAck{Service: e.svc, store: e.store}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc, Batch: 40, Workers: 1})
	require.NoError(t, err)
	rep, err := r.Round(context.Background())
	require.NoError(t, err)
	assert.Zero(t, rep.LostRaces, "nobody else decided these orders: %+v", rep)
	for _, no := range nos {
		assert.Equal(t, expiry.StatusCancelled, e.status(t, no), no)
	}
	e.advance(reconcile.SettleDefault + time.Second)
	_, err = r.Round(context.Background())
	require.NoError(t, err)
	show, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	for seat, st := range show {
		assert.Equal(t, "later", st.OrderNo, "seat %s still held by a cancelled order", seat)
	}
	assert.Len(t, show, 2, "the pending order keeps its seats")
}
