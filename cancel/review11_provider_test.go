package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// lostCommit is a memstore whose next cancel commits and then reports its
// COMMIT's outcome as unknown (a connection lost after COMMIT was sent).
type lostCommit struct {
	*memstore.Store
	lose bool
}

func (s *lostCommit) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	res, err := s.Store.CancelPending(ctx, req)
	if s.lose && err == nil && res.Changed {
		s.lose = false
		return cancel.Result{}, fmt.Errorf("memstore: commit: connection reset: %w", expiry.ErrCommitUnknown)
	}
	return res, err
}

// TestReview11UnclosedLostWithTheCommit (I18: a session left open on a
// cancelled order is counted "unclosed"): at the maximum hold the close
// fails, and the timeout's cancel commits but its COMMIT's outcome is
// unknown. Timeout answers the error (not cancelled), so its deferred
// "unclosed" is not emitted; the redelivery finds the order cancelled
// (askProvider: not pending, verdictDone) and emits nothing either. The
// order is cancelled with its payment session open, and no "unclosed" is
// ever counted (before 489cb0b it was counted at the ask).
func TestReview11UnclosedLostWithTheCommit(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	ls := &lostCommit{Store: e.store}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: ls, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev},
		Provider: e.prov, ProviderRetry: envRetry, MaxHold: envHold})
	require.NoError(t, err)
	e.placeDue(t, "A")
	e.prov.query["A"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	e.prov.closeErr["A"] = errors.New("provider: 503")
	e.clk.add(envHold)
	cancelled, _, err := e.svc.Timeout(ctx, "A") // moved to its cap: waits
	require.NoError(t, err)
	require.False(t, cancelled)
	ls.lose = true
	_, _, err = e.svc.Timeout(ctx, "A")
	require.ErrorIs(t, err, expiry.ErrCommitUnknown)
	cancelled, _, err = e.svc.Timeout(ctx, "A") // the redelivery
	require.NoError(t, err)
	assert.False(t, cancelled)
	require.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status, "the lost COMMIT landed")
	assert.Contains(t, e.answers("A"), "unclosed", "a cancelled order whose session the provider could not close is counted")
}
