package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// CancelPending implements cancel.OrderStore. With a Mapping it writes the
// cancelled status of req.Reason (Statuses.CancelledBy, else the first of
// Cancelled).
func (s *Store) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	q, one := s.q.cancel, s.q.cancelOne
	switch {
	case req.UserID != "" && req.OnlyIfDue:
		return cancel.Result{}, errors.New("sqlstore: a cancel is either the user's or due, not both")
	case req.UserID != "":
		q, one = s.q.cancelOwner, s.q.cancelOwnerOne
	case req.OnlyIfDue:
		q, one = s.q.cancelDue, s.q.cancelDueOne
	}
	v, ok := s.user(vals{no: req.OrderNo, reason: string(req.Reason), status: s.m.cancelStatus(req.Reason)}, req.UserID)
	return s.transition(ctx, req.OrderNo, req.UserID, expiry.StatusCancelled, q, one, v, ok, s.q.deleteSeats)
}

// PayPending implements cancel.OrderStore. It stores p.PaymentID in the
// payment id column with the compare-and-set; on an order that is paid
// already, Result.PaymentID is the payment that paid it (empty for an order
// paid before payment ids were kept, or without a mapped payment column),
// so the caller tells a repeated callback (the same id) from a second
// payment (another one). For an order the host has deleted, the payment's
// decision row answers (see paidGone).
func (s *Store) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	if err := p.Validate(); err != nil {
		return cancel.Result{}, fmt.Errorf("sqlstore: pay: %w", err)
	}
	q, one := s.q.pay, s.q.payOne
	if p.UserID != "" {
		q, one = s.q.payOwner, s.q.payOwnerOne
	}
	v, ok := s.user(vals{no: p.OrderNo, payment: p.PaymentID, status: s.m.paid[0].arg}, p.UserID)
	res, err := s.transition(ctx, p.OrderNo, p.UserID, expiry.StatusPaid, q, one, v, ok, s.q.sellSeats)
	if errors.Is(err, expiry.ErrNotFound) || errors.Is(err, cancel.ErrNotOwner) {
		// No order, or another user's under this number (the host
		// deleted the order this payment paid and reused the number).
		if r, ok, herr := s.paidGone(ctx, p); herr != nil || ok {
			return r, herr
		}
	}
	if err != nil && isDuplicate(err) && !errors.Is(err, cancel.ErrHook) {
		// The decision row's primary key: the id was decided before. If
		// it paid an order under this number that the host deleted, and
		// the host reused the number, it is that order's payment: answered
		// as paid, as for a deleted order (I14), and it pays nothing now.
		if r, ok, herr := s.paidGone(ctx, p); herr != nil || ok {
			return r, herr
		}
		return cancel.Result{}, fmt.Errorf("sqlstore: pay %s: payment %s decided before: %w", p.OrderNo, p.PaymentID, cancel.ErrDiscrepancy)
	}
	if res.Changed {
		res.PaymentID = p.PaymentID
	}
	if err == nil && !res.Changed {
		// The order under this number is not pending. After the host
		// reused a paid order's number, p may be the payment of the order
		// it deleted: the new one is paid by another payment, cancelled or
		// the host's; without a payment column the payer is read by
		// number, which may find p for the new order, or the new payment
		// for p. p's own decision row says which order it paid: one whose
		// buyer is not this order's is the deleted order's, answered as
		// paid (I14), and p pays nothing now.
		own := (res.Order.Status == expiry.StatusPaid || res.Order.Status == expiry.StatusHost) && res.PaymentID == p.PaymentID
		if !own || s.m.payment == "" {
			r, ok, herr := s.paidGone(ctx, p)
			if herr != nil {
				return r, herr
			}
			if ok && (!own || r.Order.UserID != res.Order.UserID) {
				return r, nil
			}
		}
	}
	if err == nil && !res.Changed && (res.Order.Status == expiry.StatusPaid || res.Order.Status == expiry.StatusHost) && res.PaymentID == p.PaymentID {
		s.recordHonoured(ctx, p, res.Order.UserID)
	}
	return res, err
}

