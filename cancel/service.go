package cancel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// Service runs cancels, payments and placements across both boundaries (SQL
// and the seat store). It is the expiry.Canceller the Handler uses, the cancel
// path of the reconciler, and what a host calls to place orders, for user
// cancels and for payment callbacks. Safe for concurrent use.
type Service struct {
	store         OrderStore
	seats         SeatStore
	obs           expiry.Observer
	log           *slog.Logger
	onDiscrepancy func(context.Context, Discrepancy) error
	placeTimeout  time.Duration
	lease         time.Duration
	acceptLate    bool
	onWarning     func(context.Context, expiry.Order) error
	sched         *expiry.Scheduler
	maxHold       time.Duration
	// provider, when set, is asked before a timeout's cancel (provider.go).
	provider                       PaymentProvider
	providerTimeout, providerRetry time.Duration
	// batcher groups concurrent Timeout calls into batches, as a database
	// groups commits (timeouts.go).
	batcher *groupCommit
}

// Defaults of Config.
const (
	// PlaceTimeoutDefault bounds a placement's transaction. It must stay
	// well below the reconciler's grace period (reconcile.GraceDefault): a
	// lock older than the grace whose order is not in SQL is released as
	// abandoned, so a transaction still running then would commit an order
	// whose seats are free.
	PlaceTimeoutDefault = 20 * time.Second
	// DiscrepancyLeaseDefault is how long a discrepancy whose hook is
	// running is left to it before the reconciler tries the hook again; each
	// hook call is bounded by half of it.
	DiscrepancyLeaseDefault = 2 * time.Minute
	// MaxHoldDefault is Config.MaxHold's default: an hour from placement,
	// four times a typical 15-minute payment window, so that a buyer in the
	// payment flow can be granted time without holding seats for ever.
	MaxHoldDefault = time.Hour
)

