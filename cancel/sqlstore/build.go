package sqlstore

import (
	"strings"
)

// This file turns a resolved Mapping into the store's statements, once, in
// New. Every piece of SQL text is a literal of this file, a name the mapping
// validated and quoted (ident), a constant it validated (literal) or a
// number; what callers pass at run time is bound as arguments, by slot.

// slot names an argument of a statement; bind fills it from vals.
type slot uint8

const (
	aNo        slot = iota // the order number
	aUser                  // the user id (int64 with NumericUserID)
	aShow                  // the show id
	aSeat                  // a seat id
	aStatus                // the status written
	aReason                // the cancel reason
	aPayment               // the payment id
	aDeadline              // the deadline (or creation time) written, in the column's unit
	aKey                   // the Expired cursor's deadline key
	aShowKey               // the Claims cursor's show
	aSeatKey               // the Claims cursor's seat
	aLimit                 // a page size
	aSeats                 // the placement's seats as a list (the library's schema: oe_order.seats)
	aSeatLimit             // the placement's purchase limit (the library's schema: oe_order.seat_limit)
	aLockID                // the placement's seat lock id (the library's schema: oe_order.lock_id)
	aScope                 // the store's scope (Store.Scope): the key of its rows in the library's own tables
	aLead                  // a warning's lead, in milliseconds
	aPrevMS                // a deadline change: the deadline read, in milliseconds
	aTargetMS              // a deadline change: the new deadline, in milliseconds
	aNoKey                 // the order number as a string, in the library's own tables (aNo may be an integer)
	aPrevLock              // a side row's seat lock id as read ("" for none), for its compare-and-set
)

// vals are the run-time values of one call.
type vals struct {
	no, user, show, seat, reason, payment, showKey, seatKey, seats, lockID, scope, prevLock string
	userNum, showNum, showKeyNum                                                            int64
	status, deadline, key                                                                   any
	limit, seatLimit                                                                        int
	leadMS, prevMS, targetMS                                                                int64
}

// stmt is a statement and the arguments it takes, in order.
type stmt struct {
	sql   string
	slots []slot
}

// numeric says which id columns are integers (Orders.NumericUserID,
// NumericShowID, NumericOrderNo): their arguments are bound as int64.
type numeric struct{ user, show, no bool }

// numNo is an order number bound to an integer column: its int64, or NULL
// for one that is not the canonical decimal form of an int64 (NULL equals
// nothing, so no order is found). The first page of the expiry scan binds
// "" as NULL too: its key, the least there is, decides the row comparison
// before the number does (and an int64 sentinel overflows an INTEGER
// column on PostgreSQL).
func numNo(no string) any {
	if n, ok := canonicalInt(no); ok {
		return n
	}
	return nil
}

func (st stmt) args(v vals, num numeric) []any {
	out := make([]any, len(st.slots))
	for i, s := range st.slots {
		switch s {
		case aNo:
			if num.no {
				out[i] = numNo(v.no)
			} else {
				out[i] = v.no
			}
		case aNoKey:
			out[i] = v.no
		case aUser:
			if num.user {
				out[i] = v.userNum
			} else {
				out[i] = v.user
			}
		case aShow:
			if num.show {
				out[i] = v.showNum
			} else {
				out[i] = v.show
			}
		case aSeat:
			out[i] = v.seat
		case aStatus:
			out[i] = v.status
		case aReason:
			out[i] = v.reason
		case aPayment:
			out[i] = v.payment
		case aDeadline:
			out[i] = v.deadline
		case aKey:
			out[i] = v.key
		case aShowKey:
			if num.show {
				out[i] = v.showKeyNum
			} else {
				out[i] = v.showKey
			}
		case aSeatKey:
			out[i] = v.seatKey
		case aLimit:
			out[i] = v.limit
		case aSeats:
			out[i] = v.seats
		case aSeatLimit:
			out[i] = v.seatLimit
		case aLockID:
			out[i] = nullIfEmpty(v.lockID)
		case aScope:
			out[i] = v.scope
		case aLead:
			out[i] = v.leadMS
		case aPrevMS:
			out[i] = v.prevMS
		case aTargetMS:
			out[i] = v.targetMS
		case aPrevLock:
			out[i] = v.prevLock
		}
	}
	return out
}

// sb builds one statement: text with ? placeholders and their slots.
type sb struct {
	b     strings.Builder
	slots []slot
}

// w appends SQL text.
func (b *sb) w(parts ...string) *sb {
	for _, p := range parts {
		b.b.WriteString(p)
	}
	return b
}

// p appends a placeholder for s.
func (b *sb) p(s slot) *sb {
	b.b.WriteString("?")
	b.slots = append(b.slots, s)
	return b
}

func (b *sb) done(d Dialect) stmt {
	return stmt{sql: rebind(d, b.b.String()), slots: b.slots}
}

