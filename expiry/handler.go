package expiry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Canceller cancels an order whose time is up; package cancel provides one.
//
// Timeout cancels orderNo only if it is still pending and due by the store's
// clock. It returns true when this call cancelled it. Otherwise it returns
// false and the order as the store found it (No and ReadAt set), which says why:
// already paid or cancelled, or pending and not due yet. A missing order is
// an error wrapping ErrNotFound; other errors are transient. It is
// idempotent and safe for concurrent use: of any number of concurrent calls
// at most one returns true. An answer of false with an Order whose No is not
// orderNo (a zero Order) and no error is a broken Canceller: the Handler
// reports it as a failure instead of re-arming on it.
type Canceller interface {
	Timeout(ctx context.Context, orderNo string) (cancelled bool, o Order, err error)
}

// WarnResult is what a Warner did with an order's expiry warning.
type WarnResult struct {
	// Fired is true when this call marked the order warned and ran the
	// warning hook. Of any number of calls for one order, at most one sees
	// true, ever.
	Fired bool
	// Warned is true when the order had been warned before (an earlier
	// delivery, a redelivered message): nothing to do.
	Warned bool
	// Order is the order as the store found it (No, Status, ExpireAt and
	// ReadAt set): when Fired and Warned are false it says why, paid or
	// cancelled, already due, or more than the lead away from its deadline
	// (the deadline was extended, or the message came early).
	Order Order
}

// Warner fires an order's expiry warning; package cancel's Service provides
// one (with an order store that keeps a warned flag).
//
// Warn marks orderNo warned, with a compare-and-set on the store's warned
// flag, only if it is pending, not warned before, not yet due, and due within
// lead by the store's clock, and then runs the host's warning hook; it
// reports whether this call fired. The flag is set before the hook runs, so a
// warning is at most once per order: a redelivery never fires it again, and
// a crash between the two loses it. A missing order is an error wrapping
// ErrNotFound; other errors are transient (nothing was marked). Safe for
// concurrent use.
type Warner interface {
	Warn(ctx context.Context, orderNo string, lead time.Duration) (WarnResult, error)
}

// Outcome is what the Handler did with a message.
type Outcome uint8

// The Handler's outcomes.
const (
	// OutcomeFailed: a transient error; the message should come back.
	OutcomeFailed Outcome = iota
	// OutcomeMissing: no such order; nothing to do.
	OutcomeMissing
	// OutcomeFinal: the order was already paid or cancelled (by a payment,
	// a user, the reconciler or an earlier delivery), is in a status the
	// host owns (StatusHost, I19), or has no deadline; nothing to do.
	// Duplicate deliveries end here (invariant I5).
	OutcomeFinal
	// OutcomeRearmed: not due yet; a message was sent for the time left.
	OutcomeRearmed
	// OutcomeCancelled: this message cancelled the order.
	OutcomeCancelled
	// OutcomeWarned: this warning message fired the order's warning hook.
	// (A warning that finds the order paid, cancelled, due or warned already
	// is OutcomeFinal; one that came early is OutcomeRearmed.)
	OutcomeWarned
)

var outcomeNames = [...]string{"failed", "missing", "final", "rearmed", "cancelled", "warned"}

// String returns the outcome's snake_case name, suitable as a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// minRearm is the shortest re-arm: an order pending at its expire_at
// boundary is re-armed shortly, never with zero, so the message cannot spin.
const minRearm = 100 * time.Millisecond

// Handler is the decision tree run for every delivered message. It keeps no
// state of its own and is safe for concurrent use.
type Handler struct {
	cancel Canceller
	warner Warner
	sender DelaySender
	rt     Runtime
	obs    Observer
	log    *slog.Logger
	tracer Tracer
}

// HandlerConfig wires a Handler. Canceller and Sender are required.
type HandlerConfig struct {
	Canceller Canceller
	// Warner handles warning messages (SchedulerConfig.WarnBefore); nil:
	// warning messages are acknowledged and dropped as OutcomeFinal.
	Warner  Warner
	Sender  DelaySender // used to re-arm
	Runtime             // the Handler's and its Shell's logger, observer, clock and tracer (the handling and the re-arm's send)
}

// NewHandler returns a Handler, or an error naming a missing dependency.
func NewHandler(c HandlerConfig) (*Handler, error) {
	switch {
	case c.Canceller == nil:
		return nil, errors.New("expiry: HandlerConfig.Canceller is nil")
	case c.Sender == nil:
		return nil, errors.New("expiry: HandlerConfig.Sender is nil")
	}
	rt := c.Runtime.WithDefaults()
	return &Handler{cancel: c.Canceller, warner: c.Warner, sender: c.Sender, rt: rt, obs: rt.Observer, log: rt.Logger, tracer: rt.Tracer}, nil
}

