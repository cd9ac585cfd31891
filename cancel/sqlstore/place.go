package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Insert returns the placing transaction for cancel.Service.Place on
// database/sql: one transaction on db that inserts the placement Place hands
// it (Place, which keeps its seat lock id), then the host's own rows (rows,
// nil: none), and commits; Place then sends the order's expiry message
// (cancel.Config.Scheduler). Where the mapping says so (HostWrites), the
// host's rows insert the order row, or the claims, themselves: the library
// reads them back after the rows (and inserts its claims of a host's order
// row), see HostWrites. On PostgreSQL with the library's schema and no
// rows, the transaction is one statement (the order and its claims
// together), two round trips fewer than BEGIN … COMMIT. A failed COMMIT, or
// a one-statement placing that got no answer, is reported wrapping
// expiry.ErrCommitUnknown, so Place keeps the seats locked; a COMMIT the
// database refused and rolled back (a Galera certification conflict, 1213; a
// serialization failure) is not: it is a plain error, and Place releases the
// seats and sends nothing; nor is a placing that could not connect (nothing
// was sent). On a Galera node the library proves, before COMMIT, that the
// transaction rows ran in still exists (a read of the host's can lose the
// report of an abort): a placement it finds gone is a plain error, nothing
// placed. A statement of the host's after such a read would have run on its
// own, outside any transaction: on Galera, rows should not write after it
// reads. rows must not end the transaction (COMMIT, ROLLBACK): Insert does.
// With another
// transaction manager, write the same function: Store.Place on its
// transaction (a cancel.Querier), the host's rows, the commit, and return once it
// has committed (examples/orm has gorm, sqlx, ent and pgx).
//
//	err := svc.Place(ctx, p, store.Insert(db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO my_order_extra …", p.OrderNo)
//		return err
//	}))
func (s *Store) Insert(db *sql.DB, rows func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error) func(ctx context.Context, p cancel.Placement) error {
	return func(ctx context.Context, p cancel.Placement) error {
		if rows == nil && s.oneStatementPlace() {
			return s.placeOne(ctx, db, p)
		}
		if host := s.hostWrites(); rows == nil && len(host) > 0 {
			return fmt.Errorf("sqlstore: place order %s: %w: the mapping leaves %s to the host's own rows (Fill with HostWrites): pass Insert the rows function that inserts them", p.OrderNo, cancel.ErrUnsupported, strings.Join(host, ", "))
		}
		v, err := s.placeArgs(p)
		if err != nil {
			return err
		}
		// The store's prepared statements belong to its own *sql.DB: a
		// transaction of another one cannot run them.
		own := db == s.db
		if own {
			// Prepared before the transaction begins, so that each INSERT
			// in it is one round trip (go-sql-driver otherwise prepares
			// and closes every statement that has arguments).
			s.preparePlace(ctx, len(p.Seats))
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlstore: place order %s: begin: %w", p.OrderNo, err)
		}
		defer tx.Rollback() //nolint:errcheck // ends the transaction after an error or a panic; after Commit, a no-op
		if rows != nil {
			// The host's rows may end the transaction without saying so:
			// a statement of theirs that lost a deadlock took the whole
			// transaction with it on MariaDB, and the host logged the
			// error and went on; on a Galera node a read can lose the
			// report of an abort (galera.go). COMMIT would then commit
			// nothing and report the placement made, and Place would send
			// a message for an order that does not exist (I6). So the
			// placement holds a savepoint from its start, and proves it
			// still exists before COMMIT (two round trips, with rows only).
			if _, err := tx.ExecContext(ctx, "SAVEPOINT oe_tx"); err != nil {
				return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
			}
		}
		if err := s.placeBefore(ctx, tx, own, p, v); err != nil {
			return err
		}
		if rows != nil {
			if err := rows(ctx, tx, p); err != nil {
				// Still the placing transaction, it rolls back and nothing
				// is placed. One the rows ended themselves before failing
				// (a COMMIT of theirs, DDL that commits on MySQL) may have
				// committed the placement: then its seats must stay locked.
				if ctx.Err() == nil {
					_, perr := tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_tx")
					if perr == nil || !savepointGone(perr) {
						return err
					}
				}
				if s.placedAnyway(ctx, p) {
					return s.finishEnded(ctx, db, p, v, fmt.Errorf("sqlstore: place order %s: the transaction ended inside the host's rows, which then failed: %w: %w", p.OrderNo, expiry.ErrCommitUnknown, err))
				}
				return err
			}
			if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_tx"); err != nil {
				return s.finishEnded(ctx, db, p, v, s.endedInRows(ctx, p, err))
			}
		}
		if err := s.placeAfter(ctx, tx, own, p, v, func(read func() error) error { return s.provedRead(ctx, tx, p, read) }); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			if refusedCommit(err) {
				return fmt.Errorf("sqlstore: place order %s: the database refused the commit and rolled the placement back (a conflict with a concurrent transaction: nothing was placed, it may be placed again): %w", p.OrderNo, err)
			}
			return fmt.Errorf("sqlstore: place order %s: %w: %w", p.OrderNo, expiry.ErrCommitUnknown, err)
		}
		return nil
	}
}

