package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Insert returns the placing transaction for cancel.Service.Place on
// database/sql: one transaction on db that inserts the placement Place hands
// it (Place, which keeps its seat lock id), then the host's own rows (rows,
// nil: none), and commits; Place then sends the order's expiry message
// (cancel.Config.Scheduler). On PostgreSQL with the library's schema and no
// rows, the transaction is one statement (the order and its claims
// together), two round trips fewer than BEGIN … COMMIT. A failed COMMIT, or
// a one-statement placing that got no answer, is reported wrapping
// expiry.ErrCommitUnknown, so Place keeps the seats locked. With another
// transaction manager, write the same function: Store.Place on its
// transaction (a Querier), the host's rows, the commit, and return once it
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
		if err := s.place(ctx, tx, own, p); err != nil {
			return err
		}
		if rows != nil {
			if err := rows(ctx, tx, p); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlstore: place order %s: %w: %w", p.OrderNo, expiry.ErrCommitUnknown, err)
		}
		return nil
	}
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
		default:
			// No answer (a broken connection, a deadline): it may have
			// committed, as a COMMIT that failed.
			return fmt.Errorf("sqlstore: place order %s: %w: %w", p.OrderNo, expiry.ErrCommitUnknown, err)
		}
	}
	return nil
}