// paidGone answers a payment for an order the store does not have (or has
// under a number the host reused): when the payment's decision row says it
// paid this very order number (the host then deleted the paid order:
// archived it, or a buyer removed it), it is the payment that paid it (ok),
// as for a paid order still there; a repeated callback is answered, never
// refunded (I14).
func (s *Store) paidGone(ctx context.Context, p cancel.Payment) (cancel.Result, bool, error) {
	var user string
	err := s.db.QueryRowContext(ctx, s.q.honouredGone, p.PaymentID, s.m.scope, p.OrderNo).Scan(&user)
	if errors.Is(err, sql.ErrNoRows) {
		return cancel.Result{}, false, nil
	}
	if err != nil {
		return cancel.Result{}, false, fmt.Errorf("sqlstore: pay %s: read the payment's decision: %w", p.OrderNo, err)
	}
	if p.UserID != "" && p.UserID != user {
		return cancel.Result{}, false, fmt.Errorf("sqlstore: order %s: %w", p.OrderNo, cancel.ErrNotOwner)
	}
	return cancel.Result{Order: expiry.Order{No: p.OrderNo, UserID: user, Status: expiry.StatusPaid}, PaymentID: p.PaymentID}, true, nil
}

// recordHonoured writes the decision row of a payment the store finds has
// paid its order (the payment id column holds it) but that may have no
// decision row: the order was paid by the host's own code, before the
// library was wired in. Once the host deletes the paid order, that row is
// all that says the payment was honoured; without it a repeated callback
// would find no order and be refunded (I14). A row there already is
// left as it is; a failure only leaves things as they were, and is logged
// by nobody: the next repeat tries again.
func (s *Store) recordHonoured(ctx context.Context, p cancel.Payment, userID string) {
	q := s.q.decidePayment
	if s.dialect != MySQL {
		q += " ON CONFLICT (scope, payment_id) DO NOTHING"
	}
	_, err := s.db.ExecContext(ctx, q, p.PaymentID, s.m.scope, p.OrderNo, userID)
	_ = err // a duplicate (MySQL) is the row there already
}

// SetHook makes every later transition of the store (CancelPending,
// PayPending, ReinstateCancelled, and each order of a CancelDue batch) run
// h in its transaction, after the compare-and-set matched
// and the claims were changed, before COMMIT (see cancel.Hook: an error
// rolls the transition back and is returned wrapping cancel.ErrHook). tx is
// the transition's *sql.Tx, on the store's *sql.DB; on a Galera node a
// cancel.Querier over it that proves the transaction still exists before a
// statement that follows a read of the hook's (see galera.go). nil removes
// the hook.
// With a hook, a transition on PostgreSQL is a transaction of three
// statements and the hook's, not the one statement it is without (a
// statement cannot run the host's code between its parts); MariaDB's
// DELETE … RETURNING stays, the hook running after it. Safe to call at any
// time; a transition already running keeps the hook it started with.
func (s *Store) SetHook(h cancel.Hook) {
	if h == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&h)
}

// transition runs one state change to status to: the compare-and-set cas,
// then (if it matched) the order's seats are read and seatsQ (delete, sell,
// or nothing) is applied, all in one transaction; on PostgreSQL all of it
// is the one statement one. When the compare-and-set matches nothing, the
// order is read again to say why. canMatch false (a user id that cannot be
// anyone's) skips the compare-and-set.
func (s *Store) transition(ctx context.Context, orderNo, userID string, to expiry.Status, cas, one stmt, v vals, canMatch bool, seatsQ stmt) (cancel.Result, error) {
	var res cancel.Result
	var changed bool
	var err error
	h := hooked{hook: s.hook.Load(), to: to}
	switch {
	case !canMatch:
	case one.sql != "" && h.hook == nil:
		res, changed, err = s.transitionOne(ctx, one, v)
	default:
		res, changed, err = s.transitionTx(ctx, cas, v, seatsQ, h)
	}
	if errors.Is(err, errHookEndedTx) && s.committedByHook(ctx, orderNo, to, v) {
		return h.changed(res, v), nil
	}
	if err != nil {
		return cancel.Result{}, fmt.Errorf("sqlstore: order %s: %w", orderNo, err)
	}
	if changed {
		return h.changed(res, v), nil
	}
	o, paymentID, err := s.orderRow(ctx, orderNo)
	if err != nil {
		return cancel.Result{}, err
	}
	if userID != "" && o.UserID != userID {
		return cancel.Result{}, fmt.Errorf("sqlstore: order %s: %w", orderNo, cancel.ErrNotOwner)
	}
	res = cancel.Result{Order: o}
	if o.Status == expiry.StatusPaid || o.Status == expiry.StatusHost {
		// Who paid it; for the host's status, a payment the host's own
		// code recorded (a payment under review), which is the host's.
		res.PaymentID = paymentID
	}
	return res, nil
}