// Config wires a Service. Store and Seats are required.
type Config struct {
	// Store is the order store: SQL, the source of truth. It also records
	// the payments that could not be honoured, once per payment id, so the
	// refund hook runs once per payment.
	Store OrderStore
	// Seats is the seat store. Refunds are recorded there too, and every
	// Pay reads that record first (one more seat-store round trip), so that
	// SQL losing its last commits neither refunds a payment twice nor
	// honours a refunded one; a payment whose seats the seat store sold to
	// another order is reported (backintime.go).
	Seats SeatStore
	// Runtime: the logger and the observer. The Service keeps no clock:
	// every "now" it acts on is the store's or the seat store's.
	expiry.Runtime
	// OnDiscrepancy is the host's refund hook: called once per recorded
	// discrepancy (a new payment id), synchronously in Pay, bounded by half
	// of DiscrepancyLease. An error (or a crash before it returned) leaves
	// the record unsettled, and RetryDiscrepancies (the reconciler) calls the
	// hook again, so it runs at least once per payment id and, keyed by
	// PaymentID at the provider (an idempotency key), refunds exactly once.
	OnDiscrepancy func(context.Context, Discrepancy) error
	// PlaceTimeout bounds the host's transaction in Place; 0:
	// PlaceTimeoutDefault.
	PlaceTimeout time.Duration
	// DiscrepancyLease: see DiscrepancyLeaseDefault; 0: that default.
	DiscrepancyLease time.Duration
	// AcceptLatePayments is the late-payment policy (pretix's
	// payment_term_accept_late). Off (the default), a payment for a
	// cancelled order is a discrepancy, refunded. On, a payment for an order
	// cancelled by its timeout or the reconciler (never by its user, nor by
	// ExpireNow) reinstates it as paid when the store can reinstate it
	// and every seat can be claimed again, in SQL and in the seat store
	// (only if free); otherwise it is refunded as before. Reinstating is the
	// only way back from a terminal state and happens at most once per
	// order.
	AcceptLatePayments bool
	// OnWarning is the host's expiry-warning hook ("your seats will be
	// released in 2 minutes"), run by Warn (the Handler's Warner, with
	// expiry.SchedulerConfig.WarnBefore), at most once per order, bounded by
	// half of DiscrepancyLease. Nil: warnings are only counted.
	OnWarning func(ctx context.Context, o expiry.Order) error
	// Scheduler sends an order's first messages: its expiry message and,
	// with SchedulerConfig.WarnBefore, its warning, once Place's insert has
	// committed, and again for a shortened deadline (Shorten), so both
	// follow the new deadline. nil: Place sends nothing (the reconciler
	// alone expires orders, or the host's insert sends in its own
	// transaction, as expiry/river's ScheduleTx does) and Shorten is
	// refused.
	Scheduler *expiry.Scheduler
	// MaxHold is the longest an order may hold its seats, from its placement
	// by the store's clock: Extend never moves a deadline past placement +
	// MaxHold (invariant I17). 0: MaxHoldDefault.
	MaxHold time.Duration
	// Provider, when set, is asked before a timeout (Timeout, ExpireDue:
	// the expiry messages and the reconciler) cancels a due order
	// (invariant I18): PaymentPaid pays the order with the provider's
	// payment id as its callback would (its seats sold, no refund);
	// PaymentNotPaid closes the provider's session (ClosePayment) and the
	// cancel commits once it is closed; PaymentOpen, an error or no
	// answer within ProviderTimeout moves the order's deadline
	// ProviderRetry later (the message re-arms to it, the reconciler finds
	// it due again then), never past its placement plus MaxHold: there the
	// cancel goes on whatever the provider says (the session closed first
	// when the provider lets it), and a payment that still arrives is
	// refunded. A store that cannot move deadlines (a mapped window)
	// cannot wait: its orders are cancelled on any answer but a paid one.
	// Users' cancels and ExpireNow never ask: once they cancelled, they
	// close the session, once (see Cancel). Nil: no provider is asked, a payment after the cancel is
	// refunded.
	Provider PaymentProvider
	// ProviderTimeout bounds each QueryPayment and ClosePayment call; 0:
	// ProviderTimeoutDefault.
	ProviderTimeout time.Duration
	// ProviderRetry is how long an order the provider could not settle
	// waits before it is asked again; 0: ProviderRetryDefault.
	ProviderRetry time.Duration
}

// New returns a Service, or an error naming the field that is missing or
// out of range.
func New(c Config) (*Service, error) {
	switch {
	case c.Store == nil:
		return nil, errors.New("cancel: Config.Store is nil")
	case c.Seats == nil:
		return nil, errors.New("cancel: Config.Seats is nil")
	case c.PlaceTimeout < 0:
		return nil, fmt.Errorf("cancel: Config.PlaceTimeout is negative (%v)", c.PlaceTimeout)
	case c.DiscrepancyLease < 0:
		return nil, fmt.Errorf("cancel: Config.DiscrepancyLease is negative (%v)", c.DiscrepancyLease)
	case c.MaxHold < 0:
		return nil, fmt.Errorf("cancel: Config.MaxHold is negative (%v)", c.MaxHold)
	case c.ProviderTimeout < 0:
		return nil, fmt.Errorf("cancel: Config.ProviderTimeout is negative (%v)", c.ProviderTimeout)
	case c.ProviderRetry < 0:
		return nil, fmt.Errorf("cancel: Config.ProviderRetry is negative (%v)", c.ProviderRetry)
	case c.ProviderRetry > 0 && c.ProviderRetry < time.Millisecond:
		return nil, fmt.Errorf("cancel: Config.ProviderRetry is below a millisecond (%v): stores keep deadlines in milliseconds", c.ProviderRetry)
	}
	if err := CheckScope(c.Store, c.Seats); err != nil {
		return nil, fmt.Errorf("cancel: Config.Store and Config.Seats: %w", err)
	}
	rt := c.Runtime.WithDefaults()
	s := &Service{store: c.Store, seats: c.Seats, obs: rt.Observer,
		log: rt.Logger, onDiscrepancy: c.OnDiscrepancy, placeTimeout: c.PlaceTimeout, lease: c.DiscrepancyLease,
		acceptLate: c.AcceptLatePayments, onWarning: c.OnWarning, sched: c.Scheduler}
	if s.placeTimeout == 0 {
		s.placeTimeout = PlaceTimeoutDefault
	}
	if s.lease == 0 {
		s.lease = DiscrepancyLeaseDefault
	}
	s.maxHold = c.MaxHold
	s.provider, s.providerTimeout, s.providerRetry = c.Provider, c.ProviderTimeout, c.ProviderRetry
	if s.providerTimeout == 0 {
		s.providerTimeout = ProviderTimeoutDefault
	}
	if s.providerRetry == 0 {
		s.providerRetry = ProviderRetryDefault
	}
	s.batcher = &groupCommit{store: c.Store}
	if s.maxHold == 0 {
		s.maxHold = MaxHoldDefault
	}
	return s, nil
}

