package cancel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// This file is the payment provider's side of an expiry (invariant I18):
// before a timeout or the reconciler cancels a due order, the Service asks
// the provider whether its buyer paid, so that a payment whose callback is
// late or lost is honoured instead of refunded, and an order whose buyer is
// still on the provider's page waits for it, never past Config.MaxHold;
// then it closes the provider's session, so that the buyer cannot pay the
// order once it is cancelled. A user's or an operator's cancel closes the
// session too, once it committed.

// PaymentProvider is the host's payment provider, as the Service's timeout
// asks it (Config.Provider).
//
// QueryPayment reports what the provider knows of the payment of o (a
// pending order whose deadline has passed by the store's clock): a trade
// query by the merchant's order number, a checkout session looked up by the
// session the host opened for it. It is called for every order a timeout or
// the reconciler is about to cancel, so an adapter answers PaymentNotPaid
// at once for an order whose buyer never started paying (the host knows: it
// opened the sessions). It is called concurrently, for many orders at once
// (every due order of a reconciler's batch), each call under a context
// that ends after Config.ProviderTimeout: the adapter should honour it (an
// HTTP request made with it does); one that does not is not waited for
// past it (its answer is dropped, and its goroutine lives until it
// returns). It changes nothing at the provider. An error means "unknown": the order
// waits and is asked again (see Config.Provider).
//
// ClosePayment closes the provider's session of o's payment (a Checkout
// Session's expiry, a trade close), so that its buyer can no longer pay an
// order about to be cancelled. The Service calls it after QueryPayment
// answered PaymentNotPaid and before the cancel, which commits only after a
// close answered PaymentNotPaid; and, without a query, after a user's or
// an operator's cancel (Cancel without Request.OnlyIfDue, ExpireNow)
// committed, with o as the cancel left it. It must be idempotent: closing a session
// that is closed, expired or was never opened answers PaymentNotPaid. It
// answers the state after the close: PaymentNotPaid (closed: the cancel
// goes on), PaymentPaid with the payment id (the provider refused to close
// because the payment completed meanwhile: the order is paid with it), or
// PaymentOpen or an error (the order waits and is asked again, as for the
// query). Bounded by Config.ProviderTimeout too.
//
// A close that answered PaymentNotPaid bars the order at the provider for
// good: no session may be opened for it afterwards (the host's adapter
// records the close under the order number and refuses to open another; a
// provider keyed by the merchant's order number, whose closed trade cannot
// be paid again, does so itself). The cancel commits after the close, and
// a session opened between the two would outlive the order.
type PaymentProvider interface {
	QueryPayment(ctx context.Context, o expiry.Order) (PaymentAnswer, error)
	ClosePayment(ctx context.Context, o expiry.Order) (PaymentAnswer, error)
}

// PaymentState is what the provider says of an order's payment.
type PaymentState uint8

// The payment states a PaymentProvider answers.
const (
	// PaymentNotPaid: no payment was started, or it failed, expired or
	// was closed: the order may be cancelled (a payment that still
	// arrives after the cancel is refunded, as always).
	PaymentNotPaid PaymentState = iota + 1
	// PaymentPaid: the provider took the payment PaymentAnswer.PaymentID:
	// the order is paid with it, exactly as if its callback had arrived
	// (Service.Pay), and its later callback changes nothing.
	PaymentPaid
	// PaymentOpen: the buyer is paying (the session is open, the payment
	// is processing): the order waits (Config.ProviderRetry) and is asked
	// again, never past Config.MaxHold from its placement.
	PaymentOpen
)

// String names the state as logs and events show it.
func (s PaymentState) String() string {
	switch s {
	case PaymentNotPaid:
		return "not_paid"
	case PaymentPaid:
		return "paid"
	case PaymentOpen:
		return "open"
	}
	return fmt.Sprintf("PaymentState(%d)", uint8(s))
}

// PaymentAnswer is a PaymentProvider's answer.
type PaymentAnswer struct {
	State PaymentState
	// PaymentID is the payment that paid the order (PaymentPaid only): the
	// id its callback carries, so that the callback and the query decide
	// one payment once (I9, I14).
	PaymentID string
}

// Defaults of the provider's Config fields.
const (
	// ProviderTimeoutDefault bounds one PaymentProvider call. An ask is
	// a query and a close at most, so two of them stay below the
	// reconciler's bound of one batch (reconcile.OrderTimeoutDefault).
	ProviderTimeoutDefault = 3 * time.Second
	// ProviderRetryDefault is how long a due order waits for its provider
	// to answer again (an open payment, an error, no answer in time).
	ProviderRetryDefault = 30 * time.Second
)

