package sqlstore

// The store side of the optional transitions: a late payment reinstating a
// cancelled order (ReinstateCancelled), a pending order's deadline moved
// (SetDeadline), the expiry warning's flag (MarkWarned).
// They use three columns of oe_order that Migrate adds to older tables:
// seats, the seat ids the order was placed with (comma-separated, sorted;
// ids never contain a comma, see expiry.ValidateID), kept after a cancel
// deletes the claims; seat_limit, the purchase limit it was placed with
// (cancel.Placement.Limit), which a reinstatement keeps; and warned_at_ms,
// when its warning fired.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// maxDeadlineIn bounds DeadlineChange.In, so that now+In cannot overflow.
const maxDeadlineIn = 10 * 366 * 24 * time.Hour

// lateColumns are the columns Migrate adds to an oe_order of an earlier
// version, by dialect.
var lateColumns = []struct {
	column string
	add    map[Dialect]string
}{
	{"seats", map[Dialect]string{
		MySQL:    "ALTER TABLE oe_order ADD COLUMN seats VARCHAR(3300) CHARACTER SET ascii COLLATE ascii_bin NULL",
		Postgres: "ALTER TABLE oe_order ADD COLUMN seats TEXT",
		SQLite:   "ALTER TABLE oe_order ADD COLUMN seats TEXT",
	}},
	{"seat_limit", map[Dialect]string{
		MySQL:    "ALTER TABLE oe_order ADD COLUMN seat_limit INT NULL",
		Postgres: "ALTER TABLE oe_order ADD COLUMN seat_limit INTEGER",
		SQLite:   "ALTER TABLE oe_order ADD COLUMN seat_limit INTEGER",
	}},
	{"lock_id", map[Dialect]string{
		MySQL:    "ALTER TABLE oe_order ADD COLUMN lock_id VARCHAR(41) CHARACTER SET ascii COLLATE ascii_bin NULL",
		Postgres: "ALTER TABLE oe_order ADD COLUMN lock_id VARCHAR(41)",
		SQLite:   "ALTER TABLE oe_order ADD COLUMN lock_id TEXT",
	}},
	{"warned_at_ms", map[Dialect]string{
		MySQL:    "ALTER TABLE oe_order ADD COLUMN warned_at_ms BIGINT NULL",
		Postgres: "ALTER TABLE oe_order ADD COLUMN warned_at_ms BIGINT",
		SQLite:   "ALTER TABLE oe_order ADD COLUMN warned_at_ms INTEGER",
	}},
}

// upgradeLate adds lateColumns where they are missing (Migrate).
func (s *Store) upgradeLate(ctx context.Context) error {
	for _, c := range lateColumns {
		has, err := s.hasColumn(ctx, "oe_order", c.column)
		if err != nil {
			return err
		}
		if !has {
			if _, err := s.db.ExecContext(ctx, c.add[s.dialect]); err != nil && !isDuplicateColumn(err) {
				return fmt.Errorf("add oe_order.%s: %w", c.column, err)
			}
		}
	}
	return nil
}

// seatList is the oe_order.seats value of seats: sorted, comma-separated.
func seatList(seats []string) string {
	sorted := append([]string(nil), seats...)
	sort.Strings(sorted)
	return strings.Join(sorted, ",")
}

// lateSQL binds q for the store's dialect, NOW_MS being the database's
// clock in epoch milliseconds, as in New.
func (s *Store) lateSQL(q string) string {
	return rebind(s.dialect, strings.ReplaceAll(q, "NOW_MS", strings.TrimPrefix(s.q.now.sql, "SELECT ")))
}

