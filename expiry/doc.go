// Package expiry decides what happens when an unpaid order's timer fires, and
// schedules that timer after the order commits.
//
// The flow, from the host's point of view:
//
//  1. The host places an order through cancel.Service.Place: its own SQL
//     transaction inserts the order, and once it has committed, Place asks
//     a Scheduler to send a delayed message for the order. A rollback sends
//     nothing; a send failure after commit is logged and counted, never
//     returned to the buyer, and left to the reconciler.
//  2. A transport (a DelaySender: expiry/rocketmq, expiry/asynq, expiry/river,
//     or the in-process sender in expiry/inproc) delivers the message at least
//     once. Its consumer hands the body to a Shell, which decodes and
//     validates it, restores the trace id and, through a Tracer, the W3C trace
//     context of the placing request, times the work and calls the Handler.
//  3. The Handler asks the Canceller (package cancel) to cancel the order
//     with reason timeout; the store's compare-and-set does it only if the
//     order is pending and due by the store's clock. Otherwise the answer
//     carries the order: missing or no longer pending, the Handler does
//     nothing (the order's state machine is the whole of idempotency); not
//     yet due, it re-arms the message for the time left.
//
// Every outcome goes to an Observer, which a host implements to count things;
// the default does nothing. The package imports no driver.
//
// # Invariants
//
// What the tests assert, on the in-memory stores (cancel/memstore) and on
// real servers (the model test in internal/e2e after every step; the
// exploration in internal/explore and the ledgers of internal/storm and
// internal/soak judge I14-I17 from outcomes alone). Every package of the
// library keeps them; they are numbered so that tests and documents can name
// them.
//
//   - I1: An order ends in exactly one terminal state, paid or cancelled;
//     never both, never back.
//   - I2: A seat of a cancelled order is released at most once; a sold seat
//     is never released; a seat now locked by another order is never
//     released by this one.
//   - I3: No order stays pending longer than its expiry plus one reconcile
//     interval, whatever was lost.
//   - I4: A timeout never cancels an order before its expire_at by the
//     database's clock.
//   - I5: Duplicate deliveries change nothing.
//   - I6: No message is sent for a rolled-back order.
//   - I7: Bad input (a malformed message, an unknown order, a hostile id)
//     never crashes the consumer, never blocks the queue behind it, and is
//     counted.
//   - I8: The purchase-limit counter equals the user's seats in pending and
//     paid orders (and in orders in a status the host owns, which keep
//     their seats: I19); never below 0.
//   - I9: A payment that cannot be honoured is refunded once per payment id,
//     however often the provider repeats its callback, across crashes and
//     hosts: recorded in SQL first, the hook retried until it succeeds, and
//     the refund recorded in the seat store too, so that SQL losing its
//     record (a failover) refunds nothing twice. The
//     hook runs once per payment id unless a call dies or stalls past
//     cancel.Config.DiscrepancyLease between the record and the hook's
//     success; then it runs again, so it must be idempotent at the provider,
//     keyed by the discrepancy's PaymentID (no library can call a hook
//     exactly once across a crash after the provider acted).
//   - I10: Ids match exactly, byte for byte, on every dialect and collation
//     ("ALICE" is not "alice").
//   - I11: No decision compares two application hosts' clocks: every "now"
//     that decides anything is the database's (the due guard, the
//     discrepancy lease) or the Redis server's (a lock's age). The Runtime's
//     clock only paces waits.
//   - I12: One stuck order never holds the others back, and a backlog drains
//     at the cancel path's rate, not a batch per interval.
//   - I13: Hostile-but-legal input is the normal case: a seat listed twice,
//     an order number placed twice, a case variant of an id, a callback
//     repeated, Redis losing data twice in a row.
//   - I14: Payments, judged from outcomes: every payment id ends either
//     honoured (it paid one order, whose seats are sold to its user) or
//     refunded once; never both, never neither once settled; its fate never
//     flips, however often or late the provider repeats it.
//   - I15: Seats: a seat has at most one holder; a sold seat is never freed;
//     a release or sale acts on the lock it judged, not a newer lock of the
//     same order number; SQL and Redis agree after settle.
//   - I16: Scope: nothing done through one tenant's wiring (a mapping's table
//     and Where) reads or changes another tenant's rows or seat keys, by
//     construction: cancel.New and reconcile.New refuse stores and services
//     of different scopes.
//   - I17: Limits: a user never holds more seats of a show than its limit,
//     whichever path gave them (placing, a late payment's reinstatement); an
//     extension never moves a deadline past placement + cancel.Config.MaxHold.
//   - I18: Payments in flight: an order whose buyer has started paying is
//     not cancelled before that payment's own deadline (never past the
//     maximum hold); where the host wires its provider, the provider is
//     asked before a cancel, and the session of every cancelled order whose
//     payment had started is closed exactly once in the end. Built so
//     far: a mapping's Paying statuses, payable and never expired while the
//     host keeps the order in one; Extend for the payment's own deadline;
//     the provider query (cancel.Config.Provider): before a timeout or the
//     reconciler cancels a due order the provider is asked, a paid answer
//     pays the order with the provider's payment id (no refund), an open
//     payment or no answer re-arms it (cancel.DeadlineChange.Due), and at
//     placement plus the maximum hold it is cancelled whatever the answer;
//     a not-paid answer closes the provider's session before the cancel
//     commits (PaymentProvider.ClosePayment), so the cancel follows a
//     successful close, except at the maximum hold (at once on a store
//     that cannot move a deadline, a mapped window) when the provider
//     cannot close (counted as "unclosed"). A user's cancel and an
//     operator's expire-now close the session once they committed, once,
//     without a query: a paid answer is handed to the payment path as its
//     callback (refunded once), any other failure is counted "unclosed".
//   - I19: Statuses the host owns: a status outside the mapping means "not
//     the library's" (StatusHost): its message is final, the passes skip
//     and count it, and it never holds another order back. The library
//     changes nothing of it, row or seats: a timeout and a user's cancel
//     change nothing (no error: the order is answered with StatusHost);
//     the reconciler's lock pass neither frees nor sells its seats, and the
//     claims pass restores them as locks when the seat store lost them
//     (counted for the buyer's limit, I8), for as long as the host keeps
//     it there, because the host's order holds them as a pending one does (an
//     offline payment awaited, an operator's hold): freeing them would let
//     a second buyer take seats the host may still sell (I15). A payment
//     for it cannot be taken without writing over the host's status and
//     bypassing what the host is doing with the order, nor dropped (I14):
//     it is a discrepancy, recorded once per payment id and refunded once
//     (I9), and Pay's error (cancel.ErrDiscrepancy; the refund hook's
//     Discrepancy.Status is StatusHost) tells the host why. Once the host
//     writes one of the mapping's statuses the order is the library's
//     again (cancelled: its seats are freed by the next lock pass). A host
//     status that means closed belongs among the mapping's cancelled
//     values. (Statuses meaning "the buyer is paying" are I18's.)
//
// # The host is an actor
//
// A real order service writes the same tables as the library. Each of its
// actions below is part of the world the tests explore, and the library's
// answer to it is decided here:
//
//   - It reuses payment ids across tenants (one provider account each):
//     payment ids are per scope. A payment id is decided (honoured or
//     refunded) once per scope; another scope's decision of the same id is
//     another payment and never answers for this one (cancel/sqlstore keys
//     its record by scope and payment id).
//   - It deletes closed orders, soft or hard: a payment for an order that is
//     not in the store (deleted, or never placed in this scope) is a
//     discrepancy, recorded once per payment id and refunded; never an
//     expiry.ErrNotFound that the provider repeats for ever.
//   - It runs statements of its own in the placing transaction, and may
//     swallow their errors: a transaction that ended inside them (a deadlock
//     that rolled it back) places nothing, and no message is sent (I6).
//   - It holds an order's row while it calls its payment provider: a batch
//     of cancels skips the held row (SKIP LOCKED) and leaves it to a later
//     round, on every dialect (I12).
//   - Its database's clock steps back: an order written later than the
//     clock now is of unknown age (cancel.OrderAge), so the reconciler's
//     lock pass repairs it at once, and Settle holds in wall time. A
//     refund's retry lease stays measured on the database's clock: after a
//     step back, a refund whose hook failed is retried once the clock has
//     passed its last try again (late by the step), so that no hook call
//     still running is duplicated within its lease by any clock reading.
//   - It picks column types and collations: ids compare byte for byte on
//     every dialect (I10) over a host's columns, whatever their collation;
//     PostgreSQL's padded CHAR(n) statuses and payment ids read as the
//     values they hold; an id an integer column cannot hold is no order.
//   - It writes statuses of its own, outside the mapping (an operator's
//     hold, an offline payment awaited): such an order is the host's
//     (StatusHost, I19) until it writes one of the mapping's again.
//   - It writes orders without a deadline (an operator's hand-made order,
//     a deadline it cleared: NULL in a nullable deadline or creation
//     column): such an order is pending and never due until it has one
//     (Order.ExpireAt zero). Its expiry message and warning are final, the
//     reconciler never expires it and leaves its seats to it, and a
//     payment pays it.
//   - It edits the settings the mapping reads: a window setting that is not
//     a whole number makes no order due (its deadline is none, Order.ExpireAt
//     zero) until it is one again, and Check names it.
//
// The state machine is the idempotency: a duplicate, late or early message
// finds the order no longer pending (ignore) or not yet due (re-arm). There
// is no dedupe table.
//
// Interfaces (7, each one to three methods): DelaySender (a transport's
// send), Processor (a transport's consumer side), Canceller and Warner
// (what a Handler calls, implemented by cancel.Service), Observer and
// Tracer (the host's metrics and traces), Clock (so tests replace time:
// expirytest.FakeClock). Each has implementations in more than one
// package, which is why it is an interface.
//
// # Names
//
// The library keeps more exported names than the 250 it aimed at (count
// them with internal/apicount); these are this package's, and why each is
// exported:
//   - Handler, HandlerConfig, NewHandler, Outcome (OutcomeFailed,
//     OutcomeMissing, OutcomeFinal, OutcomeRearmed, OutcomeCancelled,
//     OutcomeWarned), WarnResult: the decision on one message, and what it
//     did, which tests and Observers read;
//   - Shell, NewShell, Delivery, Verdict (Ack, Retry): every transport's
//     consumer hands its deliveries (a body and its trace context) to a
//     Shell and acts on its Verdict; a host's own transport does the same;
//   - Scheduler, SchedulerConfig, NewScheduler, SendTimeoutDefault,
//     ErrCommitUnknown: the after-commit send, and the error that says a
//     commit's outcome is unknown (the caller must not retry blindly);
//   - Message, EncodeMessage, DecodeMessage, ErrBadMessage, MaxMessageLen,
//     MaxHop, MaxWarnLead: the wire format every transport carries, and its
//     bounds, so a message is refused the same way on every transport;
//   - Order, Status (StatusPending, StatusPaid, StatusCancelled,
//     StatusHost), ErrNotFound, ValidateID, ErrInvalidID, MaxIDLen: an
//     order as the stores read it (StatusHost: in a status the host owns,
//     I19), and the id rule every adapter applies;
//   - Event, Kind (KindHandled, KindRearmed, KindSent, KindSendFailed,
//     KindCancelled, KindPaid, KindDiscrepancy, KindRefunded, KindHookFailed,
//     KindReleaseFailed, KindSellFailed, KindRepaired, KindSkipped,
//     KindBadMessage, KindReinstated, KindWarned, KindDeadlineChanged,
//     KindDiverged, KindProviderAnswered): what an Observer receives, one Kind per event a host
//     counts or alerts on;
//   - ObserverFunc, NopObserver, MultiObserver: an Observer from a function,
//     none, or several at once;
//   - Trace, MaxTraceParentLen, MaxTraceStateLen, NopTracer, WithTraceID,
//     TraceID: the trace context a message carries, bounded like the body;
//   - SystemClock: the real Clock, which tests replace;
//   - the 7 interfaces above.
package expiry
