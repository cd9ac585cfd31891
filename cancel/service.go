package cancel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seatflow/orderexpiry/expiry"
)

// Discrepancy is handed to the host's hook when money arrived for an order
// that was not payable any more.
type Discrepancy struct {
	OrderNo string
	UserID  string
	// Status is the order's status when the payment arrived (cancelled).
	Status expiry.Status
}

// Service runs cancels and payments across both boundaries. It is the
// expiry.Canceller the Handler uses, the cancel path of the reconciler, and
// what a host calls for user cancels and payment callbacks. Safe for
// concurrent use.
type Service struct {
	store         OrderStore
	seats         SeatReleaser
	seller        SeatSeller
	obs           expiry.Observer
	log           *slog.Logger
	onDiscrepancy func(context.Context, Discrepancy)
}

// Config wires a Service. Store and Seats are required.
type Config struct {
	Store OrderStore
	Seats SeatReleaser
	// Seller marks seats sold after a payment; nil leaves them locked in the
	// seat store until the reconciler marks them sold.
	Seller   SeatSeller
	Observer expiry.Observer // nil: expiry.NopObserver
	Logger   *slog.Logger    // nil: slog.Default()
	// OnDiscrepancy is called (synchronously) for every payment that lost to
	// a cancel, so the host can refund. Nil: logged and counted only.
	OnDiscrepancy func(context.Context, Discrepancy)
}

// New returns a Service, or an error naming a missing dependency.
func New(c Config) (*Service, error) {
	if c.Store == nil {
		return nil, errors.New("cancel: Config.Store is nil")
	}
	if c.Seats == nil {
		return nil, errors.New("cancel: Config.Seats is nil")
	}
	s := &Service{store: c.Store, seats: c.Seats, seller: c.Seller, obs: expiry.OrNop(c.Observer), log: c.Logger, onDiscrepancy: c.OnDiscrepancy}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Cancel cancels one order: the store's transaction, then, if this call
// cancelled it, the seat release. A release failure is logged and counted
// (expiry.KindReleaseFailed) and left to the reconciler; it is not an error,
// because the order is cancelled.
func (s *Service) Cancel(ctx context.Context, req Request) (Result, error) {
	if err := validate(req.OrderNo, req.UserID); err != nil {
		return Result{}, err
	}
	if len(req.Reason) > MaxReasonLen || expiry.ValidateID("reason", string(req.Reason)) != nil {
		return Result{}, fmt.Errorf("cancel: %w: reason %q (1-%d bytes of A-Z a-z 0-9 - _ .)", expiry.ErrInvalidID, req.Reason, MaxReasonLen)
	}
	res, err := s.store.CancelPending(ctx, req)
	if err != nil || !res.Changed {
		return res, err
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindCancelled, OrderNo: req.OrderNo, Reason: string(req.Reason), Seats: len(res.Seats)})
	if len(res.Seats) == 0 {
		return res, nil
	}
	hold := Hold{ShowID: res.Order.ShowID, OrderNo: req.OrderNo, UserID: res.Order.UserID, Seats: res.Seats}
	n, err := s.seats.Release(ctx, hold)
	if err != nil {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindReleaseFailed, OrderNo: req.OrderNo, Seats: len(res.Seats), Err: err})
		s.log.ErrorContext(ctx, "seat release failed after cancel; the reconciler will release them",
			"order", req.OrderNo, "show", hold.ShowID, "seats", len(hold.Seats), "err", err)
		return res, nil
	}
	res.Released = n
	return res, nil
}

// Timeout cancels an order whose time is up, guarded by the store's clock. It
// implements expiry.Canceller.
func (s *Service) Timeout(ctx context.Context, orderNo string) (bool, expiry.Order, error) {
	res, err := s.Cancel(ctx, Request{OrderNo: orderNo, Reason: ReasonTimeout, OnlyIfDue: true})
	return res.Changed, res.Order, err
}

// UserCancel cancels userID's own pending order. Another user's order gives
// ErrNotOwner and is not touched.
func (s *Service) UserCancel(ctx context.Context, orderNo, userID string) (Result, error) {
	if userID == "" {
		return Result{}, fmt.Errorf("cancel: %w: empty user id", expiry.ErrInvalidID)
	}
	return s.Cancel(ctx, Request{OrderNo: orderNo, Reason: ReasonUser, UserID: userID})
}

// Pay records a payment for userID's order (any user's when userID is
// empty, for callbacks that carry no user). Paying a paid order again changes
// nothing and is not an error (callbacks repeat). Paying a cancelled order is
// a discrepancy: nothing changes, the hook is called, and the error wraps
// ErrDiscrepancy. After the store's transaction the seats are marked sold in
// the seat store; a failure there is logged and left to the reconciler.
func (s *Service) Pay(ctx context.Context, orderNo, userID string) (Result, error) {
	if err := validate(orderNo, userID); err != nil {
		return Result{}, err
	}
	res, err := s.store.PayPending(ctx, orderNo, userID)
	if err != nil {
		return res, err
	}
	if !res.Changed {
		if res.Order.Status == expiry.StatusCancelled {
			d := Discrepancy{OrderNo: orderNo, UserID: res.Order.UserID, Status: res.Order.Status}
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDiscrepancy, OrderNo: orderNo, Reason: "paid_after_" + res.Order.Status.String()})
			s.log.WarnContext(ctx, "payment for an order that is not payable", "order", orderNo, "status", res.Order.Status)
			if s.onDiscrepancy != nil {
				s.onDiscrepancy(ctx, d)
			}
			return res, fmt.Errorf("cancel: order %s: %w", orderNo, ErrDiscrepancy)
		}
		return res, nil
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindPaid, OrderNo: orderNo, Seats: len(res.Seats)})
	if s.seller != nil && len(res.Seats) > 0 {
		hold := Hold{ShowID: res.Order.ShowID, OrderNo: orderNo, UserID: res.Order.UserID, Seats: res.Seats}
		if _, err := s.seller.Sell(ctx, hold); err != nil {
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSellFailed, OrderNo: orderNo, Seats: len(hold.Seats), Err: err})
			s.log.ErrorContext(ctx, "marking seats sold failed after payment; the reconciler will mark them",
				"order", orderNo, "show", hold.ShowID, "err", err)
		}
	}
	return res, nil
}

func validate(orderNo, userID string) error {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	if userID != "" {
		if err := expiry.ValidateID("user id", userID); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
	}
	return nil
}
