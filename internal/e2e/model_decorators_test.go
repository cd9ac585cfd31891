package e2e_test

// The model test's view of what really happened (model_test.go): the
// decorators of the stores, the sender and the observer that record each
// call's outcome, and the model updates they make.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

func (m *machine) onPlaced(p cancel.Placement) {
	o := m.orders[p.OrderNo]
	if o == nil || o.placed {
		m.violate("placed %s twice, or an order the model did not try", p.OrderNo)
		return
	}
	o.placed, o.status = true, expiry.StatusPending
}

func (m *machine) onTransition(no string, to expiry.Status, req *cancel.Request, res cancel.Result) {
	o := m.orders[no]
	if o == nil || !o.placed {
		m.violate("I1: %s moved to %s, but it was never placed", no, to)
		return
	}
	o.transitions++
	if o.status != expiry.StatusPending {
		m.violate("I1: %s was %s and became %s", no, o.status, to)
	}
	if got, want := slices.Sorted(slices.Values(res.Seats)), slices.Sorted(slices.Values(o.p.Seats)); !slices.Equal(got, want) {
		m.violate("%s: the transition to %s took seats %v, the order has %v", no, to, got, want)
	}
	if req != nil && (req.Reason == cancel.ReasonTimeout || req.Reason == cancel.ReasonReconcile) {
		if !req.OnlyIfDue {
			m.violate("I4: %s cancelled with reason %s without the due guard", no, req.Reason)
		}
		// ReadAt is the store's clock read in the cancel's own transaction,
		// after the compare-and-set: an expire_at after it is certainly early.
		if o.p.ExpireAt.After(res.Order.ReadAt) {
			m.violate("I4: %s cancelled (%s) at %s by the store's clock, before its expire_at %s", no, req.Reason, res.Order.ReadAt, o.p.ExpireAt)
		}
	}
	o.status = to
	if req != nil {
		o.reason = req.Reason
	}
}

// onReinstated: a late payment p brought order no back from cancelled to
// paid (the decorator saw the store do it).
func (m *machine) onReinstated(p cancel.Payment, res cancel.Result) {
	o := m.orders[p.OrderNo]
	switch {
	case o == nil || !o.placed:
		m.violate("I1: %s reinstated, but it was never placed", p.OrderNo)
		return
	case o.status != expiry.StatusCancelled || o.reinstated:
		m.violate("I1: %s reinstated from %s (reinstated before: %v)", p.OrderNo, o.status, o.reinstated)
	case o.reason != cancel.ReasonTimeout && o.reason != cancel.ReasonReconcile:
		m.violate("late payment %s reinstated %s, cancelled by %s", p.PaymentID, p.OrderNo, o.reason)
	}
	if got, want := slices.Sorted(slices.Values(res.Seats)), slices.Sorted(slices.Values(o.p.Seats)); !slices.Equal(got, want) {
		m.violate("%s: reinstated with seats %v, the order has %v", p.OrderNo, got, want)
	}
	o.status, o.reinstated, o.paidBy = expiry.StatusPaid, true, p.PaymentID
	m.stats.kinds["reinstated"]++
}

// onWarning is the host's warning hook: once per order, only while pending.
func (m *machine) onWarning(_ context.Context, ord expiry.Order) error {
	o := m.orders[ord.No]
	if o == nil || !o.placed {
		m.violate("warned %s, never placed", ord.No)
		return nil
	}
	o.warned++
	if o.warned > 1 {
		m.violate("%s warned %d times", ord.No, o.warned)
	}
	if o.status != expiry.StatusPending {
		m.violate("%s warned while %s", ord.No, o.status)
	}
	m.stats.kinds["warned"]++
	return nil
}

// mOrders is the order store with injected failures.
type mOrders struct {
	m     *machine
	inner mOrderStore
	place func(ctx context.Context, p cancel.Placement) error
}

func (s *mOrders) Order(ctx context.Context, no string) (expiry.Order, error) {
	if _, hit := s.m.fault("Order", no); hit {
		return expiry.Order{}, injected("Order")
	}
	return s.inner.Order(ctx, no)
}

