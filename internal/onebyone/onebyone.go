// Package onebyone is the one-order form of the library's batch paths, for
// tests and benchmarks that compare the batches with it: a store whose
// CancelDue is one CancelPending per order, and a reconciler Service whose
// ExpireDue is one Cancel per order, as a host's own store or wrapper may
// have them. Every outcome of a batch must be the same as this form's.
package onebyone

import (
	"context"
	"errors"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Expire cancels each of nos that is pending and due with one call of
// cancelOne (OnlyIfDue, reason) and returns the Results of those it
// changed. A missing order is skipped; another error stops it (the orders
// before it stay cancelled).
func Expire(ctx context.Context, cancelOne func(context.Context, cancel.Request) (cancel.Result, error), nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	seen := map[string]bool{}
	var out []cancel.Result
	for _, no := range nos {
		if seen[no] {
			continue
		}
		seen[no] = true
		res, err := cancelOne(ctx, cancel.Request{OrderNo: no, Reason: reason, OnlyIfDue: true})
		switch {
		case errors.Is(err, expiry.ErrNotFound) && !errors.Is(err, cancel.ErrHook):
		case err != nil:
			return out, err
		case res.Changed:
			out = append(out, res)
		}
	}
	return out, nil
}

// Store is an order store whose CancelDue is Expire over its CancelPending.
type Store struct{ cancel.OrderStore }

// CancelDue implements cancel.OrderStore one order at a time.
func (s Store) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	if err := cancel.ValidateBatch(nos, reason); err != nil {
		return nil, err
	}
	return Expire(ctx, s.CancelPending, nos, reason)
}

// Service is a reconciler's Service (*cancel.Service, or a wrapper) whose
// ExpireDue is Expire over its Cancel.
type Service struct {
	Canceller interface {
		Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error)
		RetryDiscrepancies(ctx context.Context, limit int) (int, error)
		Scope() string
	}
}

// Cancel is the wrapped Service's.
func (s Service) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	return s.Canceller.Cancel(ctx, req)
}

// ExpireDue cancels nos one at a time with Cancel.
func (s Service) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	return Expire(ctx, s.Canceller.Cancel, nos, reason)
}

// RetryDiscrepancies is the wrapped Service's.
func (s Service) RetryDiscrepancies(ctx context.Context, limit int) (int, error) {
	return s.Canceller.RetryDiscrepancies(ctx, limit)
}

// Scope is the wrapped Service's.
func (s Service) Scope() string { return s.Canceller.Scope() }
