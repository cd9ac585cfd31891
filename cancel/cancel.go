// Package cancel ends pending orders: cancelled (by timeout, by the user, by
// the reconciler) or paid, exactly once, and gives the seats back.
//
// A cancel has two boundaries on purpose. First one SQL transaction in the
// OrderStore: compare-and-set the order from pending to cancelled, read its
// seats, delete its order_seat rows. If the compare-and-set changes nothing,
// someone else decided first and nothing else is touched. Then, after commit,
// the SeatReleaser gives the seats back in Redis. Redis is not part of the SQL
// rollback, so the order is fixed: "cancelled in SQL, still locked in Redis"
// may happen for a while (a failed release is logged, counted and repaired by
// the reconciler), "released in Redis, still pending in SQL" never does.
//
// Payment is the other side of the same race: compare-and-set pending to paid
// and mark the seats sold. A payment that loses to a cancel changes nothing;
// it is a discrepancy, logged, counted and handed to the host's hook (to
// refund). The package imports no driver; cancel/sqlstore and cancel/redisseat
// are the adapters.
//
// Three optional transitions sit on the same state machine (lifecycle.go):
// a late payment that reinstates an order its timeout cancelled
// (Config.AcceptLatePayments), a pending order's deadline extended,
// shortened or expired now (Service.Extend, Shorten, ExpireNow), and the
// expiry warning, at most once per order (Service.Warn, the Handler's
// expiry.Warner). A store that cannot do one answers with ErrUnsupported.
//
// When SQL goes back in time (a failover to a replica that lacked the last
// commits, a restore from a backup), a sold seat is never freed and a
// payment id is never both honoured and refunded; what cannot be repaired
// is reported as expiry.KindDiverged (backintime.go, and the reconciler's
// sold pass).
//
// Interfaces. This package declares four, each kept for one reason:
//   - OrderStore, SeatStore: the two stores (store.go), each taken whole by
//     the Service and the reconciler, so that a host's wrapper forwards
//     every guarantee or does not compile; there are no optional
//     interfaces found by type assertion;
//   - SeatReleaser: SeatStore's release, the one part a host's code calls
//     on its own (a test's releaser that counts);
//   - Querier: the host's transaction as a Hook and Place take it, which
//     *sql.Tx, sqlx, gorm, ent and pgx hosts all satisfy.
//
// # Names
//
// The library keeps more exported names than the 250 it aimed at (count
// them with internal/apicount); these are this package's, and why each is
// exported:
//   - Service, New, Config, with PlaceTimeoutDefault, DiscrepancyLeaseDefault
//     and MaxHoldDefault: the host's entry point and its defaults, exported
//     so a host can see and derive from them;
//   - Placement, Request, Payment, Result, DeadlineChange, DeadlineResult:
//     what the Service's calls take and return;
//   - Hold, Claim, SeatLock, SeatSale, SeatState, SeatStatus (SeatLocked,
//     SeatSold), OrderState, AgeUnknown, Discrepancy: the values the store
//     interfaces exchange, which an adapter in another package builds;
//   - Reason, ReasonTimeout, ReasonUser, ReasonReconcile, ReasonExpireNow,
//     MaxReasonLen: who cancelled, stored with the order; a host may add its
//     own reasons;
//   - MaxSeats, MaxBatch, ValidateBatch, ValidateLockID, CheckScope,
//     OrderAge, ClockStepTolerance: the limits, checks and rules every
//     adapter applies the same way (they live here so that two adapters
//     cannot disagree);
//   - Hook: the host's work inside a transition's transaction;
//   - ErrOrderExists, ErrSeatUnavailable, ErrLimitExceeded, ErrNotOwner,
//     ErrDiscrepancy, ErrHook, ErrUnsupported, ErrNoSeatRecord,
//     ErrRestoreInterrupted: the errors a host or an adapter branches on
//     (errors.Is), one per distinct decision;
//   - DivergedSoldPending, DivergedSoldCancelled, DivergedSoldMissing,
//     DivergedSoldToAnother, DivergedRefundRepeated, DivergedRefundedPayment:
//     the reasons of expiry.KindDiverged events, which an operator's alert
//     matches on;
//   - PaymentProvider, PaymentAnswer, PaymentState (PaymentNotPaid,
//     PaymentPaid, PaymentOpen), ProviderTimeoutDefault,
//     ProviderRetryDefault: the host's payment provider, asked before a
//     timeout cancels (Config.Provider), what it answers, and its defaults;
//   - the four interfaces above.
package cancel

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// Reason says who cancelled an order. It is stored with the order.
type Reason string

