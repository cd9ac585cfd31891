package expiry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// OrderLookup is the read side of the order store that the Handler uses.
//
// Order returns the order with ReadAt set to the store's clock at the read,
// or an error wrapping ErrNotFound. Any other error is transient (the store
// is unreachable) and makes the message come back later. It must be safe for
// concurrent use.
type OrderLookup interface {
	Order(ctx context.Context, orderNo string) (Order, error)
}

// Canceller cancels an order whose time is up; package cancel provides one.
//
// Timeout cancels orderNo only if it is still pending and due by the store's
// clock, and reports whether this call cancelled it. False with a nil error
// means nothing was changed: the order was already paid or cancelled, or is
// not due yet. It is idempotent and safe for concurrent use: of any number of
// concurrent calls at most one returns true.
type Canceller interface {
	Timeout(ctx context.Context, orderNo string) (cancelled bool, err error)
}

// Outcome is what the Handler did with a message.
type Outcome uint8

// The Handler's outcomes.
const (
	// OutcomeFailed: a transient error; the message should come back.
	OutcomeFailed Outcome = iota
	// OutcomeMissing: no such order; nothing to do.
	OutcomeMissing
	// OutcomeFinal: the order was already paid or cancelled; nothing to do.
	// Duplicate deliveries end here (invariant I5).
	OutcomeFinal
	// OutcomeRearmed: not due yet; a message was sent for the time left.
	OutcomeRearmed
	// OutcomeCancelled: this message cancelled the order.
	OutcomeCancelled
	// OutcomeLostRace: the order was pending and due, but a payment or a user
	// cancel decided it first.
	OutcomeLostRace
)

var outcomeNames = [...]string{"failed", "missing", "final", "rearmed", "cancelled", "lost_race"}

// String returns the outcome's snake_case name, suitable as a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// minRearm is the delay used when the store says "not due" although its own
// clock read "due" a moment before (the expire_at boundary): short, but never
// zero, so the message cannot spin.
const minRearm = 100 * time.Millisecond

// Handler is the decision tree run for every delivered message. It keeps no
// state of its own and is safe for concurrent use.
type Handler struct {
	orders OrderLookup
	cancel Canceller
	sender DelaySender
	obs    Observer
	log    *slog.Logger
}

// HandlerConfig wires a Handler. Orders, Canceller and Sender are required.
type HandlerConfig struct {
	Orders    OrderLookup
	Canceller Canceller
	Sender    DelaySender  // used to re-arm
	Observer  Observer     // nil: NopObserver
	Logger    *slog.Logger // nil: slog.Default()
}

// NewHandler returns a Handler, or an error naming a missing dependency.
func NewHandler(c HandlerConfig) (*Handler, error) {
	switch {
	case c.Orders == nil:
		return nil, errors.New("expiry: HandlerConfig.Orders is nil")
	case c.Canceller == nil:
		return nil, errors.New("expiry: HandlerConfig.Canceller is nil")
	case c.Sender == nil:
		return nil, errors.New("expiry: HandlerConfig.Sender is nil")
	}
	return &Handler{orders: c.Orders, cancel: c.Canceller, sender: c.Sender, obs: OrNop(c.Observer), log: orDefault(c.Logger)}, nil
}

// Handle decides what a delivered message means:
//
//   - order missing, or not pending: nothing (OutcomeMissing, OutcomeFinal);
//   - pending but not due by the store's clock: re-arm with the time left
//     (OutcomeRearmed);
//   - due: cancel with reason timeout (OutcomeCancelled, or OutcomeLostRace
//     when a payment or user cancel got there first).
//
// A non-nil error is transient (store down, re-arm send failed): the message
// must be redelivered, which is safe because Handle is idempotent.
func (h *Handler) Handle(ctx context.Context, m Message) (Outcome, error) {
	if ValidateID("order number", m.OrderNo) != nil {
		return OutcomeMissing, nil // no order has that number; retrying cannot help
	}
	o, err := h.orders.Order(ctx, m.OrderNo)
	if errors.Is(err, ErrNotFound) {
		return OutcomeMissing, nil
	}
	if err != nil {
		return OutcomeFailed, fmt.Errorf("expiry: look up order %s: %w", m.OrderNo, err)
	}
	if o.Status != StatusPending {
		return OutcomeFinal, nil
	}
	if left := o.Remaining(); left > 0 {
		return h.rearm(ctx, m, left)
	}
	cancelled, err := h.cancel.Timeout(ctx, m.OrderNo)
	if err != nil {
		return OutcomeFailed, fmt.Errorf("expiry: cancel order %s: %w", m.OrderNo, err)
	}
	if cancelled {
		return OutcomeCancelled, nil
	}
	// Not cancelled: either someone else decided, or the store's guard found
	// it not due after all. Only a fresh read tells which.
	o, err = h.orders.Order(ctx, m.OrderNo)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return OutcomeFailed, fmt.Errorf("expiry: look up order %s: %w", m.OrderNo, err)
	}
	if err == nil && o.Status == StatusPending {
		return h.rearm(ctx, m, max(o.Remaining(), minRearm))
	}
	return OutcomeLostRace, nil
}

func (h *Handler) rearm(ctx context.Context, m Message, left time.Duration) (Outcome, error) {
	next := Message{OrderNo: m.OrderNo, Hop: min(m.Hop+1, MaxHop), TraceID: m.TraceID}
	if err := h.sender.Send(ctx, next, left); err != nil {
		h.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: m.OrderNo, Hop: next.Hop, Delay: left, Err: err})
		return OutcomeFailed, fmt.Errorf("expiry: re-arm order %s: %w", m.OrderNo, err)
	}
	h.obs.Observe(ctx, Event{Kind: KindRearmed, OrderNo: m.OrderNo, Hop: next.Hop, Delay: left})
	h.log.DebugContext(ctx, "order not due, re-armed", "order", m.OrderNo, "left", left, "hop", next.Hop)
	return OutcomeRearmed, nil
}

func orDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