// queries are a store's statements, built by build.
type queries struct {
	now, order, cancel, cancelOwner, cancelDue, orderSeats, deleteSeats,
	pay, payOwner, sellSeats, insertOrder, insertSeat, expired, claims, overdue stmt
	// On MariaDB with claims a cancel deletes: DELETE … RETURNING the
	// seats and the order's columns, instead of a SELECT and a DELETE.
	deleteReturning stmt
	// On PostgreSQL: each transition as one statement (a data-modifying
	// CTE), "" elsewhere.
	cancelOne, cancelOwnerOne, cancelDueOne, payOne, payOwnerOne stmt
	// The Statuses query is statusesPre, the placeholders, statusesPost.
	statusesPre, statusesPost                                                                   string
	recordDiscrepancy, dueDiscrepancies, claimDiscrepancy, settleDiscrepancy, discrepancyExists string
	decidePayment, honouredGone                                                                 string
	insertSide                                                                                  stmt // a host's table: the side row of Place
	// A host's table whose rows the host inserts (HostWrites): the
	// read-back of what its rows placed, with the owner's compare-and-set's
	// conditions (hostOrder counts the order pending, of the user and show;
	// hostOrderText reads them as text for the error; hostClaims reads the
	// live claims' seats and whether each is of the show), and the side row
	// placed before them (hostOrderTaken: the number's row exists already;
	// hostSideLock, hostSideReplace: an old side row replaced by its lock id).
	hostOrder, hostOrderText, hostClaims, hostOrderTaken, hostSideLock, hostSideReplace stmt
	hostOrderLock                                                                       stmt // hostOrder's row, locked: finishEnded's claims of a committed order
	// A host's table: a late payment's compare-and-set (cancelled by a
	// timeout or the reconciler → paid; empty when the mapping cannot tell
	// those cancels from the others), the sold claims it inserts, and the
	// warning's compare-and-set on the side row.
	reinstate, insertSold, warnSide stmt
	// A host's table with a deadline column: a deadline moved later
	// (extend; extendDue of an order due already, for the timeout waiting
	// on the payment provider) or earlier (shorten), by compare-and-set.
	extend, extendDue, shorten, shortenNull stmt
	// createdMS reads the host's created-at column of an order, in epoch
	// milliseconds: the placement of an order without a side row, for the
	// maximum hold ("" when the mapping has no such column).
	createdMS stmt
}

// asText is column col as a read gives it to Go: on PostgreSQL cast to
// text, which drops a CHAR(n)'s padding (a padded status would be none of
// the mapping's, a padded payment id another payment) and keeps a varchar's
// trailing space (which SQL's comparisons keep too: 'NEW ' is not 'NEW').
// MySQL and SQLite return CHAR(n) unpadded already.
func asText(d Dialect, col string) string {
	if d == Postgres {
		return "CAST(" + col + " AS TEXT)"
	}
	return col
}

// numeric reports whether slot s is an id the mapping keeps in an integer
// column (NumericOrderNo, NumericUserID, NumericShowID).
func (r *resolved) numeric(s slot) bool {
	o := r.raw.Orders
	return s == aNo && o.NumericOrderNo || s == aUser && o.NumericUserID || s == aShow && o.NumericShowID
}

// numArg is placeholder ph compared with an integer id column: on
// PostgreSQL as a BIGINT, so that a number the column cannot hold (above
// 2^31-1 for an INTEGER) is a value no row has, not an error the driver
// gives before the statement runs (a message for it would be retried for
// ever). A btree index on an int2 or int4 column serves the int8
// comparison.
func numArg(d Dialect, ph string) string {
	if d == Postgres {
		return "CAST(" + ph + " AS BIGINT)"
	}
	return ph
}

// binCol writes column col as a byte-for-byte comparison (binVal) needs it:
// as it is on MySQL, where comparing a column with a binary string compares
// bytes; otherwise as binVal writes a value.
func binCol(b *sb, d Dialect, col string) {
	if d == MySQL {
		b.w(col)
		return
	}
	binVal(b, d, func() { b.w(col) })
}

// binVal writes the value val writes (a placeholder, a constant, a column)
// so that comparing it compares bytes, whatever the collation of the other
// side: MySQL's binary string, SQLite's blob, PostgreSQL's "C" collation
// (deterministic, byte order). Dialect differences are data here: the
// statements that use it are the same on every dialect.
func binVal(b *sb, d Dialect, val func()) {
	switch d {
	case Postgres:
		val()
		b.w(` COLLATE "C"`)
	case SQLite:
		b.w("CAST(")
		val()
		b.w(" AS BLOB)")
	default:
		b.w("CAST(")
		val()
		b.w(" AS BINARY)")
	}
}