// ReinstateCancelled implements cancel.OrderStore. In one transaction: the
// compare-and-set status 2 → 1 (cancel_reason timeout or reconcile; the
// SET always changes the row, so matched and changed rows agree), the seats
// read from oe_order.seats and inserted again as sold claims (the primary
// key of oe_order_seat refuses a seat another live order holds), then claim,
// then COMMIT. The compare-and-set holds the order's row until the commit,
// so a concurrent late payment waits and then finds the order paid. An order
// placed before the seats column existed gives cancel.ErrNoSeatRecord. On a
// store with a Mapping the seats and the limit are the side row's
// (oe_order_side, written by Place), and the cancels a late payment may undo
// are told by statuses no other cancel writes (Statuses.CancelledBy) or by
// the cancel reason column: a mapping with neither, or an order without a
// side row, gives cancel.ErrNoSeatRecord (its late payment is refunded).
func (s *Store) ReinstateCancelled(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (cancel.Result, error) {
	if err := p.Validate(); err != nil {
		return cancel.Result{}, fmt.Errorf("sqlstore: reinstate: %w", err)
	}
	var tx func(ctx context.Context) (cancel.Result, bool, bool, error)
	if !s.m.defaultSchema {
		if s.q.reinstate.sql == "" {
			return cancel.Result{}, fmt.Errorf("sqlstore: reinstate %s: %w (the mapping cannot tell a timeout's cancel from a user's: map CancelReason, or give Statuses.CancelledBy a timeout value no other cancel writes)", p.OrderNo, cancel.ErrNoSeatRecord)
		}
		v := vals{no: p.OrderNo, payment: p.PaymentID, status: s.m.paid[0].arg}
		tx = func(ctx context.Context) (cancel.Result, bool, bool, error) {
			return s.reinstateMappedTx(ctx, p, v, claim)
		}
	}
	return s.reinstate(ctx, p, claim, tx)
}

// reinstate runs ReinstateCancelled's attempts: tx when set (a host's
// table), else the library's schema's.
func (s *Store) reinstate(ctx context.Context, p cancel.Payment, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error), tx func(ctx context.Context) (cancel.Result, bool, bool, error)) (cancel.Result, error) {
	cas := "UPDATE oe_order SET status = 1, payment_id = ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 2 AND cancel_reason IN ('timeout', 'reconcile')"
	args := []any{p.PaymentID, p.OrderNo}
	if p.UserID != "" {
		cas += " AND user_id = ?"
		args = append(args, p.UserID)
	}
	var res cancel.Result
	var changed, claimed bool
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if tx != nil {
			res, changed, claimed, err = tx(ctx)
		} else {
			res, changed, claimed, err = s.reinstateTx(ctx, p, s.lateSQL(cas), args, claim)
		}
		if err == nil || claimed || !retryable(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond)
	}
	if err != nil {
		if errors.Is(err, cancel.ErrSeatUnavailable) || errors.Is(err, cancel.ErrNoSeatRecord) || errors.Is(err, cancel.ErrDiscrepancy) || errors.Is(err, expiry.ErrCommitUnknown) {
			return cancel.Result{}, fmt.Errorf("sqlstore: reinstate %s: %w", p.OrderNo, err)
		}
		return cancel.Result{}, fmt.Errorf("sqlstore: reinstate %s: %w", p.OrderNo, ctxCause(ctx, err))
	}
	if changed {
		return res, nil
	}
	o, paymentID, err := s.orderRow(ctx, p.OrderNo)
	if err != nil {
		return cancel.Result{}, err
	}
	if p.UserID != "" && o.UserID != p.UserID {
		return cancel.Result{}, fmt.Errorf("sqlstore: order %s: %w", p.OrderNo, cancel.ErrNotOwner)
	}
	res = cancel.Result{Order: o}
	if o.Status == expiry.StatusPaid {
		res.PaymentID = paymentID
	}
	return res, nil
}

