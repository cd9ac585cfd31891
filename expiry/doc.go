// Package expiry decides what happens when an unpaid order's timer fires, and
// schedules that timer after the order commits.
//
// The flow, from the host's point of view:
//
//  1. The host places an order in one SQL transaction and, inside it, asks a
//     Scheduler (through AfterCommit or its own transaction manager's
//     after-commit hook) to send a delayed message for the order. A rollback
//     sends nothing; a send failure after commit is logged and counted, never
//     returned to the buyer, and left to the reconciler.
//  2. A transport (a DelaySender: RocketMQ in package expiry/rocketmq, or the
//     in-process sender in expiry/inproc) delivers the message at least once.
//     Its consumer hands the body to a Shell, which decodes and validates it,
//     restores the trace id and, through a Tracer, the W3C trace context of
//     the placing request, times the work and calls the Handler.
//  3. The Handler asks the Canceller (package cancel) to cancel the order
//     with reason timeout; the store's compare-and-set does it only if the
//     order is pending and due by the store's clock. Otherwise the answer
//     carries the order: missing or no longer pending, the Handler does
//     nothing (the order's state machine is the whole of idempotency); not
//     yet due, it re-arms the message for the time left.
//
// Every outcome goes to an Observer, which a host implements to count things;
// the default does nothing. The package imports no driver.
package expiry