// eq writes "col = ?" for an id, and over a host's columns (whose
// collation may fold case: MySQL's defaults, SQLite's NOCASE, a
// PostgreSQL nondeterministic collation) "col = ? AND <col = ?, by bytes>":
// the first comparison, in the column's collation, is the index lookup; the
// second, on the bytes, keeps "ALICE" from matching "alice" (I10).
func (r *resolved) eq(b *sb, col string, s slot) {
	b.w(col, " = ")
	if r.numeric(s) {
		b.w(numArg(r.d, "?")).slots = append(b.slots, s)
		return
	}
	b.p(s)
	if r.exactIDs && !(s == aUser && r.raw.Orders.NumericUserID) && !(s == aNo && r.raw.Orders.NumericOrderNo) {
		b.w(" AND ")
		binCol(b, r.d, col)
		b.w(" = ")
		binVal(b, r.d, func() { b.p(s) })
	}
}

// exactLit writes " AND <col = const, by bytes>" after the comparison of
// col with a string constant of the mapping (a status, a claim state) over
// a host's columns, whose collation may fold case and ignore trailing
// spaces: the host's 'new' or 'NEW ' is not the mapping's 'NEW' (I10). The
// first comparison keeps the index; nothing on the library's own schema.
func (r *resolved) exactLit(b *sb, col string, l lit) {
	if r.exactIDs && l.str {
		b.w(" AND ")
		binCol(b, r.d, col)
		b.w(" = ")
		binVal(b, r.d, func() { b.w(l.sql) })
	}
}

// conds writes " AND col = const" (or " AND col IS NULL") for each
// condition, columns prefixed by alias ("" or "o."), and compares a string
// constant a second time by bytes over a host's columns (exactLit).
func (r *resolved) conds(b *sb, alias string, cs []cond) {
	for _, c := range cs {
		if c.null {
			b.w(" AND ", alias, c.col, " IS NULL")
			continue
		}
		b.w(" AND ", alias, c.col, " = ", c.v.sql)
		if c.exact {
			b.w(" AND ")
			binCol(b, r.d, alias+c.col)
			b.w(" = ")
			binVal(b, r.d, func() { b.w(c.v.sql) })
		}
	}
}

// due is the guard "deadline <= now" (or "created <= now - window"),
// evaluated by the database in the statement, on the indexed column.
func (r *resolved) due(b *sb, alias string, sub bool) {
	col, now := r.deadline.Column, nowAs(r.d, r.deadline.Type, 0)
	if col == "" {
		col, now = r.created.Column, r.nowBack(r.created.Type)
	}
	if sub {
		// The clock in a scalar subquery is evaluated once, so the planner
		// can bound the index range with it (a volatile function in the
		// WHERE clause turns the bound into a filter on PostgreSQL).
		now = "(SELECT " + now + ")"
	}
	b.w(alias, col, " <= ", now)
}

// scanCol is the indexed time column of the expiry scan and its type.
func (r *resolved) scanCol() Time {
	if r.deadline.Column != "" {
		return r.deadline
	}
	return r.created
}

// expireMS reads the deadline as epoch ms (alias "" or "o.").
func (r *resolved) expireMS(alias string) string {
	if r.deadline.Column != "" {
		return asMS(r.d, r.deadline.Type, alias+r.deadline.Column, 0)
	}
	if r.windowSQL != "" {
		return "(" + asMS(r.d, r.created.Type, alias+r.created.Column, 0) + " + " + r.windowSQL + ")"
	}
	return asMS(r.d, r.created.Type, alias+r.created.Column, r.window)
}

// set writes the SET list of a transition: status, then the optional
// columns.
func (r *resolved) set(b *sb, extra string, s slot) {
	b.w(" SET ", r.status, " = ").p(aStatus)
	if extra != "" {
		b.w(", ", extra, " = ").p(s)
	}
	if r.updated != "" {
		b.w(", ", r.updated, " = ", nowAs(r.d, r.updatedType, 0))
	}
	if r.version != "" {
		b.w(", ", r.version, " = ", r.version, " + 1")
	}
}

// cas writes the compare-and-set UPDATE of a transition. extra/extraSlot is
// the reason or payment column ("" if unmapped); owner adds the user guard,
// due the deadline guard; pay takes an order in one of the mapping's Paying
// statuses too (the buyer is paying: payable, never cancelled by the
// library).
func (r *resolved) cas(b *sb, extra string, extraSlot slot, owner, due, pay bool) {
	b.w("UPDATE ", r.o)
	r.set(b, extra, extraSlot)
	b.w(" WHERE ")
	r.eq(b, r.no, aNo)
	if pay {
		r.statusIn(b, "", append([]lit{r.pending}, r.paying...))
	} else {
		r.statusIn(b, "", []lit{r.pending})
	}
	r.conds(b, "", r.where)
	if owner {
		b.w(" AND ")
		r.eq(b, r.user, aUser)
	}
	if due {
		b.w(" AND ")
		r.due(b, "", false)
	}
}

