package reconcile

import (
	"context"
	"fmt"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Rows SQL holds that the library cannot act on: a legacy row a host's old
// code wrote (an order number with a space in it, a claim whose order has
// no user). Each is counted (Report.Unreadable), reported by order number
// and left as it is; the passes go on with the others.

// readable returns the numbers of nos that are valid ids, and reports the
// others as unreadable: no cancel can name them (a batch with one of them
// would be refused whole), so they are not tried.
func (r *Reconciler) readable(ctx context.Context, nos []string, rep *Report) []string {
	out := nos[:0:0]
	for _, no := range nos {
		if err := expiry.ValidateID("order number", no); err != nil {
			r.unreadable(ctx, no, err, rep)
			continue
		}
		out = append(out, no)
	}
	return out
}

// unreadable counts and reports a row of order no that no pass can act on.
// Its callers run outside the expired pass's workers: rep is theirs alone.
func (r *Reconciler) unreadable(ctx context.Context, no string, err error, rep *Report) {
	rep.Unreadable++
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSkipped, OrderNo: no, Reason: "unreadable", Err: err})
	r.log.WarnContext(ctx, "reconcile: a row SQL holds cannot be read as the library's; left as it is", "order", no, "err", err)
}

// readableClaims returns the claims the seat store can be given, and
// reports the others as unreadable, once per order: a claim with an id
// missing or invalid would make the seat store refuse the whole batch, and
// the claims pass would stop there in every round. Its seat is neither
// restored nor freed: no user is guessed.
func (r *Reconciler) readableClaims(ctx context.Context, claims []cancel.Claim, rep *Report) []cancel.Claim {
	out := claims[:0:0]
	reported := map[string]bool{}
	for _, c := range claims {
		err := cancel.Hold{ShowID: c.ShowID, OrderNo: c.OrderNo, UserID: c.UserID, Seats: []string{c.SeatID}}.Validate()
		if err == nil {
			out = append(out, c)
			continue
		}
		if !reported[c.OrderNo] {
			reported[c.OrderNo] = true
			r.unreadable(ctx, c.OrderNo, fmt.Errorf("claim of seat %q of show %q: %w", c.SeatID, c.ShowID, err), rep)
		}
	}
	return out
}