// finishEnded completes a placement whose transaction the host's rows
// ended with a COMMIT of theirs (err wraps expiry.ErrCommitUnknown) where
// the order row is the host's and the claims the library's: they come
// after the rows (placeAfter), so the order committed without them, and
// a sold seat would be missing from Claims (a rebuild would free it), a
// cancel would free nothing. On a transaction of its own, it reads the
// host's row back and inserts the claims; err is returned either way (the
// outcome was not the placement's own COMMIT), with why the claims could
// not be written if they could not.
func (s *Store) finishEnded(ctx context.Context, db *sql.DB, p cancel.Placement, v vals, err error) error {
	if !errors.Is(err, expiry.ErrCommitUnknown) || len(s.m.hostFill) == 0 || !s.m.claims || len(s.m.cHostFill) > 0 {
		return err
	}
	fctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	tx, berr := db.BeginTx(fctx, nil)
	if berr == nil {
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		// Locked, and still pending: a cancel that committed meanwhile
		// freed claims that did not exist yet, so none are written after it.
		var one int
		berr = queryRow(fctx, tx, s.q.hostOrderLock.sql, s.args(s.q.hostOrderLock, v), &one)
		if errors.Is(berr, sql.ErrNoRows) {
			berr = fmt.Errorf("%w: not pending as the placement's any more", errHostRows)
		}
		if berr == nil {
			berr = s.insertClaims(fctx, tx, false, p, v)
		}
		if berr == nil {
			berr = tx.Commit()
		}
	}
	if berr != nil {
		return fmt.Errorf("%w (and its claims could not be written after: %v)", err, berr)
	}
	return err
}

// provedRead runs read, a read-back of the host's rows in Insert's
// transaction tx, inside a savepoint it then releases: a transaction gone
// meanwhile (an abort whose report a read on a Galera node lost) is an
// error, nothing placed, before anything else runs on its own or COMMIT
// commits nothing and reports the placement made (I6).
func (s *Store) provedRead(ctx context.Context, tx *sql.Tx, p cancel.Placement, read func() error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT oe_rb"); err != nil {
		return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
	}
	if err := read(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT oe_rb"); err != nil {
		if savepointGone(err) {
			err = fmt.Errorf("%w: %w", errTxAborted, err)
		}
		return fmt.Errorf("sqlstore: place order %s: the transaction was gone after the read-back of the host's rows: nothing was placed: %w", p.OrderNo, err)
	}
	return nil
}

// endedInRows is Insert's answer when the placing transaction is gone after
// the host's rows returned nil (err: the failed RELEASE SAVEPOINT). An
// abort (a deadlock, a Galera conflict, PostgreSQL refusing statements
// after one that failed) committed nothing: a plain error, so Place
// releases the seats and sends nothing. A COMMIT of the rows' own, against
// the doc, may have committed the placement: the order is read back, and if
// it is there the outcome is reported unknown (expiry.ErrCommitUnknown), so
// Place schedules it only as the store shows it.
func (s *Store) endedInRows(ctx context.Context, p cancel.Placement, err error) error {
	orderNo := p.OrderNo
	// COMMIT was never sent: only a COMMIT of the rows' own can have placed
	// the order, and then it is there to read under this placement's lock.
	// An abort the database reports here (a deadlock, a Galera conflict, a
	// serialization failure, PostgreSQL's aborted transaction) rolled the
	// transaction back, and a read would only find a concurrent placement
	// of the same number.
	if !abortedTx(err) && s.placedAnyway(ctx, p) {
		return fmt.Errorf("sqlstore: place order %s: the transaction ended inside the host's rows (a COMMIT of theirs?): %w: %w", orderNo, expiry.ErrCommitUnknown, err)
	}
	if savepointGone(err) {
		err = fmt.Errorf("%w: %w", errTxAborted, err)
	}
	return fmt.Errorf("sqlstore: place order %s: the transaction was gone before COMMIT, inside or right after the host's rows (a statement of theirs that aborted it, such as a deadlock, whose error was not returned; a lost connection): nothing was placed: %w", orderNo, err)
}