// lockedOnly writes the claims' state condition of a live claim (locked) for
// the transitions, with the alias.
func (r *resolved) lockedOnly(b *sb, alias string) {
	if r.cState != "" {
		b.w(" AND ", alias, r.cState, " = ", r.cLocked.sql)
		r.exactLit(b, alias+r.cState, *r.cLocked)
	}
}

// release writes what a cancel does to the order's claims ("" when there
// is nothing to do): delete them, or set the released state.
func (r *resolved) release() stmt {
	return r.releaseOf(func(b *sb) { r.eq(b, r.cNo, aNo) })
}

// releaseOf is release for the claims whose order number condition which
// writes (one order's, or a batch's IN list).
func (r *resolved) releaseOf(which func(b *sb)) stmt {
	if !r.claims {
		return stmt{}
	}
	b := &sb{}
	if r.cReleased != nil {
		b.w("UPDATE ", r.c, " SET ", r.cState, " = ", r.cReleased.sql, " WHERE ")
	} else {
		b.w("DELETE FROM ", r.c, " WHERE ")
	}
	which(b)
	r.conds(b, "", r.cWhere)
	if r.cReleased != nil {
		r.lockedOnly(b, "")
	}
	return b.done(r.d)
}

// sell writes what a payment does to the order's claims ("" for nothing).
func (r *resolved) sell() stmt {
	if !r.claims || r.cState == "" || r.cSold == nil {
		return stmt{}
	}
	b := &sb{}
	b.w("UPDATE ", r.c, " SET ", r.cState, " = ", r.cSold.sql, " WHERE ")
	r.eq(b, r.cNo, aNo)
	r.conds(b, "", r.cWhere)
	r.lockedOnly(b, "")
	return b.done(r.d)
}

// oneWithClaims is a transition as one PostgreSQL statement with a claims
// table: the compare-and-set, then, only if it matched (USING/FROM cas),
// what happens to the claims, returning the order and its seats (no row:
// the compare-and-set matched nothing). One statement is atomic by itself,
// and needs no BEGIN and COMMIT round trips.
func (r *resolved) oneWithClaims(extra string, extraSlot slot, owner, due, pay bool) stmt {
	b := &sb{}
	b.w("WITH cas AS (")
	r.cas(b, extra, extraSlot, owner, due, pay)
	b.w(" RETURNING ", r.user, " AS u, ", r.show, " AS sh, ", r.expireMS(""), " AS ex, ", nowMS[r.d], " AS nw, ")
	r.lock(b, "")
	b.w(" AS lk)")
	if pay {
		decide(b)
	}
	sells := r.cState != "" && r.cSold != nil
	switch {
	case !pay && r.cReleased == nil:
		b.w(", rel AS (DELETE FROM ", r.c, " c USING cas WHERE ")
	case !pay:
		b.w(", rel AS (UPDATE ", r.c, " c SET ", r.cState, " = ", r.cReleased.sql, " FROM cas WHERE ")
	case sells:
		b.w(", rel AS (UPDATE ", r.c, " c SET ", r.cState, " = ", r.cSold.sql, " FROM cas WHERE ")
	default:
		b.w(", rel AS (SELECT c.", r.cSeat, " AS seat FROM ", r.c, " c, cas WHERE ")
	}
	r.eq(b, "c."+r.cNo, aNo)
	r.conds(b, "c.", r.cWhere)
	if !pay || sells {
		r.lockedOnly(b, "c.")
		b.w(" RETURNING c.", r.cSeat, " AS seat)")
	} else {
		b.w(")")
	}
	b.w(" SELECT cas.u, cas.sh, cas.ex, cas.nw, rel.seat, cas.lk FROM cas LEFT JOIN rel ON TRUE ORDER BY rel.seat")
	return b.done(r.d)
}

// inserted are the constants an insert writes: its table's Where
// conditions, then its Fill.
func inserted(where, fill []cond) []cond {
	return append(where[:len(where):len(where)], fill...)
}

// claimsInsert is the INSERT of n claims of one order, one row per seat:
// placing then costs one round trip for its claims whatever their number.
// Each row's arguments are the slots of one seat (aSeat is that seat's id).
func (r *resolved) claimsInsert(d Dialect, n int) stmt {
	b := (&sb{}).w("INSERT INTO ", r.c, " (", r.cShow, ", ", r.cSeat, ", ", r.cNo)
	if r.cState != "" {
		b.w(", ", r.cState)
	}
	for _, c := range inserted(r.cWhere, r.cFill) {
		b.w(", ", c.col)
	}
	b.w(") VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.w(", ")
		}
		b.w("(").p(aShow).w(", ").p(aSeat).w(", ").p(aNo)
		if r.cState != "" {
			b.w(", ", r.cLocked.sql)
		}
		for _, c := range inserted(r.cWhere, r.cFill) {
			b.w(", ", c.v.sql)
		}
		b.w(")")
	}
	return b.done(d)
}