// Scope implements Scoped: its order store's scope, so that a reconciler
// is never wired to another scope's Service (reconcile.New checks it).
func (s *Service) Scope() string { return s.store.Scope() }

// Place places an order, in one call: it validates p, locks its seats (up
// to p.Limit seats of the show for the user, 0 no limit), runs insert with p
// and the lock's id in p.LockID, and once insert has returned nil schedules
// the order's expiry message (and, with expiry.SchedulerConfig.WarnBefore, its
// warning) through Config.Scheduler (nil: none; the reconciler alone expires
// the order). A failed send is logged and counted, never returned: the order
// is placed.
//
// insert is the host's transaction, and its nil is the commit: it must
// insert that p (sqlstore's Store.Place does, keeping the lock id with the
// order) and may insert the host's own rows in the same transaction, and it
// returns only after the commit, nil if it committed. A commit whose outcome
// is unknown (it got no answer) must be returned wrapping
// expiry.ErrCommitUnknown; one the database refused, rolling the transaction
// back (a Galera certification conflict answers 1213 at COMMIT), must not:
// nothing was placed (sqlstore's Insert does both). insert
// gets a context bounded by Config.PlaceTimeout. It sends nothing itself,
// unless in its own transaction (expiry/river's ScheduleTx).
//
// An order number that exists already gives ErrOrderExists before anything
// is locked. If insert fails, nothing is sent (invariant I6) and the seats of
// this lock are released again, with two exceptions: a failed lock (nothing
// was locked), and an error wrapping expiry.ErrCommitUnknown. The order may
// exist then: its seats stay locked (the reconciler releases them after its
// grace period if it does not), and Place reads the order back; if the store
// shows it committed, it is scheduled as above (by the store's clock), else
// nothing is sent and the reconciler expires it should it commit yet. Either
// way the error is returned: the host learns that its commit was not
// confirmed.
// The release names this call's lock, so it never touches a live order, even
// one with the same number (ErrOrderExists: a retry after an unknown
// commit, a double submit).
// The error wraps insert's, or the lock's (ErrSeatUnavailable,
// ErrLimitExceeded, expiry.ErrInvalidID).
func (s *Service) Place(ctx context.Context, p Placement, insert func(ctx context.Context, p Placement) error) error {
	p.LockID = ""
	if err := p.Validate(); err != nil {
		return fmt.Errorf("cancel: place: %w", err)
	}
	// An order number placed already is refused before anything is locked:
	// a retry or a double submit then never holds seats, even for a moment.
	// (Two submits racing past this read both lock; Lock lets one of them
	// win, and the loser's insert fails with ErrOrderExists and releases its
	// own lock only.)
	switch _, err := s.store.Order(ctx, p.OrderNo); {
	case err == nil:
		return fmt.Errorf("cancel: place %s: %w", p.OrderNo, ErrOrderExists)
	case !errors.Is(err, expiry.ErrNotFound):
		return fmt.Errorf("cancel: place %s: %w", p.OrderNo, err)
	}
	id, err := s.seats.Lock(ctx, p.Hold(), p.Limit)
	if err != nil {
		return fmt.Errorf("cancel: place %s: %w", p.OrderNo, err)
	}
	p.LockID = id
	tctx, done := context.WithTimeout(ctx, s.placeTimeout)
	err = insert(tctx, p)
	done()
	if err == nil {
		if s.sched != nil {
			s.sched.Schedule(ctx, p.OrderNo, p.ExpireAt) // logs and counts a failed send itself
		}
		return nil
	}
	if errors.Is(err, expiry.ErrCommitUnknown) {
		s.scheduleIfCommitted(ctx, p.OrderNo, err)
		return fmt.Errorf("cancel: place %s: %w", p.OrderNo, err)
	}
	// The request may be over (a client gone): release anyway.
	h := p.Hold()
	if _, rerr := s.seats.Release(context.WithoutCancel(ctx), h); rerr != nil {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindReleaseFailed, OrderNo: p.OrderNo, Seats: len(h.Seats), Err: rerr})
		s.log.ErrorContext(ctx, "seat release failed after a failed placement; the reconciler will release them",
			"order", p.OrderNo, "err", rerr)
	}
	return fmt.Errorf("cancel: place %s: %w", p.OrderNo, err)
}