// MaxReasonLen is the longest Reason the schema stores (cancel_reason).
const MaxReasonLen = 16

// The reasons this library uses; a host may use others that pass
// expiry.ValidateID and fit MaxReasonLen.
const (
	ReasonTimeout   Reason = "timeout"
	ReasonUser      Reason = "user"
	ReasonReconcile Reason = "reconcile"
)

// ErrNotOwner reports that the order exists but belongs to another user. A
// host serving users should answer it like expiry.ErrNotFound (404), so that
// order numbers cannot be probed.
var ErrNotOwner = errors.New("orderexpiry: order belongs to another user")

// ErrDiscrepancy reports a payment for an order that was already cancelled:
// nothing was changed, and the host's discrepancy hook has been called.
var ErrDiscrepancy = errors.New("orderexpiry: payment for a cancelled order")

// ErrSeatUnavailable reports that a seat could not be claimed because another
// live order holds it (locked or sold); nothing was claimed.
var ErrSeatUnavailable = errors.New("orderexpiry: seat unavailable")

// ErrLimitExceeded reports that a lock would take the user past the
// purchase limit; nothing was locked.
var ErrLimitExceeded = errors.New("orderexpiry: purchase limit exceeded")

// ErrOrderExists reports that an order with this number was placed already:
// nothing was inserted, and the existing order is untouched. It is the
// answer to a retry after an unknown commit and to a double submit.
var ErrOrderExists = errors.New("orderexpiry: order number already placed")

// ErrRestoreInterrupted reports that the seat store lost its data again
// while it was being rebuilt: the rebuild must start over.
var ErrRestoreInterrupted = errors.New("orderexpiry: seat store lost data during the rebuild")

// MaxSeats is the most seats one order (one Hold) may carry: a seat-store
// script runs atomically, so an unbounded one would block its shard.
const MaxSeats = 50

// Placement is a new order as the host places it: pending until ExpireAt.
type Placement struct {
	OrderNo  string
	UserID   string
	ShowID   string
	Seats    []string
	ExpireAt time.Time
	// Limit is the purchase limit: the most seats UserID may hold in ShowID,
	// in pending and paid orders, counting this one (0: no limit). It is
	// the host's business rule (say 4 tickets per buyer and show), set here
	// per placement: the seat store's Lock checks it atomically against its
	// per-user counter (I8) and refuses with ErrLimitExceeded. The store
	// keeps it with the order, so that a late payment reinstating the order
	// later is held to the same limit (invariant I17).
	Limit int
	// LockID is the id of the seat lock taken for this placement
	// (SeatLock.LockID). Service.Place sets it before it calls the host's
	// insert, and the store keeps it with the order, so that a cancel
	// releases that very lock and the reconciler can tell the order's lock
	// from any other lock under its number (a crashed double submit's, a
	// reinstatement's): a host leaves it empty.
	LockID string
}

// Validate checks every id of p (expiry.ValidateID), that it has 1 to
// MaxSeats seats, none twice, and a Limit of 0 or more. Errors wrap
// expiry.ErrInvalidID.
func (p Placement) Validate() error {
	if len(p.Seats) == 0 {
		return fmt.Errorf("%w: order %s has no seats", expiry.ErrInvalidID, p.OrderNo)
	}
	if p.Limit < 0 {
		return fmt.Errorf("%w: order %s has a negative purchase limit %d", expiry.ErrInvalidID, p.OrderNo, p.Limit)
	}
	if err := ValidateLockID(p.LockID); err != nil {
		return err
	}
	return p.Hold().Validate()
}