// reinstateTx is one attempt of ReinstateCancelled; claimed reports that
// claim ran and succeeded (the attempt must not be repeated then).
func (s *Store) reinstateTx(ctx context.Context, p cancel.Payment, cas string, args []any, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (res cancel.Result, changed, claimed bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, false, false, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // the error that matters is the statement's
		}
	}()
	if err := s.beginProof(ctx, tx); err != nil {
		return res, false, false, err
	}
	r, err := tx.ExecContext(ctx, cas, args...)
	if err != nil {
		return res, false, false, err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return res, false, false, err
	}
	var seats sql.NullString
	var limit sql.NullInt64 // NULL: placed before the column existed
	var nowMS int64
	o := expiry.Order{No: p.OrderNo, Status: expiry.StatusPaid}
	err = tx.QueryRowContext(ctx, s.lateSQL("SELECT user_id, show_id, expire_at_ms, NOW_MS, seats, seat_limit FROM oe_order WHERE order_no = ?"), p.OrderNo).
		Scan(idCol{&o.UserID}, idCol{&o.ShowID}, deadlineCol{&o.ExpireAt}, &nowMS, &seats, &limit)
	if err != nil {
		return res, false, false, err
	}
	o.ReadAt = time.UnixMilli(nowMS)
	if !seats.Valid || seats.String == "" {
		return res, false, false, cancel.ErrNoSeatRecord
	}
	if !limit.Valid {
		// Placed before seat_limit existed: the limit it was placed with is
		// unknown, and reading none as "no limit" would let the buyer pass
		// it (I17). Refunded, as an order without its seats' record.
		return res, false, false, fmt.Errorf("the purchase limit it was placed with is not recorded: %w", cancel.ErrNoSeatRecord)
	}
	// The payment id's fate, decided here once: the primary key of
	// oe_payment_discrepancy refuses an id recorded before (refunded, or
	// honoured by another reinstatement), and makes a concurrent
	// RecordDiscrepancy of this id wait for this transaction and then find
	// it decided. status 0: honoured, settled at once, never refunded.
	if err := s.proveTx(ctx, tx, true); err != nil { // writes follow the read (see proveTx)
		return res, false, false, err
	}
	decide := "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES (?, ?, ?, ?, 0, NOW_MS, NOW_MS, NOW_MS)"
	if s.dialect != MySQL {
		decide += " ON CONFLICT (scope, payment_id) DO NOTHING"
	}
	r, err = tx.ExecContext(ctx, s.lateSQL(decide), p.PaymentID, s.m.scope, p.OrderNo, o.UserID)
	if err != nil {
		if isDuplicate(err) {
			return res, false, false, fmt.Errorf("payment %s decided before: %w", p.PaymentID, cancel.ErrDiscrepancy)
		}
		return res, false, false, err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		if err == nil {
			err = fmt.Errorf("payment %s decided before: %w", p.PaymentID, cancel.ErrDiscrepancy)
		}
		return res, false, false, err
	}
	list := strings.Split(seats.String, ",")
	insert := s.lateSQL("INSERT INTO oe_order_seat (show_id, seat_id, order_no, state) VALUES (?, ?, ?, 2)")
	for _, seat := range list {
		if _, err := tx.ExecContext(ctx, insert, o.ShowID, seat, p.OrderNo); err != nil {
			if isDuplicate(err) {
				return res, false, false, fmt.Errorf("seat %s/%s: %w", o.ShowID, seat, cancel.ErrSeatUnavailable)
			}
			return res, false, false, err
		}
	}
	lockID, err := claim(ctx, cancel.Hold{ShowID: o.ShowID, OrderNo: p.OrderNo, UserID: o.UserID, Seats: list}, int(limit.Int64))
	if err != nil {
		return res, false, false, fmt.Errorf("claim: %w", err)
	}
	// The new lock is the order's from this commit on: a cancel's release
	// that runs late names the old one, and the reconciler tells the two
	// apart (cancel.OrderState.LockID).
	if _, err := tx.ExecContext(ctx, s.lateSQL("UPDATE oe_order SET lock_id = ? WHERE order_no = ?"), nullIfEmpty(lockID), p.OrderNo); err != nil {
		return res, false, true, fmt.Errorf("keep the lock id: %w", err) // rolled back: the caller releases the lock
	}
	done := cancel.Result{Changed: true, Order: o, Seats: list, PaymentID: p.PaymentID, LockID: lockID}
	if err := s.runHook(ctx, hooked{hook: s.hook.Load(), to: expiry.StatusPaid}, tx, done, vals{no: p.OrderNo, payment: p.PaymentID}); err != nil {
		if errors.Is(err, errHookEndedTx) && s.committedByHook(ctx, p.OrderNo, expiry.StatusPaid, vals{payment: p.PaymentID}) {
			return done, true, true, nil // the hook committed it: the lock is the order's
		}
		return res, false, true, err // rolled back: the caller releases the lock
	}
	if err := s.proveTx(ctx, tx, false); err != nil {
		return res, false, true, err // nothing committed: the caller releases the lock
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return res, false, true, fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
	}
	return cancel.Result{Changed: true, Order: o, Seats: list, PaymentID: p.PaymentID, LockID: lockID}, true, true, nil
}