// Handle decides what a delivered message means:
//
//   - order missing, not pending (paid, cancelled, or in a status the host
//     owns: StatusHost), or pending without a deadline (Order.ExpireAt
//     zero): nothing (OutcomeMissing, OutcomeFinal);
//   - pending but not due by the store's clock: re-arm with the time left
//     (OutcomeRearmed);
//   - due: cancelled with reason timeout (OutcomeCancelled).
//
// It tries the cancel first: the store's compare-and-set checks "pending and
// due" by its own clock in the same statement, so the common case (a due
// order) is one transaction, and any other answer comes with the order as
// the store saw it.
//
// A warning message (m.Warning) goes to the Warner instead: fired
// (OutcomeWarned); paid, cancelled, due, warned already, or pending without
// a deadline (OutcomeFinal);
// pending with more than m.Lead left by the store's clock, because it came
// early or the deadline was extended (re-armed for the time left minus the
// lead, OutcomeRearmed); pending within the lead but not fired, because the
// window opened between the store's compare-and-set and its read, tried
// once more at once. It never cancels.
//
// A non-nil error is transient (store down, re-arm send failed): the message
// must be redelivered, which is safe because Handle is idempotent.
func (h *Handler) Handle(ctx context.Context, m Message) (Outcome, error) {
	if ValidateID("order number", m.OrderNo) != nil {
		return OutcomeMissing, nil // no order has that number; retrying cannot help
	}
	if m.Warning {
		return h.warn(ctx, m)
	}
	cancelled, o, err := h.cancel.Timeout(ctx, m.OrderNo)
	switch {
	case errors.Is(err, ErrNotFound):
		return OutcomeMissing, nil
	case err != nil:
		return OutcomeFailed, fmt.Errorf("expiry: cancel order %s: %w", m.OrderNo, err)
	case cancelled:
		return OutcomeCancelled, nil
	case o.No != m.OrderNo:
		// Not the order it was asked about (a zero Order, say): re-arming on
		// it would spin every minRearm for ever.
		return OutcomeFailed, fmt.Errorf("expiry: order %s: the canceller answered with order %q and no error", m.OrderNo, o.No)
	case o.Status != StatusPending:
		return OutcomeFinal, nil
	case o.ExpireAt.IsZero():
		// Pending without a deadline (Order.ExpireAt): nothing to re-arm
		// for; the reconciler's expired pass cancels it once it has one
		// and it is due.
		return OutcomeFinal, nil
	default: // pending, not due by the store's clock
		return h.rearm(ctx, m, max(o.Remaining(), minRearm))
	}
}

// warn handles a warning message: see Handle.
func (h *Handler) warn(ctx context.Context, m Message) (Outcome, error) {
	// Whole milliseconds, as the codecs carry it and the stores compare it
	// (sqlstore sends lead.Milliseconds()): a finer lead handed to Handle
	// directly would make this window and the store's disagree, and the
	// warning be dropped as Final inside it.
	m.Lead = m.Lead.Truncate(time.Millisecond)
	if h.warner == nil || m.Lead <= 0 {
		return OutcomeFinal, nil // nobody to warn: a warning is at most once anyway
	}
	for try := 1; ; try++ {
		res, err := h.warner.Warn(ctx, m.OrderNo, m.Lead)
		switch {
		case errors.Is(err, ErrNotFound):
			return OutcomeMissing, nil
		case err != nil:
			return OutcomeFailed, fmt.Errorf("expiry: warn order %s: %w", m.OrderNo, err)
		case res.Fired:
			return OutcomeWarned, nil
		case res.Order.No != m.OrderNo:
			return OutcomeFailed, fmt.Errorf("expiry: order %s: the warner answered with order %q and no error", m.OrderNo, res.Order.No)
		case res.Warned || res.Order.Status != StatusPending:
			return OutcomeFinal, nil
		case res.Order.ExpireAt.IsZero():
			// Pending without a deadline (Order.ExpireAt): never due, so
			// never within the lead. Remaining() means nothing then (it
			// saturates, and minus the lead would wrap to centuries).
			return OutcomeFinal, nil
		}
		if left := res.Order.Remaining() - m.Lead; left > 0 {
			return h.rearm(ctx, m, max(left, minRearm)) // early, or the deadline was extended
		}
		if res.Order.Remaining() <= 0 || try == 2 {
			return OutcomeFinal, nil // due already: the expiry message's business
		}
		// Pending, within the lead, not warned, and not fired: the window
		// opened between the store's compare-and-set and its read of the
		// order (each reads the store's clock). Once more: the
		// compare-and-set now runs inside the window. Not a re-arm: a store
		// whose compare-and-set never fires would spin the message.
	}
}

func (h *Handler) rearm(ctx context.Context, m Message, left time.Duration) (Outcome, error) {
	next := Message{OrderNo: m.OrderNo, Hop: min(m.Hop+1, MaxHop), TraceID: m.TraceID, Trace: m.Trace, Warning: m.Warning, Lead: m.Lead}
	if err := send(ctx, h.tracer, h.sender, next, left); err != nil {
		h.obs.Observe(ctx, Event{Kind: KindSendFailed, OrderNo: m.OrderNo, Hop: next.Hop, Delay: left, Err: err})
		return OutcomeFailed, fmt.Errorf("expiry: re-arm order %s: %w", m.OrderNo, err)
	}
	h.obs.Observe(ctx, Event{Kind: KindRearmed, OrderNo: m.OrderNo, Hop: next.Hop, Delay: left})
	if h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.DebugContext(ctx, "order not due, re-armed", "order", m.OrderNo, "left", left, "hop", next.Hop)
	}
	return OutcomeRearmed, nil
}