// errProviderAnswer reports a PaymentProvider answer the Service cannot use
// (an unknown state, a paid answer without a valid payment id): the order
// is treated as one the provider could not answer for.
var errProviderAnswer = errors.New("orderexpiry: unusable payment provider answer")

// verdict is what asking the provider decided for one order.
type verdict uint8

const (
	verdictCancel   verdict = iota // not paid (or waited long enough): the timeout's cancel goes on
	verdictDone                    // paid by the provider's answer, waiting again, or no longer the timeout's
	verdictUnclosed                // at the maximum hold, the session not closed: the cancel goes on, and if it cancels, unclosed counts it
)

// unclosed counts and says a cancel that left the order's session open:
// at the maximum hold, or after a user's or operator's cancel (once the
// cancel committed: an order paid meanwhile is no alarm). closeErr is the
// close's.
func (s *Service) unclosed(ctx context.Context, orderNo string, closeErr error) {
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: orderNo, Reason: "unclosed", Err: closeErr})
	s.log.ErrorContext(ctx, "an order was cancelled with its payment session not closed; a payment that still arrives is refunded", "order", orderNo, "err", closeErr)
}

// closeAfter closes the provider's session of an order a user's or an
// operator's cancel (a Cancel without OnlyIfDue, ExpireNow) cancelled, or
// found cancelled when its COMMIT's outcome was unknown (settleUnknown),
// once and without a query: that
// cancel was asked for, so it is made first and never waits on the
// provider, and only the store's own checks (the owner's, the status's)
// decide it. o is the order as the cancel left it. PaymentNotPaid: closed.
// PaymentPaid: the buyer paid as the cancel committed; the payment is
// handed to Pay as its callback would be (refunded once, or reinstated by
// the late-payment policy), in case that callback never comes, and if the
// store keeps failing it is counted "unclosed". An open session, an error
// or an unusable answer: the session stays open, counted "unclosed"; a
// payment that still arrives is refunded.
func (s *Service) closeAfter(ctx context.Context, o expiry.Order) {
	ans, err := s.callProvider(ctx, o, s.provider.ClosePayment)
	switch {
	case err == nil && ans.State == PaymentNotPaid:
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: o.No, Reason: "closed"})
		return
	case err == nil && ans.State == PaymentPaid:
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: o.No, Reason: "close_paid"})
		// The order is cancelled: no timeout or pass asks about it again,
		// so this answer may be all the library ever hears of the payment
		// (its callback lost). A store that fails (a connection reset) is
		// tried again at once, twice; one that keeps failing leaves the
		// payment to its callback, said loudly and counted "unclosed".
		var perr error
		for range 3 {
			if _, perr = s.Pay(ctx, Payment{OrderNo: o.No, PaymentID: ans.PaymentID}); perr == nil || errors.Is(perr, ErrDiscrepancy) {
				return // honoured (late payments) or refunded, once
			}
			if ctx.Err() != nil {
				break
			}
		}
		err = fmt.Errorf("cancel: the provider took payment %s of cancelled order %s, and handing it on failed (its callback decides it, or the reconciler's refund retry if its record landed: check both before refunding by hand): %w", ans.PaymentID, o.No, perr)
	case err == nil:
		err = fmt.Errorf("cancel: the payment provider did not close the session of %s: %v", o.No, ans.State)
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: o.No, Reason: "close_" + ans.State.String(), Err: err})
	default:
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: o.No, Reason: "close_unknown", Err: err})
	}
	s.unclosed(ctx, o.No, err)
}

// settleUnknown follows a user's or an operator's cancel whose COMMIT's
// outcome is unknown (res, err its answer), so that its session is closed
// exactly when the order is cancelled. The cancel is made again: the
// store's compare-and-set waits for a commit still in flight on the row
// (a plain read would not, and would see the order pending), then answers
// what is decided: cancelled by this second try (its answer is the
// caller's), cancelled already (closed; the caller keeps the unknown
// outcome), or refused (another user's, decided otherwise: nothing is
// closed; a store hook that refuses it answers the caller). A second try
// whose outcome is unknown too, or that fails, leaves the first's unknown:
// counted "unclosed", since the order may be cancelled with its session
// open. Both run past the caller's context (a lost reply is often its
// end): the second try within Config.PlaceTimeout, the close within
// ProviderTimeout, and a refund the close hands on within half the
// DiscrepancyLease, as every refund.
func (s *Service) settleUnknown(ctx context.Context, req Request, res Result, err error) (Result, error) {
	rctx, done := context.WithTimeout(context.WithoutCancel(ctx), s.placeTimeout)
	defer done()
	again, err2 := s.cancelOne(rctx, req)
	switch {
	case err2 == nil && again.Changed:
		s.closeAfter(rctx, again.Order)
		return again, nil
	case err2 == nil && again.Order.Status == expiry.StatusCancelled:
		s.closeAfter(rctx, again.Order)
	case err2 == nil, errors.Is(err2, ErrNotOwner), errors.Is(err2, expiry.ErrNotFound):
		// Decided otherwise (paid, the host's, another user's, gone):
		// nothing of this cancel to close.
	case errors.Is(err2, ErrHook):
		// The order was pending and the host's hook refused the cancel:
		// known, not cancelled. The caller hears the hook's refusal.
		return again, err2
	default:
		s.unclosed(ctx, req.OrderNo, fmt.Errorf("cancel: the cancel's outcome is unknown, twice, so its session was not closed: %w", err2))
	}
	return res, err
}

