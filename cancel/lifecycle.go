package cancel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// This file is the state machine's optional transitions: a late
// payment reinstating a cancelled order, a pending order's deadline moved,
// and the expiry warning. A store that cannot do one answers its
// OrderStore method with ErrUnsupported: the caller gets that error, and a
// late payment is refunded.

// ReasonExpireNow is the reason of an operator's expire-now (Service.ExpireNow).
// Like a user's cancel it is final for the late-payment policy: a payment
// after it is refunded, never reinstated.
const ReasonExpireNow Reason = "expired"

// ErrUnsupported reports that the order store cannot do the optional
// transition an operation needs (OrderStore.ReinstateCancelled,
// SetDeadline, MarkWarned). Nothing was changed.
var ErrUnsupported = errors.New("orderexpiry: not supported by the order store")

// ErrNoSeatRecord reports that the store kept no record of a cancelled
// order's seats or of the purchase limit it was placed with (an order placed
// before the store kept them, a host table that deletes its claims without
// history), so the order cannot be reinstated: a late payment for it is
// refunded.
var ErrNoSeatRecord = errors.New("orderexpiry: no record of the cancelled order's seats")

// DeadlineChange asks to move a pending order's deadline to In from now by
// the store's clock.
type DeadlineChange struct {
	OrderNo string
	// UserID, when set, restricts the change to that user's order (another
	// user's gives ErrNotOwner).
	UserID string
	// In is the new deadline's distance from now, by the store's clock.
	In time.Duration
	// Shorten selects the direction: false moves the deadline later only
	// (an extension; never of an order already due), true earlier only.
	Shorten bool
	// MaxHold, when positive, caps an extension: the new deadline is at
	// most the order's placement plus MaxHold, by the store's clock
	// (Config.MaxHold). An order whose deadline is there already is not
	// extended (Changed false).
	MaxHold time.Duration
	// Due lets an extension move the deadline of an order that is due
	// already (never a shortening: an error): the Service's timeout
	// waiting for the payment provider's answer (Config.Provider) re-arms
	// the order this way, MaxHold capping how long it can wait. Every
	// other guard holds: pending only, and only later.
	Due bool
}

// DeadlineResult is what a deadline change did.
type DeadlineResult struct {
	// Changed is true when this call moved the deadline.
	Changed bool
	// Order is the order as this call left it (ReadAt the store's clock):
	// when Changed is false it says why (not pending, already due for an
	// extension, or its deadline already on the asked side of now+In).
	Order expiry.Order
	// Previous is the deadline before the change, when Changed.
	Previous time.Time
}

// lateReason reports the cancels a late payment may undo
// (OrderStore.ReinstateCancelled).
func lateReason(r Reason) bool { return r == ReasonTimeout || r == ReasonReconcile }