// placedAnyway reports whether placement p may have committed after its
// transaction ended in a way Insert cannot read (inside the host's rows, a
// lost connection, the caller's context gone): a read on a context of its
// own finds the order under p's lock (or under no lock the store keeps),
// or cannot say. Either way the seats must stay locked and the outcome be
// reported unknown. The order under another lock is a concurrent placement
// of the same number, not this one.
func (s *Store) placedAnyway(ctx context.Context, p cancel.Placement) bool {
	rctx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer done()
	st, err := s.Statuses(rctx, []string{p.OrderNo})
	if err != nil {
		return true
	}
	o, ok := st[p.OrderNo]
	return ok && (o.LockID == "" || o.LockID == p.LockID)
}

// abortedTx reports an error by which the database says it rolled the
// transaction back: MySQL's deadlock (1213, also a Galera certification
// conflict), PostgreSQL's serialization failure, deadlock, and "current
// transaction is aborted".
func abortedTx(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrLockDeadlock
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "40001" || code == "40P01" || code == "25P02"
	}
	return false
}

// pgconnPkg is the package of pgx's connection errors.
const pgconnPkg = "github.com/jackc/pgx/v5/pgconn"

// connectFailed reports an error of opening a connection, before any
// statement of the caller was sent on it: a dial that failed (*net.OpError
// "dial"), or pgx's *pgconn.ConnectError (a dial, a refused login, or a
// server that is not what target_session_attrs asks for, such as a Patroni
// replica while its primary fails over). database/sql opens a connection
// only before a statement, and pgx returns driver.ErrBadConn (retried by
// database/sql on a fresh connection) only when nothing was sent, so such an
// error means the statement never reached a server. The pgx type is
// matched by its package and name, by reflection as mysqlErrorNumber does,
// so that sqlstore does not import the driver.
func connectFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	for err != nil {
		if t := reflect.TypeOf(err); t.Kind() == reflect.Pointer && t.Elem().Name() == "ConnectError" && t.Elem().PkgPath() == pgconnPkg {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if connectFailed(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// refusedCommit reports an error of COMMIT that the server answered by
// rolling the transaction back, so its outcome is known: nothing committed.
// On a MariaDB Galera Cluster a certification conflict (another node
// committed a conflicting writeset first, internal/galera's
// TestPlacementConflictAtCommit: a double submit through two nodes) aborts
// the transaction and its COMMIT answers 1213, like a deadlock; MariaDB's
// snapshot isolation answers 1020. PostgreSQL answers a serialization
// failure or deadlock (40001, 40P01) or a deferred constraint (class 23) at
// COMMIT, after rolling back. Anything else (no answer, a broken connection,
// a server shutting down mid-commit, which PostgreSQL reports after the
// commit may have happened locally) stays an unknown commit. PostgreSQL
// answers the COMMIT of a transaction a failed statement aborted (one a
// host's hook swallowed) with ROLLBACK, which pgx reports by the message
// below. SQLite (modernc, no exported code type) refuses a COMMIT when
// busy or on a deferred foreign key (787), after rolling back.
func refusedCommit(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == myErrLockDeadlock || n == myErrCheckRead
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		c := pg.SQLState()
		return c == "40001" || c == "40P01" || strings.HasPrefix(c, "23")
	}
	msg := err.Error()
	return strings.Contains(msg, "commit unexpectedly resulted in rollback") ||
		strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked") ||
		strings.Contains(msg, "SQLITE_CONSTRAINT") || strings.Contains(msg, "constraint failed")
}

// oneStatementPlace reports whether Insert without rows of the host's own
// places an order in one statement: on PostgreSQL with the library's schema,
// the order's INSERT is a data-modifying CTE of the claims' INSERT. One
// statement is its own transaction, so BEGIN and COMMIT (two round trips of
// four) go, and the order and its claims still commit or fail together.
func (s *Store) oneStatementPlace() bool {
	return s.dialect == Postgres && s.m.defaultSchema && s.m.claims && s.q.insertSide.sql == ""
}

// placeOneStmt is the one statement for an order of n seats, built once per n:
// WITH o AS (INSERT INTO oe_order …) INSERT INTO oe_order_seat … VALUES
// (…), (…). PostgreSQL runs a data-modifying CTE to completion whether or not
// the main statement reads it.
func (s *Store) placeOneStmt(n int) stmt {
	if st, ok := s.oneQ.Load(n); ok {
		return st.(stmt)
	}
	order, claims := s.q.insertOrder, s.claimsInsert(n)
	st := stmt{
		sql:   "WITH o AS (" + order.sql + ") " + shiftParams(claims.sql, len(order.slots)),
		slots: append(append([]slot(nil), order.slots...), claims.slots...),
	}
	s.oneQ.Store(n, st)
	return st
}

// shiftParams renumbers PostgreSQL's $n placeholders of q by off. The
// library's own schema has no literal holding a '$', so a scan is exact.
func shiftParams(q string, off int) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		if q[i] != '$' {
			b.WriteByte(q[i])
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		n, _ := strconv.Atoi(q[i+1 : j])
		n += off
		b.WriteString("$" + strconv.Itoa(n))
		i = j - 1
	}
	return b.String()
}

// placeOne is Insert's placing as one statement (oneStatementPlace).
func (s *Store) placeOne(ctx context.Context, db *sql.DB, p cancel.Placement) error {
	v, err := s.placeArgs(p)
	if err != nil {
		return err
	}
	st := s.placeOneStmt(len(p.Seats))
	args := s.args(s.q.insertOrder, v)
	for _, seat := range p.Seats {
		v.seat = seat
		args = append(args, s.args(s.q.insertSeat, v)...)
	}
	if db == s.db && len(p.Seats) <= preparedClaims { // the statements are prepared on the store's own *sql.DB
		var ps *sql.Stmt
		if ps, err = s.prepared(ctx, st.sql); err == nil {
			_, err = ps.ExecContext(ctx, args...)
		}
	} else {
		_, err = db.ExecContext(ctx, st.sql, args...)
	}
	if err != nil {
		var answered interface{ SQLState() string }
		switch {
		case isDuplicate(err):
			// The order's number or one of its seats: the number is
			// taken if an order holds it now (nothing of this statement
			// committed).
			switch _, oerr := s.Order(ctx, p.OrderNo); {
			case oerr == nil:
				return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, cancel.ErrOrderExists)
			case errors.Is(oerr, expiry.ErrNotFound):
				return fmt.Errorf("sqlstore: place order %s: a seat of %s %v: %w", p.OrderNo, p.ShowID, p.Seats, cancel.ErrSeatUnavailable)
			}
			return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
		case errors.As(err, &answered):
			// The server answered with an error: the statement, its own
			// transaction, did not commit.
			return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
		case connectFailed(err):
			// No connection was made, so the statement was never sent.
			return fmt.Errorf("sqlstore: place order %s: not sent (no connection): %w", p.OrderNo, err)
		default:
			// No answer (a broken connection, a deadline): it may have
			// committed, as a COMMIT that failed.
			return fmt.Errorf("sqlstore: place order %s: %w: %w", p.OrderNo, expiry.ErrCommitUnknown, err)
		}
	}
	return nil
}

