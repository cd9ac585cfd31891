package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// ReinstateCancelled implements cancel.OrderStore like sqlstore's: an order
// cancelled by its timeout or the reconciler becomes paid by p, its seats
// claimed again (sold), if none is claimed by another order and claim
// succeeds; claim runs with the store locked, as sqlstore runs it inside the
// transaction that holds the order's row, so concurrent calls for one order
// wait for each other.
func (s *Store) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	if err := p.Validate(); err != nil {
		return cancel.Result{}, fmt.Errorf("memstore: reinstate: %w", err)
	}
	if err := s.fail("ReinstateCancelled"); err != nil {
		return cancel.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[p.OrderNo]
	if !ok {
		return cancel.Result{}, fmt.Errorf("memstore: order %s: %w", p.OrderNo, expiry.ErrNotFound)
	}
	if err := s.rowHeld(p.OrderNo); err != nil {
		return cancel.Result{}, err
	}
	if p.UserID != "" && o.o.UserID != p.UserID {
		return cancel.Result{}, fmt.Errorf("memstore: order %s: %w", p.OrderNo, cancel.ErrNotOwner)
	}
	cur := o.o
	cur.ReadAt = s.now()
	if o.o.Status != expiry.StatusCancelled || (o.reason != cancel.ReasonTimeout && o.reason != cancel.ReasonReconcile) {
		return cancel.Result{Order: cur, PaymentID: o.paymentID}, nil
	}
	if len(o.placed) == 0 {
		return cancel.Result{Order: cur}, fmt.Errorf("memstore: reinstate %s: %w", p.OrderNo, cancel.ErrNoSeatRecord)
	}
	for _, seat := range o.placed {
		if other, taken := s.claims[[2]string{o.o.ShowID, seat}]; taken {
			return cancel.Result{Order: cur}, fmt.Errorf("memstore: reinstate %s: seat %s/%s held by %s: %w", p.OrderNo, o.o.ShowID, seat, other, cancel.ErrSeatUnavailable)
		}
	}
	if _, decided := s.disc[p.PaymentID]; decided {
		return cancel.Result{Order: cur}, fmt.Errorf("memstore: reinstate %s: payment %s decided before: %w", p.OrderNo, p.PaymentID, cancel.ErrDiscrepancy)
	}
	h := cancel.Hold{ShowID: o.o.ShowID, OrderNo: o.o.No, UserID: o.o.UserID, Seats: slices.Clone(o.placed)}
	lockID, err := claim(ctx, h, o.limit)
	if err != nil {
		return cancel.Result{Order: cur}, fmt.Errorf("memstore: reinstate %s: %w", p.OrderNo, err)
	}
	if s.hook != nil {
		// A reinstatement is a transition too (cancelled to paid): the
		// hook sees it before anything changes, and its failure leaves
		// the order cancelled (the caller gives the claimed lock back).
		r := cur
		r.Status = expiry.StatusPaid
		change := cancel.Result{Changed: true, Order: r, Seats: slices.Clone(o.placed), PaymentID: p.PaymentID, LockID: lockID}
		if err := s.hook(ctx, nil, change); err != nil {
			return cancel.Result{Order: cur}, fmt.Errorf("memstore: reinstate %s: %w: %w", p.OrderNo, cancel.ErrHook, err)
		}
	}
	// The id is decided: honoured (settled at once, never refunded).
	nowMS := s.now().UnixMilli()
	s.disc[p.PaymentID] = &discrepancy{d: cancel.Discrepancy{PaymentID: p.PaymentID, OrderNo: p.OrderNo, UserID: o.o.UserID},
		recordedMS: nowMS, triedMS: nowMS, settled: true, honoured: true}
	for _, seat := range o.placed {
		s.claims[[2]string{o.o.ShowID, seat}] = o.o.No
	}
	o.seats = slices.Clone(o.placed)
	o.o.Status, o.paymentID, o.lockID, o.written = expiry.StatusPaid, p.PaymentID, lockID, s.now()
	cur.Status = expiry.StatusPaid
	return cancel.Result{Changed: true, Order: cur, Seats: slices.Clone(o.placed), PaymentID: p.PaymentID, LockID: lockID}, nil
}

