package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// An outside review of fbc1d86 (the expired pass always in batches, a
// pending order a batch left counted Skipped "held", no backoff), on the
// in-memory stores, judged by orders, seats and the round's counts.

// One due order's row is held by the host for ever (a request stuck in its
// payment provider call, its SELECT … FOR UPDATE never ending) while other
// due orders come and go. Every round: the others are expired (I12); the
// held one is tried again without harm (still pending, its seats still its
// own, never cancelled behind its holder's back), counted once as Skipped
// with one KindSkipped "held" event, and not backed off; it never makes Run
// start the next round at once (More) on its own; Overdue counts it (it is
// overdue). Let go, the next round expires it and frees its seats.
func TestReviewBatchHeldRowForEver(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	held := e.place(t, "held", time.Minute)
	letGo := e.store.HoldRow("held")
	defer letGo()
	rec := &expirytest.Recorder{}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 10, MaxPerRound: 50, Grace: time.Minute,
		Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	for round := 0; round < 8; round++ {
		var fresh []string
		for i := 0; i < 5; i++ {
			no := fmt.Sprintf("r%dn%d", round, i)
			e.place(t, no, time.Minute)
			fresh = append(fresh, no)
		}
		e.advance(2 * time.Minute)
		before := len(rec.Of(expiry.KindSkipped))
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		assert.Equal(t, 5, rep.Expired, "round %d: I12: the others expire beside the held row", round)
		assert.Equal(t, 1, rep.Skipped, "round %d: the held order is counted once", round)
		assert.Zero(t, rep.LostRaces, "round %d", round)
		assert.False(t, rep.More, "round %d: a held row alone does not make Run spin", round)
		skips := rec.Of(expiry.KindSkipped)[before:]
		if assert.Len(t, skips, 1, "round %d: one skipped event", round) {
			assert.Equal(t, "held", skips[0].Reason)
			assert.Equal(t, "held", skips[0].OrderNo)
		}
		for _, no := range fresh {
			assert.Equal(t, expiry.StatusCancelled, e.status(t, no), "round %d: %s", round, no)
		}
		assert.Equal(t, expiry.StatusPending, e.status(t, "held"), "round %d: never cancelled behind its holder's back", round)
		show, err := e.seats.Show(ctx, "s")
		require.NoError(t, err)
		assert.Len(t, show, 2, "round %d: only the held order's two seats are locked", round)
		for _, seat := range held.Seats {
			assert.Equal(t, "held", show[seat].OrderNo, "round %d", round)
		}
		n, _, err := e.store.Overdue(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, n, "round %d: Overdue counts the held order", round)
	}
	letGo()
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Expired, "let go, the held order is expired at once (no backoff)")
	assert.Equal(t, expiry.StatusCancelled, e.status(t, "held"))
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Empty(t, show, "I2: its seats are freed")
	n, err := e.seats.Held(ctx, "s", "u1")
	require.NoError(t, err)
	assert.Zero(t, n, "I8")
}

// More held rows than a round may try (MaxPerRound): the rounds must go
// past them to a due order behind them (keyset paging, I12), and Run's
// "more work" signal must not stay on for ever because of rows it can
// only pass by.
func TestReviewBatchManyHeldRowsDoNotHideTheRest(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for i := 0; i < 30; i++ {
		no := fmt.Sprintf("h%02d", i)
		e.place(t, no, time.Minute)
		defer e.store.HoldRow(no)()
	}
	e.advance(30 * time.Second)
	e.place(t, "zlast", time.Minute) // due after every held one
	e.advance(2 * time.Minute)
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 10, MaxPerRound: 20, Grace: time.Minute})
	require.NoError(t, err)
	more := 0
	for round := 0; round < 6; round++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		t.Logf("round %d: %+v", round, rep)
		if rep.More {
			more++
		}
	}
	assert.Equal(t, expiry.StatusCancelled, e.status(t, "zlast"), "I12: the due order behind the held rows is reached")
	assert.Less(t, more, 6, "Run would start round after round at once, for ever, because of held rows")
}

// A batch partly held, and the held order then paid by its holder: the
// payment is honoured (the batch never cancelled it), its seats sold, and
// the next round counts nothing against it.
func TestReviewBatchHeldThenPaid(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for i := 0; i < 20; i++ {
		e.place(t, fmt.Sprintf("o%02d", i), time.Minute)
	}
	letGo := e.store.HoldRow("o07")
	e.advance(2 * time.Minute)
	r := e.reconciler(t, 20, 100)
	rep, err := r.Round(ctx)
	require.NoError(t, err)
	assert.Equal(t, 19, rep.Expired)
	assert.Equal(t, 1, rep.Skipped)
	letGo()
	res, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "o07", PaymentID: "pay-o07"})
	require.NoError(t, err, "I14: the held order is paid by its holder")
	assert.True(t, res.Changed)
	rep, err = r.Round(ctx)
	require.NoError(t, err)
	assert.Zero(t, rep.Expired+rep.Skipped+rep.LostRaces)
	show, err := e.seats.Show(ctx, "s")
	require.NoError(t, err)
	assert.Len(t, show, 2)
	for _, st := range show {
		assert.Equal(t, cancel.SeatSold, st.Status)
		assert.Equal(t, "o07", st.OrderNo)
	}
}

// blockingBatches is the Service whose batches hang until their context
// ends (a database that stopped answering).
type blockingBatches struct {
	*cancel.Service
	started chan struct{}
}

func (b *blockingBatches) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// The host stops the reconciler (Run's context ends) while its batches
// hang: Round returns promptly, leaves no goroutine behind (goleak in
// TestMain), tries nothing one by one after the stop, backs nothing off,
// and the next reconciler expires every order.
func TestReviewBatchStoppedMidBatch(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 64; i++ {
		e.place(t, fmt.Sprintf("o%02d", i), time.Minute)
	}
	e.advance(2 * time.Minute)
	svc := &blockingBatches{Service: e.svc, started: make(chan struct{}, 1)}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc, Batch: 64, Workers: 4, OrderTimeout: time.Hour})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var rep reconcile.Report
	go func() {
		defer close(done)
		rep, _ = r.Round(ctx)
	}()
	<-svc.started
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Round does not return after its context ended")
	}
	t.Logf("stopped round: %+v", rep)
	assert.Zero(t, rep.Expired)
	for i := 0; i < 64; i++ {
		assert.Equal(t, expiry.StatusPending, e.status(t, fmt.Sprintf("o%02d", i)))
	}
	rep, err = e.reconciler(t, 64, 1000).Round(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 64, rep.Expired)
	rep, err = r.Round(context.Background()) // the stopped reconciler, restarted: nothing backed off
	require.NoError(t, err)
	assert.Zero(t, rep.Skipped)
}