// Place inserts a pending order and its seat claims in the host's
// transaction q (a cancel.Querier: a *sql.Tx, sqlx's Tx, gorm's
// transaction's tx.Statement.ConnPool, ent's generated Tx with its
// sql/execquery feature, or a pgx session reached through
// stdlib.OpenDBFromPool; examples/orm shows each). Pass the transaction: on
// a *sql.DB, or a *sql.Conn outside a transaction, each statement commits
// on its own. Place sends the statements' text, not the store's prepared
// statements, which database/sql refuses to a transaction of another
// *sql.DB (only Insert's transactions are known to be the store's). An order number that exists already gives an error
// wrapping cancel.ErrOrderExists (the existing order is untouched: a retry
// after an unknown commit, a double submit); a seat that another live order
// holds gives one wrapping cancel.ErrSeatUnavailable. After either, the
// transaction is unusable on PostgreSQL: roll it back. It sends nothing:
// cancel.Service.Place sends the expiry message once the host's function
// that called Place has returned nil, its commit.
//
// With a Mapping it writes the mapped columns only (number, user, show,
// pending status, deadline or creation time, updated-at, the Where and
// Fill constants; the claims with their Locked state and constants): the
// host's other NOT NULL columns need defaults or a Fill (Check names
// them). Where the mapping's Fill says HostWrites, the host's statements
// on q insert those rows first, and Place writes the rest after reading
// them back (see HostWrites).
func (s *Store) Place(ctx context.Context, q cancel.Querier, p cancel.Placement) error {
	return s.place(ctx, q, false, p)
}