// committedByHook reports, for a transaction that ended inside its hook,
// whether the hook committed the change (a COMMIT through its handle, then
// its error or not): the order has the new status (and, for a payment with
// a payment column, this payment's id). It did not when the order is
// still pending or another call decided it; a read that fails says nothing
// was committed, which a caller that retries cannot regret (the next
// attempt finds the order decided and answers so).
func (s *Store) committedByHook(ctx context.Context, orderNo string, to expiry.Status, v vals) bool {
	o, paymentID, err := s.orderRow(ctx, orderNo)
	if err != nil || o.Status != to {
		return false
	}
	return to != expiry.StatusPaid || paymentID == "" || paymentID == v.payment
}

// hooked is a transition's hook (nil: none) and the status it moves the
// order to.
type hooked struct {
	hook *cancel.Hook
	to   expiry.Status
}

// changed completes the result of a transition that changed the order.
func (h hooked) changed(res cancel.Result, v vals) cancel.Result {
	res.Changed, res.Order.Status = true, h.to
	if h.to == expiry.StatusCancelled {
		res.Reason = cancel.Reason(v.reason)
	} else {
		res.PaymentID = v.payment
	}
	return res
}

// runHook runs the hook, if any, in tx, for the transition res read; its
// error wraps cancel.ErrHook and rolls tx back.
//
// A hook must leave the transaction as it found it, open and holding the
// change. One that does not (a COMMIT or ROLLBACK through its handle, DDL
// that commits on its own on MySQL, a statement of its own that failed and
// took the transaction with it: MariaDB rolls the whole transaction back on
// a deadlock, Galera aborts it on a certification conflict, PostgreSQL
// refuses every later statement) would leave COMMIT with nothing to commit,
// or with the change committed before the hook's error. So the hook runs
// inside a savepoint (two more round trips, with a hook only): when the
// savepoint is gone afterwards, the transaction ended inside the hook, and
// the returned errHookEndedTx makes transition read the order to say what
// really happened.
func (s *Store) runHook(ctx context.Context, h hooked, tx *sql.Tx, res cancel.Result, v vals) error {
	if h.hook == nil {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT oe_hook"); err != nil {
		return err
	}
	var q cancel.Querier = tx
	if s.galera.Load() == 1 {
		q = &provedQuerier{tx: tx}
	}
	herr := (*h.hook)(ctx, q, h.changed(res, v))
	_, serr := tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_hook")
	switch {
	case errors.Is(herr, errTxAborted):
		// The hook's handle refused a statement after a read that had
		// lost the report of an abort (provedQuerier): nothing of the
		// transaction committed, and it is tried again.
		return fmt.Errorf("%w: %w", cancel.ErrHook, herr)
	case serr != nil && ctx.Err() == nil && savepointGone(serr) && herr != nil:
		// The transaction ended inside a hook that then failed: a COMMIT
		// of its own before its error is the one way the change may have
		// committed, and transition reads the order to say. The hook's
		// error stays in the chain.
		return fmt.Errorf("%w: %w (the savepoint: %v): %w", cancel.ErrHook, errHookEndedTx, serr, herr)
	case serr != nil && ctx.Err() == nil && savepointGone(serr):
		// The transaction ended inside a hook that says it succeeded: a
		// ROLLBACK or COMMIT of its own, or an abort it never saw (Galera
		// aborts a transaction for another node's commit, and MariaDB may
		// run the hook's next statement on its own, outside it). Which one
		// cannot be told, and the transition may be tried again whatever
		// it was: a COMMIT's change is then found decided.
		return fmt.Errorf("%w: %w (the savepoint: %v)", cancel.ErrHook, errTxLostInHook, serr)
	case serr != nil && ctx.Err() == nil && herr == nil && retryable(serr):
		// The database aborted the transaction while the hook ran (a
		// deadlock, a Galera certification conflict): nothing committed,
		// and the transition is tried again as on any deadlock.
		return serr
	case serr != nil && ctx.Err() == nil && herr == nil:
		// Aborted (PostgreSQL refuses every statement after one that
		// failed, which the hook ignored): nothing committed.
		return fmt.Errorf("%w: the transaction was aborted inside the hook: %w", cancel.ErrHook, serr)
	case herr != nil:
		// The hook's error stays in the chain: a deadlock of its own is
		// retried as the store's are.
		return fmt.Errorf("%w: %w", cancel.ErrHook, herr)
	}
	return ctx.Err()
}

