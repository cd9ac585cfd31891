// The statements of the optional transitions (late.go): a late payment's
// reinstatement, a moved deadline, the warned flag, and the side table of a
// mapped store.

package sqlstore

import (
	"github.com/seatflow/orderexpiry/cancel"
)

// reinstateCAS is a late payment's compare-and-set on a host's table: a
// cancelled order, cancelled by its timeout or the reconciler, becomes
// paid. Which cancels those were is told by statuses (Statuses.CancelledBy)
// that no other cancel writes, or else by the cancel reason column; a
// mapping with neither gives an empty statement (the store cannot
// reinstate: a late payment is refunded).
func (r *resolved) reinstateCAS() stmt {
	late := []cancel.Reason{cancel.ReasonTimeout, cancel.ReasonReconcile}
	key := func(reason cancel.Reason) string {
		if v, ok := r.by[reason]; ok {
			return v.key
		}
		return r.cancelled[0].key
	}
	byStatus := true
	for _, other := range []cancel.Reason{cancel.ReasonUser, cancel.ReasonExpireNow} {
		byStatus = byStatus && key(other) != key(late[0]) && key(other) != key(late[1])
	}
	if !byStatus && r.reason == "" {
		return stmt{}
	}
	b := &sb{}
	b.w("UPDATE ", r.o)
	r.set(b, r.payment, aPayment)
	b.w(" WHERE ")
	r.eq(b, r.no, aNo)
	r.conds(b, "", r.where)
	if !byStatus {
		r.statusIn(b, "", r.cancelled)
		b.w(" AND ", r.reason, " IN ('timeout', 'reconcile')")
		return b.done(r.d)
	}
	// The statuses of the late reasons, each once.
	var ls []lit
	for i, reason := range late {
		if i > 0 && key(reason) == key(late[0]) {
			continue
		}
		if v, ok := r.by[reason]; ok {
			ls = append(ls, v)
		} else {
			ls = append(ls, r.cancelled[0])
		}
	}
	r.statusIn(b, "", ls)
	return b.done(r.d)
}

// statusIn writes " AND status IN (ls…)" for a statement that finds its
// row by the order number (alias "" or "o."), and on MySQL over a host's
// column the same compared as bytes: a status differing only by case or
// trailing space is not the mapping's (I10, as exactLit).
//
// On MySQL the status is compared as an expression (status + 0, or
// CONCAT(status) for strings), which no index range can use, so InnoDB
// reaches the row by the number's index alone. Compared plainly, MariaDB's
// planner takes the status index when few orders are pending (the two
// ranges estimate one row each) and range-scans it, locking, or waiting on,
// every pending row it passes: a payment then waited on another order's
// row that a stuck batch, or the host, held (I12,
// TestReview6PaymentWaitsOnAStuckBatch).
func (r *resolved) statusIn(b *sb, alias string, ls []lit) {
	list := func() {
		for i, l := range ls {
			if i > 0 {
				b.w(", ")
			}
			b.w(l.sql)
		}
		b.w(")")
	}
	str := true
	for _, l := range ls {
		str = str && l.str
	}
	switch {
	case r.d != MySQL:
		b.w(" AND ", alias, r.status, " IN (")
	case str:
		b.w(" AND CONCAT(", alias, r.status, ") IN (")
	default:
		b.w(" AND ", alias, r.status, " + 0 IN (")
	}
	list()
	if r.exactIDs && str {
		b.w(" AND ")
		// The column as bytes on every dialect (binCol leaves MySQL's
		// column as it is, for an index to use): no index range here.
		binVal(b, r.d, func() { b.w(alias, r.status) })
		b.w(" IN (")
		for i, l := range ls {
			if i > 0 {
				b.w(", ")
			}
			binVal(b, r.d, func() { b.w(l.sql) })
		}
		b.w(")")
	}
}

// moveDeadline is a deadline change's compare-and-set on a host's table: the
// deadline column set to the new deadline (an argument in the column's
// unit, aDeadline), on a pending order whose deadline is still the one read
// (aPrevMS) and not due by the database's clock; an extension only to a
// later deadline than the current (aTargetMS), a shortening only to an
// earlier one.
func (r *resolved) moveDeadline(later bool) stmt {
	b := r.setDeadline()
	b.w(" AND ", r.expireMS(""), " = ").p(aPrevMS).w(" AND ", r.expireMS(""), " > ", nowMS[r.d], " AND ", r.expireMS(""))
	if later {
		b.w(" < ").p(aTargetMS)
	} else {
		b.w(" > ").p(aTargetMS)
	}
	return b.done(r.d)
}