// place is Place; own says q is a transaction of the store's own *sql.DB,
// whose prepared statements it may run.
func (s *Store) place(ctx context.Context, q cancel.Querier, own bool, p cancel.Placement) error {
	v, err := s.placeArgs(p)
	if err != nil {
		return err
	}
	if err := s.placeBefore(ctx, q, own, p, v); err != nil {
		return err
	}
	return s.placeAfter(ctx, q, own, p, v, func(read func() error) error { return read() })
}

// hostWrites names the columns the mapping leaves to the host's own rows
// (Fill with HostWrites), of the orders table and then the claims table.
func (s *Store) hostWrites() []string {
	return append(s.m.hostFill[:len(s.m.hostFill):len(s.m.hostFill)], s.m.cHostFill...)
}

// placeArgs checks p and binds it for Place's statements.
func (s *Store) placeArgs(p cancel.Placement) (vals, error) {
	if err := p.Validate(); err != nil {
		return vals{}, fmt.Errorf("sqlstore: place: %w", err)
	}
	v, ok := s.user(vals{no: p.OrderNo, show: p.ShowID}, p.UserID)
	if !ok {
		return vals{}, fmt.Errorf("sqlstore: place order %s: %w: user id %q is not a canonical integer (the mapping's user column is numeric)", p.OrderNo, expiry.ErrInvalidID, p.UserID)
	}
	if _, ok := canonicalInt(p.OrderNo); s.m.raw.Orders.NumericOrderNo && !ok {
		return vals{}, fmt.Errorf("sqlstore: place order %s: %w: not a canonical integer (the mapping's order number column is numeric)", p.OrderNo, expiry.ErrInvalidID)
	}
	if v.showNum, ok = s.numericShow(p.ShowID); !ok {
		return vals{}, fmt.Errorf("sqlstore: place order %s: %w: show id %q is not a canonical integer (the mapping's show column is numeric)", p.OrderNo, expiry.ErrInvalidID, p.ShowID)
	}
	v.deadline, v.seats, v.seatLimit, v.lockID = s.timeArg(p.ExpireAt), seatList(p.Seats), p.Limit, p.LockID
	return v, nil
}

// placeBefore writes what of bound placement p goes before the host's
// rows: the order row, unless the mapping leaves it to them (HostWrites);
// the side row; the claims, unless they are the host's or refer to an
// order row the host's rows insert. A host's rows that end the transaction
// against Insert's doc then find the placement whole where its order row is
// the library's.
func (s *Store) placeBefore(ctx context.Context, q cancel.Querier, own bool, p cancel.Placement, v vals) error {
	hostOrder := len(s.m.hostFill) > 0
	if !hostOrder {
		if _, err := s.execTx(ctx, q, own, s.q.insertOrder, s.args(s.q.insertOrder, v)); err != nil {
			if isDuplicate(err) { // the order number is the orders' unique key
				return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, cancel.ErrOrderExists)
			}
			return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, err)
		}
	}
	if hostOrder {
		if err := s.hostSide(ctx, q, own, p, v); err != nil {
			return err
		}
	} else if st := s.q.insertSide; st.sql != "" {
		if _, err := s.execTx(ctx, q, own, st, s.args(st, v)); err != nil {
			return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
		}
	}
	if s.m.claims && !hostOrder && len(s.m.cHostFill) == 0 {
		return s.insertClaims(ctx, q, own, p, v)
	}
	return nil
}