// scheduleIfCommitted is Place's answer to an unknown commit (cause): the
// seats stay locked, and the order is scheduled only if the store shows it
// committed, so that no message is ever sent for an order that rolled back
// (I6). An order found under the number is committed, whoever placed it (a
// concurrent submit of the same number): one more message for it is a
// duplicate, which changes nothing (I5). Not found, or not readable: the
// commit may still land; the reconciler then expires the order when due
// (I3) and releases the seats of one that never appears.
func (s *Service) scheduleIfCommitted(ctx context.Context, orderNo string, cause error) {
	if s.sched == nil {
		s.log.WarnContext(ctx, "placing commit outcome unknown; seats stay locked until the reconciler decides", "order", orderNo, "err", cause)
		return
	}
	rctx, done := context.WithTimeout(context.WithoutCancel(ctx), s.placeTimeout)
	o, err := s.store.Order(rctx, orderNo)
	done()
	if err != nil || o.Status != expiry.StatusPending {
		s.log.WarnContext(ctx, "placing commit outcome unknown and the order not seen pending; seats stay locked until the reconciler decides",
			"order", orderNo, "err", cause, "read", err)
		return
	}
	s.log.WarnContext(ctx, "placing commit reported failed, but the order is in the store; scheduling it", "order", orderNo, "err", cause)
	s.sched.Reschedule(ctx, o)
}