// reinstateMappedTx is one attempt of ReinstateCancelled on a host's table:
// the compare-and-set (q.reinstate), the order and its side row read, the
// payment id decided, the claims inserted again as sold, claim, the side
// row's lock id, COMMIT. claimed reports that claim ran and succeeded.
func (s *Store) reinstateMappedTx(ctx context.Context, p cancel.Payment, v vals, claim func(ctx context.Context, h cancel.Hold, limit int) (string, error)) (res cancel.Result, changed, claimed bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return res, false, false, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // the error that matters is the statement's
		}
	}()
	if err := s.beginProof(ctx, tx); err != nil {
		return res, false, false, err
	}
	r, err := tx.ExecContext(ctx, s.q.reinstate.sql, s.args(s.q.reinstate, v)...)
	if err != nil {
		return res, false, false, err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return res, false, false, err
	}
	o := expiry.Order{No: p.OrderNo, Status: expiry.StatusPaid}
	var status string
	var nowMS int64
	var paymentID sql.NullString
	if err := tx.QueryRowContext(ctx, s.q.order.sql, s.args(s.q.order, vals{no: p.OrderNo})...).Scan(idCol{&o.UserID}, idCol{&o.ShowID}, &status, deadlineCol{&o.ExpireAt}, &nowMS, &paymentID); err != nil {
		return res, false, false, err
	}
	unpad(&o.UserID, &o.ShowID)
	o.ReadAt = time.UnixMilli(nowMS)
	if p.UserID != "" && o.UserID != p.UserID {
		return res, false, false, fmt.Errorf("order %s: %w", p.OrderNo, cancel.ErrNotOwner) // rolled back
	}
	var seats string
	var limit int
	err = tx.QueryRowContext(ctx, s.lateSQL("SELECT seats, seat_limit FROM oe_order_side WHERE scope = ? AND order_no = ?"), s.m.scope, p.OrderNo).Scan(&seats, &limit)
	if errors.Is(err, sql.ErrNoRows) || err == nil && seats == "" {
		return res, false, false, fmt.Errorf("no side row keeps its seats: %w", cancel.ErrNoSeatRecord)
	}
	if err != nil {
		return res, false, false, err
	}
	if err := s.proveTx(ctx, tx, true); err != nil { // writes follow the reads (see proveTx)
		return res, false, false, err
	}
	decide := "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES (?, ?, ?, ?, 0, NOW_MS, NOW_MS, NOW_MS)"
	if _, err := tx.ExecContext(ctx, s.lateSQL(decide), p.PaymentID, s.m.scope, p.OrderNo, o.UserID); err != nil {
		if isDuplicate(err) {
			return res, false, false, fmt.Errorf("payment %s decided before: %w", p.PaymentID, cancel.ErrDiscrepancy)
		}
		return res, false, false, err
	}
	list := splitSeats(seats)
	if st := s.q.insertSold; st.sql != "" {
		sv := vals{no: p.OrderNo, show: o.ShowID}
		sv.showNum, _ = s.numericShow(o.ShowID) // read from the column: canonical
		for _, seat := range list {
			sv.seat = seat
			if _, err := tx.ExecContext(ctx, st.sql, s.args(st, sv)...); err != nil {
				if isDuplicate(err) {
					return res, false, false, fmt.Errorf("seat %s/%s: %w", o.ShowID, seat, cancel.ErrSeatUnavailable)
				}
				return res, false, false, err
			}
		}
	}
	lockID, err := claim(ctx, cancel.Hold{ShowID: o.ShowID, OrderNo: p.OrderNo, UserID: o.UserID, Seats: list}, limit)
	if err != nil {
		return res, false, false, fmt.Errorf("claim: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.lateSQL("UPDATE oe_order_side SET lock_id = ? WHERE scope = ? AND order_no = ?"), nullIfEmpty(lockID), s.m.scope, p.OrderNo); err != nil {
		return res, false, true, fmt.Errorf("keep the lock id: %w", err) // rolled back: the caller releases the lock
	}
	done := cancel.Result{Changed: true, Order: o, Seats: list, PaymentID: p.PaymentID, LockID: lockID}
	if err := s.runHook(ctx, hooked{hook: s.hook.Load(), to: expiry.StatusPaid}, tx, done, vals{no: p.OrderNo, payment: p.PaymentID}); err != nil {
		if errors.Is(err, errHookEndedTx) && s.committedByHook(ctx, p.OrderNo, expiry.StatusPaid, vals{payment: p.PaymentID}) {
			return done, true, true, nil // the hook committed it: the lock is the order's
		}
		return res, false, true, err // rolled back: the caller releases the lock
	}
	if err := s.proveTx(ctx, tx, false); err != nil {
		return res, false, true, err // nothing committed: the caller releases the lock
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return res, false, true, fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
	}
	return cancel.Result{Changed: true, Order: o, Seats: list, PaymentID: p.PaymentID, LockID: lockID}, true, true, nil
}