// hostSide writes the side row of bound placement p before the host's
// rows insert its order row: never over another order's. A number whose
// row exists already, or whose side row a concurrent placement wrote (the
// plain INSERT meets it as a duplicate, after it committed), or replaced
// first (the compare-and-set on the old side row's lock id finds another),
// is cancel.ErrOrderExists; the old side row of a number no order holds
// (the host deleted its order) is replaced.
func (s *Store) hostSide(ctx context.Context, q cancel.Querier, own bool, p cancel.Placement, v vals) error {
	exists := func() error { return fmt.Errorf("sqlstore: place order %s: %w", p.OrderNo, cancel.ErrOrderExists) }
	var n int
	if err := queryRow(ctx, q, s.q.hostOrderTaken.sql, s.args(s.q.hostOrderTaken, v), &n); err != nil {
		return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
	}
	if n > 0 {
		return exists()
	}
	err := queryRow(ctx, q, s.q.hostSideLock.sql, s.args(s.q.hostSideLock, v), &v.prevLock)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := s.execTx(ctx, q, own, s.q.insertSide, s.args(s.q.insertSide, v)); err != nil {
			if isDuplicate(err) {
				return exists()
			}
			return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
	}
	r, err := s.execTx(ctx, q, own, s.q.hostSideReplace, s.args(s.q.hostSideReplace, v))
	if err != nil {
		return fmt.Errorf("sqlstore: place order %s: side row: %w", p.OrderNo, err)
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return exists()
	}
	return nil
}

// placeAfter writes what of bound placement p needs the host's rows, once
// they ran: it reads back the order row they inserted (HostWrites: pending,
// of p's user and show byte for byte, in the store's scope), inserts the
// library's claims of that order, and reads back the claims they inserted
// (their live claims exactly p's seats of p's show). Anything else places
// nothing: the library would keep seats, or a lock id, for an order that
// is not there or is another's. prove runs each read: Insert proves after
// it that its transaction still exists (a read on a Galera node can lose
// the report of an abort, and what follows would run on its own).
func (s *Store) placeAfter(ctx context.Context, q cancel.Querier, own bool, p cancel.Placement, v vals, prove func(read func() error) error) error {
	if len(s.m.hostFill) > 0 {
		if err := prove(func() error { return s.hostPlacedOrder(ctx, q, p, v) }); err != nil {
			return err
		}
		if s.m.claims && len(s.m.cHostFill) == 0 {
			if err := s.insertClaims(ctx, q, own, p, v); err != nil {
				return err
			}
		}
	}
	if s.m.claims && len(s.m.cHostFill) > 0 {
		return prove(func() error { return s.hostPlacedClaims(ctx, q, p, v) })
	}
	return nil
}

// insertClaims inserts p's claims: every claim in one statement, one round
// trip whatever the number of seats. A duplicate key names no seat, so the
// error names the show.
func (s *Store) insertClaims(ctx context.Context, q cancel.Querier, own bool, p cancel.Placement, v vals) error {
	st := s.claimsInsert(len(p.Seats))
	args := make([]any, 0, len(st.slots))
	for _, seat := range p.Seats {
		v.seat = seat
		args = append(args, s.args(s.q.insertSeat, v)...)
	}
	if _, err := s.execTx(ctx, q, own, st, args); err != nil {
		if isDuplicate(err) {
			return fmt.Errorf("sqlstore: place order %s: a seat of %s %v: %w", p.OrderNo, p.ShowID, p.Seats, cancel.ErrSeatUnavailable)
		}
		return fmt.Errorf("sqlstore: place order %s: seats %v: %w", p.OrderNo, p.Seats, err)
	}
	return nil
}

// errHostRows is placeAfter's error for rows the host's function did not
// write as the placement says.
var errHostRows = errors.New("the host's rows did not place the order as the placement says")

// hostPlacedOrder proves that the host's rows inserted p's order: pending,
// p's user and show, in the store's scope (its Where), with the
// comparisons of the owner's compare-and-set (byte for byte, I10), so the
// placement's user is the one who can cancel it. Else it reads the row as
// text to say what differs.
func (s *Store) hostPlacedOrder(ctx context.Context, q cancel.Querier, p cancel.Placement, v vals) error {
	var n int
	if err := queryRow(ctx, q, s.q.hostOrder.sql, s.args(s.q.hostOrder, v), &n); err != nil {
		return fmt.Errorf("sqlstore: place order %s: read the host's row: %w", p.OrderNo, err)
	}
	if n == 1 {
		return nil
	}
	var user, show, status sql.NullString
	err := queryRow(ctx, q, s.q.hostOrderText.sql, s.args(s.q.hostOrderText, v), &user, &show, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlstore: place order %s: %w: no row of it in the store's scope (the mapping leaves %s to the rows function handed to Insert, which must insert it)",
			p.OrderNo, errHostRows, strings.Join(s.m.hostFill, ", "))
	}
	if err != nil {
		return fmt.Errorf("sqlstore: place order %s: read the host's row: %w", p.OrderNo, err)
	}
	return fmt.Errorf("sqlstore: place order %s: %w: the row reads as user %q, show %q, status %v (compared byte for byte, as the column holds them); the placement is user %q, show %q, pending",
		p.OrderNo, errHostRows, user.String, show.String, s.status(status), p.UserID, p.ShowID)
}