// savepointGone reports the error of a RELEASE SAVEPOINT whose
// transaction ended without an abort (COMMIT or ROLLBACK): MySQL's 1305,
// PostgreSQL's 25P01 (no transaction) and 3B001 (no such savepoint),
// SQLite's "no such savepoint".
func savepointGone(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrSavepointGone
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "25P01" || code == "3B001"
	}
	return strings.Contains(err.Error(), "no such savepoint")
}

// errHookEndedTx is a transaction that ended inside its hook, which then
// failed (see runHook).
var errHookEndedTx = errors.New("sqlstore: the transaction ended inside the hook")

// errTxLostInHook is a transaction that ended inside a hook that returned
// nil (see runHook): retried, as a deadlock is.
var errTxLostInHook = errors.New("sqlstore: the transaction ended inside the hook, which did not know it")

// transitionTx is a transition as a transaction of three statements (and
// the hook's, after them).
func (s *Store) transitionTx(ctx context.Context, cas stmt, v vals, seatsQ stmt, h hooked) (cancel.Result, bool, error) {
	if seatsQ.sql != "" && seatsQ.sql == s.q.deleteSeats.sql && s.q.deleteReturning.sql != "" && s.isMariaDB(ctx) {
		return s.transitionDeleteReturning(ctx, cas, v, h)
	}
	pay := v.payment != ""
	decideSQL := ""
	if pay {
		decideSQL = s.q.decidePayment
	}
	var stmts [4]*sql.Stmt // prepared before the transaction: see prepared
	for i, q := range []string{cas.sql, s.q.orderSeats.sql, seatsQ.sql, decideSQL} {
		if q == "" {
			continue
		}
		st, err := s.prepared(ctx, q)
		if err != nil {
			return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
		}
		stmts[i] = st
	}
	var res cancel.Result
	var changed bool
	err := s.retry(ctx, func(tx *sql.Tx) error {
		r, err := tx.StmtContext(ctx, stmts[0]).ExecContext(ctx, s.args(cas, v)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if changed = n == 1; !changed {
			return nil
		}
		rows, err := tx.StmtContext(ctx, stmts[1]).QueryContext(ctx, s.args(s.q.orderSeats, v)...)
		if err != nil {
			return err
		}
		if res, err = readForTransition(rows, v.no, !s.m.claims); err != nil {
			return err
		}
		if stmts[2] != nil || stmts[3] != nil {
			if err := s.proveTx(ctx, tx, true); err != nil {
				return err
			}
		}
		if stmts[3] != nil {
			// The payment id's decision row (see decidePayment): a
			// duplicate key rolls the whole transaction back.
			if _, err := tx.StmtContext(ctx, stmts[3]).ExecContext(ctx, v.payment, s.m.scope, v.no, res.Order.UserID); err != nil {
				return err
			}
		}
		if stmts[2] != nil {
			if _, err := tx.StmtContext(ctx, stmts[2]).ExecContext(ctx, s.args(seatsQ, v)...); err != nil {
				return err
			}
		}
		return s.runHook(ctx, h, tx, res, v)
	})
	return res, changed, err
}

// transitionDeleteReturning is a cancel on MariaDB: the compare-and-set,
// then one DELETE … RETURNING that frees the claims and returns them with
// the order's columns (4 round trips with BEGIN and COMMIT, not 5). An
// order without claims returns no row: it is read with orderSeats.
func (s *Store) transitionDeleteReturning(ctx context.Context, cas stmt, v vals, h hooked) (cancel.Result, bool, error) {
	var stmts [3]*sql.Stmt
	for i, q := range []string{cas.sql, s.q.deleteReturning.sql, s.q.orderSeats.sql} {
		st, err := s.prepared(ctx, q)
		if err != nil {
			return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
		}
		stmts[i] = st
	}
	var res cancel.Result
	var changed bool
	err := s.retry(ctx, func(tx *sql.Tx) error {
		r, err := tx.StmtContext(ctx, stmts[0]).ExecContext(ctx, s.args(cas, v)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if changed = n == 1; !changed {
			return nil
		}
		rows, err := tx.StmtContext(ctx, stmts[1]).QueryContext(ctx, s.args(s.q.deleteReturning, v)...)
		if err != nil {
			return err
		}
		res, err = readForTransition(rows, v.no, !s.m.claims)
		if errors.Is(err, sql.ErrNoRows) {
			if rows, err = tx.StmtContext(ctx, stmts[2]).QueryContext(ctx, s.args(s.q.orderSeats, v)...); err != nil {
				return err
			}
			res, err = readForTransition(rows, v.no, !s.m.claims)
		}
		slices.Sort(res.Seats) // RETURNING has no ORDER BY
		if err != nil {
			// On Galera an abort can interrupt the RETURNING's subqueries,
			// which then read NULL for the order this transaction has
			// just changed, and the report of the abort be lost: when
			// the proof finds the transaction gone, it is tried again.
			if perr := s.proveTx(ctx, tx, false); errors.Is(perr, errTxAborted) {
				return fmt.Errorf("%w (the read: %v)", perr, err)
			}
			return err
		}
		return s.runHook(ctx, h, tx, res, v)
	})
	return res, changed, err
}

// transitionOne is a transition as one statement (PostgreSQL): no row back
// means the compare-and-set matched nothing. A serialization failure or a
// deadlock is retried like a transaction.
func (s *Store) transitionOne(ctx context.Context, one stmt, v vals) (cancel.Result, bool, error) {
	st, err := s.prepared(ctx, one.sql)
	if err != nil {
		return cancel.Result{}, false, fmt.Errorf("prepare: %w", err)
	}
	var res cancel.Result
	var changed bool
	for attempt := 1; ; attempt++ {
		var rows *sql.Rows
		rows, err = st.QueryContext(ctx, s.args(one, v)...)
		if err == nil {
			res, err = readForTransition(rows, v.no, !s.m.claims)
			changed = err == nil
			if errors.Is(err, sql.ErrNoRows) {
				return cancel.Result{}, false, nil
			}
		}
		if err == nil || !retryable(err) || ctx.Err() != nil || attempt == maxAttempts {
			return res, changed, err
		}
		select {
		case <-ctx.Done():
			return cancel.Result{}, false, err
		case <-time.After(time.Duration(attempt) * time.Millisecond):
		}
	}
}

// readForTransition reads the order, its seats and its lock id from rows of
// (user, show, deadline ms, now ms, seat or NULL, lock id or NULL), and
// closes them; sql.ErrNoRows when there are none. With list, the seat
// column holds the order's seats as a list (a host's table without claims:
// the side table's).
func readForTransition(rows *sql.Rows, orderNo string, list bool) (cancel.Result, error) {
	defer rows.Close()
	res := cancel.Result{Order: expiry.Order{No: orderNo}}
	found := false
	for rows.Next() {
		var nowMS int64
		var user, show, seat, lockID sql.NullString
		if err := rows.Scan(&user, &show, deadlineCol{&res.Order.ExpireAt}, &nowMS, &seat, &lockID); err != nil {
			return res, err
		}
		// A NULL user or show (a legacy row of a host's table) is read as
		// "": the compare-and-set has decided (on PostgreSQL its one
		// statement has even committed), so the result must say so; the
		// seat store then refuses the release of an unknown user, and that
		// failure is reported with the order's number.
		res.Order.UserID, res.Order.ShowID = user.String, show.String
		unpad(&res.Order.UserID, &res.Order.ShowID, &seat.String)
		res.LockID = lockID.String
		found = true
		res.Order.ReadAt = time.UnixMilli(nowMS)
		switch {
		case seat.Valid && list:
			res.Seats = splitSeats(seat.String)
		case seat.Valid:
			res.Seats = append(res.Seats, seat.String)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if !found {
		return res, sql.ErrNoRows
	}
	return res, nil
}

const maxAttempts = 4

// retry runs fn in a transaction, again when the database reports a
// serialization failure or a deadlock.
func (s *Store) retry(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.retryTx(ctx, nil, fn)
}

// retryTx is retry with transactions begun with opts.
func (s *Store) retryTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		err = s.inTx(ctx, opts, fn)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * time.Millisecond):
		}
	}
	return err
}

