package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// CancelDue implements cancel.OrderStore, honouring the Mapping as
// CancelPending does (its scope, statuses, id types, claims or none). One
// transaction: the listed orders still pending and due by the database's
// clock are locked (SELECT … FOR UPDATE; SQLite's write transaction), set
// cancelled by one UPDATE … WHERE order IN (…), their live claims read and
// freed by one statement each; four statements whatever the batch's size,
// on every dialect and schema (five on MySQL, which reads the pending and
// due ones before it locks them: see batchLock). An order another transaction holds (a
// payment deciding it, the host's own row lock while it calls its payment
// provider) is skipped (SKIP LOCKED), left to its holder and a later
// round: one held row never holds the batch back (I12). A serialization
// failure or a deadlock is retried as CancelPending's. With a hook (see
// SetHook) each changed order's hook runs in the batch's transaction, and
// one that fails rolls the whole batch back (an error wrapping
// cancel.ErrHook).
func (s *Store) CancelDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error) {
	if err := cancel.ValidateBatch(orderNos, reason); err != nil {
		return nil, fmt.Errorf("sqlstore: cancel due: %w", err)
	}
	nos := slices.Clone(orderNos)
	slices.Sort(nos)
	nos = slices.Compact(nos)
	if len(nos) == 0 {
		return nil, nil
	}
	size := batchSize(len(nos))
	hook := hooked{hook: s.hook.Load(), to: expiry.StatusCancelled}
	var sts [5]stmt
	var prep [5]*sql.Stmt
	for i, build := range [...]func(*resolved, int) stmt{(*resolved).batchLock, (*resolved).batchCAS, (*resolved).batchSeats, (*resolved).batchRelease, (*resolved).batchPick} {
		if sts[i] = build(s.m, size); sts[i].sql == "" {
			continue
		}
		st, err := s.prepared(ctx, sts[i].sql) // before the transaction: see prepared
		if err != nil {
			return nil, fmt.Errorf("sqlstore: cancel due: prepare: %w", err)
		}
		prep[i] = st
	}
	var out []cancel.Result
	var opts *sql.TxOptions
	if s.dialect == MySQL {
		// READ COMMITTED: InnoDB's UPDATE then reads a row another
		// transaction holds at its last committed version and passes it by
		// when it is not one of the batch's, where REPEATABLE READ waits on
		// every row its scan meets (a scan of the whole table, when the
		// batch lists most of it). The batch's own rows are locked by
		// batchLock's locking read, which reads the latest committed rows
		// at any isolation level.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	var err error
	for {
		var changed map[string]bool
		err = s.cancelDue(ctx, opts, nos, reason, size, sts, prep, hook, &changed, &out)
		if !errors.Is(err, errRepick) {
			break
		}
		// Shed the orders that changed: none of them is cancelled by this
		// batch, and every attempt lists fewer, so a payment wave that
		// keeps landing between pick and lock ends the batch's attempts
		// (at most one per order) without ever holding one of them.
		nos = slices.DeleteFunc(slices.Clone(nos), func(no string) bool { return changed[no] })
		if len(nos) == 0 {
			out, err = nil, nil // every order changed: nothing of the batch's is left to cancel
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: cancel due: %w", err)
	}
	for i := range out {
		slices.Sort(out[i].Seats)
	}
	return out, nil
}

// errRepick rolls a MySQL batch back before its compare-and-set: an order
// batchPick found pending and due changed before batchLock locked it (a
// payment, an extension, the host's own write). InnoDB keeps the lock of
// every row a locking read examined, its WHERE rejected or not, until the
// transaction ends, so going on would hold that order, which the batch
// does not cancel, for as long as the batch and its hooks run (I12,
// TestReview5PaidBetweenPickAndLockHeldForTheBatch). A rollback lets go
// of it at once, and the next attempt leaves it out (shed from the batch's
// list, and not picked again).
var errRepick = errors.New("sqlstore: an order changed between the batch's pick and its lock")

// cancelDue is one attempt of CancelDue (with its own retries of a
// deadlock), its results in *out. An order of nos that changed since the
// pick ends the attempt with errRepick, the orders that changed in
// *changed.
func (s *Store) cancelDue(ctx context.Context, opts *sql.TxOptions, nos []string, reason cancel.Reason, size int, sts [5]stmt, prep [5]*sql.Stmt, hook hooked, changedp *map[string]bool, outp *[]cancel.Result) error {
	var out []cancel.Result
	defer func() { *outp = out }()
	return s.retryTx(ctx, opts, func(tx *sql.Tx) error {
		out = nil
		changed := map[string]bool{}
		*changedp = changed
		v := vals{reason: string(reason), status: s.m.cancelStatus(reason)}
		want := make(map[string]bool, len(nos))
		for _, no := range nos {
			want[no] = true
		}
		lockNos := nos
		if prep[4] != nil {
			picked, err := s.batchPicked(ctx, tx.StmtContext(ctx, prep[4]), s.batchArgs(sts[4], v, nos, size), want)
			if err != nil || len(picked) == 0 {
				return err
			}
			lockNos = picked
		}
		rows, err := tx.StmtContext(ctx, prep[0]).QueryContext(ctx, s.batchArgs(sts[0], v, lockNos, size)...)
		if err != nil {
			return err
		}
		byNo := map[string]int{}
		for rows.Next() {
			var r cancel.Result
			var nowMS int64
			var dueNow int
			var user, show, lockID sql.NullString // NULL ids: see readForTransition
			if err := rows.Scan(&r.Order.No, &user, &show, deadlineCol{&r.Order.ExpireAt}, &nowMS, &lockID, &dueNow); err != nil {
				rows.Close()
				return err
			}
			r.Order.UserID, r.Order.ShowID = user.String, show.String
			unpad(&r.Order.No, &r.Order.UserID, &r.Order.ShowID)
			if !want[r.Order.No] {
				continue // a case variant a folding collation matched (I10)
			}
			if dueNow != 1 { // paid or extended since batchPick (MySQL: see batchLock)
				changed[r.Order.No] = true
				continue
			}
			r.Changed, r.Order.Status, r.LockID = true, expiry.StatusCancelled, lockID.String
			r.Order.ReadAt = time.UnixMilli(nowMS)
			byNo[r.Order.No] = len(out)
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(changed) > 0 {
			out = nil
			return errRepick // rolled back: lets go of the changed orders
		}
		if len(out) == 0 {
			return nil
		}
		mine := make([]string, len(out))
		for i, r := range out {
			mine[i] = r.Order.No
		}
		if err := s.proveTx(ctx, tx, true); err != nil {
			return err
		}
		if err := s.batchExec(ctx, tx.StmtContext(ctx, prep[1]), s.batchArgs(sts[1], v, mine, size), len(mine)); err != nil {
			return err
		}
		if !s.m.claims {
			err := s.sideRowsIn(ctx, tx, mine, func(no, lockID, seats string) {
				if i, ok := byNo[no]; ok {
					out[i].LockID, out[i].Seats = lockID, splitSeats(seats)
				}
			})
			if err != nil {
				return err
			}
			return s.batchHooks(ctx, hook, tx, out, v)
		}
		// A host's table with claims keeps an order's lock id in the side
		// table (the lock a late payment's reinstatement took): the batch's
		// release must name it, or a release that runs late would free a
		// newer lock of the same order number (Cancel reads it the same way).
		err = s.sideRowsIn(ctx, tx, mine, func(no, lockID, _ string) {
			if i, ok := byNo[no]; ok {
				out[i].LockID = lockID
			}
		})
		if err != nil {
			return err
		}
		rows, err = tx.StmtContext(ctx, prep[2]).QueryContext(ctx, s.batchArgs(sts[2], v, mine, size)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var no, seat string
			if err := rows.Scan(&no, &seat); err != nil {
				rows.Close()
				return err
			}
			unpad(&no, &seat)
			if i, ok := byNo[no]; ok {
				out[i].Seats = append(out[i].Seats, seat)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := s.proveTx(ctx, tx, true); err != nil {
			return err
		}
		if err := s.batchExec(ctx, tx.StmtContext(ctx, prep[3]), s.batchArgs(sts[3], v, mine, size), -1); err != nil {
			return err
		}
		return s.batchHooks(ctx, hook, tx, out, v)
	})
}

// batchHooks runs the store's hook, if any, for each order of the batch in
// its transaction (see runHook): one failure rolls the whole batch back,
// and cancel.Service.ExpireDue then cancels its orders one by one, so the
// failing order is backed off alone. A transaction that ended inside a hook
// fails the batch too; the one-by-one cancels then find out what committed.
func (s *Store) batchHooks(ctx context.Context, h hooked, tx *sql.Tx, out []cancel.Result, v vals) error {
	for i := range out {
		slices.Sort(out[i].Seats) // as the batch returns them
		if err := s.runHook(ctx, h, tx, out[i], v); err != nil {
			return fmt.Errorf("order %s: %w", out[i].Order.No, err)
		}
	}
	return nil
}

// batchExec runs st with args; want >= 0 is the number of rows it must
// change (else the transaction is rolled back: those rows were locked, so
// another count means the statement and the lock disagree, and nothing is
// committed).
func (s *Store) batchExec(ctx context.Context, st *sql.Stmt, args []any, want int) error {
	res, err := st.ExecContext(ctx, args...)
	if err != nil || want < 0 {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("the batch's compare-and-set changed %d of the %d orders it locked", n, want)
	}
	return nil
}

// batchSize is the length of a batch's IN lists for n orders: n rounded up
// to a power of two (batchArgs repeats the last number), so that a store
// prepares a few statements per kind, not one per batch size.
func batchSize(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// batchArgs binds v to st, whose IN lists are size long: the k-th order
// number placeholder gets nos[k mod size], the last of nos past its end.
// batchPicked runs batchPick and returns the listed numbers it found
// pending and due, each once, as the caller spelled it (want).
func (s *Store) batchPicked(ctx context.Context, st *sql.Stmt, args []any, want map[string]bool) ([]string, error) {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	seen := map[string]bool{}
	for rows.Next() {
		var no string
		if err := rows.Scan(&no); err != nil {
			return nil, err
		}
		unpad(&no)
		if want[no] && !seen[no] { // a case variant a folding collation matched (I10)
			seen[no] = true
			out = append(out, no)
		}
	}
	return out, rows.Err()
}

func (s *Store) batchArgs(st stmt, v vals, nos []string, size int) []any {
	out := s.args(st, v)
	k := 0
	for i, sl := range st.slots {
		if sl != aNo {
			continue
		}
		no := nos[min(k%size, len(nos)-1)]
		k++
		if s.m.raw.Orders.NumericOrderNo {
			out[i] = numNo(no)
		} else {
			out[i] = no
		}
	}
	return out
}
