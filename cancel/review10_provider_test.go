package cancel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// review10: adversarial tests of the provider's side of a timeout
// (provider.go). Each names the invariant it judges.

// hookedClose runs a hook (once) inside the provider's close, before the
// scripted close answers: what happens at the provider or in the store
// while the close is in flight.
type hookedClose struct {
	*scripted
	before func(no string)
}

func (h *hookedClose) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	if f := h.before; f != nil {
		h.before = nil
		f(o.No)
	}
	return h.scripted.ClosePayment(ctx, o)
}

func review10Env(t *testing.T) (*provEnv, *hookedClose) {
	e := newProvEnv(t)
	h := &hookedClose{scripted: e.prov}
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev},
		Provider: h, ProviderRetry: envRetry, MaxHold: envHold,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			e.refunds[d.PaymentID]++
			e.mu.Unlock()
			return nil
		}})
	require.NoError(t, err)
	return e, h
}

// TestReview10UnclosedWithoutACancel (events): at the maximum hold the
// close fails while the buyer's callback pays the order. Nothing is
// cancelled (the order is paid, its seat sold), yet the ask counts
// "unclosed" (the alert the README tells operators to page on) and logs
// "a due order is cancelled at its maximum hold with its payment session
// not closed".
func TestReview10UnclosedWithoutACancel(t *testing.T) {
	ctx := context.Background()
	e, h := review10Env(t)
	e.placeDue(t, "A")
	e.prov.query["A"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	e.prov.closeErr["A"] = errors.New("provider: 503")
	e.clk.add(envHold)                           // the message came late (a consumer down): the cap is now
	cancelled, o, err := e.svc.Timeout(ctx, "A") // moved to the cap (now): waits
	require.NoError(t, err)
	require.False(t, cancelled)
	require.LessOrEqual(t, o.Remaining(), time.Duration(0))
	h.before = func(no string) { // the buyer's callback lands during the close
		_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-cb"})
		assert.NoError(t, err)
	}
	cancelled, o, err = e.svc.Timeout(ctx, "A")
	require.NoError(t, err)
	assert.False(t, cancelled)
	assert.Equal(t, expiry.StatusPaid, e.order(t, "A").Status, "paid by its callback")
	assert.Equal(t, "sold:A", e.holder(t, "A"))
	_ = o
	assert.NotContains(t, e.answers("A"), "unclosed", "nothing was cancelled: no session was left open on a cancelled order")
}

// TestReview10ClosedSessionOnALiveOrder (I18, ClosePayment's contract):
// two asks of one order (a timeout beside the reconciler). The first's
// query answers not paid and it closes the session; while the close is
// in flight, the second's query fails (the provider is flaky) and it
// re-arms the order. The first's cancel then finds the order not due: the
// order lives on, waiting ProviderRetry, barred at the provider. The
// review asked that the ask that closed it cancel it; that would cancel
// before the deadline the other ask just set (I4), so it stays as it is,
// documented: the buyer had no payment in flight (the provider said not
// paid), the order is past its deadline, and its next ask finds it not
// paid and cancels it. Judged: nothing paid, nothing refunded, cancelled
// at the next ask.
func TestReview10ClosedSessionOnALiveOrder(t *testing.T) {
	ctx := context.Background()
	e, h := review10Env(t)
	e.placeDue(t, "A")
	h.before = func(no string) { // the other ask, its query failing
		e.prov.mu.Lock()
		e.prov.queryErr[no] = errors.New("provider: 502")
		e.prov.mu.Unlock()
		_, err := e.svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
		assert.NoError(t, err)
		e.prov.mu.Lock()
		delete(e.prov.queryErr, no)
		e.prov.mu.Unlock()
	}
	cancelled, o, err := e.svc.Timeout(ctx, "A")
	require.NoError(t, err)
	_, _, closed := e.prov.counts("A")
	require.Equal(t, 1, closed, "the session was closed (not paid)")
	assert.False(t, cancelled, "the other ask re-armed it: not due")
	require.Equal(t, expiry.StatusPending, o.Status)
	h.before = nil
	e.clk.add(o.Remaining())
	cancelled, _, err = e.svc.Timeout(ctx, "A") // its next ask
	require.NoError(t, err)
	assert.True(t, cancelled, "not paid: cancelled at its next ask")
	assert.Empty(t, e.holder(t, "A"))
	e.mu.Lock()
	assert.Empty(t, e.refunds, "nothing was paid, nothing refunded")
	e.mu.Unlock()
}
