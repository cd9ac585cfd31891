package cancel

import (
	"context"
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
//     the seat store records each refund the hook made (RefundLedger), so a
//     refund SQL forgot is not made again, and a refunded payment is
//     refused even when SQL would honour it.
//
// What the library cannot repair it reports to the host as an
// expiry.KindDiverged event (see its reasons there): a payment SQL lost
// (only the host, with the provider's records, can honour it again or
// refund it), and a seat two buyers hold. The reconciler's sold pass
// (reconcile.SoldScanner) finds the sales SQL does not back; Pay finds a
// seat it could not sell because the seat store sold it to another order
// (SeatReader) and a refunded payment (RefundLedger).

// SeatSale is one seat sold in the seat store, as the reconciler's sold
// pass reads it.
type SeatSale struct {
	ShowID  string
	SeatID  string
	OrderNo string
	UserID  string
}

// SeatReader reads seats as the seat store has them.
//
// SeatStates returns the state of each of seats in showID that is locked
// or sold; free seats are absent. It changes nothing. Pay uses it, when the
// seat store implements it, to tell why a sale sold fewer seats than SQL
// paid: a seat sold to another order is reported. Safe for concurrent use.
type SeatReader interface {
	SeatStates(ctx context.Context, showID string, seats []string) (map[string]SeatState, error)
}

// RefundLedger keeps, beside SQL's records, which payment ids the refund
// hook refunded, so that SQL going back in time (a lost discrepancy
// record) neither makes the hook refund a payment twice (I9) nor lets a
// refunded payment be honoured (I14). cancel/redisseat and
// cancel/memstore's seat stores implement it; the Service uses it when its
// Config.Seats does.
//
// Refunded reports whether paymentID was marked refunded. MarkRefunded marks
// it, for orderNo (kept for operators), after the hook succeeded;
// idempotent, and a mark is never removed. Both refuse an invalid id
// (expiry.ErrInvalidID). Safe for concurrent use; errors are transient.
type RefundLedger interface {
	Refunded(ctx context.Context, paymentID string) (bool, error)
	MarkRefunded(ctx context.Context, paymentID, orderNo string) error
}