// SetDeadline implements cancel.OrderStore like sqlstore's, by the
// store's clock (whole milliseconds, as there).
func (s *Store) SetDeadline(_ context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if err := expiry.ValidateID("order number", c.OrderNo); err != nil {
		return cancel.DeadlineResult{}, fmt.Errorf("memstore: deadline: %w", err)
	}
	if c.In < 0 {
		return cancel.DeadlineResult{}, fmt.Errorf("memstore: deadline of %s: %w: negative duration %v", c.OrderNo, expiry.ErrInvalidID, c.In)
	}
	if c.Due && c.Shorten {
		return cancel.DeadlineResult{}, fmt.Errorf("memstore: deadline of %s: %w: Due is for an extension only", c.OrderNo, expiry.ErrInvalidID)
	}
	if err := s.fail("SetDeadline"); err != nil {
		return cancel.DeadlineResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[c.OrderNo]
	if !ok {
		return cancel.DeadlineResult{}, fmt.Errorf("memstore: order %s: %w", c.OrderNo, expiry.ErrNotFound)
	}
	if err := s.rowHeld(c.OrderNo); err != nil {
		return cancel.DeadlineResult{}, err
	}
	if c.UserID != "" && o.o.UserID != c.UserID {
		return cancel.DeadlineResult{}, fmt.Errorf("memstore: order %s: %w", c.OrderNo, cancel.ErrNotOwner)
	}
	now := s.now().Truncate(time.Millisecond)
	to := now.Add(c.In.Truncate(time.Millisecond))
	if c.MaxHold > 0 && !c.Shorten {
		if most := o.created.Truncate(time.Millisecond).Add(c.MaxHold.Truncate(time.Millisecond)); to.After(most) {
			to = most
		}
	}
	cur := o.o
	cur.ReadAt = s.now()
	match := o.o.Status == expiry.StatusPending
	if c.Shorten {
		match = match && o.o.ExpireAt.After(to)
	} else {
		// Due lifts the not-yet-due guard, never the one of a NULL
		// deadline (the zero time: never due, nothing to wait for).
		match = match && (c.Due && !o.o.ExpireAt.IsZero() || o.o.ExpireAt.After(now)) && o.o.ExpireAt.Before(to)
	}
	if !match {
		return cancel.DeadlineResult{Order: cur}, nil
	}
	prev := o.o.ExpireAt
	o.o.ExpireAt, o.written = to, s.now()
	cur.ExpireAt = to
	return cancel.DeadlineResult{Changed: true, Order: cur, Previous: prev}, nil
}

// MarkWarned implements cancel.OrderStore like sqlstore's: the warned flag,
// set once, on a pending order due within lead and not yet due.
func (s *Store) MarkWarned(_ context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error) {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return expiry.WarnResult{}, fmt.Errorf("memstore: warn: %w", err)
	}
	if err := s.fail("MarkWarned"); err != nil {
		return expiry.WarnResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[orderNo]
	if !ok {
		return expiry.WarnResult{}, fmt.Errorf("memstore: order %s: %w", orderNo, expiry.ErrNotFound)
	}
	if err := s.rowHeld(orderNo); err != nil {
		return expiry.WarnResult{}, err
	}
	cur := o.o
	cur.ReadAt = s.now()
	now := s.now().Truncate(time.Millisecond)
	if o.warned {
		return expiry.WarnResult{Warned: true, Order: cur}, nil
	}
	if o.o.Status != expiry.StatusPending || !o.o.ExpireAt.After(now) || o.o.ExpireAt.After(now.Add(lead)) {
		return expiry.WarnResult{Order: cur}, nil
	}
	o.warned = true
	return expiry.WarnResult{Fired: true, Order: cur}, nil
}
