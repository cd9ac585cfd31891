package cancel

import (
	"context"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// The library's two stores: the order store (SQL, the source of truth) and
// the seat store (Redis, the fast side). Each is one interface, declared
// here once, that the Service and the reconciler take whole: a host that
// wraps a store (metrics, tracing, a test's fault) must forward every
// method, so a wrapper cannot drop a guarantee in silence the way a
// wrapper hiding an optional interface would. A store that cannot do one
// of the optional transitions (a late payment's reinstatement, a deadline
// move, the warning) answers that method with an error wrapping
// ErrUnsupported; the Service then says so to its caller (or, for a late
// payment, refunds it and logs why). cancel/canceltest is the suite any
// implementation must pass.

// OrderStore is the order side of the state machine: one transaction per
// call, by the store's clock (invariant I11). cancel/sqlstore implements it
// for MySQL/MariaDB, PostgreSQL and SQLite, cancel/memstore in memory.
// Every method is safe for concurrent use; an error that is not one of the
// sentinels named below is transient and means nothing was changed (unless
// it wraps expiry.ErrCommitUnknown).
type OrderStore interface {
	// Order returns an order with ReadAt set to the store's clock, or an
	// error wrapping expiry.ErrNotFound. It reads committed data: a
	// connection at READ UNCOMMITTED could show a payment that then rolls
	// back, and a Timeout answered from that read (a queued one, see
	// Service.Timeout) leaves the due order to the reconciler.
	Order(ctx context.Context, orderNo string) (expiry.Order, error)
	// CancelPending, in one transaction: compare-and-set pending to
	// cancelled (with the guards in req), read the order's seats, delete its
	// order_seat rows. Nothing changed (Changed false, nil error) when the
	// order is not pending or not due; expiry.ErrNotFound when it does not
	// exist; ErrNotOwner when req.UserID is set and differs. A serialization
	// failure of the database counts as losing the race, not as an error.
	CancelPending(ctx context.Context, req Request) (Result, error)
	// CancelDue is CancelPending for many orders in one transaction (the
	// reconciler's expired pass, a consumer's batch of due messages):
	// compare-and-set to cancelled (reason) every listed order that is
	// still pending and due by the store's clock (I4), read the seats and
	// the lock id of exactly the orders it changed, free their claims, and
	// return one Result per changed order (Changed true, as CancelPending
	// returns it), in no particular order. An order not pending, not due,
	// missing or outside the store's scope is simply absent from the
	// result; one whose row another transaction holds is skipped, never
	// waited for (I12). A number listed twice counts once. More than
	// MaxBatch numbers, or an invalid one, is an error wrapping
	// expiry.ErrInvalidID and changes nothing (ValidateBatch). A
	// serialization failure is retried as CancelPending's; any other error
	// means nothing was changed, except one wrapping expiry.ErrCommitUnknown
	// (the COMMIT failed after it was sent: the outcome is unknown, and a
	// caller that retried would find its own cancels). Of concurrent calls (batches or single
	// ones) for one order, at most one changes it.
	CancelDue(ctx context.Context, orderNos []string, reason Reason) ([]Result, error)
	// PayPending, in one transaction: compare-and-set pending to paid (for
	// p.UserID's order only, when it is set), recording p.PaymentID as
	// decided in the discrepancies' key space (honoured: one key decides a
	// payment id's fate once per scope), and mark its seats sold. Same
	// conventions as CancelPending; on an order that is paid already,
	// Result.PaymentID is the payment that paid it. A payment id decided
	// before (refunded, or the payment of another order) pays nothing: an
	// error wrapping ErrDiscrepancy, nothing changed. An order not in the
	// store is expiry.ErrNotFound, unless p's id is recorded as honoured
	// for this very order number (the host deleted the order after p paid
	// it): then the answer is the paid order's (Changed false, Status
	// paid, Result.PaymentID p's, the user the record names), and a
	// repeated callback is answered, never refunded (I14). The record
	// answers the same when the number holds another order now (the host
	// reused it), whatever its status: p pays nothing of it.
	PayPending(ctx context.Context, p Payment) (Result, error)
	// ReinstateCancelled is the store side of the late-payment policy
	// (Config.AcceptLatePayments), in one transaction: compare-and-set an
	// order that was cancelled with ReasonTimeout or ReasonReconcile
	// (p.UserID's only, when set) to paid with p.PaymentID; record
	// p.PaymentID as decided in the discrepancies' key space (an id
	// recorded there before, refunded or honoured, refuses the
	// reinstatement: a payment id's fate never flips); claim each of its
	// seats again as sold (the unique live claim: a seat another order
	// holds refuses it); then call claim with the order's seats and the
	// purchase limit it was placed with (Placement.Limit), inside the
	// transaction, keep the lock id claim returned as the order's
	// (Result.LockID), and commit only if claim returned nil. The caller's
	// claim is the seat store's strict Lock, so the seats are taken in both
	// stores or in neither, and the limit holds on this path too (I17).
	//
	// Result.Changed is true when this call reinstated the order (Seats are
	// its seats). Of concurrent calls for one order at most one is ever
	// true: the others wait for it and then find the order paid. Changed
	// false with a nil error means the order is not (or no longer) a
	// cancelled order of those reasons: Result.Order.Status says what it
	// is, and Result.PaymentID names the payment that paid it. Errors:
	// expiry.ErrNotFound, ErrNotOwner, ErrDiscrepancy (p.PaymentID was
	// decided before: it is refunded, never honoured), ErrSeatUnavailable
	// (a seat held by another live order), ErrNoSeatRecord, ErrUnsupported
	// (the store cannot reinstate: the payment is refunded), claim's own
	// error (wrapped); on every error nothing was committed, except one
	// wrapping expiry.ErrCommitUnknown (the outcome is unknown; the
	// reconciler settles the seat store either way).
	ReinstateCancelled(ctx context.Context, p Payment, claim func(ctx context.Context, h Hold, limit int) (lockID string, err error)) (Result, error)
	// SetDeadline compare-and-sets the deadline of c.OrderNo to now+c.In by
	// the store's clock (for an extension with c.MaxHold, to the earlier of
	// that and the order's placement plus c.MaxHold), on a pending order
	// only, and only in c.Shorten's direction: an extension only if the
	// order is not due yet and its deadline is before now+In (so repeating
	// an extension by the same In changes nothing but what the passing time
	// asks: "at least In from now"); a shortening only if the deadline is
	// after now+In, or is none (a host's NULL: any deadline is earlier;
	// Previous is then zero). Not matching is Changed false and a nil error. Errors:
	// expiry.ErrNotFound, ErrNotOwner, expiry.ErrInvalidID, ErrUnsupported
	// (the store keeps no deadline of its own to move, as a mapped table
	// whose window is a setting).
	SetDeadline(ctx context.Context, c DeadlineChange) (DeadlineResult, error)
	// MarkWarned sets orderNo's warned flag with a compare-and-set, only if
	// the order is pending, not warned before, not yet due and due within
	// lead, all by the store's clock. Fired is true when this call set it
	// (of all calls for one order, at most one ever); otherwise Warned says
	// whether it was set before, and Order the order as found. Errors:
	// expiry.ErrNotFound, ErrUnsupported.
	MarkWarned(ctx context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error)
	// RecordDiscrepancy inserts d keyed by (the store's scope,
	// d.PaymentID), marked as tried now by the store's clock (the caller
	// runs the refund hook next), so that the hook runs once per payment
	// however often the provider repeats its callback, and is retried after
	// a failure or a crash (invariant I9). recorded is false, and nothing
	// changes, when the payment id was decided already: recorded as a
	// discrepancy, or honoured (PayPending and ReinstateCancelled record in
	// the same key space, so one key decides an id's fate once). Of
	// concurrent calls for one id exactly one gets true.
	RecordDiscrepancy(ctx context.Context, d Discrepancy) (recorded bool, err error)
	// ClaimDiscrepancies returns up to limit unsettled discrepancies last
	// tried at least lease ago by the store's clock, oldest first, each
	// marked tried now by a compare-and-set, so two concurrent claimers
	// never get the same one within a lease.
	ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]Discrepancy, error)
	// SettleDiscrepancy records that the hook succeeded for paymentID.
	// Idempotent.
	SettleDiscrepancy(ctx context.Context, paymentID string) error
	// Expired returns up to limit numbers of orders that are pending and
	// past their deadline by the store's clock, in (deadline, order number)
	// order, strictly after cursor ("" starts), following an index (never a
	// full scan), and the cursor to continue from ("" when fewer than limit
	// were returned): the reconciler's expired pass. Keyset paging lets a
	// round go past orders it skips (one whose cancel keeps failing)
	// instead of meeting them first in every batch. It changes nothing.
	Expired(ctx context.Context, cursor string, limit int) (nos []string, next string, err error)
	// Statuses returns the state of every order among nos that exists;
	// orders that do not exist are absent from the map. It changes nothing.
	Statuses(ctx context.Context, nos []string) (map[string]OrderState, error)
	// Claims lists the seat claims of pending and paid orders, a batch at a
	// time, in key order after cursor ("" starts; "" returned: done): what
	// the reconciler rebuilds a seat store that lost its data from. It
	// changes nothing; a store that keeps no claims returns none.
	Claims(ctx context.Context, cursor string, limit int) ([]Claim, string, error)
	// Scope names the part of a shared database the store serves (one
	// tenant's rows, cancel/sqlstore with a Mapping's Where); "" is the
	// whole database. New and reconcile.New refuse an order store and a
	// seat store of different scopes (CheckScope, invariant I16).
	Scope() string
}