// SetDeadline implements cancel.OrderStore: a compare-and-set of the
// deadline on the value just read (so Previous is exact), guarded by the
// database's clock in the same statement: pending, and for an extension not
// due and before now+In, for a shortening after now+In. A concurrent change
// of the deadline makes it read again (a few times at most). On a Mapping
// it moves the mapped deadline column; a mapping whose deadline is the
// host's creation time plus a window has no deadline of its own to move,
// and gives cancel.ErrUnsupported.
func (s *Store) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if !s.m.defaultSchema && s.q.extend.sql == "" {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w (the mapping has no deadline column: the host's window decides)", c.OrderNo, cancel.ErrUnsupported)
	}
	if err := validateIDs(c.OrderNo, c.UserID); err != nil {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline: %w", err)
	}
	if c.In < 0 || c.In > maxDeadlineIn {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w: duration %v outside 0..%v", c.OrderNo, expiry.ErrInvalidID, c.In, maxDeadlineIn)
	}
	if c.MaxHold < 0 || c.MaxHold > maxDeadlineIn {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: maximum hold %v outside 0..%v", c.OrderNo, c.MaxHold, maxDeadlineIn)
	}
	if c.Due && c.Shorten {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w: Due is for an extension only", c.OrderNo, expiry.ErrInvalidID)
	}
	if !s.m.defaultSchema {
		return s.setDeadlineMapped(ctx, c)
	}
	// The new deadline is now+In; for an extension with a maximum hold, no
	// later than the placement (created_at_ms) plus it. The status is
	// compared as an expression (status + 0) in every statement here that
	// finds its row by number: see statusIn.
	q := "UPDATE oe_order SET expire_at_ms = NOW_MS + ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms > NOW_MS AND expire_at_ms < NOW_MS + ?"
	capped := c.MaxHold > 0 && !c.Shorten
	switch {
	case c.Shorten:
		q = "UPDATE oe_order SET expire_at_ms = NOW_MS + ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms > NOW_MS + ?"
	// Due (the timeout waiting for the payment provider) drops the
	// not-yet-due guard alone: a NULL deadline never compares equal to
	// the value read, so it is never given one here.
	case c.Due && capped && s.dialect == SQLite:
		q = "UPDATE oe_order SET expire_at_ms = MIN(NOW_MS + ?, created_at_ms + ?), updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms < MIN(NOW_MS + ?, created_at_ms + ?)"
	case c.Due && capped:
		q = "UPDATE oe_order SET expire_at_ms = LEAST(NOW_MS + ?, created_at_ms + ?), updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms < LEAST(NOW_MS + ?, created_at_ms + ?)"
	case c.Due:
		q = "UPDATE oe_order SET expire_at_ms = NOW_MS + ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms < NOW_MS + ?"
	case capped && s.dialect == SQLite: // SQLite's scalar MIN of several arguments
		q = "UPDATE oe_order SET expire_at_ms = MIN(NOW_MS + ?, created_at_ms + ?), updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms > NOW_MS AND expire_at_ms < MIN(NOW_MS + ?, created_at_ms + ?)"
	case capped:
		q = "UPDATE oe_order SET expire_at_ms = LEAST(NOW_MS + ?, created_at_ms + ?), updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms > NOW_MS AND expire_at_ms < LEAST(NOW_MS + ?, created_at_ms + ?)"
	}
	st, err := s.prepared(ctx, s.lateSQL(q))
	if err != nil {
		return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
	}
	in := c.In.Milliseconds()
	o, _, err := s.orderRow(ctx, c.OrderNo)
	if err != nil {
		return cancel.DeadlineResult{}, err
	}
	for attempt := 1; ; attempt++ {
		if c.UserID != "" && o.UserID != c.UserID {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: order %s: %w", c.OrderNo, cancel.ErrNotOwner)
		}
		if o.Status != expiry.StatusPending {
			return cancel.DeadlineResult{Order: o}, nil
		}
		args := []any{in, c.OrderNo, o.ExpireAt.UnixMilli(), in}
		if capped {
			hold := c.MaxHold.Milliseconds()
			args = []any{in, hold, c.OrderNo, o.ExpireAt.UnixMilli(), in, hold}
		}
		r, err := st.ExecContext(ctx, args...)
		if err != nil {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		}
		after, _, err := s.orderRow(ctx, c.OrderNo)
		if err != nil {
			return cancel.DeadlineResult{}, err
		}
		if n == 1 {
			return cancel.DeadlineResult{Changed: true, Order: after, Previous: o.ExpireAt}, nil
		}
		if after.Status == o.Status && after.ExpireAt.Equal(o.ExpireAt) || attempt == maxAttempts {
			return cancel.DeadlineResult{Order: after}, nil // the guard refused it
		}
		o = after // someone moved it between the read and the compare-and-set
	}
}

