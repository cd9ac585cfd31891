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

// hostOwned reports a status that is none of the library's: the host's own
// (expiry.StatusHost, I19), or any other the store may answer one day.
// Such an order is the host's to decide; no pass frees, sells or restores
// its seats.
func hostOwned(s expiry.Status) bool {
	return s != expiry.StatusPending && s != expiry.StatusPaid && s != expiry.StatusCancelled
}

// hostStatus counts and reports order no, in a status the host owns, once
// per call of its pass (reported holds those reported already). Its callers
// run outside the expired pass's workers: rep is theirs alone. It is the
// host's ordinary business (an operator's hold), so it is logged at debug
// level; the event and Report.HostStatus count it.
func (r *Reconciler) hostStatus(ctx context.Context, no string, rep *Report, reported map[string]bool) {
	if reported[no] {
		return
	}
	reported[no] = true
	rep.HostStatus++
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSkipped, OrderNo: no, Reason: "host_status"})
	r.log.DebugContext(ctx, "reconcile: an order in a status the host owns; its seats are left to the host", "order", no)
}

// heldClaims returns claims with those of orders in a status the host
// owns as pending ones, and reports those orders once each: such an order
// holds its seats as a pending one does (I8, I19), so a seat store that
// lost them gets them back as locks, counted for the buyer's limit; the
// lock pass then leaves those locks to the host.
func (r *Reconciler) heldClaims(ctx context.Context, claims []cancel.Claim, rep *Report) []cancel.Claim {
	reported := map[string]bool{}
	for i, c := range claims {
		if hostOwned(c.Status) {
			r.hostStatus(ctx, c.OrderNo, rep, reported)
			claims[i].Status = expiry.StatusPending
		}
	}
	return claims
}
