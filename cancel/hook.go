package cancel

import (
	"context"
	"database/sql"
	"errors"
)

// Hook is the host's own work in the transaction of a transition: return a
// coupon, write an outbox row, in the same SQL transaction as the order's
// change of state, so that both commit or neither does. A store runs it
// when configured with one (cancel/sqlstore's and cancel/memstore's
// Store.SetHook).
//
// When: after the compare-and-set matched and the order's claims were
// changed (deleted or sold), in the same transaction, before COMMIT; only
// for a transition this call makes (pending to cancelled by CancelPending,
// pending to paid by PayPending, cancelled to paid by a late payment's
// ReinstateCancelled, after the seats were claimed again), never for a call
// that lost the race, found the order decided, not due or not the user's.
//
// What: tx is the open transaction (cancel/sqlstore passes its *sql.Tx, or
// on a MariaDB Galera node a Querier over it that refuses a statement after
// a read that lost the report of an abort; an in-memory store, which has
// none, passes nil). r is the change as the
// call will return it: r.Changed true, r.Order the order (number, user,
// show, deadline) with its new Status (cancelled or paid; it was pending),
// r.Reason the cancel's reason, r.PaymentID the payment's id, r.Seats the
// seats taken from the order or sold to it, r.LockID its seat lock.
//
// Concurrency: called concurrently for different orders, never twice at
// once for one order (the transaction holds the order's row).
//
// Errors and retries: an error rolls the whole transition back (the order
// stays pending, its claims untouched, a payment's id undecided) and the
// call returns an error wrapping both ErrHook and the hook's error; the
// Service then releases and sells nothing. The transition is tried again
// later like any failed one: a timeout message is redelivered, the
// reconciler counts the order as skipped and backs it off, a payment
// callback is repeated by its provider. So the hook must be idempotent in
// the transaction's sense: every write through tx, never outside it (an
// outside write of an attempt that rolled back stays done). The store may
// also run it again in a new transaction after a serialization failure or
// a deadlock, its own or the hook's. It must not call the store or the
// Service: the transaction holds the order's row (and an in-memory store its
// lock). Nor may it end the transaction (COMMIT, ROLLBACK, or DDL, which
// MySQL and MariaDB commit on their own): cancel/sqlstore runs it inside a
// savepoint: when the transaction ended in a hook that then failed, the
// order is read to report what committed (a transition the hook committed
// is reported as made); when it ended in a hook that returned nil (also a
// Galera abort the hook never saw), the transition is tried again, as after
// a deadlock. On a MariaDB Galera Cluster such an abort can go unreported
// to a SELECT: a hook that writes after its own read should write first
// (or check its read with a savepoint of its own), since a write after a
// lost abort runs on its own and stays done.
//
// Panics: a panic rolls the transition back like an error. On a call of
// the host's it goes on up to the caller; in the library's own goroutines
// (a batch of timeouts, the reconciler's expired pass) it is logged and
// counted as a failure of the orders it held, never raised there, where it
// would end the process.
type Hook func(ctx context.Context, tx Querier, r Result) error

// ErrHook reports that a Hook failed: the transition was rolled back. The
// error wraps the hook's own error too.
var ErrHook = errors.New("orderexpiry: transition hook failed; the transition was rolled back")

// Querier is the part of a SQL transaction that a Hook (and
// cancel/sqlstore's Store.Place) uses: database/sql's ExecContext and
// QueryContext, which *sql.Tx, *sql.DB and *sql.Conn have, and so do sqlx's
// Tx, gorm's transaction (tx.Statement.ConnPool) and ent's generated client
// and Tx with ent's sql/execquery feature. QueryRowContext is left out on
// purpose: ent's generated code has none.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}