// setDeadlineMapped is SetDeadline on a host's table with a deadline
// column. The new deadline is the database's clock as read with the order,
// plus c.In (for an extension, no later than the placement plus c.MaxHold:
// the placement kept in the side row, or for an order the host inserted
// itself its created-at column, never later than now), written in the
// column's unit (rounded up to the
// second for a column of seconds: never earlier than asked); the
// compare-and-set guards it with the database's clock at the write.
func (s *Store) setDeadlineMapped(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	pick := func(o expiry.Order) stmt {
		switch {
		case c.Shorten && o.ExpireAt.IsZero():
			return s.q.shortenNull // no deadline (NULL): any is earlier
		case c.Shorten:
			return s.q.shorten
		case c.Due:
			return s.q.extendDue
		}
		return s.q.extend
	}
	capMS := int64(-1)
	hostCreated := int64(-1) // the host's created-at of an order without a side row
	if c.MaxHold > 0 && !c.Shorten {
		var created int64
		err := s.db.QueryRowContext(ctx, s.lateSQL("SELECT created_at_ms FROM oe_order_side WHERE scope = ? AND order_no = ?"), s.m.scope, c.OrderNo).Scan(&created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// Inserted by the host, not through Place: its placement is
			// the host's created-at column when the mapping names one,
			// else unknown, and then it is never extended (and a timeout
			// waiting for the payment provider cancels it at once).
			capMS = 0
			if s.q.createdMS.sql != "" {
				var created sql.NullInt64
				err := s.db.QueryRowContext(ctx, s.q.createdMS.sql, s.args(s.q.createdMS, vals{no: c.OrderNo})...).Scan(&created)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: order %s: %w", c.OrderNo, expiry.ErrNotFound)
				case err != nil:
					return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
				case created.Valid:
					hostCreated = created.Int64
				}
			}
		case err != nil:
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		default:
			capMS = created + c.MaxHold.Milliseconds()
		}
	}
	o, _, err := s.orderRow(ctx, c.OrderNo)
	if err != nil {
		return cancel.DeadlineResult{}, err
	}
	for attempt := 1; ; attempt++ {
		if c.UserID != "" && o.UserID != c.UserID {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: order %s: %w", c.OrderNo, cancel.ErrNotOwner)
		}
		if o.Status != expiry.StatusPending {
			return cancel.DeadlineResult{Order: o}, nil
		}
		// In a column of seconds an extension rounds up (at least c.In),
		// a shortening and the cap round down (never later than asked).
		targetMS, up := o.ReadAt.Add(c.In).UnixMilli(), !c.Shorten
		if hostCreated >= 0 {
			// The host's clock wrote it: a time ahead of the database's
			// counts as now, so the hold never starts in the future.
			capMS = min(hostCreated, o.ReadAt.UnixMilli()) + c.MaxHold.Milliseconds()
		}
		if capMS >= 0 && targetMS > capMS {
			targetMS, up = capMS, false
		}
		var arg any = targetMS
		if s.m.scanCol().Type != EpochMillis {
			sec := targetMS / 1000 // epoch times here are positive
			if up && targetMS%1000 != 0 {
				sec++
			}
			arg, targetMS = sec, sec*1000
		}
		q := pick(o)
		st, err := s.prepared(ctx, q.sql)
		if err != nil {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		}
		r, err := st.ExecContext(ctx, s.args(q, vals{no: c.OrderNo, deadline: arg, prevMS: o.ExpireAt.UnixMilli(), targetMS: targetMS})...)
		if err != nil {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return cancel.DeadlineResult{}, fmt.Errorf("sqlstore: deadline of %s: %w", c.OrderNo, err)
		}
		after, _, err := s.orderRow(ctx, c.OrderNo)
		if err != nil {
			return cancel.DeadlineResult{}, err
		}
		if n == 1 {
			return cancel.DeadlineResult{Changed: true, Order: after, Previous: o.ExpireAt}, nil
		}
		if after.Status == o.Status && after.ExpireAt.Equal(o.ExpireAt) || attempt == maxAttempts {
			return cancel.DeadlineResult{Order: after}, nil // the guard refused it
		}
		o = after // someone moved it between the read and the compare-and-set
	}
}