// Hold returns the seats of p as a Hold.
func (p Placement) Hold() Hold {
	return Hold{ShowID: p.ShowID, OrderNo: p.OrderNo, UserID: p.UserID, Seats: p.Seats, LockID: p.LockID}
}

// Request asks the OrderStore to cancel one order.
type Request struct {
	OrderNo string
	Reason  Reason
	// UserID, when set, restricts the cancel to that user's order: another
	// user's order gives ErrNotOwner and is not touched.
	UserID string
	// OnlyIfDue guards the compare-and-set with expire_at <= now by the
	// store's clock (timeouts and the reconciler), so an application host
	// whose clock runs ahead cannot cancel early (invariant I4).
	OnlyIfDue bool
}

// Result is what a cancel or a payment did.
type Result struct {
	// Changed is true when this call moved the order out of pending. Of any
	// number of concurrent calls for one order, at most one sees true.
	Changed bool
	// Order is the order as this call left it: when Changed is false, its
	// Status says who decided first (or pending, for a cancel that was not
	// due).
	Order expiry.Order
	// Seats are the seat ids this call took from the order (a cancel) or sold
	// (a payment); nil when Changed is false.
	Seats []string
	// Released is how many seats the seat store gave back after a cancel
	// (Seats minus those already free, sold or relocked, or all of them when
	// the release failed and was left to the reconciler).
	Released int
	// PaymentID is the payment that paid the order, whenever Order.Status is
	// paid: a payment call that did not change the order compares it with
	// its own to tell a repeated callback from a second payment.
	PaymentID string
	// Reason is the reason a cancel stored with the order, when this call
	// cancelled it (Changed); empty otherwise.
	Reason Reason
	// LockID is the seat lock the order held when this call changed it
	// (Placement.LockID, or a reinstatement's): the cancel releases that
	// lock only, so a newer lock under the same order number is never freed
	// by a release that runs late. Empty when the store kept none (an order
	// placed before lock ids were kept, a host table mapped without them):
	// the release then frees any lock of the order.
	LockID string
}

// Payment is a payment callback: the provider's payment id for one order.
type Payment struct {
	OrderNo string
	// UserID, when set, restricts the payment to that user's order.
	UserID string
	// PaymentID is the provider's id of the payment (its transaction
	// number). Callbacks repeat; the id is what makes them idempotent.
	PaymentID string
}

// Validate checks every id of p (expiry.ValidateID; UserID may be empty).
// Errors wrap expiry.ErrInvalidID.
func (p Payment) Validate() error {
	if err := expiry.ValidateID("order number", p.OrderNo); err != nil {
		return err
	}
	if err := expiry.ValidateID("payment id", p.PaymentID); err != nil {
		return err
	}
	if p.UserID != "" {
		return expiry.ValidateID("user id", p.UserID)
	}
	return nil
}

// Discrepancy is money that arrived for an order that could not take it: the
// order was cancelled, paid already by another payment, or in a status the
// host owns. The host refunds it, keyed by PaymentID.
type Discrepancy struct {
	PaymentID string
	OrderNo   string
	UserID    string
	// Status is the order's status when the payment arrived: cancelled
	// (also for an order that was gone: deleted by the host, or never
	// placed in the store's scope), paid (by another payment), or
	// expiry.StatusHost (in a status the host owns); pending when the payment was refused
	// because the seat store recorded it refunded although SQL has its
	// order pending again (SQL went back in time, backintime.go).
	Status expiry.Status
}

// Validate checks every id of d (expiry.ValidateID; UserID may be empty).
// Errors wrap expiry.ErrInvalidID.
func (d Discrepancy) Validate() error {
	return Payment{OrderNo: d.OrderNo, UserID: d.UserID, PaymentID: d.PaymentID}.Validate()
}

