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
package cancel

import (
	"context"
	"errors"
	"fmt"
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

// Placement is a new order as the host places it: pending until ExpireAt.
type Placement struct {
	OrderNo  string
	UserID   string
	ShowID   string
	Seats    []string
	ExpireAt time.Time
}

// Validate checks every id of p (expiry.ValidateID) and that it has seats,
// none twice. Errors wrap expiry.ErrInvalidID.
func (p Placement) Validate() error {
	for _, f := range [...]struct{ kind, id string }{{"order number", p.OrderNo}, {"user id", p.UserID}, {"show id", p.ShowID}} {
		if err := expiry.ValidateID(f.kind, f.id); err != nil {
			return err
		}
	}
	if len(p.Seats) == 0 {
		return fmt.Errorf("%w: order %s has no seats", expiry.ErrInvalidID, p.OrderNo)
	}
	seen := make(map[string]struct{}, len(p.Seats))
	for _, seat := range p.Seats {
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

// Hold returns the seats of p as a Hold.
func (p Placement) Hold() Hold {
	return Hold{ShowID: p.ShowID, OrderNo: p.OrderNo, UserID: p.UserID, Seats: p.Seats}
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
}

// OrderStore is the order side of the state machine, one transaction per
// call. The SQL adapter (cancel/sqlstore) implements it for MySQL/MariaDB,
// PostgreSQL and SQLite; cancel/canceltest is the suite any implementation
// must pass. Implementations are safe for concurrent use.
type OrderStore interface {
	// Order returns an order with ReadAt set to the store's clock, or an
	// error wrapping expiry.ErrNotFound.
	Order(ctx context.Context, orderNo string) (expiry.Order, error)
	// CancelPending, in one transaction: compare-and-set pending to
	// cancelled (with the guards in req), read the order's seats, delete its
	// order_seat rows. Nothing changed (Changed false, nil error) when the
	// order is not pending or not due; expiry.ErrNotFound when it does not
	// exist; ErrNotOwner when req.UserID is set and differs. A serialization
	// failure of the database counts as losing the race, not as an error.
	CancelPending(ctx context.Context, req Request) (Result, error)
	// PayPending, in one transaction: compare-and-set pending to paid (for
	// userID's order only, when userID is set) and mark its seats sold.
	// Same conventions as CancelPending.
	PayPending(ctx context.Context, orderNo, userID string) (Result, error)
}

// Hold names seats held for one order in one show.
type Hold struct {
	ShowID  string
	OrderNo string
	UserID  string
	Seats   []string
}

// Validate checks every id of h (expiry.ValidateID). Errors wrap
// expiry.ErrInvalidID.
func (h Hold) Validate() error {
	for _, f := range [...]struct{ kind, id string }{{"show id", h.ShowID}, {"order number", h.OrderNo}, {"user id", h.UserID}} {
		if err := expiry.ValidateID(f.kind, f.id); err != nil {
			return err
		}
	}
	for _, s := range h.Seats {
		if err := expiry.ValidateID("seat id", s); err != nil {
			return err
		}
	}
	return nil
}

// SeatReleaser gives seats back in the seat store (Redis).
//
// Release frees those of h.Seats that are still locked by h.OrderNo, lowers
// h.UserID's purchase-limit counter by exactly the number freed (never below
// zero), and returns that number. Seats that are free, sold, or locked by
// another order are left alone, so Release is idempotent: a second call frees
// nothing. It is atomic: on error nothing was changed. Safe for concurrent use.
type SeatReleaser interface {
	Release(ctx context.Context, h Hold) (int, error)
}

// SeatSeller marks seats sold in the seat store after a payment.
//
// Sell marks those of h.Seats that are locked by h.OrderNo (or free) as sold
// to it and returns how many it marked; seats sold or locked by another order
// are left alone. Idempotent and atomic like Release. Safe for concurrent use.
type SeatSeller interface {
	Sell(ctx context.Context, h Hold) (int, error)
}

// SeatState is one seat as the seat store has it.
type SeatState struct {
	// Status is expiry.StatusPending for a locked seat and expiry.StatusPaid
	// for a sold one; free seats have no SeatState.
	Status   expiry.Status
	OrderNo  string
	UserID   string
	LockedAt time.Time // for locked seats
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
}

// SeatLock is one seat locked in the seat store, as the reconciler sees it.
type SeatLock struct {
	ShowID   string
	SeatID   string
	OrderNo  string
	UserID   string
	LockedAt time.Time
}