func (s *mOrders) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if s.m.stuck[req.OrderNo] {
		s.m.hits = append(s.m.hits, "CancelPending")
		s.m.stats.failures["stuck/CancelPending"]++
		return cancel.Result{}, injected("CancelPending (stuck)")
	}
	mode, hit := s.m.fault("CancelPending", req.OrderNo)
	if hit && req.Reason == cancel.ReasonReconcile { // that reconciler backs off from the order
		s.m.backoff[req.OrderNo] = s.m.appNow().Add(reconcile.BackoffMax)
	}
	if mode == mBefore {
		return cancel.Result{}, injected("CancelPending")
	}
	res, err := s.inner.CancelPending(ctx, req)
	if err == nil && res.Changed {
		s.m.onTransition(req.OrderNo, expiry.StatusCancelled, &req, res)
	}
	if hit {
		return cancel.Result{}, injected("CancelPending")
	}
	return res, err
}

func (s *mOrders) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	no := p.OrderNo
	mode, hit := s.m.fault("PayPending", no)
	if mode == mBefore {
		return cancel.Result{}, injected("PayPending")
	}
	res, err := s.inner.PayPending(ctx, p)
	if err == nil && res.Changed {
		s.m.onTransition(no, expiry.StatusPaid, nil, res)
		s.m.orders[no].paidBy = p.PaymentID
	}
	if hit {
		return cancel.Result{}, injected("PayPending")
	}
	return res, err
}

// ReinstateCancelled is the late-payment side of the store. A lost
// acknowledgement is a commit whose answer was lost (expiry.ErrCommitUnknown).
func (s *mOrders) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	mode, hit := s.m.fault("ReinstateCancelled", p.OrderNo)
	if mode == mBefore {
		return cancel.Result{}, injected("ReinstateCancelled")
	}
	res, err := s.inner.ReinstateCancelled(ctx, p, claim)
	if err == nil && res.Changed {
		s.m.onReinstated(p, res)
	}
	if hit {
		return cancel.Result{}, fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, injected("ReinstateCancelled"))
	}
	return res, err
}

func (s *mOrders) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if _, hit := s.m.fault("SetDeadline", c.OrderNo); hit {
		return cancel.DeadlineResult{}, injected("SetDeadline")
	}
	res, err := s.inner.SetDeadline(ctx, c)
	if err == nil && res.Changed {
		o := s.m.orders[c.OrderNo]
		switch {
		case o == nil || !o.placed || o.status != expiry.StatusPending:
			s.m.violate("the deadline of %s (%s) moved", c.OrderNo, s.m.state(o))
		case !c.Shorten && (res.Order.ExpireAt.Before(o.p.ExpireAt) || !o.p.ExpireAt.After(res.Order.ReadAt.Add(-time.Second))):
			s.m.violate("I4: extending %s moved its deadline from %s to %s (store clock %s)", c.OrderNo, o.p.ExpireAt, res.Order.ExpireAt, res.Order.ReadAt)
		default:
			o.p.ExpireAt = res.Order.ExpireAt
		}
	}
	return res, err
}

func (s *mOrders) MarkWarned(ctx context.Context, no string, lead time.Duration) (expiry.WarnResult, error) {
	mode, hit := s.m.fault("MarkWarned", no)
	if mode == mBefore {
		return expiry.WarnResult{}, injected("MarkWarned")
	}
	res, err := s.inner.MarkWarned(ctx, no, lead)
	if hit {
		if err == nil && res.Fired {
			s.m.orders[no].warned++ // marked, never fired: at most once
		}
		return expiry.WarnResult{}, injected("MarkWarned")
	}
	return res, err
}

func (s *mOrders) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if _, hit := s.m.fault("Expired", ""); hit {
		return nil, "", injected("Expired")
	}
	return s.inner.Expired(ctx, cursor, limit)
}

func (s *mOrders) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	return s.inner.Claims(ctx, cursor, limit)
}

func (s *mOrders) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	return s.inner.RecordDiscrepancy(ctx, d)
}

func (s *mOrders) ClaimDiscrepancies(ctx context.Context, lease time.Duration, limit int) ([]cancel.Discrepancy, error) {
	ds, err := s.inner.ClaimDiscrepancies(ctx, lease, limit)
	mine := ds[:0:0] // the SQL variants share one table between runs
	for _, d := range ds {
		// A case variant of a run's number (a payment for an order no one
		// placed, refunded) is the run's too.
		if len(d.OrderNo) >= len(s.m.env.prefix) && strings.EqualFold(d.OrderNo[:len(s.m.env.prefix)], s.m.env.prefix) {
			mine = append(mine, d)
		}
	}
	return mine, err
}

func (s *mOrders) SettleDiscrepancy(ctx context.Context, paymentID string) error {
	return s.inner.SettleDiscrepancy(ctx, paymentID)
}

func (s *mOrders) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	if _, hit := s.m.fault("Statuses", ""); hit {
		return nil, injected("Statuses")
	}
	return s.inner.Statuses(ctx, nos)
}

