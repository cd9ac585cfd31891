package expiry

import (
	"context"
	"time"
)

// Kind says what an Event reports.
type Kind uint8

// The kinds of Event. Each names the fields it sets.
const (
	// KindHandled: a message was handled; Outcome, Duration, Hop, Err (when
	// the handling failed and the message will be redelivered).
	KindHandled Kind = iota + 1
	// KindRearmed: a message arrived before the order was due and was sent
	// again; Delay is the time that was left, Hop the new message's hop.
	KindRearmed
	// KindSendFailed: a delayed send failed; Err. After commit the order is
	// still placed and the reconciler will cancel it. Reason says which:
	// "" the expiry message's send, "warning" its warning's alone (the
	// expiry went or failed on its own), and with SchedulerConfig.Async
	// "queue_full", "closed" (never sent: no place in the queue, or the
	// Scheduler closed) and "panic" (the send panicked).
	KindSendFailed
	// KindCancelled: this process cancelled an order; Reason, Seats, and
	// Deadline and At when the store reports them (see Event.Lateness).
	KindCancelled
	// KindReleaseFailed: seats of a cancelled order could not be given back
	// in the seat store; Err, Seats. The reconciler repairs it.
	KindReleaseFailed
	// KindPaid: this process marked an order paid; Seats.
	KindPaid
	// KindDiscrepancy: a payment arrived for an order that was already
	// cancelled, or paid by another payment; Reason. Counted once per
	// payment id (the order store records it); the host's
	// hook refunds.
	KindDiscrepancy
	// KindBadMessage: a message could not be decoded or named an invalid
	// order; it was acknowledged and dropped. Err.
	KindBadMessage
	// KindRepaired: the reconciler fixed something; Reason ("expired",
	// "released", "sold", "restored"), Seats.
	KindRepaired
	// KindSellFailed: seats of a paid order could not be marked sold in the
	// seat store; Err, Seats. The reconciler repairs it.
	KindSellFailed
	// KindHookFailed: the host's refund hook returned an error for a
	// recorded discrepancy; Err. The reconciler calls it again.
	KindHookFailed
	// KindSkipped: the reconciler could not finish an order's work (its
	// cancel failed or timed out) and skipped it for now, with a backoff, so
	// that it does not hold the others back; Reason ("cancel"), Err. Reason
	// "held": an expired order a batch passed by because another
	// transaction holds its row, tried again in the next round. Reason
	// "unreadable": a row SQL holds that the library cannot act on (an
	// order number that is not a valid id, a claim with no user), left as
	// it is; OrderNo as the row has it, Err.
	KindSkipped
	// KindSent: a transport accepted a message (the first one of an order
	// or a re-arm); Hop, Delay (the delay the transport applies, after
	// rounding to a level), Level (the delay level, 0 without levels).
	// Emitted by the DelaySender, so it means the same on every transport.
	KindSent
	// KindReinstated: a late payment reinstated a cancelled order (cancelled
	// by timeout or the reconciler) as paid, every seat claimed again; Seats.
	// A late payment that could not be honoured is a KindDiscrepancy.
	KindReinstated
	// KindWarned: the expiry-warning hook fired for a pending order; Delay is
	// the time it had left by the store's clock.
	KindWarned
	// KindDeadlineChanged: a pending order's deadline moved; Reason
	// ("extended", "shortened", "expired_now"), Delay the change (negative
	// when it moved earlier; zero when the order had no deadline before).
	KindDeadlineChanged
	// KindRefunded: the host's refund hook succeeded for a recorded
	// discrepancy, and the record was settled: one refund, once per
	// payment id.
	KindRefunded
	// KindDiverged: SQL and the seat store disagree in a way the library
	// cannot repair, because SQL went back in time (an asynchronous
	// failover promoted a replica that lacked the last commits, a restore
	// from a backup): Reason says how, OrderNo and Seats which. The
	// library never frees a sold seat nor honours a refunded payment to
	// hide it; only the host, which has the payment provider's records,
	// can settle it. Reasons: "sold_pending", "sold_cancelled",
	// "sold_missing" (the seat store has seats sold to an order that SQL
	// has pending, cancelled or does not have: a payment SQL lost),
	// "sold_to_another" (a payment SQL accepted, for seats the seat store
	// sold to another order: two buyers hold them), "refund_repeated" (a
	// refund SQL forgot, recorded again and not handed to the hook a
	// second time) and "refunded_payment" (a payment SQL would have
	// honoured although the seat store recorded it refunded: refused).
	KindDiverged
	// KindProviderAnswered: the payment provider was asked about a due
	// order before its cancel (cancel.Config.Provider), OrderNo which;
	// Reason its answer. To the query: "not_paid", "paid", "open", or
	// "unknown" (an error or no answer in time, Err set). To the close
	// that follows a "not_paid": "closed" (the cancel goes on),
	// "close_paid", "close_open", "close_unknown". "open" and "unknown"
	// re-arm the order (a KindDeadlineChanged follows) until its maximum
	// hold; "unclosed": cancelled there (or its cancel's commit outcome
	// unknown) with its session not closed (a payment that still arrives
	// is refunded): alert on it.
	KindProviderAnswered
)

var kindNames = [...]string{"", "handled", "rearmed", "send_failed", "cancelled", "release_failed", "paid", "discrepancy", "bad_message", "repaired", "sell_failed", "hook_failed", "skipped", "sent", "reinstated", "warned", "deadline_changed", "refunded", "diverged", "provider_answered"}

// String returns the kind's snake_case name, suitable as a metric label.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one thing worth counting. Only the fields its Kind names are set.
type Event struct {
	Kind     Kind
	OrderNo  string
	Outcome  Outcome
	Reason   string
	Hop      int
	Level    int
	Seats    int
	Delay    time.Duration
	Duration time.Duration
	Err      error
	// Deadline and At (KindCancelled, when the store reports them): the
	// order's expire_at and the store's clock at the cancel, both by the
	// store's clock, so Lateness compares no application host's clock.
	Deadline time.Time
	At       time.Time
}

// Lateness returns how long after its deadline the event's order was
// cancelled, by the store's clock, and whether the event says (Deadline and
// At set). It is negative for a cancel before the deadline (a user's).
func (e Event) Lateness() (time.Duration, bool) {
	if e.Deadline.IsZero() || e.At.IsZero() {
		return 0, false
	}
	return e.At.Sub(e.Deadline), true
}

// Observer receives every Event. It is called synchronously on the path that
// produced the event, from many goroutines at once, so it must be safe for
// concurrent use and quick (increment a counter, observe a histogram).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

type nopObserver struct{}

func (nopObserver) Observe(context.Context, Event) {}

// NopObserver is the default Observer: it does nothing.
var NopObserver Observer = nopObserver{}

// MultiObserver returns an Observer that hands every event to each of
// observers in turn (nil ones are skipped): metrics and a host's own audit,
// say. With no observer left it returns NopObserver.
func MultiObserver(observers ...Observer) Observer {
	var all multiObserver
	for _, o := range observers {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return NopObserver
	case 1:
		return all[0]
	}
	return all
}

type multiObserver []Observer

func (m multiObserver) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}