// MarkWarned implements cancel.OrderStore: one compare-and-set of
// warned_at_ms (NULL to the database's clock, so it always changes the
// row), on a pending order due within lead and not yet due by that clock.
// On a store with a Mapping the flag is the side row's (oe_order_side): an
// order without one (not placed through Place) is never warned.
func (s *Store) MarkWarned(ctx context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error) {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn: %w", err)
	}
	if lead < 0 || lead > maxDeadlineIn {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: lead %v outside 0..%v", orderNo, lead, maxDeadlineIn)
	}
	if !s.m.defaultSchema {
		return s.markWarnedMapped(ctx, orderNo, lead)
	}
	st, err := s.prepared(ctx, s.lateSQL("UPDATE oe_order SET warned_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND warned_at_ms IS NULL AND expire_at_ms > NOW_MS AND expire_at_ms <= NOW_MS + ?"))
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	r, err := st.ExecContext(ctx, orderNo, lead.Milliseconds())
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	o := expiry.Order{No: orderNo}
	var status uint8
	var nowMS int64
	var warned sql.NullInt64
	err = s.db.QueryRowContext(ctx, s.lateSQL("SELECT user_id, show_id, status, expire_at_ms, NOW_MS, warned_at_ms FROM oe_order WHERE order_no = ?"), orderNo).
		Scan(idCol{&o.UserID}, idCol{&o.ShowID}, &status, deadlineCol{&o.ExpireAt}, &nowMS, &warned)
	if errors.Is(err, sql.ErrNoRows) {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: order %s: %w", orderNo, expiry.ErrNotFound)
	}
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	o.Status, o.ReadAt = expiry.Status(status), time.UnixMilli(nowMS)
	if n == 1 {
		// The order as the compare-and-set saw it: pending (a payment that
		// committed since does not make this call's warning a false one).
		o.Status = expiry.StatusPending
		return expiry.WarnResult{Fired: true, Order: o}, nil
	}
	return expiry.WarnResult{Warned: warned.Valid, Order: o}, nil
}

// markWarnedMapped is MarkWarned on a host's table: the compare-and-set of
// the side row's warned_at_ms, guarded by the host's row.
func (s *Store) markWarnedMapped(ctx context.Context, orderNo string, lead time.Duration) (expiry.WarnResult, error) {
	st, err := s.prepared(ctx, s.q.warnSide.sql)
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	r, err := st.ExecContext(ctx, s.args(s.q.warnSide, vals{no: orderNo, leadMS: lead.Milliseconds()})...)
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	o, _, err := s.orderRow(ctx, orderNo)
	if err != nil {
		return expiry.WarnResult{}, err
	}
	if n == 1 {
		o.Status = expiry.StatusPending // as the compare-and-set saw it
		return expiry.WarnResult{Fired: true, Order: o}, nil
	}
	var warned sql.NullInt64
	err = s.db.QueryRowContext(ctx, s.lateSQL("SELECT warned_at_ms FROM oe_order_side WHERE scope = ? AND order_no = ?"), s.m.scope, orderNo).Scan(&warned)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return expiry.WarnResult{}, fmt.Errorf("sqlstore: warn %s: %w", orderNo, err)
	}
	return expiry.WarnResult{Warned: warned.Valid, Order: o}, nil
}

func validateIDs(orderNo, userID string) error {
	if err := expiry.ValidateID("order number", orderNo); err != nil {
		return err
	}
	if userID != "" {
		return expiry.ValidateID("user id", userID)
	}
	return nil
}