// Cancel cancels one order: the store's transaction, then, if this call
// cancelled it, the seat release. A release failure is logged and counted
// (expiry.KindReleaseFailed) and left to the reconciler; it is not an error,
// because the order is cancelled. A store's failed Hook is an error
// wrapping ErrHook: nothing was cancelled, nothing is released. With
// Config.Provider, a cancel with Request.OnlyIfDue (a timeout's, the
// reconciler's one by one) asks the provider first, as Timeout does: it
// may pay the order instead, or leave it waiting (Result.Changed false).
// Any other cancel (a user's, an operator's) is made as asked, then, if it
// cancelled the order (or, its commit's outcome unknown, a second try
// finds it cancelled), closes the provider's session (PaymentProvider.ClosePayment, once, bounded by
// Config.ProviderTimeout): a close that finds a payment complete hands it
// to Pay as its callback would be (refunded once, or reinstated by the
// late-payment policy; the Result still says what the cancel did), one
// that fails or finds the payment processing is counted as
// expiry.KindProviderAnswered "unclosed". A cancel whose commit's outcome
// is unknown is made again first; that second try, the close and a refund
// it hands on run past ctx's end, within PlaceTimeout, ProviderTimeout and
// half the DiscrepancyLease.
func (s *Service) Cancel(ctx context.Context, req Request) (Result, error) {
	if err := validate(req.OrderNo, req.UserID); err != nil {
		return Result{}, err
	}
	if len(req.Reason) > MaxReasonLen || expiry.ValidateID("reason", string(req.Reason)) != nil {
		return Result{}, fmt.Errorf("cancel: %w: reason %q (1-%d bytes of A-Z a-z 0-9 - _ .)", expiry.ErrInvalidID, req.Reason, MaxReasonLen)
	}
	if s.provider != nil && !req.OnlyIfDue {
		res, err := s.cancelOne(ctx, req)
		switch {
		case err == nil && res.Changed:
			s.closeAfter(ctx, res.Order)
		case errors.Is(err, expiry.ErrCommitUnknown):
			return s.settleUnknown(ctx, req, res, err)
		}
		return res, err
	}
	if s.provider != nil && req.UserID == "" { // a user's due cancel is refused by the store, untouched
		v, res, err := s.askProvider(ctx, req.OrderNo)
		switch {
		case v == verdictUnclosed:
			res, cerr := s.cancelOne(ctx, req)
			if cerr == nil && res.Changed || errors.Is(cerr, expiry.ErrCommitUnknown) {
				s.unclosed(ctx, req.OrderNo, err)
			}
			return res, cerr
		case v == verdictDone || err != nil:
			res.Changed = false
			return res, err
		}
	}
	return s.cancelOne(ctx, req)
}

// cancelOne is Cancel without the provider: the store's compare-and-set,
// then the seats.
func (s *Service) cancelOne(ctx context.Context, req Request) (Result, error) {
	res, err := s.store.CancelPending(ctx, req)
	if err != nil || !res.Changed {
		return res, err
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindCancelled, OrderNo: req.OrderNo, Reason: string(req.Reason), Seats: len(res.Seats),
		Deadline: res.Order.ExpireAt, At: res.Order.ReadAt}) // both the store's: the lateness by its clock
	if len(res.Seats) == 0 {
		return res, nil
	}
	// The lock the order held at the cancel, by its id: a release that
	// runs late (after the reconciler freed this lock and a late payment
	// locked the seats again under the same number) frees nothing.
	hold := Hold{ShowID: res.Order.ShowID, OrderNo: req.OrderNo, UserID: res.Order.UserID, Seats: res.Seats, LockID: res.LockID}
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
//
// Timeout calls that arrive while
// another is in the store are cancelled together, in one transaction and
// one seat-store release per show (timeouts.go), as a consumer handling
// many due messages at once makes them; a lone call goes by the one-order
// path. Either way each call answers for its own order alone; a batch's
// store call (a store's hook too) and seat release run under one context,
// which carries the values of the batch's first call.
func (s *Service) Timeout(ctx context.Context, orderNo string) (cancelled bool, o expiry.Order, err error) {
	if err := validate(orderNo, ""); err != nil {
		return false, expiry.Order{}, err
	}
	if s.provider != nil {
		v, res, aerr := s.askProvider(ctx, orderNo)
		switch {
		case v == verdictUnclosed:
			// Counted once the cancel committed, or may have (its
			// COMMIT's outcome unknown: a redelivery then finds the order
			// decided and would never count it).
			defer func() {
				if cancelled || errors.Is(err, expiry.ErrCommitUnknown) {
					s.unclosed(ctx, orderNo, aerr)
				}
			}()
		case v == verdictDone || aerr != nil:
			return false, res.Order, aerr
		}
	}
	res, err := s.batcher.timeout(ctx, s, orderNo)
	return res.Changed, res.Order, err
}

// timeoutOne is Timeout by the one-order path.
func (s *Service) timeoutOne(ctx context.Context, orderNo string) (Result, error) {
	// Timeout asked the provider already: the cancel goes on without it.
	res, err := s.cancelOne(ctx, Request{OrderNo: orderNo, Reason: ReasonTimeout, OnlyIfDue: true})
	if errors.Is(err, ErrHook) {
		// The Handler branches on expiry's sentinels: a hook's own error
		// that wraps one (ErrNotFound of the host's lookup) must not turn
		// the failed cancel into an order that is gone, acked and never
		// redelivered. Its text stays; its chain is the caller's of Cancel.
		res.Changed = false
		return res, fmt.Errorf("cancel: timeout of %s: %w (%v)", orderNo, ErrHook, err)
	}
	return res, err
}