// Place is the host's placing transaction. A lost acknowledgement is a
// commit whose answer was lost: expiry.ErrCommitUnknown, as sqlstore's Insert
// reports it.
func (s *mOrders) Place(ctx context.Context, p cancel.Placement) error {
	mode, hit := s.m.fault("Place", p.OrderNo)
	if mode == mBefore {
		return injected("Place")
	}
	err := s.place(ctx, p)
	if err == nil {
		s.m.onPlaced(p)
	}
	if hit {
		return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, injected("Place"))
	}
	return err
}

// mSeats is the seat store with injected failures. It also audits every
// release and sale against the seat store's state before and after (I2). Each
// run has its own Redis namespace; the lock scan is still confined to this
// run's shows, as a second fence against judging another test's locks.
type mSeats struct {
	m     *machine
	inner canceltest.SeatStore
}

func (s *mSeats) Lock(ctx context.Context, h cancel.Hold, limit int) (string, error) {
	mode, hit := s.m.fault("Lock", h.OrderNo)
	if mode == mBefore {
		return "", injected("Lock")
	}
	id, err := s.inner.Lock(ctx, h, limit)
	// A seat this order locks again (a late payment's reinstatement, whose
	// lock may be left behind when the reinstatement fails) may be released
	// again: "released twice" counts releases per lock. Checked even when
	// the ack is lost: the lock is in the store all the same.
	after := s.show(ctx, h.ShowID)
	for _, seat := range h.Seats {
		if st, ok := after[seat]; ok && st.Status == cancel.SeatLocked && st.OrderNo == h.OrderNo {
			delete(s.m.freed, [3]string{h.OrderNo, h.ShowID, seat})
		}
	}
	if hit {
		return "", injected("Lock")
	}
	return id, err
}

func (s *mSeats) Lost(ctx context.Context) (string, bool, error) { return s.inner.Lost(ctx) }

func (s *mSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	mine := claims[:0:0]
	for _, c := range claims {
		if slices.Contains(s.m.shows, c.ShowID) {
			mine = append(mine, c)
		}
	}
	return s.inner.Restore(ctx, mine)
}

func (s *mSeats) Missing(ctx context.Context, claims []cancel.Claim) ([]cancel.Claim, error) {
	mine := claims[:0:0]
	for _, c := range claims {
		if slices.Contains(s.m.shows, c.ShowID) {
			mine = append(mine, c)
		}
	}
	return s.inner.Missing(ctx, mine)
}

func (s *mSeats) MarkRestored(ctx context.Context, token string) error {
	return s.inner.MarkRestored(ctx, token)
}

func (s *mSeats) show(ctx context.Context, show string) map[string]cancel.SeatState {
	st, err := s.inner.Show(ctx, show)
	if err != nil {
		s.m.violate("reading show %s: %v", show, err)
	}
	return st
}

func (s *mSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	mode, hit := s.m.fault("Release", h.OrderNo)
	if mode == mBefore {
		return 0, injected("Release")
	}
	if mid := s.m.midRelease; mid != nil && mid.order == h.OrderNo {
		s.m.midRelease = nil
		mid.run()
	}
	before := s.show(ctx, h.ShowID)
	n, err := s.inner.Release(ctx, h)
	after := s.show(ctx, h.ShowID)
	s.auditRelease(h, before, after, n, err)
	if hit {
		return 0, injected("Release")
	}
	return n, err
}

func (s *mSeats) auditRelease(h cancel.Hold, before, after map[string]cancel.SeatState, n int, err error) {
	m := s.m
	o := m.orders[h.OrderNo]
	freed := 0
	for seat, b := range before {
		a, still := after[seat]
		if still && a == b {
			continue
		}
		if b.Status != cancel.SeatLocked || b.OrderNo != h.OrderNo || still {
			m.violate("I2: releasing %s changed seat %s/%s from %+v to %+v (not a lock of this order)", h.OrderNo, h.ShowID, seat, b, a)
			continue
		}
		freed++
		m.freedBlocked(h.ShowID, seat, h.OrderNo)
		key := [3]string{h.OrderNo, h.ShowID, seat}
		if m.freed[key] {
			m.violate("I2: seat %s/%s of %s released twice", h.ShowID, seat, h.OrderNo)
		}
		m.freed[key] = true
		switch {
		case o == nil:
			m.violate("I2: released seat %s/%s of an order the model never tried: %s", h.ShowID, seat, h.OrderNo)
		case o.placed && o.status == expiry.StatusPaid:
			m.violate("I2: released seat %s/%s of paid order %s", h.ShowID, seat, h.OrderNo)
		case o.placed && o.status == expiry.StatusPending:
			m.violate("released seat %s/%s of %s while the store still has it pending", h.ShowID, seat, h.OrderNo)
		}
	}
	for seat, a := range after {
		if _, was := before[seat]; !was {
			m.violate("releasing %s created seat %s/%s: %+v", h.OrderNo, h.ShowID, seat, a)
		}
	}
	if err == nil && n != freed {
		m.violate("release of %s reported %d seats freed, %d were", h.OrderNo, n, freed)
	}
}