// payLate is Pay's path for a payment that found its order cancelled, with
// the late-payment policy on: reinstate when the store can and every seat is
// free, else the refund path. res is PayPending's answer.
func (s *Service) payLate(ctx context.Context, p Payment, res Result) (Result, error) {
	var claimed *Hold
	rres, err := s.store.ReinstateCancelled(ctx, p, func(ctx context.Context, h Hold, limit int) (string, error) {
		// Strict, as Place locks: only free seats, and within the limit the
		// order was placed with (a buyer who placed another order since
		// may not hold more; the payment is refunded then).
		id, err := s.seats.Lock(ctx, h, limit)
		if err != nil {
			return "", err
		}
		h.LockID = id
		claimed = &h
		return id, nil
	})
	switch {
	case err == nil && rres.Changed:
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindReinstated, OrderNo: p.OrderNo, Seats: len(rres.Seats)})
		s.log.InfoContext(ctx, "late payment reinstated a cancelled order", "order", p.OrderNo, "payment", p.PaymentID, "seats", len(rres.Seats))
		s.sell(ctx, p, rres)
		return rres, nil
	case err == nil:
		// Someone else decided first: another late payment reinstated it
		// (this one is a repeat of it, or a second payment), or the order
		// was never a timeout's.
		if rres.Order.Status == expiry.StatusPaid && rres.PaymentID == p.PaymentID {
			return rres, nil
		}
		return s.refuse(ctx, p, rres, rres.Order.Status, false)
	}
	if claimed != nil && !errors.Is(err, expiry.ErrCommitUnknown) {
		// The lock is ours (Lock is strict) and nothing committed: give it
		// back. A failure is left to the reconciler (a lock of a cancelled
		// order, past its grace).
		if _, rerr := s.seats.Release(context.WithoutCancel(ctx), *claimed); rerr != nil {
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindReleaseFailed, OrderNo: p.OrderNo, Seats: len(claimed.Seats), Err: rerr})
			s.log.ErrorContext(ctx, "seat release failed after a refused reinstatement; the reconciler will release them", "order", p.OrderNo, "err", rerr)
		}
	}
	switch {
	case errors.Is(err, ErrHook):
		// The store's Hook failed: nothing was reinstated, nothing is
		// refunded (whatever its error wraps); the provider's repeat decides.
		return res, fmt.Errorf("cancel: late payment %s of order %s: %w", p.PaymentID, p.OrderNo, err)
	case errors.Is(err, ErrUnsupported):
		s.log.WarnContext(ctx, "the order store cannot reinstate a cancelled order; the late payment is refunded", "order", p.OrderNo, "payment", p.PaymentID, "err", err)
		return s.refuse(ctx, p, res, expiry.StatusCancelled, false)
	case errors.Is(err, ErrSeatUnavailable), errors.Is(err, ErrNoSeatRecord), errors.Is(err, ErrLimitExceeded), errors.Is(err, ErrDiscrepancy):
		return s.refuse(ctx, p, res, expiry.StatusCancelled, false)
	case errors.Is(err, expiry.ErrNotFound):
		// Deleted by the host since the payment found it cancelled.
		return s.refuseGone(ctx, p)
	default: // transient, ErrNotOwner: the provider's retry decides
		return res, fmt.Errorf("cancel: late payment %s of order %s: %w", p.PaymentID, p.OrderNo, err)
	}
}

// Extend extends a pending order's deadline to at least atLeast from now by
// the store's clock (userID, when set, restricts it to that user's order):
// the buyer is in the payment flow, an operator grants time. It is
// idempotent in the sense of "at least": repeated calls never move the
// deadline earlier, and one already later is left alone (Changed false). An
// order already due is not extended (Changed false, Order.Remaining() <= 0):
// it is the timeout's, whatever its message is doing, so the outcome never
// depends on how late a message is. No new message is sent: the expiry
// message in flight re-arms by the stored deadline when it arrives early,
// and so does the warning. Counted as expiry.KindDeadlineChanged
// ("extended"). However often it is repeated, the deadline never passes the
// order's placement plus Config.MaxHold by the store's clock (invariant I17):
// an extension stops there, and one asked for after it changes nothing.
// Errors as OrderStore.SetDeadline's.
func (s *Service) Extend(ctx context.Context, orderNo, userID string, atLeast time.Duration) (DeadlineResult, error) {
	if atLeast <= 0 {
		return DeadlineResult{}, fmt.Errorf("cancel: extend %s: %w: non-positive duration %v", orderNo, expiry.ErrInvalidID, atLeast)
	}
	return s.setDeadline(ctx, DeadlineChange{OrderNo: orderNo, UserID: userID, In: atLeast, MaxHold: s.maxHold}, "extended")
}