// build returns the store's statements for r.
func (r *resolved) build() queries {
	d := r.d
	var q queries
	q.now = (&sb{}).w("SELECT ", nowMS[d]).done(d)

	b := (&sb{}).w("SELECT ", r.user, ", ", r.show, ", ", asText(d, r.status), ", ", r.expireMS(""), ", ", nowMS[d], ", ")
	if r.payment != "" {
		b.w(asText(d, r.payment))
	} else {
		// No payment column: the payment that paid the order is its
		// decision row's (status 0), in this store's scope.
		b.w("(SELECT MIN(d.payment_id) FROM oe_payment_discrepancy d WHERE d.scope = ").p(aScope).w(" AND d.order_no = ").p(aNoKey).w(" AND d.status = 0)")
	}
	b.w(" FROM ", r.o, " WHERE ")
	r.eq(b, r.no, aNo)
	r.conds(b, "", r.where)
	q.order = b.done(d)

	tr := func(extra string, s slot, owner, due, pay bool) stmt {
		b := &sb{}
		r.cas(b, extra, s, owner, due, pay)
		return b.done(d)
	}
	q.cancel = tr(r.reason, aReason, false, false, false)
	q.cancelOwner = tr(r.reason, aReason, true, false, false)
	q.cancelDue = tr(r.reason, aReason, false, true, false)
	q.pay = tr(r.payment, aPayment, false, false, true)
	q.payOwner = tr(r.payment, aPayment, true, false, true)

	// One round trip for the order and its seats (NULL seat: none).
	b = (&sb{}).w("SELECT o.", r.user, ", o.", r.show, ", ", r.expireMS("o."), ", ", nowMS[d], ", ")
	if r.claims {
		b.w("s.", r.cSeat, ", ")
		r.lock(b, "o.")
		b.w(" FROM ", r.o, " o LEFT JOIN ", r.c, " s ON ")
		r.eq(b, "s."+r.cNo, aNo)
		r.conds(b, "s.", r.cWhere)
		r.lockedOnly(b, "s.")
		b.w(" WHERE ")
		r.eq(b, "o."+r.no, aNo)
		r.conds(b, "o.", r.where)
		b.w(" ORDER BY s.", r.cSeat)
	} else {
		// No claims table: the seats the order was placed with, as a
		// list (readForTransition splits it).
		r.sideSeats(b)
		b.w(", ")
		r.lock(b, "o.")
		b.w(" FROM ", r.o, " o WHERE ")
		r.eq(b, "o."+r.no, aNo)
		r.conds(b, "o.", r.where)
	}
	q.orderSeats = b.done(d)
	q.deleteSeats = r.release()
	if d == MySQL && r.claims && r.cReleased == nil {
		// MariaDB: the claims deleted and read in one statement, the
		// order's columns in scalar subqueries (MariaDB's DELETE RETURNING
		// takes no join); used only when the server says it is MariaDB.
		b := (&sb{}).w("DELETE FROM ", r.c, " WHERE ")
		r.eq(b, r.cNo, aNo)
		r.conds(b, "", r.cWhere)
		sub := func(expr string) {
			b.w("(SELECT ", expr, " FROM ", r.o, " o WHERE ")
			r.eq(b, "o."+r.no, aNo)
			r.conds(b, "o.", r.where)
			b.w(")")
		}
		b.w(" RETURNING ")
		sub("o." + r.user)
		b.w(", ")
		sub("o." + r.show)
		b.w(", ")
		sub(r.expireMS("o."))
		b.w(", ", nowMS[d], ", ", r.cSeat, ", ")
		if r.defaultSchema {
			sub("o.lock_id")
		} else {
			r.lock(b, "")
		}
		q.deleteReturning = b.done(d)
	}
	q.sellSeats = r.sell()

	if d == Postgres {
		q.cancelOne = r.oneOrPlain(r.reason, aReason, false, false, false)
		q.cancelOwnerOne = r.oneOrPlain(r.reason, aReason, true, false, false)
		q.cancelDueOne = r.oneOrPlain(r.reason, aReason, false, true, false)
		q.payOne = r.oneOrPlain(r.payment, aPayment, false, false, true)
		q.payOwnerOne = r.oneOrPlain(r.payment, aPayment, true, false, true)
	}

	// Place.
	b = (&sb{}).w("INSERT INTO ", r.o, " (", r.no, ", ", r.user, ", ", r.show, ", ", r.status)
	if r.deadline.Column != "" {
		b.w(", ", r.deadline.Column)
		if r.created.Column != "" {
			b.w(", ", r.created.Column)
		}
	} else {
		b.w(", ", r.created.Column)
	}
	if r.updated != "" {
		b.w(", ", r.updated)
	}
	if r.defaultSchema {
		b.w(", seats, seat_limit, lock_id") // what a late payment reinstates, its limit (late.go), the seat lock
	}
	for _, c := range inserted(r.where, r.fill) {
		b.w(", ", c.col)
	}
	b.w(") VALUES (").p(aNo).w(", ").p(aUser).w(", ").p(aShow).w(", ", r.pending.sql, ", ")
	if r.deadline.Column != "" {
		fromArg(d, r.deadline.Type, b, aDeadline)
		if r.created.Column != "" {
			b.w(", ", nowAs(d, r.created.Type, 0))
		}
	} else {
		r.createdFrom(b, r.created.Type, aDeadline)
	}
	if r.updated != "" {
		b.w(", ", nowAs(d, r.updatedType, 0))
	}
	if r.defaultSchema {
		b.w(", ").p(aSeats).w(", ").p(aSeatLimit).w(", ").p(aLockID)
	}
	for _, c := range inserted(r.where, r.fill) {
		b.w(", ", c.v.sql)
	}
	q.insertOrder = b.w(")").done(d)
	if !r.defaultSchema {
		// The order pending, of the user and show, as the owner's
		// compare-and-set compares them.
		placed := func(b *sb) *sb {
			r.eq(b, r.no, aNo)
			r.conds(b, "", r.where)
			r.statusIn(b, "", []lit{r.pending})
			b.w(" AND ")
			r.eq(b, r.user, aUser)
			b.w(" AND ")
			r.eq(b, r.show, aShow)
			return b
		}
		q.hostOrder = placed((&sb{}).w("SELECT COUNT(*) FROM ", r.o, " WHERE ")).done(d)
		b = placed((&sb{}).w("SELECT 1 FROM ", r.o, " WHERE "))
		if d != SQLite {
			b.w(" FOR UPDATE") // SQLite's writers are one at a time already
		}
		q.hostOrderLock = b.done(d)
		b = (&sb{}).w("SELECT ", asText(d, r.user), ", ", asText(d, r.show), ", ", asText(d, r.status), " FROM ", r.o, " WHERE ")
		r.eq(b, r.no, aNo)
		r.conds(b, "", r.where)
		q.hostOrderText = b.done(d)
		if r.claims {
			b = (&sb{}).w("SELECT ", asText(d, "s."+r.cSeat), ", CASE WHEN ")
			r.eq(b, "s."+r.cShow, aShow)
			b.w(" THEN 1 ELSE 0 END FROM ", r.c, " s WHERE ")
			r.eq(b, "s."+r.cNo, aNo)
			r.conds(b, "s.", r.cWhere)
			r.lockedOnly(b, "s.")
			q.hostClaims = b.done(d)
		}
		q.reinstate = r.reinstateCAS()
		q.warnSide = r.warnSide()
		if r.deadline.Column != "" {
			q.extend, q.shorten, q.shortenNull = r.moveDeadline(true), r.moveDeadline(false), r.shortenNull()
			q.extendDue = r.extendDue()
			if r.created.Column != "" {
				// An order the host inserted itself has no side row: its
				// placement is then the host's own created-at column.
				b = (&sb{}).w("SELECT ", asMS(d, r.created.Type, r.created.Column, 0), " FROM ", r.o, " WHERE ")
				r.eq(b, r.no, aNo)
				r.conds(b, "", r.where)
				q.createdMS = b.done(d)
			}
		}
		if r.claims {
			b = (&sb{}).w("INSERT INTO ", r.c, " (", r.cShow, ", ", r.cSeat, ", ", r.cNo)
			if r.cState != "" {
				b.w(", ", r.cState)
			}
			for _, c := range inserted(r.cWhere, r.cFill) {
				b.w(", ", c.col)
			}
			b.w(") VALUES (").p(aShow).w(", ").p(aSeat).w(", ").p(aNo)
			switch { // sold where the claims have a sold state, else live
			case r.cSold != nil:
				b.w(", ", r.cSold.sql)
			case r.cState != "":
				b.w(", ", r.cLocked.sql)
			}
			for _, c := range inserted(r.cWhere, r.cFill) {
				b.w(", ", c.v.sql)
			}
			q.insertSold = b.w(")").done(d)
		}
		// What the host's table lacks, kept beside it (oe_order_side):
		// the seats, the limit and the seat lock, for the order's scope.
		// An old row of a number the host deleted is replaced.
		b = (&sb{}).w("INSERT INTO oe_order_side (scope, order_no, seats, seat_limit, lock_id, created_at_ms) VALUES (").
			p(aScope).w(", ").p(aNoKey).w(", ").p(aSeats).w(", ").p(aSeatLimit).w(", ").p(aLockID).w(", ", nowMS[d], ")")
		switch {
		case len(r.hostFill) > 0:
			// The host's rows insert the order row after the side row, so
			// the side row of a number another order holds must never be
			// replaced (a double submit whose host insert skips a
			// duplicate would take over the first order's seats and
			// lock): a plain INSERT (a duplicate: cancel.ErrOrderExists),
			// or, over the old row of a number no order holds, a
			// compare-and-set on that row's lock id (hostSideReplace),
			// which a concurrent submit that replaced it first fails.
			o := (&sb{}).w("SELECT COUNT(*) FROM ", r.o, " WHERE ")
			r.eq(o, r.no, aNo)
			r.conds(o, "", r.where)
			q.hostOrderTaken = o.done(d)
			q.hostSideLock = (&sb{}).w("SELECT COALESCE(lock_id, '') FROM oe_order_side WHERE scope = ").p(aScope).w(" AND order_no = ").p(aNoKey).done(d)
			q.hostSideReplace = (&sb{}).w("UPDATE oe_order_side SET seats = ").p(aSeats).w(", seat_limit = ").p(aSeatLimit).w(", lock_id = ").p(aLockID).
				w(", created_at_ms = ", nowMS[d], ", warned_at_ms = NULL WHERE scope = ").p(aScope).w(" AND order_no = ").p(aNoKey).
				w(" AND COALESCE(lock_id, '') = ").p(aPrevLock).done(d)
		case d == MySQL:
			b.w(" ON DUPLICATE KEY UPDATE seats = VALUES(seats), seat_limit = VALUES(seat_limit), lock_id = VALUES(lock_id), created_at_ms = VALUES(created_at_ms), warned_at_ms = NULL")
		default:
			b.w(" ON CONFLICT (scope, order_no) DO UPDATE SET seats = excluded.seats, seat_limit = excluded.seat_limit, lock_id = excluded.lock_id, created_at_ms = excluded.created_at_ms, warned_at_ms = NULL")
		}
		q.insertSide = b.done(d)
	}
	if r.claims {
		q.insertSeat = r.claimsInsert(d, 1)

		// Claims of pending and paid orders, keyset on (show, seat).
		// The claim's order number as the expired scan reads it (as text:
		// a CHAR(n)'s padding dropped, a host's "X1 " kept, then reported
		// unreadable by the reconciler rather than trimmed into "X1").
		b = (&sb{}).w("SELECT s.", r.cShow, ", s.", r.cSeat, ", ", asText(d, "s."+r.cNo), ", o.", r.user, ", ", asText(d, "o."+r.status), ", ", r.ownLock("o."),
			" FROM ", r.c, " s JOIN ", r.o, " o ON o.", r.no, " = s.", r.cNo)
		if r.exactIDs && !r.raw.Orders.NumericOrderNo {
			b.w(" AND ")
			binCol(b, d, "o."+r.no)
			b.w(" = ")
			binVal(b, d, func() { b.w("s." + r.cNo) })
		}
		r.conds(b, "o.", r.where)
		b.w(" WHERE ")
		after(b, d, "s."+r.cShow, "s."+r.cSeat, "?", aShowKey, aSeatKey)
		r.conds(b, "s.", r.cWhere)
		if r.cState != "" {
			b.w(" AND s.", r.cState, " IN (", r.cLocked.sql)
			if r.cSold != nil {
				b.w(", ", r.cSold.sql)
			}
			b.w(")")
			if r.exactIDs && r.cLocked.str {
				b.w(" AND ")
				binCol(b, d, "s."+r.cState)
				b.w(" IN (")
				binVal(b, d, func() { b.w(r.cLocked.sql) })
				if r.cSold != nil {
					b.w(", ")
					binVal(b, d, func() { b.w(r.cSold.sql) })
				}
				b.w(")")
			}
		}
		b.w(" ORDER BY s.", r.cShow, ", s.", r.cSeat, " LIMIT ").p(aLimit)
		q.claims = b.done(d)
	}

	// The expiry scan: pending, due, after the cursor, on the index.
	// The order number as the column holds it, but for a CHAR(n)'s padding:
	// MySQL drops that on read, and PostgreSQL's cast of bpchar to text
	// does, where varchar's trailing blank stays. A number a host wrote
	// with one ("X1 ") is then read as it is, an id the reconciler reports
	// unreadable, not trimmed into the number of no row.
	sc := r.scanCol()
	b = (&sb{}).w("SELECT ", asText(d, r.no), ", ", keyOf(d, sc.Type, sc.Column), " FROM ", r.o, " WHERE ", r.status, " = ", r.pending.sql)
	r.exactLit(b, r.status, r.pending)
	r.conds(b, "", r.where)
	b.w(" AND ")
	r.due(b, "", true)
	b.w(" AND ")
	after(b, d, sc.Column, r.no, keyArg(d, sc.Type), aKey, aNo)
	b.w(" ORDER BY ", sc.Column, ", ", r.no, " LIMIT ").p(aLimit)
	q.expired = b.done(d)

	// Overdue: the same range, counted, and its oldest deadline. On
	// PostgreSQL the clock is statement_timestamp(), stable, so the planner
	// sees its value and estimates the range (a clock in a subquery is a
	// parameter it cannot see: it guesses a third of the table, and scans
	// the table). A gauge decides nothing, so the statement's start is now
	// enough; the guard of a cancel keeps clock_timestamp().
	if d == Postgres {
		col, now := r.deadline.Column, nowAs(d, r.deadline.Type, 0)
		if col == "" {
			col, now = r.created.Column, r.nowBack(r.created.Type)
		}
		b = (&sb{}).w("SELECT COUNT(*), MIN(", r.expireMS(""), "), ", stable(nowMS[d]), " FROM ", r.o, " WHERE ", r.status, " = ", r.pending.sql)
		r.conds(b, "", r.where)
		b.w(" AND ", col, " <= ", stable(now))
	} else {
		b = (&sb{}).w("SELECT COUNT(*), MIN(", r.expireMS(""), "), (SELECT ", nowMS[d], ") FROM ", r.o, " WHERE ", r.status, " = ", r.pending.sql)
		r.exactLit(b, r.status, r.pending)
		r.conds(b, "", r.where)
		b.w(" AND ")
		r.due(b, "", true)
	}
	q.overdue = b.done(d)

	// Statuses: each order's status and, with an updated-at column, the
	// milliseconds since its last write by the database's clock.
	age := "NULL"
	if r.updated != "" {
		age = "(" + nowMS[d] + " - " + asMS(d, r.updatedType, r.updated, 0) + ")"
	}
	q.statusesPre = "SELECT " + r.no + ", " + asText(d, r.status) + ", " + age + ", " + r.show + ", " + r.ownLock("") + ", " + r.ownSeats() + " FROM " + r.o + " WHERE " + r.no + " IN ("
	b = &sb{}
	r.conds(b, "", r.where)
	q.statusesPost = ")" + b.b.String()
	return q
}

