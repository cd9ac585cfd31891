package main

// This file is the payment provider: an in-memory model of a hosted
// checkout, after Stripe's Checkout Sessions as its public API reference
// describes them. It is the provider's side only; the host's adapter that
// the library asks is in provider.go.
//
// What the model keeps of the real API (each point from the page cited):
//
//   - A session's status is open, complete or expired; its payment_status
//     unpaid or paid; once complete it names the payment (payment_intent),
//     the id the checkout.session.completed webhook carries too.
//     https://docs.stripe.com/api/checkout/sessions/object
//   - A session is created with expires_at 30 minutes to 24 hours after its
//     creation (24 hours by default); it cannot be shorter. A session whose
//     expires_at has passed is expired: its buyer can no longer complete it.
//     https://docs.stripe.com/api/checkout/sessions/create
//     https://docs.stripe.com/payments/checkout/managing-limited-inventory
//   - "Expire a Session" expires an open session at once, so that its buyer
//     can no longer pay; it returns an error for a session that is already
//     expired or not in an expirable state (a complete one).
//     https://docs.stripe.com/api/checkout/sessions/expire
//   - "Retrieve a Session" returns the session object and changes nothing.
//     https://docs.stripe.com/api/checkout/sessions/retrieve
//   - Errors are objects with a type (invalid_request_error for a request
//     the session's state refuses, api_error for the provider's own
//     trouble) and an HTTP status.
//     https://docs.stripe.com/api/errors
//   - A refund is created for a payment intent; a retried request with the
//     same idempotency key gets the first request's answer, not a second
//     refund.
//     https://docs.stripe.com/api/refunds/create
//     https://docs.stripe.com/api/idempotent_requests
//
// What it leaves out: line items, customers, delayed payment methods (a
// session complete with payment_status unpaid until the money arrives: the
// adapter answers "open" for one), and the exact error codes and messages,
// which are this model's own wording.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The session statuses and payment statuses of the model.
const (
	StatusOpen     = "open"
	StatusComplete = "complete"
	StatusExpired  = "expired"

	PaymentUnpaid = "unpaid"
	PaymentPaid   = "paid"
)

// The bounds of a session's expires_at, from its creation.
const (
	MinSessionTTL = 30 * time.Minute
	MaxSessionTTL = 24 * time.Hour
)

// Clock is the provider's clock: the system clock plus an offset the demo
// can drive forward (Advance), to reach a session's expires_at without
// waiting half an hour. The library never reads it: its deadlines are the
// database's.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the provider's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the provider's time d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Session is a Checkout Session as the API returns it (the fields this
// model keeps).
type Session struct {
	ID                string
	ClientReferenceID string // the merchant's order number
	AmountTotal       int64  // in the currency's smallest unit
	Status            string // open, complete, expired
	PaymentStatus     string // unpaid, paid
	PaymentIntent     string // the payment, once complete
	Created           time.Time
	ExpiresAt         time.Time
}

// Error is an API error: its HTTP status and the error object's type, code
// and message.
type Error struct {
	HTTPStatus int
	Type       string // invalid_request_error, api_error
	Code       string // resource_missing, ...
	Message    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("checkout: %d %s: %s", e.HTTPStatus, e.Type, e.Message)
}

// InvalidRequest reports whether err is the API refusing a request the
// session's state does not allow (HTTP 400): the request was answered, and
// retrying it changes nothing.
func InvalidRequest(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == "invalid_request_error" && e.HTTPStatus == http.StatusBadRequest
}

// Payment is one payment the provider took: a completed session's.
type Payment struct {
	SessionID, OrderNo, PaymentIntent string
	Amount                            int64
}

// Refund is a refund the provider made.
type Refund struct {
	ID, PaymentIntent, IdempotencyKey string
}

// Checkout is the provider: its sessions, payments and refunds. Safe for
// concurrent use. The merchant's calls (CreateSession, Retrieve, Expire,
// Refund) take a context and honour it; the buyer's (Complete) is the
// buyer's browser on the hosted page, which the merchant does not make.
type Checkout struct {
	clock *Clock
	// Latency is each merchant call's round trip.
	Latency time.Duration

	mu          sync.Mutex
	seq         int
	sessions    map[string]*Session
	unreachable map[string]bool // sessions whose merchant calls hang (a partition)
	payments    []Payment
	refunds     map[string]Refund    // by idempotency key
	expired     map[string]time.Time // sessions expired by the merchant's Expire: when (the system clock)
}

// NewCheckout returns a provider on clock.
func NewCheckout(clock *Clock) *Checkout {
	return &Checkout{clock: clock, Latency: 3 * time.Millisecond, sessions: map[string]*Session{},
		unreachable: map[string]bool{}, refunds: map[string]Refund{}, expired: map[string]time.Time{}}
}

// Unreachable makes the merchant's calls about the session hang until
// their context ends (on: a network partition between the merchant and the
// provider), or answer again (off). The buyer's page is not affected.
func (c *Checkout) Unreachable(sessionID string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unreachable[sessionID] = on
}

// roundTrip is one merchant call's way to the provider: the latency, or
// the context's end.
func (c *Checkout) roundTrip(ctx context.Context, sessionID string) error {
	c.mu.Lock()
	hang := c.unreachable[sessionID]
	c.mu.Unlock()
	if hang {
		<-ctx.Done()
		return fmt.Errorf("checkout: no answer: %w", ctx.Err())
	}
	t := time.NewTimer(c.Latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("checkout: %w", ctx.Err())
	}
}

// settle expires an open session whose expires_at has passed (c.mu held).
func (c *Checkout) settle(s *Session) {
	if s.Status == StatusOpen && !c.clock.Now().Before(s.ExpiresAt) {
		s.Status = StatusExpired
	}
}