// askProvider asks the provider about orderNo if it is a pending order that
// is due, and acts on the answer: pays it (PaymentPaid), re-arms it
// (PaymentOpen, an error, an unusable answer; at the maximum hold the
// cancel goes on), or lets the cancel go on (PaymentNotPaid). With
// verdictDone, res is the order's answer to the caller of Timeout. With
// verdictUnclosed, the error is the failed close's, for s.unclosed once the
// cancel committed; it is no error of the ask.
func (s *Service) askProvider(ctx context.Context, orderNo string) (verdict, Result, error) {
	o, err := s.store.Order(ctx, orderNo)
	if err != nil {
		if errors.Is(err, expiry.ErrNotFound) {
			return verdictCancel, Result{}, nil // the cancel answers it, as without a provider
		}
		return verdictDone, Result{}, err
	}
	if o.Status != expiry.StatusPending || o.ExpireAt.IsZero() || o.Remaining() > 0 {
		// Not the timeout's to cancel now: the store's cancel would change
		// nothing either, and its answer is this read's.
		return verdictDone, Result{Order: o}, nil
	}
	ans, qerr := s.callProvider(ctx, o, s.provider.QueryPayment)
	step := "" // the event's Reason prefix: "" for the query, "close_" for the close
	if qerr == nil && ans.State == PaymentNotPaid {
		// Close the session before the cancel commits, so that the buyer
		// cannot pay an order that is gone: a cancel then follows a
		// successful close only, and a crash between the two asks and
		// closes again (closing is idempotent). A provider that refuses
		// because the payment completed meanwhile answers paid.
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: orderNo, Reason: ans.State.String()})
		step = "close_"
		ans, qerr = s.callProvider(ctx, o, s.provider.ClosePayment)
	}
	switch {
	case qerr == nil && ans.State == PaymentNotPaid:
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: orderNo, Reason: "closed"})
		return verdictCancel, Result{}, nil
	case qerr == nil && ans.State == PaymentPaid:
		return s.paidByProvider(ctx, o, ans, step)
	}
	reason := step + "open"
	if qerr != nil {
		reason = step + "unknown"
		s.log.WarnContext(ctx, "the payment provider could not settle a due order's payment; it waits", "order", orderNo, "step", map[string]string{"": "query", "close_": "close"}[step], "err", qerr)
	}
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: orderNo, Reason: reason, Err: qerr})
	d, err := s.store.SetDeadline(ctx, DeadlineChange{OrderNo: orderNo, In: s.providerRetry, MaxHold: s.maxHold, Due: true})
	switch {
	case errors.Is(err, ErrUnsupported):
		// The store keeps no deadline to move (a mapped window): it
		// cannot wait durably, so the cancel goes on as at the cap.
	case err != nil:
		return verdictDone, Result{}, fmt.Errorf("cancel: timeout of %s: waiting for the payment provider: %w", orderNo, err)
	case d.Changed:
		// Moved by this call: it waits, even when the move took so long
		// (a busy database) that the order is due again when read after
		// it, or it was moved to a cap already past. Only a move the
		// store refuses says the cap is reached: the next ask finds that.
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindDeadlineChanged, OrderNo: orderNo, Reason: "provider_" + reason, Delay: d.Order.ExpireAt.Sub(d.Previous)})
		return verdictDone, Result{Order: d.Order}, nil
	case d.Order.Status != expiry.StatusPending:
		return verdictCancel, Result{}, nil // decided meanwhile: the cancel answers it
	case d.Order.Remaining() > 0:
		// Not moved by this call, and not due: another ask of the same
		// order (a timeout beside the reconciler, a wave) re-armed it
		// first. It waits as that one decided; closing here would shut
		// the session of a buyer who is still paying.
		return verdictDone, Result{Order: d.Order}, nil
	}
	// Not moved, and due: at placement + MaxHold (I17). The cancel goes
	// on whatever the provider says, and a payment that still arrives is
	// refunded. The session is closed first if the provider lets it (a
	// paid answer still pays); if not, it stays open: said loudly,
	// counted ("unclosed").
	if step == "" {
		ans, qerr = s.callProvider(ctx, o, s.provider.ClosePayment)
		switch {
		case qerr == nil && ans.State == PaymentNotPaid:
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: orderNo, Reason: "closed"})
			return verdictCancel, Result{}, nil
		case qerr == nil && ans.State == PaymentPaid:
			return s.paidByProvider(ctx, o, ans, "close_")
		}
	}
	return verdictUnclosed, Result{}, qerr
}