// oneOrPlain is the single-statement transition on PostgreSQL, with or
// without a claims table.
func (r *resolved) oneOrPlain(extra string, s slot, owner, due, pay bool) stmt {
	if !r.claims {
		b := &sb{}
		b.w("WITH cas AS (")
		r.cas(b, extra, s, owner, due, pay)
		b.w(" RETURNING ", r.user, " AS u, ", r.show, " AS sh, ", r.expireMS(""), " AS ex, ", nowMS[r.d], " AS nw, ")
		r.sideSeats(b)
		b.w(" AS st, ")
		r.lock(b, "")
		b.w(" AS lk)")
		if pay {
			decide(b)
		}
		b.w(" SELECT cas.u, cas.sh, cas.ex, cas.nw, cas.st, cas.lk FROM cas")
		return b.done(r.d)
	}
	return r.oneWithClaims(extra, s, owner, due, pay)
}

// decide writes a payment's decision row (PostgreSQL, after the cas CTE):
// the payment id recorded as honoured in oe_payment_discrepancy, only if the
// compare-and-set matched, for the order's user (empty for a NULL one, as the
// other paths write it). Its primary key refuses an id decided before
// (refunded, or another order's payment) with a unique violation, which
// aborts the whole statement: the order is not paid then.
func decide(b *sb) {
	b.w(", dec AS (INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) SELECT ").
		p(aPayment).w(", ").p(aScope).w(", ").p(aNoKey).w(", COALESCE(CAST(cas.u AS VARCHAR(64)), ''), 0, cas.nw, cas.nw, cas.nw FROM cas)")
}

// after writes the keyset condition "(a, b) > (x, ?)" in the form the
// dialect's planner turns into an index range that starts at the cursor; x
// is the SQL of the first argument (a placeholder, or a conversion of one).
//
// PostgreSQL and SQLite take the row value as one index condition. On
// PostgreSQL the OR form is a filter over the index from its start (a page
// of 200 from the middle of 100k claims read 37701 rows, so a rebuild was
// quadratic); SQLite scans the whole index with it. MySQL/MariaDB do the
// opposite: the range optimizer splits the OR form into ranges that start at
// the cursor, while the row value is a full index scan (MariaDB 10.11: 200
// rows read against 50700). TestClaimsMiddlePageIsARange checks each.
func after(b *sb, d Dialect, a, c, x string, sa, sc slot) {
	xs := func() {
		pre, post, _ := strings.Cut(x, "?")
		b.w(pre).p(sa).w(post)
	}
	if d == MySQL {
		b.w("(", a, " > ")
		xs()
		b.w(" OR (", a, " = ")
		xs()
		b.w(" AND ", c, " > ").p(sc).w("))")
		return
	}
	b.w("(", a, ", ", c, ") > (")
	xs()
	b.w(", ").p(sc).w(")")
}
