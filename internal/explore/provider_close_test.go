package explore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Why PaymentProvider.ClosePayment's contract bars the order at the
// provider for good. The exploration of payments in flight found, with a
// plain adapter (provPlain) whose close only ends the session open at the
// time: a timeout (or a reconcile round) asks the provider, which answers
// not paid, closes (nothing was open), and then commits the cancel.
// Between the close and the commit the order is still pending, so the host
// opens a payment session when its buyer asks for one; the cancel then
// commits with that session open, never closed: the buyer can pay an order
// that is gone (refunded, or reinstating the order, as any late payment).
// The contract asks a close to bar any session after it (the host's
// adapter records the close and refuses to open another; a provider keyed
// by the merchant's order number, whose closed trade cannot be paid again,
// does so itself): the scenario "payments in flight" in TestExplore
// explores such an adapter (provBarring), and the window is gone.
//
// The shortest sequences (depth 4 and 5), as the exploration prints them:
//
//  1. place o1 by u1 on a1: Lock, Insert, Send → ok
//  2. timeout o1: QueryPayment(o1)=not_paid, ClosePayment(o1)=not_paid
//     → stopped before CancelPending(o1 timeout)
//  3. buyer opens a payment session for o1 → open
//  4. timeout o1: CancelPending(o1 timeout)=changed→cancelled, Release → ok
//     finding: order t1/o1 cancelled (timeout) 15m0s after its placement
//     (MaxHold 20m0s) with its session open at the provider
//
// and the same for a reconcile round stopped before its CancelDue.

// TestCloseBarsLaterSessions replays the shortest sequence: the ledgers
// find the open session with the plain adapter (they can see it); with an
// adapter that keeps the contract the buyer's session after the close
// cannot be opened.
func TestCloseBarsLaterSessions(t *testing.T) {
	shared := wireTenants(t)
	for _, tc := range []struct {
		name    string
		adapter provModel
		finds   bool
	}{{"plain adapter: the window", provPlain, true}, {"barring adapter: the contract", provBarring, false}} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := paymentsInFlightWith(tc.adapter)
			x := newExplorer(kinds, shared, 1)
			defer x.pool.close()
			seq, err := resolve(kinds, []spec{{"place o1", 0}, {"timeout o1", 3}, {"buyer opens", 0}, {"timeout o1", 0}})
			require.NoError(t, err)
			fs, err := x.check(seq)
			if !tc.finds {
				// The adapter refuses the session after the close: the
				// buyer's step cannot happen.
				require.ErrorContains(t, err, "not enabled")
				return
			}
			require.NoError(t, err)
			out := x.explain(record{seq: seq, at: true})
			var found []string
			for _, f := range fs {
				found = append(found, f.class+": "+f.text)
			}
			require.NotEmpty(t, found, "the ledgers missed the session left open in\n%s", out)
			for _, f := range found {
				require.Contains(t, f, "I18", "only the session's ledger: %s", f)
			}
		})
	}
}