// UserCancel cancels userID's own pending order. Another user's order gives
// ErrNotOwner and is not touched.
func (s *Service) UserCancel(ctx context.Context, orderNo, userID string) (Result, error) {
	if userID == "" {
		return Result{}, fmt.Errorf("cancel: %w: empty user id", expiry.ErrInvalidID)
	}
	return s.Cancel(ctx, Request{OrderNo: orderNo, Reason: ReasonUser, UserID: userID})
}

// Pay records a payment callback. Paying a paid order again with the same
// payment id changes nothing and is not an error (callbacks repeat). With
// Config.AcceptLatePayments, paying an order cancelled by its timeout or the
// reconciler reinstates it as paid when every seat can be claimed again
// (Changed true, expiry.KindReinstated; see OrderStore.ReinstateCancelled). Paying a cancelled
// order otherwise, a paid one with another payment id, an order in a status
// the host owns (expiry.StatusHost: the library cannot take it, and never
// writes over the host's status; unless the host's own code recorded this
// very payment id with it, a payment under review: then it is the host's,
// answered without an error and never refunded), or an order that is
// not in the store (the host deleted it, or it was never placed in this
// scope; the repeated callback of the payment that paid an order the host
// deleted since is answered as paid, without an error), is a discrepancy: nothing changes, it is recorded once per payment id (by
// the order store) and handed to the refund hook, and the error wraps
// ErrDiscrepancy (a repeated callback gets it too). A store's failed Hook
// is an error wrapping ErrHook (checked first: never a discrepancy, even
// when the hook's own error wraps one): nothing was paid, sold, recorded or
// refunded. After the store's
// transaction the seats are marked sold in the seat store; a failure there is
// logged and left to the reconciler.
//
// A payment id the seat store recorded refunded is refused (ErrDiscrepancy, the hook not called again) whatever
// SQL says, and a seat the sale found sold to another order is reported as
// expiry.KindDiverged: both can happen only after SQL lost commits
// (backintime.go).
func (s *Service) Pay(ctx context.Context, p Payment) (Result, error) {
	if err := p.Validate(); err != nil {
		return Result{}, fmt.Errorf("cancel: %w", err)
	}
	// A payment the seat store recorded refunded is never honoured, even
	// when SQL lost that record (backintime.go). When the seat store
	// cannot answer, SQL decides alone, as it always did.
	refunded, err := s.seats.Refunded(ctx, p.PaymentID)
	if err != nil {
		s.log.WarnContext(ctx, "could not read the seat store's refund record; SQL decides alone", "order", p.OrderNo, "payment", p.PaymentID, "err", err)
	} else if refunded {
		return s.refusedBefore(ctx, p)
	}
	res, err := s.store.PayPending(ctx, p)
	if errors.Is(err, ErrHook) {
		// The store's Hook failed: the payment was rolled back, undecided
		// (whatever the hook's error wraps), and is honoured when the
		// provider repeats it and the hook succeeds.
		return Result{}, fmt.Errorf("cancel: pay %s: %w", p.OrderNo, err)
	}
	if errors.Is(err, ErrDiscrepancy) {
		// The id was decided before (refunded, or it paid another order):
		// it pays nothing, and is never refunded twice.
		return s.refuse(ctx, p, res, res.Order.Status, false)
	}
	if errors.Is(err, expiry.ErrNotFound) {
		return s.refuseGone(ctx, p)
	}
	if err != nil {
		return res, err
	}
	if res.Changed {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindPaid, OrderNo: p.OrderNo, Seats: len(res.Seats)})
		s.sell(ctx, p, res)
		return res, nil
	}
	switch {
	case res.Order.Status == expiry.StatusHost && res.PaymentID == p.PaymentID:
		// The host's own code took this payment (it wrote the id with a
		// status of its own, a payment under review): the host's, honoured
		// (the store recorded it so), never refunded (I14, I19).
		return res, nil
	case res.Order.Status == expiry.StatusCancelled && s.acceptLate:
		return s.payLate(ctx, p, res)
	case res.Order.Status == expiry.StatusCancelled,
		res.Order.Status == expiry.StatusPaid && res.PaymentID != p.PaymentID,
		res.Order.Status == expiry.StatusHost: // the host's order: the money cannot be taken (I19)
		return s.refuse(ctx, p, res, res.Order.Status, false)
	}
	return res, nil // the same payment again, or an order still pending (a store that refused)
}