// queryRow scans the one row of query on q into dest: sql.ErrNoRows if
// there is none.
func queryRow(ctx context.Context, q cancel.Querier, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// hostPlacedClaims proves that the host's rows inserted p's claims: the
// order's live claims are exactly p's seats, each of p's show (compared as
// the compare-and-sets compare ids).
func (s *Store) hostPlacedClaims(ctx context.Context, q cancel.Querier, p cancel.Placement, v vals) error {
	rows, err := q.QueryContext(ctx, s.q.hostClaims.sql, s.args(s.q.hostClaims, v)...)
	if err != nil {
		return fmt.Errorf("sqlstore: place order %s: read the host's claims: %w", p.OrderNo, err)
	}
	defer rows.Close()
	var got []string
	otherShow := 0
	for rows.Next() {
		var seat sql.NullString
		var ofShow int
		if err := rows.Scan(&seat, &ofShow); err != nil {
			return fmt.Errorf("sqlstore: place order %s: read the host's claims: %w", p.OrderNo, err)
		}
		got = append(got, seat.String)
		if ofShow != 1 {
			otherShow++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: place order %s: read the host's claims: %w", p.OrderNo, err)
	}
	want := slices.Clone(p.Seats)
	slices.Sort(got)
	slices.Sort(want)
	if want = slices.Compact(want); otherShow > 0 || !slices.Equal(got, want) {
		return fmt.Errorf("sqlstore: place order %s: %w: its live claims are seats %v (%d of them not of show %q), the placement's %v (the mapping leaves %s to the rows function handed to Insert, which must insert them)",
			p.OrderNo, errHostRows, got, otherShow, p.ShowID, want, strings.Join(s.m.cHostFill, ", "))
	}
	return nil
}

// preparedClaims is the most seats whose multi-row claims INSERT is kept
// prepared: one statement per seat count, per pooled connection, so the
// common orders (a few seats) save their prepare round trip without a
// 50-seat order leaving 50 statements on every connection.
const preparedClaims = 8

// claimsInsert is the INSERT of n claims, built once per n.
func (s *Store) claimsInsert(n int) stmt {
	if n == 1 {
		return s.q.insertSeat
	}
	if st, ok := s.claimsQ.Load(n); ok {
		return st.(stmt)
	}
	st := s.m.claimsInsert(s.dialect, n)
	s.claimsQ.Store(n, st)
	return st
}

// preparePlace prepares Place's statements for an order of n seats, before
// its transaction begins (see prepared: never inside one). Place then finds
// them prepared. A failure is not an error: Place sends them unprepared.
func (s *Store) preparePlace(ctx context.Context, n int) {
	qs := [3]string{s.q.insertOrder.sql, s.q.insertSide.sql}
	if s.m.claims && n <= preparedClaims {
		qs[2] = s.claimsInsert(n).sql
	}
	for _, q := range qs {
		if q != "" {
			if _, err := s.prepared(ctx, q); err != nil {
				return
			}
		}
	}
}

// execTx runs st on q: through its prepared statement when q is a
// transaction of the store's own *sql.DB (own) and the statement was
// prepared before the transaction (preparePlace), else as plain text. It
// never prepares inside a transaction.
func (s *Store) execTx(ctx context.Context, q cancel.Querier, own bool, st stmt, args []any) (sql.Result, error) {
	if tx, ok := q.(*sql.Tx); ok && own {
		s.mu.RLock()
		ps := s.stmts[st.sql]
		s.mu.RUnlock()
		if ps != nil {
			return tx.StmtContext(ctx, ps).ExecContext(ctx, args...)
		}
	}
	return q.ExecContext(ctx, st.sql, args...)
}

// nullIfEmpty is s, or NULL for "" (an id not known).
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