// CheckScope returns an error unless orders and other (a seat store, or a
// Service) serve the same scope: an order store of one tenant wired to a
// seat store shared by every tenant would let this tenant's reconciler read
// the others' seat locks, find no order of theirs in its own rows, and free
// them (invariant I16). New and reconcile.New call it, so such wiring is
// refused at startup.
func CheckScope(orders OrderStore, other interface{ Scope() string }) error {
	if o, st := orders.Scope(), other.Scope(); o != st {
		return fmt.Errorf("the order store serves scope %q but the other serves scope %q: give the seat store the order store's scope (redisseat: seats.Scoped(store.Scope())) and use that store's Service, so one tenant's wiring never reads or frees another's rows or seats", o, st)
	}
	return nil
}

// Hold names seats held for one order in one show.
type Hold struct {
	ShowID  string
	OrderNo string
	UserID  string
	Seats   []string
	// LockID, when set, restricts a Release or a Sell to the seats of that
	// very lock (SeatLock.LockID): the reconciler sets it, so that a lock it
	// judged stale is never confused with a newer lock of the same order
	// number (a late payment's reinstatement, a rebuild). Empty: any lock
	// of the order.
	LockID string
}

// Validate checks every id of h (expiry.ValidateID), that no seat is listed
// twice and that there are at most MaxSeats. Errors wrap expiry.ErrInvalidID.
// A seat listed twice is refused, not merged: a store that counted it twice
// would raise the purchase-limit counter by two and lower it by one.
func (h Hold) Validate() error {
	for _, f := range [...]struct{ kind, id string }{{"show id", h.ShowID}, {"order number", h.OrderNo}, {"user id", h.UserID}} {
		if err := expiry.ValidateID(f.kind, f.id); err != nil {
			return err
		}
	}
	if len(h.Seats) > MaxSeats {
		return fmt.Errorf("%w: order %s has %d seats, more than %d", expiry.ErrInvalidID, h.OrderNo, len(h.Seats), MaxSeats)
	}
	seen := make(map[string]struct{}, len(h.Seats))
	for _, seat := range h.Seats {
		if err := expiry.ValidateID("seat id", seat); err != nil {
			return err
		}
		if _, dup := seen[seat]; dup {
			return fmt.Errorf("%w: seat %s listed twice", expiry.ErrInvalidID, seat)
		}
		seen[seat] = struct{}{}
	}
	return nil
}

// OrderState is what a store reads of one order for the reconciler
// (OrderStore.Statuses).
type OrderState struct {
	Status expiry.Status
	// Age is how long ago the order was last written (placed, decided,
	// reinstated, its deadline moved), by the store's clock: for a decided
	// order, how long it has been decided. AgeUnknown when the store does
	// not record it (a host's table mapped without an updated-at column),
	// or when the write is later than the store's clock now (see OrderAge).
	Age time.Duration
	// ShowID is the order's show; "" when the store could not read it (a
	// legacy row with none): the lock pass then does not judge the order's
	// locks by their show.
	ShowID string
	// LockID is the seat lock the order holds (Result.LockID), empty
	// when the store kept none. A lock under the order's number with
	// another id, or in another show, is not the order's (a crashed double
	// submit's, a refused reinstatement's, one a seat store that went back
	// in time still has): the reconciler's lock pass releases its seats past the grace period,
	// except those Seats gives the order, which it treats as the order's.
	LockID string
	// Seats are the seats the order was placed with (nil when the store
	// kept none).
	Seats []string
	// Paying says the order is in a status its host writes while the buyer
	// pays (sqlstore's Statuses.Paying): Status is expiry.StatusHost, yet
	// the order is payable as a pending one, so a sale of its seats is a
	// payment SQL lost, not the host's to judge.
	Paying bool
}