// Shorten moves a pending order's deadline earlier, to atMost from now by the
// store's clock (an order due sooner already is left alone), and schedules
// the order again with Config.Scheduler (Reschedule, by the store's clock):
// a new expiry message, so the cancel is not late (the message in flight
// would re-arm past it), and a new warning, so the buyer is warned before
// the new deadline (at once when less than the lead is left). A failed send
// is counted (KindSendFailed) and left to the reconciler, as after a
// placement. Counted as expiry.KindDeadlineChanged ("shortened"). Errors as
// Extend's; a Service without Config.Scheduler cannot shorten (an error
// wrapping ErrUnsupported, nothing changed). An order without a deadline
// (the host's NULL: never due) is given one, as any deadline is earlier
// than none (DeadlineResult.Previous zero, the event's Delay zero); Extend
// leaves it without.
func (s *Service) Shorten(ctx context.Context, orderNo, userID string, atMost time.Duration) (DeadlineResult, error) {
	if s.sched == nil {
		return DeadlineResult{}, fmt.Errorf("cancel: shorten %s: Config.Scheduler is nil: %w", orderNo, ErrUnsupported)
	}
	if atMost < 0 {
		return DeadlineResult{}, fmt.Errorf("cancel: shorten %s: %w: negative duration %v", orderNo, expiry.ErrInvalidID, atMost)
	}
	res, err := s.setDeadline(ctx, DeadlineChange{OrderNo: orderNo, UserID: userID, In: atMost, Shorten: true}, "shortened")
	if err != nil || !res.Changed {
		return res, err
	}
	s.sched.Reschedule(ctx, res.Order) // logs and counts a failed send itself
	return res, nil
}

func (s *Service) setDeadline(ctx context.Context, c DeadlineChange, reason string) (DeadlineResult, error) {
	if err := validate(c.OrderNo, c.UserID); err != nil {
		return DeadlineResult{}, err
	}
	res, err := s.store.SetDeadline(ctx, c)
	if err != nil || !res.Changed {
		return res, err
	}
	var delay time.Duration // none before (a NULL deadline given one): no change to measure
	if !res.Previous.IsZero() {
		delay = res.Order.ExpireAt.Sub(res.Previous)
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDeadlineChanged, OrderNo: c.OrderNo, Reason: reason, Delay: delay})
	return res, nil
}

// ExpireNow is an operator's "expire it now": it cancels a pending order at
// once with ReasonExpireNow (a compare-and-set on pending, without the due
// guard, so it is not late either), and gives its seats back as any cancel
// does. A late payment after it is refunded, never reinstated. Counted as
// expiry.KindCancelled (Reason "expired") and expiry.KindDeadlineChanged
// ("expired_now", Delay the time the order had left, negated). Errors as
// Cancel's.
func (s *Service) ExpireNow(ctx context.Context, orderNo string) (Result, error) {
	res, err := s.Cancel(ctx, Request{OrderNo: orderNo, Reason: ReasonExpireNow})
	if err == nil && res.Changed {
		var delay time.Duration // no deadline (NULL): no time left to measure
		if !res.Order.ExpireAt.IsZero() {
			delay = res.Order.ReadAt.Sub(res.Order.ExpireAt)
		}
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDeadlineChanged, OrderNo: orderNo, Reason: "expired_now", Delay: delay})
	}
	return res, err
}

// Warn implements expiry.Warner: it marks the order warned in the store
// (OrderStore.MarkWarned's compare-and-set), then runs Config.OnWarning with the order.
// At most once per order: the flag is set first, so a redelivered warning
// never runs the hook again, and a hook that fails (counted as
// expiry.KindHookFailed, Reason "warning", and logged) or a crash before it
// ran is not retried. Without a hook it only marks and counts
// (expiry.KindWarned). A store that keeps no warned flag gives
// ErrUnsupported.
func (s *Service) Warn(ctx context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error) {
	if err := validate(orderNo, ""); err != nil {
		return expiry.WarnResult{}, err
	}
	res, err := s.store.MarkWarned(ctx, orderNo, lead)
	if err != nil || !res.Fired {
		return res, err
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindWarned, OrderNo: orderNo, Delay: res.Order.Remaining()})
	if s.onWarning != nil {
		hctx, done := context.WithTimeout(context.WithoutCancel(ctx), s.lease/2)
		defer done()
		if herr := s.onWarning(hctx, res.Order); herr != nil {
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindHookFailed, OrderNo: orderNo, Reason: "warning", Err: herr})
			s.log.ErrorContext(ctx, "warning hook failed; warnings are at most once, it is not retried", "order", orderNo, "err", herr)
		}
	}
	return res, nil
}