func (s *Store) inTx(ctx context.Context, opts *sql.TxOptions, fn func(*sql.Tx) error) error {
	tx, done, err := s.begin(ctx, opts)
	if err != nil {
		return err
	}
	defer done()
	defer func() {
		// A panic (a host's Hook's) rolls back before it goes on up:
		// otherwise the transaction, and the order's row lock, would
		// stay open for as long as the caller's context.
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := s.beginProof(ctx, tx); err != nil {
		_ = tx.Rollback()
		return ctxCause(ctx, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the one to report
		return ctxCause(ctx, err)
	}
	if err := s.proveTx(ctx, tx, false); err != nil {
		_ = tx.Rollback()
		return ctxCause(ctx, err)
	}
	if ctx.Err() != nil {
		// Ended before the COMMIT was sent: database/sql rolls back, a
		// known outcome (its Commit would answer the same error, which
		// commitErr could not tell from one ended on the wire).
		_ = tx.Rollback()
		return ctxCause(ctx, sql.ErrTxDone)
	}
	return commitErr(ctx, tx.Commit())
}

// commitErr reports a failed COMMIT. One the database refused
// (refusedCommit: it rolled back, as for a deadlock or a deferred
// constraint), a serialization failure retry may repeat, and a transaction
// database/sql had already rolled back changed nothing; any other failure
// (a connection broken or a context ended while the COMMIT was on the wire)
// may have come after the database committed, so it wraps
// expiry.ErrCommitUnknown: a caller that retried the compare-and-set then
// would find its own change and report it as somebody else's.
func commitErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, sql.ErrTxDone) || retryable(err) || refusedCommit(err) {
		return ctxCause(ctx, err)
	}
	return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
}

