package cancel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Review (final) of e78cc78: after a batch whose COMMIT's outcome is
// unknown, a queued Timeout reads its order and, finding it pending, goes
// alone "because the batch commits all or nothing". But a COMMIT whose
// reply was lost may still be in flight on the server (a synchronous
// replica's ack awaited, a slow fsync, a deferred trigger): the reader on
// another connection sees the old row (pending) and the one-order
// compare-and-set then waits on the batch's row lock and finds the batch's
// cancel once it lands. The call answers "cancelled by somebody else" with
// no error: the batch's cancel is reported by nobody (no KindCancelled, no
// call answered ErrCommitUnknown, so a ledger cannot even attribute it),
// exactly what d256a5c set out to prevent (I1/I5 in the storm).
//
// The store models it: CancelDue returns ErrCommitUnknown before its
// COMMIT is visible, and the COMMIT lands when a compare-and-set for one
// of its orders waits on the row (as PostgreSQL's and InnoDB's UPDATE ...
// WHERE status = pending do behind the batch's lock).
func TestReviewFinalTimeoutBatchUnknownCommitLandsAfterRead(t *testing.T) {
	ign := goleak.IgnoreCurrent()
	e := newA5(t, a5opts{})
	kinds := e.a5mix(t, 6, 0, 0, 0, 0)
	e.place(t, "g0", "u0", "s0", -time.Minute)

	var (
		mu      sync.Mutex
		late    map[string]bool // the batch's orders whose COMMIT is still in flight
		lateNos []string
		landed  bool
		inner   func(context.Context, []string, cancel.Reason) ([]cancel.Result, error)
	)
	e.store.setCancelDue(func(ctx context.Context, in func(context.Context, []string, cancel.Reason) ([]cancel.Result, error), nos []string, r cancel.Reason) ([]cancel.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		late = map[string]bool{}
		for _, no := range nos {
			late[no] = true
		}
		lateNos, inner = append([]string(nil), nos...), in
		return nil, fmt.Errorf("connection reset after COMMIT was sent: %w", expiry.ErrCommitUnknown)
	})
	g := e.hold(t, context.Background(), "g0")
	gate := e.store.beforePending.Load()
	land := func(ctx context.Context, req cancel.Request) error {
		mu.Lock()
		if late[req.OrderNo] && !landed {
			// The compare-and-set waits on the batch's row lock; the
			// in-flight COMMIT completes first.
			landed = true
			_, err := inner(context.Background(), lateNos, cancel.ReasonTimeout)
			mu.Unlock()
			if err != nil {
				return err
			}
		} else {
			mu.Unlock()
		}
		return (*gate)(ctx, req)
	}
	e.store.beforePending.Store(&land)
	n := 0
	for no := range kinds {
		g.enqueue(context.Background(), no)
		n++
	}
	g.queued(t, n)
	_, out := g.wait(t)
	require.True(t, landed, "the batch's COMMIT landed")

	ctx := context.Background()
	for _, c := range out {
		o, err := e.mem.Order(ctx, c.no)
		require.NoError(t, err)
		require.Equal(t, expiry.StatusCancelled, o.Status)
		if !c.cancelled && c.err == nil {
			t.Errorf("I1/I5: order %s: the batch's own cancel (its COMMIT landed after the read) answered as decided by somebody else (%v); no KindCancelled, no ErrCommitUnknown", c.no, c.o.Status)
		}
	}
	events := map[string]int{}
	for _, ev := range e.ev.Of(expiry.KindCancelled) {
		events[ev.OrderNo]++
	}
	for _, c := range out {
		if events[c.no] == 0 && (c.err == nil || !assert.ErrorIs(t, c.err, expiry.ErrCommitUnknown)) {
			t.Errorf("order %s cancelled, reported by nobody and no call said its outcome is unknown", c.no)
		}
	}
	noLeak(t, ign)
}
