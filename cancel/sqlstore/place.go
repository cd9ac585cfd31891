package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Insert returns the placing transaction for cancel.Service.Place on
// database/sql: one transaction on db that inserts the placement Place hands
// it (Place, which keeps its seat lock id), then the host's own rows (rows,
// nil: none) and, once it has committed, sends its expiry message with sched
// (nil: none; the reconciler alone expires the order). A failed COMMIT is
// reported wrapping expiry.ErrCommitUnknown, so Place keeps the seats
// locked. With another transaction manager, write the same function with its
// transaction and its after-commit hook.
//
//	err := svc.Place(ctx, p, store.Insert(db, sched, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO my_order_extra …", p.OrderNo)
//		return err
//	}))
func (s *Store) Insert(db *sql.DB, sched *expiry.Scheduler, rows func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error) func(ctx context.Context, p cancel.Placement) error {
	return func(ctx context.Context, p cancel.Placement) error {
		// Prepared before the transaction begins, so that each INSERT in it
		// is one round trip (go-sql-driver otherwise prepares and closes
		// every statement that has arguments).
		s.preparePlace(ctx, len(p.Seats))
		fn := func(tx *sql.Tx, after *expiry.AfterCommit) error {
			if err := s.Place(ctx, tx, p); err != nil {
				return err
			}
			if rows != nil {
				if err := rows(ctx, tx, p); err != nil {
					return err
				}
			}
			if after != nil {
				after.Add(p.OrderNo, p.ExpireAt)
			}
			return nil
		}
		if sched != nil {
			return sched.InTx(ctx, db, nil, fn)
		}
		return inTxUnknownCommit(ctx, db, func(tx *sql.Tx) error { return fn(tx, nil) })
	}
}

// inTxUnknownCommit runs fn in a transaction and reports a failed COMMIT as
// expiry.ErrCommitUnknown, as expiry.Scheduler.InTx does.
func inTxUnknownCommit(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the one to report
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: %w", expiry.ErrCommitUnknown, err)
	}
	return nil
}
