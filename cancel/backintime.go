package cancel

import (
	"context"
	"errors"
	"fmt"

	"github.com/seatflow/orderexpiry/expiry"
)

// When SQL goes back in time.
//
// SQL is the source of truth, but a database can lose its last commits: an
// asynchronous replica promoted after its primary died, a restore from a
// backup. The seat store and the payment provider keep what those commits
// did, so afterwards SQL may have pending (or not at all) an order whose
// seats the seat store sold, or have forgotten a refund the hook made. The
// library then keeps two rules and reports the rest:
//
//   - a sold seat is never freed, nor locked or sold for another order: the
//     seat store's sale stands (every release and sale already acts only on
//     locks), and a sale SQL does not back is reported, never guessed;
//   - a payment id is never both honoured and refunded, and refunded once:
//     the seat store records each refund the hook made (SeatStore.Refunded), so a
//     refund SQL forgot is not made again, and a refunded payment is
//     refused even when SQL would honour it.
//
// What the library cannot repair it reports to the host as an
// expiry.KindDiverged event (see its reasons there): a payment SQL lost
// (only the host, with the provider's records, can honour it again or
// refund it), and a seat two buyers hold. The reconciler's sold pass
// (SeatStore.ScanSold) finds the sales SQL does not back; Pay finds a seat
// it could not sell because the seat store sold it to another order
// (SeatStore.SeatStates) and a refunded payment (SeatStore.Refunded).

// SeatSale is one seat sold in the seat store, as the reconciler's sold
// pass reads it.
type SeatSale struct {
	ShowID  string
	SeatID  string
	OrderNo string
	UserID  string
}

// refusedBefore is Pay's answer to a payment the seat store recorded as
// refunded: it is never honoured, whatever SQL says now. It goes the way of
// any discrepancy (recorded in SQL again when SQL forgot it, so SQL refuses
// its next repeat by itself), and runHook, finding the refund marked, does
// not call the hook again.
func (s *Service) refusedBefore(ctx context.Context, p Payment) (Result, error) {
	o, err := s.store.Order(ctx, p.OrderNo)
	if errors.Is(err, expiry.ErrNotFound) {
		// SQL lost the order too: nothing to record it against.
		s.diverged(ctx, p.OrderNo, p.PaymentID, DivergedRefundedPayment, 0)
		return Result{}, fmt.Errorf("cancel: order %s: payment %s (refunded before): %w", p.OrderNo, p.PaymentID, ErrDiscrepancy)
	}
	if err != nil {
		return Result{}, fmt.Errorf("cancel: pay %s: %w", p.OrderNo, err)
	}
	if p.UserID != "" && o.UserID != p.UserID {
		return Result{}, fmt.Errorf("cancel: pay %s: %w", p.OrderNo, ErrNotOwner)
	}
	res := Result{Order: o}
	if o.Status == expiry.StatusPaid || o.Status == expiry.StatusCancelled {
		// PayPending cannot pay a paid or cancelled order (it never goes
		// back): its answer says who paid, as for any discrepancy. A
		// pending one is never handed to it, nor one in a status of the
		// host's (a sqlstore mapping's Paying values are payable): it
		// would be honoured.
		r, err := s.store.PayPending(ctx, p)
		if (err == nil || errors.Is(err, ErrDiscrepancy)) && r.Order.No != "" {
			res = r
		}
	}
	return s.refuse(ctx, p, res, res.Order.Status, true)
}

// Reasons of the expiry.KindDiverged events.
const (
	// DivergedSoldPending: seats sold to an order SQL has pending, or in
	// a status of its payment step (OrderState.Paying): a payment SQL
	// lost. Reported by the reconciler.
	DivergedSoldPending = "sold_pending"
	// DivergedSoldCancelled: seats sold to an order SQL has cancelled (a
	// payment SQL lost, then the deadline passed). Reported by the
	// reconciler.
	DivergedSoldCancelled = "sold_cancelled"
	// DivergedSoldMissing: seats sold to an order SQL does not have (its
	// placement and payment lost). Reported by the reconciler.
	DivergedSoldMissing = "sold_missing"
	// DivergedSoldToAnother: a payment SQL accepted for seats the seat
	// store sold to another order: two buyers hold them. Reported by Pay.
	DivergedSoldToAnother = "sold_to_another"
	// DivergedRefundRepeated: a refund SQL forgot, recorded again and not
	// handed to the hook a second time. Reported by Pay.
	DivergedRefundRepeated = "refund_repeated"
	// DivergedRefundedPayment: a payment the seat store recorded refunded,
	// for an order SQL has pending again (or lost): refused. Reported by
	// Pay.
	DivergedRefundedPayment = "refunded_payment"
)

// diverged reports what SQL going back in time left that the library
// cannot repair.
func (s *Service) diverged(ctx context.Context, orderNo, paymentID, reason string, seats int) {
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDiverged, OrderNo: orderNo, Reason: reason, Seats: seats})
	s.log.ErrorContext(ctx, "SQL and the seat store diverged (SQL lost commits: a failover or a restore); left to the host",
		"order", orderNo, "payment", paymentID, "reason", reason, "seats", seats)
}

// checkSale is called when a payment's sale sold fewer seats than SQL
// paid: a seat the seat store sold to another order is reported (two
// buyers hold it). A seat sold to this order already (a repeat, the
// reconciler) or locked by another (a placement that will fail on SQL's
// claim and release it) is not.
func (s *Service) checkSale(ctx context.Context, paymentID string, h Hold) {
	states, err := s.seats.SeatStates(ctx, h.ShowID, h.Seats)
	if err != nil {
		s.log.WarnContext(ctx, "could not read the seats a sale skipped", "order", h.OrderNo, "err", err)
		return
	}
	taken := 0
	for _, seat := range h.Seats {
		if st, ok := states[seat]; ok && st.Status == SeatSold && (st.OrderNo != h.OrderNo || st.UserID != h.UserID) {
			taken++
		}
	}
	if taken > 0 {
		s.diverged(ctx, h.OrderNo, paymentID, DivergedSoldToAnother, taken)
	}
}