func (s *Service) sell(ctx context.Context, p Payment, res Result) {
	if len(res.Seats) == 0 {
		return
	}
	hold := Hold{ShowID: res.Order.ShowID, OrderNo: p.OrderNo, UserID: res.Order.UserID, Seats: res.Seats}
	n, err := s.seats.Sell(ctx, hold)
	if err != nil {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSellFailed, OrderNo: p.OrderNo, Seats: len(hold.Seats), Err: err})
		s.log.ErrorContext(ctx, "marking seats sold failed after payment; the reconciler will mark them",
			"order", p.OrderNo, "show", hold.ShowID, "err", err)
		return
	}
	if n < len(hold.Seats) {
		s.checkSale(ctx, p.PaymentID, hold)
	}
}

// refuse is Pay's answer to a payment its order cannot take (res, as the
// store answered it): the discrepancy is recorded (once per payment id) and
// handed to the refund hook. A payment id decided before is never decided
// again: refunded before, it is refunded (the hook is not called again);
// honoured before (a concurrent late payment of the same id reinstated the
// order first), Pay answers the order as paid by it, without an error.
//
// refundedBefore says the seat store recorded p's id refunded (Pay read it
// first): if SQL then records the discrepancy as new, SQL lost its record
// of that refund (it went back in time), which is reported; runHook does
// not refund it again.
func (s *Service) refuse(ctx context.Context, p Payment, res Result, status expiry.Status, refundedBefore bool) (Result, error) {
	d := Discrepancy{PaymentID: p.PaymentID, OrderNo: p.OrderNo, UserID: res.Order.UserID, Status: status}
	recorded, err := s.store.RecordDiscrepancy(ctx, d)
	if err != nil {
		return res, fmt.Errorf("cancel: order %s: record discrepancy of payment %s: %w", d.OrderNo, d.PaymentID, err)
	}
	if !recorded {
		// Decided before: refunded, or it paid the order. PayPending
		// answers who paid (and pays nothing: the order is not pending).
		now, err := s.store.PayPending(ctx, Payment{OrderNo: p.OrderNo, PaymentID: p.PaymentID})
		if err == nil && now.Order.Status == expiry.StatusPaid && now.PaymentID == p.PaymentID {
			return now, nil
		}
		return res, fmt.Errorf("cancel: order %s: payment %s (recorded before): %w", d.OrderNo, d.PaymentID, ErrDiscrepancy)
	}
	if refundedBefore {
		reason := DivergedRefundRepeated
		if d.Status == expiry.StatusPending {
			reason = DivergedRefundedPayment
		}
		s.diverged(ctx, d.OrderNo, d.PaymentID, reason, 0)
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDiscrepancy, OrderNo: d.OrderNo, Reason: "paid_after_" + d.Status.String()})
	s.log.WarnContext(ctx, "payment for an order that is not payable", "order", d.OrderNo, "payment", d.PaymentID, "status", d.Status)
	if s.onDiscrepancy != nil {
		s.runHook(ctx, d)
	}
	return res, fmt.Errorf("cancel: order %s: payment %s: %w", d.OrderNo, d.PaymentID, ErrDiscrepancy)
}