// AgeUnknown is the OrderState.Age of an order whose store does not record
// when it was last written. The lock pass then fixes the order's locks at once
// (see reconcile.Config.Settle).
const AgeUnknown time.Duration = -1

// ClockStepTolerance is how far an order's last write may lie ahead of the
// store's clock before OrderAge calls its age unknown: more than any time
// column rounds (MySQL rounds DATETIME to the second).
const ClockStepTolerance = time.Second

// OrderAge is the OrderState.Age of an order last written sinceWrite ago by
// the store's clock (now minus the write's time): sinceWrite itself, or 0
// for a write up to ClockStepTolerance ahead (a time column that rounds
// up). A write further ahead means the store's clock stepped back since (a
// failover to a node whose clock was behind, an operator's correction):
// counting such an order as just decided would keep the lock pass off its
// locks until the clock caught up, an hour for a step of an hour, where
// Settle promises a repair at the first pass after it. Its age is then
// AgeUnknown, and the lock pass fixes its locks at once, as for a store
// that keeps no write time. Every adapter computes Age with it, so that
// none disagrees.
func OrderAge(sinceWrite time.Duration) time.Duration {
	switch {
	case sinceWrite < -ClockStepTolerance:
		return AgeUnknown
	case sinceWrite < 0:
		return 0
	}
	return sinceWrite
}

// SeatStatus is what a seat is in the seat store. A free seat has none.
type SeatStatus uint8

// The seat statuses.
const (
	// SeatLocked: held for a pending order.
	SeatLocked SeatStatus = iota + 1
	// SeatSold: sold to a paid order, for good.
	SeatSold
)

// String returns "locked" or "sold".
func (s SeatStatus) String() string {
	switch s {
	case SeatLocked:
		return "locked"
	case SeatSold:
		return "sold"
	}
	return fmt.Sprintf("SeatStatus(%d)", uint8(s))
}

// SeatState is one seat as the seat store has it.
type SeatState struct {
	// Status is SeatLocked or SeatSold; free seats have no SeatState.
	Status   SeatStatus
	OrderNo  string
	UserID   string
	LockedAt time.Time // for locked seats
	LockID   string    // for locked seats: see SeatLock.LockID
}

// Claim is one seat claimed in SQL (oe_order_seat) by a pending or paid
// order: the source of truth from which the seat store is rebuilt after it
// lost its data.
type Claim struct {
	ShowID  string
	SeatID  string
	OrderNo string
	UserID  string
	Status  expiry.Status // pending (the seat is locked) or paid (sold)
	// LockID is the seat lock the order holds (Result.LockID), empty when
	// the store kept none: a rebuild restores a pending order's lock under
	// this id, so the lock stays the order's own.
	LockID string
}

// ValidateLockID checks that id is empty or a lock id as the seat stores
// write them: "<ms>" or "<ms>.<generation>", decimal digits (at most 20
// each). The error wraps expiry.ErrInvalidID.
func ValidateLockID(id string) error {
	if id == "" {
		return nil
	}
	ms, gen, dotted := strings.Cut(id, ".")
	if !digits(ms) || (dotted && !digits(gen)) {
		return fmt.Errorf("%w: lock id %q (want <ms> or <ms>.<generation>, decimal digits)", expiry.ErrInvalidID, id)
	}
	return nil
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// SeatLock is one seat locked in the seat store, as the reconciler sees it.
type SeatLock struct {
	ShowID   string
	SeatID   string
	OrderNo  string
	UserID   string
	LockedAt time.Time // by the seat store's clock
	// Age is how long ago the lock was taken, by the seat store's clock at
	// the scan: the reconciler's grace period is measured with it, never by
	// comparing two hosts' clocks (invariant I11).
	Age time.Duration
	// LockID identifies this very lock within its show: every lock the
	// seat store takes (Lock, or a rebuild's Restore without the order's
	// kept id) gets an id that no other lock of the show shares. Pass it in
	// Hold.LockID (with the show) to act on this lock only.
	LockID string
}