// SeatReleaser gives seats back in the seat store (Redis).
//
// Release frees those of h.Seats that are still locked by h.OrderNo (by
// the lock h.LockID only, when it is set), lowers h.UserID's purchase-limit
// counter by exactly the number freed (never below zero), and returns that
// number. Seats that are free, sold, or locked by another order are left
// alone, so Release is idempotent: a second call frees nothing. Atomic per
// call; safe for concurrent use.
type SeatReleaser interface {
	Release(ctx context.Context, h Hold) (int, error)
}

// SeatStore is the whole seat side: locking at placement, releasing after a
// cancel, selling after a payment, and what the reconciler scans and
// repairs. cancel/redisseat implements it on Redis (and Redis Cluster),
// cancel/memstore in memory. Every method is safe for concurrent use; the
// seat store's time is its own clock. Errors other than the sentinels
// named are transient.
type SeatStore interface {
	SeatReleaser
	// Lock claims every seat of h for h.OrderNo and h.UserID, all or
	// nothing, and raises the user's purchase-limit counter by
	// len(h.Seats); limit is the most seats the user may hold in the show
	// (0: no limit). Every seat must be free: one locked by anything (the
	// same order number included) or sold gives an error wrapping
	// ErrSeatUnavailable, past the limit ErrLimitExceeded, and nothing
	// changes. So when Lock succeeds every seat of h is this call's, and a
	// placer whose insert then fails may release all of them without
	// touching a live order of the same number. It returns the new lock's
	// id (SeatLock.LockID), which no other lock of the same show shares
	// (ids of two shows may be equal: a lock is named by its show and its
	// id); h.LockID is ignored.
	Lock(ctx context.Context, h Hold, limit int) (lockID string, err error)
	// Sell marks those of h.Seats that are locked by h.OrderNo (or free) as
	// sold to it and returns how many it marked; seats sold or locked by
	// another order are left alone. With h.LockID set, only the seats of
	// that very lock are sold (not free ones, nor a newer lock of the same
	// order). Idempotent and atomic like Release.
	Sell(ctx context.Context, h Hold) (int, error)
	// ReleaseAll is Release for each of holds (of any shows), the holds of
	// one show in one atomic step: it returns how many seats each hold
	// freed, in the order of holds. Each hold is guarded by its own order
	// number and LockID exactly as Release guards one. On an error some
	// shows' holds may have been released (each show's step is atomic; a
	// release is idempotent, so the reconciler's repair releases the rest):
	// the counts then say which, -1 for a hold whose step failed.
	ReleaseAll(ctx context.Context, holds []Hold) ([]int, error)
	// SeatStates returns the state of each of seats in showID that is
	// locked or sold; free seats are absent. It changes nothing. Pay uses
	// it to tell why a sale sold fewer seats than SQL paid: a seat sold to
	// another order is reported (backintime.go).
	SeatStates(ctx context.Context, showID string, seats []string) (map[string]SeatState, error)
	// Refunded reports whether paymentID was marked refunded; MarkRefunded
	// marks it, for orderNo (kept for operators), after the refund hook
	// succeeded, idempotently, and a mark is never removed. The seat
	// store's record of refunds, beside SQL's, keeps SQL going back in time
	// (a lost discrepancy record) from refunding a payment twice (I9) or
	// honouring a refunded one (I14). Both refuse an invalid id
	// (expiry.ErrInvalidID).
	Refunded(ctx context.Context, paymentID string) (bool, error)
	MarkRefunded(ctx context.Context, paymentID, orderNo string) error
	// ScanLocks returns the locks found examining about count entries from
	// cursor ("" starts a pass), and the cursor to continue from ("" when
	// the pass is complete). A lock may be seen twice in a pass. It changes
	// nothing.
	ScanLocks(ctx context.Context, cursor string, count int) ([]SeatLock, string, error)
	// ScanSold is ScanLocks for the seats sold: the reconciler's sold pass
	// reads it to find sales SQL does not back (backintime.go).
	ScanSold(ctx context.Context, cursor string, count int) ([]SeatSale, string, error)
	// Lost reports that the store lost its data (its marker is gone) and
	// names the rebuild with a token: every caller gets the same token
	// until MarkRestored succeeds or the store loses its data again (a new
	// token then).
	Lost(ctx context.Context) (token string, lost bool, err error)
	// MarkRestored records a completed rebuild under token, only if token
	// is still current (atomically); otherwise it returns an error wrapping
	// ErrRestoreInterrupted and the rebuild starts over, so a second loss
	// during a rebuild is never marked restored over a half-empty store.
	MarkRestored(ctx context.Context, token string) error
	// Missing returns the claims whose seat the store does not hold as the
	// claim says (free, or a paid claim's seat only locked); it changes
	// nothing.
	Missing(ctx context.Context, claims []Claim) ([]Claim, error)
	// Restore gives each claim's seat its state if the seat is free (and
	// counts it for the user), and turns a paid claim's lock into a sale;
	// it is idempotent and returns the number of seats changed.
	Restore(ctx context.Context, claims []Claim) (int, error)
	// Scope names the keys the store serves (redisseat.Seats.Scoped); ""
	// is the whole store. It must equal the order store's Scope.
	Scope() string
}