func (c *Checkout) session(id string) (*Session, error) {
	s, ok := c.sessions[id]
	if !ok {
		return nil, &Error{HTTPStatus: http.StatusNotFound, Type: "invalid_request_error", Code: "resource_missing", Message: "no such checkout session: " + id}
	}
	c.settle(s)
	return s, nil
}

// CreateSession opens a session for orderNo (its client_reference_id) of
// amount, expiring expiresAfter from now (30 minutes to 24 hours).
func (c *Checkout) CreateSession(ctx context.Context, orderNo string, amount int64, expiresAfter time.Duration) (Session, error) {
	if err := c.roundTrip(ctx, ""); err != nil {
		return Session{}, err
	}
	if expiresAfter < MinSessionTTL || expiresAfter > MaxSessionTTL {
		return Session{}, &Error{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Code: "parameter_invalid",
			Message: fmt.Sprintf("expires_at must be 30 minutes to 24 hours after creation, not %v", expiresAfter)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	now := c.clock.Now()
	s := &Session{ID: fmt.Sprintf("cs_test_%06d", c.seq), ClientReferenceID: orderNo, AmountTotal: amount,
		Status: StatusOpen, PaymentStatus: PaymentUnpaid, Created: now, ExpiresAt: now.Add(expiresAfter)}
	c.sessions[s.ID] = s
	return *s, nil
}

// Retrieve returns the session.
func (c *Checkout) Retrieve(ctx context.Context, sessionID string) (Session, error) {
	if err := c.roundTrip(ctx, sessionID); err != nil {
		return Session{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(sessionID)
	if err != nil {
		return Session{}, err
	}
	return *s, nil
}

// Expire expires an open session: its buyer can no longer pay. A session
// already expired, or complete, is refused with an invalid_request_error.
func (c *Checkout) Expire(ctx context.Context, sessionID string) (Session, error) {
	if err := c.roundTrip(ctx, sessionID); err != nil {
		return Session{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(sessionID)
	if err != nil {
		return Session{}, err
	}
	if s.Status != StatusOpen {
		return Session{}, &Error{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Code: "checkout_session_not_expirable",
			Message: fmt.Sprintf("checkout session %s is %s; only an open session can be expired", s.ID, s.Status)}
	}
	s.Status = StatusExpired
	c.expired[s.ID] = time.Now()
	return *s, nil
}

// Complete is the buyer paying on the hosted page: it succeeds only while
// the session is open (not expired by Expire, nor past its expires_at), and
// returns the payment intent, which the checkout.session.completed webhook
// then carries to the merchant.
func (c *Checkout) Complete(sessionID string) (Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(sessionID)
	if err != nil {
		return Session{}, err
	}
	if s.Status != StatusOpen {
		return *s, &Error{HTTPStatus: http.StatusBadRequest, Type: "invalid_request_error", Code: "checkout_session_" + s.Status,
			Message: fmt.Sprintf("checkout session %s is %s: it can no longer be paid", s.ID, s.Status)}
	}
	s.Status, s.PaymentStatus = StatusComplete, PaymentPaid
	s.PaymentIntent = "pi_" + s.ID[len("cs_"):]
	c.payments = append(c.payments, Payment{SessionID: s.ID, OrderNo: s.ClientReferenceID, PaymentIntent: s.PaymentIntent, Amount: s.AmountTotal})
	return *s, nil
}

// Refund refunds the payment intent; a retry with the same idempotency key
// answers the first refund. A payment intent the provider never took is an
// error.
func (c *Checkout) Refund(ctx context.Context, paymentIntent, idempotencyKey string) (Refund, error) {
	if err := c.roundTrip(ctx, ""); err != nil {
		return Refund{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.refunds[idempotencyKey]; ok {
		return r, nil
	}
	took := false
	for _, p := range c.payments {
		took = took || p.PaymentIntent == paymentIntent
	}
	if !took {
		return Refund{}, &Error{HTTPStatus: http.StatusNotFound, Type: "invalid_request_error", Code: "resource_missing", Message: "no such payment_intent: " + paymentIntent}
	}
	r := Refund{ID: fmt.Sprintf("re_%06d", len(c.refunds)+1), PaymentIntent: paymentIntent, IdempotencyKey: idempotencyKey}
	c.refunds[idempotencyKey] = r
	return r, nil
}

// Payments lists the payments the provider took, in order: its ledger
// (the Dashboard's payments list).
func (c *Checkout) Payments() []Payment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Payment(nil), c.payments...)
}

// Refunds lists the refunds the provider made.
func (c *Checkout) Refunds() []Refund {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Refund, 0, len(c.refunds))
	for _, r := range c.refunds {
		out = append(out, r)
	}
	return out
}

// ExpiredByRequest reports when the merchant's Expire expired the session
// (by the system clock), if it did: the provider's request log.
func (c *Checkout) ExpiredByRequest(sessionID string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.expired[sessionID]
	return t, ok
}

// Peek is the session as the provider has it now, without a round trip:
// for the demo's report and the test's checks, not for the host.
func (c *Checkout) Peek(sessionID string) (Session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(sessionID)
	if err != nil {
		return Session{}, false
	}
	return *s, true
}

// PeekOrder is the latest session of the order (its client_reference_id),
// as Peek.
func (c *Checkout) PeekOrder(orderNo string) (Session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last *Session
	for _, s := range c.sessions {
		if s.ClientReferenceID == orderNo && (last == nil || s.ID > last.ID) {
			last = s
		}
	}
	if last == nil {
		return Session{}, false
	}
	c.settle(last)
	return *last, true
}