// refuseGone is Pay's answer to a payment whose order is not in the store:
// the host deleted it (a closed order the buyer removed, soft or hard), or
// it was never placed in this scope. The provider took the money all the
// same, and no retry of the callback will find the order: it is a
// discrepancy (Status cancelled), recorded once per payment id and
// refunded, never an expiry.ErrNotFound the provider repeats for ever.
func (s *Service) refuseGone(ctx context.Context, p Payment) (Result, error) {
	s.log.WarnContext(ctx, "payment for an order that is not in the store (deleted, or never placed in this scope); it is refunded", "order", p.OrderNo, "payment", p.PaymentID)
	res := Result{Order: expiry.Order{No: p.OrderNo, UserID: p.UserID, Status: expiry.StatusCancelled}}
	return s.refuse(ctx, p, res, expiry.StatusCancelled, false)
}

// runHook calls the refund hook for d and settles d when it succeeds.
func (s *Service) runHook(ctx context.Context, d Discrepancy) bool {
	hctx, done := context.WithTimeout(context.WithoutCancel(ctx), s.lease/2)
	defer done()
	// The seat store's record of a refund outlives a record SQL lost
	// (backintime.go): a refund made once is not made again. When the seat
	// store cannot answer, SQL's record decides alone, as it always did:
	// refunds go on during a seat-store outage.
	refunded, err := s.seats.Refunded(hctx, d.PaymentID)
	if err != nil {
		s.log.WarnContext(ctx, "could not read the seat store's refund record; SQL's decides alone", "order", d.OrderNo, "payment", d.PaymentID, "err", err)
	}
	if err == nil && refunded {
		// Refunded already: by a call whose record SQL lost (refuse
		// reported it), or by the reconciler's retry while this call
		// stalled past the lease. Settled, not refunded again.
		if err := s.store.SettleDiscrepancy(hctx, d.PaymentID); err != nil {
			s.log.ErrorContext(ctx, "a refund made before could not be recorded settled; the reconciler will try again", "order", d.OrderNo, "payment", d.PaymentID, "err", err)
			return false
		}
		return true
	}
	if err := s.onDiscrepancy(hctx, d); err != nil {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindHookFailed, OrderNo: d.OrderNo, Err: err})
		s.log.ErrorContext(ctx, "refund hook failed; the reconciler will call it again", "order", d.OrderNo, "payment", d.PaymentID, "err", err)
		return false
	}
	if err := s.seats.MarkRefunded(hctx, d.PaymentID, d.OrderNo); err != nil {
		// SQL's record still keeps the hook from running again; only a
		// later loss of that record is no longer covered.
		s.log.ErrorContext(ctx, "refund made but not recorded in the seat store", "order", d.OrderNo, "payment", d.PaymentID, "err", err)
	}
	if err := s.store.SettleDiscrepancy(hctx, d.PaymentID); err != nil {
		s.log.ErrorContext(ctx, "refund hook ran but could not be recorded; it will be called again", "order", d.OrderNo, "payment", d.PaymentID, "err", err)
		return false
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRefunded, OrderNo: d.OrderNo})
	return true
}

// RetryDiscrepancies calls the refund hook again for up to limit recorded
// discrepancies whose hook failed, or was interrupted by a crash, at least a
// lease ago (Config.DiscrepancyLease). It returns how many hooks succeeded.
// The reconciler calls it every round; without a hook it does nothing.
func (s *Service) RetryDiscrepancies(ctx context.Context, limit int) (int, error) {
	if s.onDiscrepancy == nil || limit <= 0 {
		return 0, nil
	}
	ds, err := s.store.ClaimDiscrepancies(ctx, s.lease, limit)
	if err != nil {
		return 0, fmt.Errorf("cancel: claim discrepancies: %w", err)
	}
	settled := 0
	for _, d := range ds {
		if ctx.Err() != nil {
			break
		}
		if s.runHook(ctx, d) {
			settled++
		}
	}
	return settled, ctx.Err()
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
