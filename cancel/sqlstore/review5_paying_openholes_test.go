//go:build openholes

package sqlstore_test

import (
	"database/sql"
	"testing"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// An open hole an outside review of Statuses.Paying found, kept failing
// behind the openholes tag (go test -tags openholes -run TestReview5 ./cancel/sqlstore/):
// an order the host reopens after a cancel (pending or paying) is paid
// without its seats, which another order may hold by then (older than
// Paying).

// TestReview5HostReopenedCancelledOrderIsPayable: the library's timeout
// cancelled X and freed its seat, which Y then placed. The host's code
// moves X back into a payment step (a "pay again" button writing a Paying
// value over the cancelled one) and the provider's callback for X arrives.
// The payment must not be kept for seats X no longer holds: either X is
// paid with its seat (impossible: Y holds it) or it is refunded (I9, I15).
// NOT specific to Paying: the control (the host writes the pending value
// back) fails the same way; Paying only widens the door (a payment step
// after an expiry is a plausible host flow).
func TestReview5HostReopenedCancelledOrderIsPayable(t *testing.T) {
	c := payingCases[0]
	for _, noClaims := range []bool{false, true} {
		for _, reopen := range []string{"paying", "pending"} {
			name := "claims/" + reopen
			if noClaims {
				name = "noclaims/" + reopen
			}
			t.Run(name, func(t *testing.T) {
				eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
					reopenedAfterTimeout(t, c, d, db, noClaims, false, reopen)
				})
			})
		}
	}
}