// paidByProvider pays o with the payment the provider answered (step: the
// event's Reason prefix).
func (s *Service) paidByProvider(ctx context.Context, o expiry.Order, ans PaymentAnswer, step string) (verdict, Result, error) {
	// No owner check: the provider answered for this order number, and a
	// legacy row's user id the library would refuse (an old host's space)
	// must not keep its payment from being taken.
	res, err := s.Pay(ctx, Payment{OrderNo: o.No, PaymentID: ans.PaymentID})
	s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindProviderAnswered, OrderNo: o.No, Reason: step + ans.State.String(), Err: err})
	switch {
	case err == nil:
		return verdictDone, res, nil
	case errors.Is(err, ErrDiscrepancy):
		// The provider's payment id was decided before (refunded, or
		// another order's): Pay refunded it; the order is still unpaid
		// and the timeout's.
		return verdictCancel, Result{}, nil
	}
	return verdictDone, res, fmt.Errorf("cancel: %s: paying it with the provider's payment %s: %w", o.No, ans.PaymentID, err)
}

// callProvider is one provider call, bounded by Config.ProviderTimeout, its
// answer checked. An adapter that ignores its context (an HTTP client
// without the request's context) is not waited for past the bound: the
// call's goroutine ends when the adapter returns, and its late answer is
// dropped (the order waits and is asked again, so nothing is lost).
func (s *Service) callProvider(ctx context.Context, o expiry.Order, call func(context.Context, expiry.Order) (PaymentAnswer, error)) (PaymentAnswer, error) {
	qctx, done := context.WithTimeout(ctx, s.providerTimeout)
	defer done()
	type answer struct {
		a   PaymentAnswer
		err error
	}
	got := make(chan answer, 1) // buffered: an abandoned call still returns
	go func() {
		a, err := call(qctx, o)
		got <- answer{a, err}
	}()
	select {
	case r := <-got:
		if r.err == nil {
			r.err = r.a.check()
		}
		return r.a, r.err
	case <-qctx.Done():
		return PaymentAnswer{}, fmt.Errorf("cancel: the payment provider gave no answer for %s in %v: %w", o.No, s.providerTimeout, qctx.Err())
	}
}

// check reports an answer the Service cannot act on.
func (a PaymentAnswer) check() error {
	switch a.State {
	case PaymentNotPaid, PaymentOpen:
		return nil
	case PaymentPaid:
		if err := expiry.ValidateID("payment id", a.PaymentID); err != nil {
			return fmt.Errorf("%w: paid without a valid payment id: %w", errProviderAnswer, err)
		}
		return nil
	}
	return fmt.Errorf("%w: state %v", errProviderAnswer, a.State)
}

// askAll is askProvider for a batch (ExpireDue), every order at once, so
// that the batch waits for its slowest ask only (one ProviderTimeout, two
// with the close), not for one slow ask after another (I12): it returns
// the numbers whose cancel goes on, and those of them whose session could
// not be closed (with the close's error). An order whose ask failed is
// left out (its error logged): it is the next round's.
func (s *Service) askAll(ctx context.Context, orderNos []string) ([]string, map[string]error) {
	// A number listed twice is asked once (CancelDue counts it once too):
	// two asks of one order would race each other's re-arm.
	orderNos = slices.Compact(slices.Sorted(slices.Values(orderNos)))
	verdicts := make([]verdict, len(orderNos))
	errs := make([]error, len(orderNos))
	var wg sync.WaitGroup
	for i, no := range orderNos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, err := s.askProvider(ctx, no)
			if err != nil && v != verdictUnclosed {
				s.log.WarnContext(ctx, "asking the payment provider before an expiry failed; the order is left for the next round", "order", no, "err", err)
				v = verdictDone
			}
			verdicts[i], errs[i] = v, err
		}()
	}
	wg.Wait()
	var out []string
	unclosed := map[string]error{}
	for i, no := range orderNos {
		switch verdicts[i] {
		case verdictUnclosed:
			unclosed[no] = errs[i]
			fallthrough
		case verdictCancel:
			out = append(out, no)
		}
	}
	return out, unclosed
}