// begin begins a transaction. On MySQL/MariaDB with a Hook, under a context
// with a deadline, the server's own lock wait is bounded by that deadline
// first (innodb_lock_wait_timeout, whole seconds, at least 1), on a
// connection of its own that gets the server's default back afterwards: a
// hook's statement that waits on a row lock (the host's coupon row held by
// an admin) otherwise keeps waiting on the server after the caller gave up,
// up to 50 s, and with it every row lock the transaction took, a batch's
// orders all (I12). PostgreSQL cancels the statement itself when the
// context ends.
func (s *Store) begin(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, func(), error) {
	deadline, ok := ctx.Deadline()
	if s.dialect != MySQL || !ok || s.hook.Load() == nil {
		tx, err := s.db.BeginTx(ctx, opts)
		return tx, func() {}, err
	}
	wait := int64(math.Ceil(time.Until(deadline).Seconds()))
	if wait < 1 {
		wait = 1
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	done := func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION innodb_lock_wait_timeout = DEFAULT"); err != nil {
			// A connection whose wait could not be put back is not
			// handed to anyone else.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = ?", wait); err != nil {
		done()
		return nil, nil, err
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		done()
		return nil, nil, err
	}
	return tx, done, nil
}

// ctxCause names the context's error when database/sql reports only
// sql.ErrTxDone: a context that ends mid-transaction makes database/sql
// roll the transaction back on its own, and the next statement (or the
// COMMIT) then fails with ErrTxDone, which says nothing about why. Callers
// branch on context.DeadlineExceeded and context.Canceled; nothing was
// committed.
func ctxCause(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		return fmt.Errorf("%w (the transaction was rolled back: %w)", ctx.Err(), err)
	}
	return err
}

// retryable reports serialization failures and deadlocks, and a
// transaction lost inside a hook that did not know it.
func retryable(err error) bool {
	if errors.Is(err, errTxLostInHook) || errors.Is(err, errTxAborted) {
		return true
	}
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrCheckRead || n == myErrLockDeadlock || n == myErrLockWaitTimeout
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "40001" || code == "40P01"
	}
	msg := err.Error() // SQLite (modernc) has no exported code type worth importing
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

func isDuplicate(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrDupEntry
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState() == "23505"
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed")
}
