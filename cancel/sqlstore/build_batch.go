package sqlstore

// This file builds the statements of a batch of cancels (batch.go) for n
// order numbers, from the same pieces as build.go: every order number is a
// placeholder of slot aNo, which batchArgs fills with the batch's numbers in
// turn.

import "strings"

// inNos writes "col IN (?, …)" for n order numbers (each as numArg writes
// it for an integer column) and, where build.go's eq compares ids a second
// time as bytes (a host's columns, whose collation may fold case), "AND
// <col, by bytes> IN (<?, by bytes>, …)": the first list is the index
// lookup, the second keeps "ALICE" from matching "alice" (I10).
func (r *resolved) inNos(b *sb, col string, n int) {
	list := func(pre, post string) {
		b.w("(")
		for i := 0; i < n; i++ {
			if i > 0 {
				b.w(", ")
			}
			b.w(pre).p(aNo).w(post)
		}
		b.w(")")
	}
	b.w(col, " IN ")
	if r.raw.Orders.NumericOrderNo {
		pre, post, _ := strings.Cut(numArg(r.d, "?"), "?")
		list(pre, post)
	} else {
		list("", "")
	}
	if r.exactIDs && !r.raw.Orders.NumericOrderNo {
		b.w(" AND ")
		binCol(b, r.d, col)
		b.w(" IN (")
		for i := 0; i < n; i++ {
			if i > 0 {
				b.w(", ")
			}
			binVal(b, r.d, func() { b.p(aNo) })
		}
		b.w(")")
	}
}

// batchPending writes the condition of build.go's due compare-and-set for
// n orders: listed, pending, in the mapping's scope, due by the database's
// clock (alias "" or "o.").
func (r *resolved) batchPending(b *sb, alias string, n int) {
	r.inNos(b, alias+r.no, n)
	b.w(" AND ", alias, r.status, " = ", r.pending.sql)
	r.exactLit(b, alias+r.status, r.pending)
	r.conds(b, alias, r.where)
	b.w(" AND ")
	r.due(b, alias, false)
}

// batchPick reads, without locking, which of n listed orders are pending
// and due (MySQL only; "" elsewhere): see batchLock.
func (r *resolved) batchPick(n int) stmt {
	if r.d != MySQL {
		return stmt{}
	}
	b := (&sb{}).w("SELECT o.", r.no, " FROM ", r.o, " o WHERE ")
	r.batchPending(b, "o.", n)
	return b.done(r.d)
}

// batchLock locks the candidates of a batch (FOR UPDATE, where the dialect
// has it: SQLite's write transaction is the lock) and reads each one's
// number, user, show, deadline ms, the clock ms, on the library's schema
// its lock id, and 1 when it is pending and due under the lock (0: keep
// out of the batch).
//
// On MySQL it locks by number alone the orders batchPick found pending and
// due an instant before, and reads the guards under the lock. With the
// guards in a locking read's WHERE, InnoDB may range-scan the status index
// and lock every row it passes: other batches' due orders for an instant
// (two reconcilers, or one's workers, then skipped a run of due orders for
// a round: TestBatchTwoReconcilersRace), and a listed order not due for
// the whole batch (TestReviewBatchLockHoldsOrdersItDoesNotCancel). Locking
// all listed orders by number instead held the ones paid or extended since
// the listing for the batch's duration. InnoDB keeps the lock of every row
// a locking read examines, its WHERE rejected or not (a point lookup, or the
// row that ends a range, at READ COMMITTED too), so an order that changes
// between the pick and the lock is locked all the same: CancelDue then
// rolls back before its compare-and-set and picks again (errRepick).
// Elsewhere the WHERE keeps the guards and the flag is 1.
func (r *resolved) batchLock(n int) stmt {
	b := (&sb{}).w("SELECT o.", r.no, ", o.", r.user, ", o.", r.show, ", ", r.expireMS("o."), ", ", nowMS[r.d], ", ", r.ownLock("o."), ", ")
	if r.d == MySQL {
		b.w("CASE WHEN o.", r.status, " = ", r.pending.sql)
		r.exactLit(b, "o."+r.status, r.pending)
		b.w(" AND ")
		r.due(b, "o.", false)
		b.w(" THEN 1 ELSE 0 END FROM ", r.o, " o WHERE ")
		r.inNos(b, "o."+r.no, n)
		r.conds(b, "o.", r.where)
	} else {
		b.w("1 FROM ", r.o, " o WHERE ")
		r.batchPending(b, "o.", n)
	}
	if r.d != SQLite {
		// SKIP LOCKED (MariaDB 10.6, MySQL 8.0, PostgreSQL 9.5): an order
		// another transaction holds (a payment deciding it, a host's own
		// lock) is left to that transaction and to a later round. Waiting
		// for it would hold the locks this statement already took on the
		// orders before it, and MariaDB keeps a statement its client gave
		// up on running (and its locks held) until innodb_lock_wait_timeout,
		// so one stuck row would hold back its whole batch and then their
		// one-by-one retries.
		b.w(" FOR UPDATE SKIP LOCKED")
	}
	return b.done(r.d)
}

// batchCAS is the compare-and-set of a batch: the cancelled status (with
// the reason, the updated-at and version columns as build.go's set writes
// them) for the listed orders still pending and due.
func (r *resolved) batchCAS(n int) stmt {
	b := (&sb{}).w("UPDATE ", r.o)
	r.set(b, r.reason, aReason)
	b.w(" WHERE ")
	if r.d == MySQL {
		// The rows are the ones batchLock locked (still pending and due
		// under that lock): by their numbers alone, so that InnoDB reaches
		// them through the number's index. With the pending and due guards
		// it may range-scan the status index instead and wait on every
		// pending row it passes, another transaction's too (REPEATABLE
		// READ keeps the lock of each row an UPDATE examines).
		r.inNos(b, r.no, n)
		r.conds(b, "", r.where)
		return b.done(r.d)
	}
	r.batchPending(b, "", n)
	return b.done(r.d)
}

// batchSeats reads the live claims of n orders (number, seat), and
// batchRelease frees them as build.go's release does for one ("" without
// a claims table).
func (r *resolved) batchSeats(n int) stmt {
	if !r.claims {
		return stmt{}
	}
	b := (&sb{}).w("SELECT ", r.cNo, ", ", r.cSeat, " FROM ", r.c, " WHERE ")
	r.inNos(b, r.cNo, n)
	r.conds(b, "", r.cWhere)
	r.lockedOnly(b, "")
	b.w(" ORDER BY ", r.cNo, ", ", r.cSeat)
	return b.done(r.d)
}

func (r *resolved) batchRelease(n int) stmt {
	return r.releaseOf(func(b *sb) { r.inNos(b, r.cNo, n) })
}