// extendDue is an extension's compare-and-set without the not-yet-due
// guard: the timeout re-arms a due order while the payment provider cannot
// say whether its buyer paid (cancel.DeadlineChange.Due). The deadline read
// must still be there (a NULL never equals it) and the new one later.
func (r *resolved) extendDue() stmt {
	b := r.setDeadline()
	b.w(" AND ", r.expireMS(""), " = ").p(aPrevMS).w(" AND ", r.expireMS(""), " < ").p(aTargetMS)
	return b.done(r.d)
}

// shortenNull is a shortening's compare-and-set on a host's table for an
// order with no deadline (NULL: an operator's hand-made order, never due):
// any deadline is earlier, so it sets one, on a pending order whose
// deadline is still NULL.
func (r *resolved) shortenNull() stmt {
	b := r.setDeadline()
	b.w(" AND ", r.deadline.Column, " IS NULL")
	return b.done(r.d)
}

// setDeadline is the head of a deadline change's compare-and-set: the
// deadline column set to aDeadline (updated-at and version with it), on
// the pending order of that number in the store's scope.
func (r *resolved) setDeadline() *sb {
	b := &sb{}
	b.w("UPDATE ", r.o, " SET ", r.deadline.Column, " = ")
	fromArg(r.d, r.deadline.Type, b, aDeadline)
	if r.updated != "" {
		b.w(", ", r.updated, " = ", nowAs(r.d, r.updatedType, 0))
	}
	if r.version != "" {
		b.w(", ", r.version, " = ", r.version, " + 1")
	}
	b.w(" WHERE ")
	r.eq(b, r.no, aNo)
	r.conds(b, "", r.where)
	r.statusIn(b, "", []lit{r.pending})
	return b
}

// warnSide is the warning's compare-and-set on a host's table: the side
// row's warned_at_ms, NULL to the database's clock, while the order is
// pending, due within the lead and not yet due by that clock.
func (r *resolved) warnSide() stmt {
	b := &sb{}
	b.w("UPDATE oe_order_side SET warned_at_ms = ", nowMS[r.d], " WHERE scope = ").p(aScope).w(" AND order_no = ").p(aNoKey).
		w(" AND warned_at_ms IS NULL AND EXISTS (SELECT 1 FROM ", r.o, " o WHERE ")
	r.eq(b, "o."+r.no, aNo)
	r.conds(b, "o.", r.where)
	r.statusIn(b, "o.", []lit{r.pending})
	b.w(" AND ", r.expireMS("o."), " > ", nowMS[r.d], " AND ", r.expireMS("o."), " <= ", nowMS[r.d], " + ").p(aLead).w(")")
	return b.done(r.d)
}

// ownLock is the order's seat lock id column of the library's schema with
// its table prefix, or NULL on a host's table (the caller reads the side
// table: Store.sideLocks).
func (r *resolved) ownLock(prefix string) string {
	if r.defaultSchema {
		return prefix + "lock_id"
	}
	return "NULL"
}

// ownSeats is the seats column of the library's schema (the seats an order
// was placed with), or NULL on a host's table (Store.sideRows reads them).
func (r *resolved) ownSeats() string {
	if r.defaultSchema {
		return "seats"
	}
	return "NULL"
}

// lock writes the order's seat lock id: oe_order.lock_id (with its table
// prefix), or on a host's table the side table's, for the order number
// argument.
func (r *resolved) lock(b *sb, prefix string) {
	if r.defaultSchema {
		b.w(prefix, "lock_id")
		return
	}
	r.side(b, "lock_id")
}

// sideSeats writes the seats the order was placed with, as a list: on a
// host's table, from the side table; NULL on the library's (its seats are
// claims).
func (r *resolved) sideSeats(b *sb) {
	if r.defaultSchema {
		b.w("NULL")
		return
	}
	r.side(b, "seats")
}

// side writes a scalar subquery of oe_order_side's column col (a literal
// of this file) for the order number argument in the store's scope.
func (r *resolved) side(b *sb, col string) {
	b.w("(SELECT sd.", col, " FROM oe_order_side sd WHERE sd.scope = ").p(aScope).w(" AND sd.order_no = ").p(aNoKey).w(")")
}