func (s *mSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	mode, hit := s.m.fault("Sell", h.OrderNo)
	if mode == mBefore {
		return 0, injected("Sell")
	}
	before := s.show(ctx, h.ShowID)
	n, err := s.inner.Sell(ctx, h)
	after := s.show(ctx, h.ShowID)
	changed := 0
	for seat, a := range after {
		b, was := before[seat]
		if was && a == b {
			continue
		}
		changed++
		if a.Status != cancel.SeatSold || a.OrderNo != h.OrderNo || (was && (b.Status != cancel.SeatLocked || b.OrderNo != h.OrderNo)) {
			s.m.violate("I2: selling for %s changed seat %s/%s from %+v to %+v", h.OrderNo, h.ShowID, seat, b, a)
		}
	}
	if o := s.m.orders[h.OrderNo]; changed > 0 && (o == nil || !o.placed || o.status != expiry.StatusPaid) {
		s.m.violate("seats of %s marked sold, but the order is not paid", h.OrderNo)
	}
	if hit {
		return 0, injected("Sell")
	}
	return n, err
}

func (s *mSeats) ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error) {
	if _, hit := s.m.fault("ScanLocks", ""); hit {
		return nil, "", injected("ScanLocks")
	}
	locks, next, err := s.inner.ScanLocks(ctx, cursor, count)
	mine := locks[:0:0]
	for _, l := range locks {
		if slices.Contains(s.m.shows, l.ShowID) {
			mine = append(mine, l)
		}
	}
	return mine, next, err
}

// mSender is the transport: it keeps sent messages in flight until the model
// delivers them.
type mSender struct{ m *machine }

func (s *mSender) Send(ctx context.Context, msg expiry.Message, delay time.Duration) error {
	if _, err := expiry.EncodeMessage(msg); err != nil {
		return err
	}
	if s.m.brokerDown {
		s.m.stats.failures["broker_down/Send"]++
		return injected("Send (broker down)")
	}
	mode, hit := s.m.fault("Send", msg.OrderNo)
	if mode == mBefore {
		return injected("Send")
	}
	s.m.flights = append(s.m.flights, &mFlight{msg: msg, due: s.m.appNow().Add(delay)})
	if hit {
		return injected("Send")
	}
	return nil
}

// mObserver counts what the library reports.
type mObserver struct {
	mu        sync.Mutex
	kinds     map[expiry.Kind]int
	cancelled map[string]int
	paid      map[string]int
	handled   expiry.Event // the last KindHandled
}

func (o *mObserver) Observe(_ context.Context, e expiry.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kinds[e.Kind]++
	switch e.Kind {
	case expiry.KindCancelled:
		o.cancelled[e.OrderNo]++
	case expiry.KindPaid:
		o.paid[e.OrderNo]++
	case expiry.KindHandled:
		o.handled = e
	}
}

// Scope is the store's own.
func (s *mOrders) Scope() string { return s.inner.Scope() }

// Scope is the seat store's own.
func (s *mSeats) Scope() string { return s.inner.Scope() }

// SeatStates, Refunded, MarkRefunded and ScanSold pass to the seat store
// unfaulted: they are its records for when SQL goes back in time, which
// the model's stores never do (internal/patroni and reconcile's
// back-in-time cases drive them).
func (s *mSeats) SeatStates(ctx context.Context, show string, seats []string) (map[string]cancel.SeatState, error) {
	return s.inner.SeatStates(ctx, show, seats)
}

func (s *mSeats) Refunded(ctx context.Context, paymentID string) (bool, error) {
	return s.inner.Refunded(ctx, paymentID)
}

func (s *mSeats) MarkRefunded(ctx context.Context, paymentID, orderNo string) error {
	return s.inner.MarkRefunded(ctx, paymentID, orderNo)
}

func (s *mSeats) ScanSold(ctx context.Context, cursor string, count int) ([]cancel.SeatSale, string, error) {
	return s.inner.ScanSold(ctx, cursor, count)
}
