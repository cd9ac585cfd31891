package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// soldPass is the sold pass's state: its cursor, and what this Reconciler
// reported already.
type soldPass struct {
	mu       sync.Mutex
	cursor   string
	reported map[[3]string]bool // (show, order, reason)
}

// sold runs the sold pass, for when SQL went back in time (see cancel's
// backintime.go): every seat the seat store sold must belong to an order
// SQL has paid, because a sale only ever follows a payment's commit (Pay,
// scan #4, a rebuild from SQL's paid claims) and paid is final. A sale
// whose order SQL has pending (or in its payment step, OrderState.Paying),
// cancelled or not at all is a payment SQL lost. Nothing here can repair it: the payment id was in the lost commit,
// so the order cannot be paid again, and freeing the seat would take it
// from a buyer who paid. So the seat is left sold (never freed, never
// locked or sold for another order: Lock takes free seats only), counted
// in Report.Diverged in every round, and reported to the host once per
// order and reason per Reconciler as an expiry.KindDiverged event (reasons
// cancel.DivergedSoldPending, DivergedSoldCancelled, DivergedSoldMissing)
// with an error log naming the seats. The pass is bounded by MaxPerRound
// like the others and goes on from its cursor in the next round; it costs
// what the claims pass (#2) costs, one read per seat held.
//
// A host that deletes paid orders from SQL (archiving) must retire their
// shows from the seat store first (redisseat's RetireShow): their sales
// would otherwise be reported as sold_missing.
func (r *Reconciler) sold(ctx context.Context, rep *Report) error {
	r.soldPass.mu.Lock()
	cursor := r.soldPass.cursor
	r.soldPass.mu.Unlock()
	var errs []error
	for calls := 0; calls*r.c.Batch < r.c.MaxPerRound; calls++ {
		sales, next, err := r.c.Seats.ScanSold(ctx, cursor, r.c.Batch)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("reconcile: scan sold seats: %w", err))...)
		}
		if err := r.judgeSales(ctx, sales, rep); err != nil {
			errs = append(errs, err)
		}
		cursor = next
		r.soldPass.mu.Lock()
		r.soldPass.cursor = next
		r.soldPass.mu.Unlock()
		if next == "" {
			break
		}
	}
	return errors.Join(errs...)
}

// judgeSales counts and reports the sales SQL does not back.
func (r *Reconciler) judgeSales(ctx context.Context, sales []cancel.SeatSale, rep *Report) error {
	if len(sales) == 0 {
		return nil
	}
	var nos []string
	seen := map[string]bool{}
	for _, s := range sales {
		if !seen[s.OrderNo] {
			seen[s.OrderNo] = true
			nos = append(nos, s.OrderNo)
		}
	}
	statuses, err := r.c.Orders.Statuses(ctx, nos)
	if err != nil {
		return fmt.Errorf("reconcile: read statuses of sold seats: %w", err)
	}
	type group struct {
		show, no, reason string
		seats            []string
	}
	var groups []*group
	byKey := map[[3]string]*group{}
	counted := map[[2]string]bool{} // a sale seen twice in a batch counts once
	for _, s := range sales {
		st, exists := statuses[s.OrderNo]
		var reason string
		switch {
		case !exists:
			reason = cancel.DivergedSoldMissing
		case st.Status == expiry.StatusPending, st.Paying:
			// Paying: payable as a pending order, so its sale is a payment
			// SQL lost too, whatever status the host's payment step wrote.
			reason = cancel.DivergedSoldPending
		case st.Status == expiry.StatusCancelled:
			reason = cancel.DivergedSoldCancelled
		default:
			continue // paid: the sale is the order's (in a status the host owns: the host's to judge)
		}
		if counted[[2]string{s.ShowID, s.SeatID}] {
			continue
		}
		counted[[2]string{s.ShowID, s.SeatID}] = true
		rep.Diverged++
		k := [3]string{s.ShowID, s.OrderNo, reason}
		g := byKey[k]
		if g == nil {
			g = &group{show: s.ShowID, no: s.OrderNo, reason: reason}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.seats = append(g.seats, s.SeatID)
	}
	for _, g := range groups {
		k := [3]string{g.show, g.no, g.reason}
		r.soldPass.mu.Lock()
		if r.soldPass.reported == nil {
			r.soldPass.reported = map[[3]string]bool{}
		}
		first := !r.soldPass.reported[k]
		r.soldPass.reported[k] = true
		r.soldPass.mu.Unlock()
		if !first {
			continue
		}
		r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDiverged, OrderNo: g.no, Reason: g.reason, Seats: len(g.seats)})
		r.log.ErrorContext(ctx, "seats sold in the seat store that SQL does not show paid (SQL lost commits: a failover or a restore); left sold, for the host to settle",
			"order", g.no, "show", g.show, "seats", g.seats, "reason", g.reason)
	}
	return nil
}
