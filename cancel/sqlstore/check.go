package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
)

// ErrMapping is wrapped by Check's error when the live tables do not match
// the store's Mapping: a table, a column or an index is missing, or a
// column's type cannot hold what the mapping says.
var ErrMapping = errors.New("sqlstore: the tables do not match the mapping")

// Check verifies the store's Mapping against the live database, so that a
// host learns at startup, not at the first expiry: every mapped table and
// column exists with a usable type (ids strings, statuses and conditions of
// their values' kind, time columns of their TimeType, epoch milliseconds in
// 64 bits), the expiry scan has its index (status, then the deadline or
// creation column, then the order number; the Where columns may lead, and
// InnoDB's implicit primary-key suffix counts), the order number is unique
// (alone or with the Where columns), and the claims table has an index
// leading with its order number and a unique key on (show, seat) (with the
// Where columns; with a State column any unique key holding them, partial
// or with a generated column, is accepted: live claims must be unique, old
// ones may repeat). It names, per table, the NOT NULL columns without a
// default that no insert of the store writes (neither mapped nor a Where or
// Fill column; keys the database fills and generated columns aside), on
// which the first Place would fail, and every Fill column the table lacks.
// It also checks that the library's own table
// oe_payment_discrepancy exists (Migrate creates it), keyed by (scope,
// payment_id), and holds no scope of records that are most likely this
// store's own under another scope (its Where changed, or they predate
// scopes; see checkMovedScope and Orders.PreviousScopes). The error wraps
// ErrMapping and names every problem found, one per line.
func (s *Store) Check(ctx context.Context) error {
	r := s.m
	o := r.raw.Orders
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Errorf(format, a...).Error()) }
	var scopeCols []string // the Where columns the order number is unique with (none: unique alone)

	ocols, oidx, err := s.describe(ctx, o.Table)
	if err != nil {
		return fmt.Errorf("sqlstore: check: %w", err)
	}
	if len(ocols) == 0 {
		bad("orders table %s does not exist", o.Table)
	} else if err := s.checkScopeSpelling(ctx, o.Table, bad); err != nil {
		return fmt.Errorf("sqlstore: check: %w", err)
	} else {
		want := func(what, col, class string) {
			if col == "" {
				return
			}
			t, ok := ocols[col]
			if !ok {
				bad("orders table %s has no %s column %s", o.Table, what, col)
				return
			}
			if got := typeClass(s.dialect, t); !classOK(class, got, t) {
				bad("orders column %s.%s (%s): is %s (%s), the mapping needs %s", o.Table, col, what, t, got, class)
			}
		}
		want("order number", o.OrderNo, idClass(o.NumericOrderNo))
		if o.NumericUserID {
			want("user", o.UserID, "integer")
		} else {
			want("user", o.UserID, "string")
		}
		want("show", o.ShowID, idClass(o.NumericShowID))
		want("status", o.Status, kindClass(r.pending))
		want("deadline", o.Deadline.Column, timeClass(s.dialect, o.Deadline.Type))
		want("created-at", o.CreatedAt.Column, timeClass(s.dialect, o.CreatedAt.Type))
		want("updated-at", o.UpdatedAt.Column, timeClass(s.dialect, o.UpdatedAt.Type))
		want("cancel reason", o.CancelReason, "string")
		if n, ok := charLen(ocols[o.CancelReason]); o.CancelReason != "" && ok && n < cancel.MaxReasonLen {
			bad("orders column %s.%s (cancel reason) holds %d characters: the library writes reasons of up to %d", o.Table, o.CancelReason, n, cancel.MaxReasonLen)
		}
		want("payment id", o.PaymentID, "string")
		want("version", o.Version, "integer")
		var whereCols, uniqueCols []string
		for _, c := range r.where {
			if !c.null { // IS NULL: any type
				want("condition", c.name, kindClass(c.v))
				uniqueCols = append(uniqueCols, c.name) // NULLs are distinct in a unique key
			}
			whereCols = append(whereCols, c.name)
		}
		scan := o.Deadline.Column
		if scan == "" {
			scan = o.CreatedAt.Column
		}
		exist := func(cols map[string]string, names ...string) bool {
			for _, n := range names {
				if _, ok := cols[n]; !ok {
					return false // named as missing above; no index can hold it
				}
			}
			return true
		}
		if exist(ocols, append([]string{o.Status, scan, o.OrderNo}, whereCols...)...) && !hasIndex(oidx, whereCols, []string{o.Status}, []string{scan, o.OrderNo}, false) {
			bad("orders table %s: no index serves the expiry scan: want one on (%s, %s, %s), the condition columns %v may lead", o.Table, o.Status, scan, o.OrderNo, whereCols)
		}
		if !hasUnique(oidx, []string{o.OrderNo}, nil) {
			scopeCols = uniqueWith(oidx, o.OrderNo, uniqueCols)
		}
		if exist(ocols, append([]string{o.OrderNo}, uniqueCols...)...) && !hasUnique(oidx, []string{o.OrderNo}, uniqueCols) {
			bad("orders table %s: the order number %s is not unique: want a unique key on (%s) (the condition columns %v may join it)", o.Table, o.OrderNo, o.OrderNo, uniqueCols)
		}
		for _, c := range o.Fill {
			if _, ok := ocols[c.Column]; !ok {
				bad("orders table %s has no fill column %s", o.Table, c.Column)
			}
		}
		if err := s.checkUnfilled(ctx, "orders", "Orders", o.Table, r.writes, bad); err != nil {
			return fmt.Errorf("sqlstore: check: %w", err)
		}
	}

	if c := r.raw.Claims; c != nil {
		ccols, cidx, err := s.describe(ctx, c.Table)
		if err != nil {
			return fmt.Errorf("sqlstore: check: %w", err)
		}
		if len(ccols) == 0 {
			bad("claims table %s does not exist", c.Table)
		} else {
			want := func(what, col, class string) {
				if col == "" {
					return
				}
				t, ok := ccols[col]
				if !ok {
					bad("claims table %s has no %s column %s", c.Table, what, col)
					return
				}
				if got := typeClass(s.dialect, t); !classOK(class, got, t) {
					bad("claims column %s.%s (%s): is %s (%s), the mapping needs %s", c.Table, col, what, t, got, class)
				}
			}
			want("show", c.ShowID, idClass(o.NumericShowID))
			want("seat", c.SeatID, "string")
			want("order number", c.OrderNo, idClass(o.NumericOrderNo))
			if r.cLocked != nil {
				want("state", c.State, kindClass(*r.cLocked))
			}
			var whereCols []string
			for _, w := range r.cWhere {
				if !w.null {
					want("condition", w.name, kindClass(w.v))
				}
				whereCols = append(whereCols, w.name)
			}
			for _, f := range c.Fill {
				if _, ok := ccols[f.Column]; !ok {
					bad("claims table %s has no fill column %s", c.Table, f.Column)
				}
			}
			if err := s.checkUnfilled(ctx, "claims", "Claims", c.Table, r.cWrites, bad); err != nil {
				return fmt.Errorf("sqlstore: check: %w", err)
			}
			_, hasNo := ccols[c.OrderNo]
			if hasNo && !hasIndex(cidx, whereCols, nil, []string{c.OrderNo}, true) {
				bad("claims table %s: no index leads with the order number %s (a cancel reads and frees an order's claims by it)", c.Table, c.OrderNo)
			}
			_, hasShow := ccols[c.ShowID]
			_, hasSeat := ccols[c.SeatID]
			if hasShow && hasSeat {
				if err := s.checkLiveClaimKey(ctx, c, cidx, bad); err != nil {
					return fmt.Errorf("sqlstore: check: %w", err)
				}
			}
			// Order numbers unique per scope only (per tenant): the claims
			// must be scoped the same way, or a cancel of one tenant's order
			// frees another tenant's claims of the same number (I16).
			for _, oc := range r.where {
				if oc.null || !slices.Contains(scopeCols, oc.name) {
					continue
				}
				scoped := false
				for _, cc := range r.cWhere {
					scoped = scoped || !cc.null && cc.v.key == oc.v.key
				}
				if !scoped {
					bad("claims table %s: the orders are scoped by %s = %s and their numbers are unique only with it, but the claims have no condition for that scope: a cancel of one scope's order would free another scope's claims of the same number (I16); add a Claims.Where on the claims' own column holding %s, or make the order number unique alone", c.Table, oc.name, oc.v.sql, oc.v.sql)
				}
			}
		}
	}
	if err := s.checkWindow(ctx, bad); err != nil {
		return fmt.Errorf("sqlstore: check: %w", err)
	}
	dcols, _, err := s.describe(ctx, "oe_payment_discrepancy")
	if err != nil {
		return fmt.Errorf("sqlstore: check: %w", err)
	}
	if _, ok := dcols["payment_id"]; !ok {
		bad("the library's table oe_payment_discrepancy does not exist: run Migrate (it creates only that table) or apply its statements from Schema")
	} else if n, err := s.discrepancyKeyColumns(ctx); err != nil {
		return fmt.Errorf("sqlstore: check: %w", err)
	} else if n != 2 {
		// A table of an earlier version, which CREATE TABLE IF NOT EXISTS
		// leaves as it is: its key decides a payment id across scopes.
		bad("the library's table oe_payment_discrepancy is keyed by payment_id alone (an earlier version's): payment ids are per scope, so run Migrate, which re-keys it by (scope, payment_id)")
	} else if !r.defaultSchema {
		if err := s.checkMovedScope(ctx, bad); err != nil {
			return fmt.Errorf("sqlstore: check: %w", err)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrMapping, strings.Join(problems, "\n  "))
	}
	return nil
}

// checkMovedScope reports (bad) each scope of payment records, other than
// this store's and its Orders.PreviousScopes, that is most likely this
// store's own: "" (the records made before the library kept scopes) or a
// scope of this orders table (its Where or the style of its soft-delete
// condition changed), when at least half of its most recent records (up
// to 8) are of this store's orders (ownsRecord). Under its present scope the
// store would not see them, and would decide those payments again: refund
// a refunded one twice, refund one that paid (I9, I14). Another tenant's
// scope holds orders of other tenants, which do not match (or only by the
// odd coincidence of number, buyer and fate).
func (s *Store) checkMovedScope(ctx context.Context, bad func(string, ...any)) error {
	rows, err := s.db.QueryContext(ctx, rebind(s.dialect, "SELECT DISTINCT scope FROM oe_payment_discrepancy WHERE scope <> ?"), s.m.scope)
	if err != nil {
		return fmt.Errorf("payment records' scopes: %w", err)
	}
	var scopes []string
	for rows.Next() {
		var scope string
		if err := rows.Scan(&scope); err != nil {
			rows.Close()
			return fmt.Errorf("payment records' scopes: %w", err)
		}
		scopes = append(scopes, scope)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("payment records' scopes: %w", err)
	}
	table := s.m.raw.Orders.Table
	sample := rebind(s.dialect, "SELECT payment_id, order_no, user_id, status FROM oe_payment_discrepancy WHERE scope = ? ORDER BY recorded_at_ms DESC, payment_id LIMIT 8")
	// Beside the library's own schema, whose records are scope "" too (one
	// per payment it honoured: they would fill any sample), "" is sampled
	// among the records whose order is not in oe_order.
	own, _, err := s.describe(ctx, "oe_order")
	if err != nil {
		return err
	}
	sampleUnscoped := sample
	if len(own) > 0 {
		sampleUnscoped = rebind(s.dialect, "SELECT d.payment_id, d.order_no, d.user_id, d.status FROM oe_payment_discrepancy d WHERE d.scope = ? AND NOT EXISTS (SELECT 1 FROM oe_order o WHERE o.order_no = d.order_no) ORDER BY d.recorded_at_ms DESC, d.payment_id LIMIT 8")
	}
	for _, scope := range scopes {
		rest, ok := strings.CutPrefix(scope, table)
		if scope != "" && !(ok && (rest == "" || rest[0] == '?')) || slices.Contains(s.m.previousScopes, scope) {
			continue
		}
		if _, _, other := contradicts(scope, table, s.m.scopeParts); other {
			continue // another tenant's: its orders are not this store's, whatever they look like
		}
		q := sample
		if scope == "" {
			q = sampleUnscoped
		}
		mine, n, err := s.ownRecords(ctx, q, scope)
		if err != nil {
			return err
		}
		if n == 0 || 2*mine < n {
			continue
		}
		what := "this orders table's under another Where"
		if scope == "" {
			what = "made before the library kept scopes"
		}
		bad("oe_payment_discrepancy holds payment records of scope %q (%s), and %d of the %d most recent are of this store's orders (number, buyer and fate): most likely its own. Under its scope %q this store would not see them and would decide those payments again, refunding them twice (I9): list %q in Orders.PreviousScopes (Migrate moves the records), or set Orders.Scope to it",
			scope, what, mine, n, s.m.scope, scope)
	}
	return nil
}

// checkUnfilled reports (bad) the NOT NULL columns of table without a
// default that no insert of the store writes (writes: the mapped, Where and
// Fill columns an insert writes): the first Place would fail on them. Keys
// the database fills (auto-increment, identity, SQLite's rowid) and
// generated columns have their value.
func (s *Store) checkUnfilled(ctx context.Context, what, field, table string, writes []string, bad func(string, ...any)) error {
	req, err := s.requiredColumns(ctx, table)
	if err != nil {
		return err
	}
	req = slices.DeleteFunc(req, func(c string) bool { return slices.Contains(writes, c) })
	if len(req) > 0 {
		bad("%s table %s: NOT NULL columns without a default that Place does not write: %s (the first Place would fail): give each a constant in %s.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in %s.Fill with the value sqlstore.HostWrites",
			what, table, strings.Join(req, ", "), field, field)
	}
	return nil
}

// ownRecords samples scope's records (query sample) and counts those that
// are of this store's orders (ownsRecord).
func (s *Store) ownRecords(ctx context.Context, sample, scope string) (mine, n int, err error) {
	rows, err := s.db.QueryContext(ctx, sample, scope)
	if err != nil {
		return 0, 0, fmt.Errorf("payment records of scope %q: %w", scope, err)
	}
	var recs []record
	for rows.Next() {
		var r record
		if err := rows.Scan(&r.payment, &r.no, &r.user, &r.status); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("payment records of scope %q: %w", scope, err)
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("payment records of scope %q: %w", scope, err)
	}
	for _, r := range recs {
		own, err := s.ownsRecord(ctx, r)
		if err != nil {
			return 0, 0, err
		}
		if own {
			mine++
		}
	}
	return mine, len(recs), nil
}

// requiredColumns lists, in the table's order, the columns of table that an
// INSERT must name: NOT NULL, without a default, not filled by the database
// (an auto-increment or identity column, SQLite's INTEGER PRIMARY KEY, which
// is the rowid), not generated.
func (s *Store) requiredColumns(ctx context.Context, table string) ([]string, error) {
	var schema any // NULL: the connection's own
	name := table
	if sch, t, ok := strings.Cut(table, "."); ok {
		schema, name = sch, t
	}
	var q string
	args := []any{schema, name}
	switch s.dialect {
	case MySQL:
		q = `SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?
AND IS_NULLABLE = 'NO' AND COLUMN_DEFAULT IS NULL AND EXTRA NOT LIKE '%auto_increment%' AND IS_GENERATED = 'NEVER' ORDER BY ORDINAL_POSITION`
	case Postgres:
		q = `SELECT a.attname FROM pg_attribute a JOIN pg_class t ON t.oid = a.attrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = COALESCE(CAST($1 AS TEXT), current_schema()) AND t.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
AND a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '' ORDER BY a.attnum`
	default:
		q, args = `SELECT name FROM pragma_table_xinfo(?1) WHERE "notnull" = 1 AND dflt_value IS NULL AND hidden = 0
AND NOT (pk = 1 AND upper(type) = 'INTEGER' AND (SELECT COUNT(*) FROM pragma_table_xinfo(?1) WHERE pk > 0) = 1) ORDER BY cid`, []any{name}
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("required columns of %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("required columns of %s: %w", table, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("required columns of %s: %w", table, err)
	}
	return out, nil
}

// uniqueWith returns the columns beside no of a non-partial unique index
// that holds no and otherwise only columns of may: the columns an order
// number is unique with.
func uniqueWith(idx []index, no string, may []string) []string {
	for _, ix := range idx {
		if ix.unique && !ix.partial && slices.Contains(ix.cols, no) && subset(ix.cols, append([]string{no}, may...)) {
			return slices.DeleteFunc(slices.Clone(ix.cols), func(c string) bool { return c == no })
		}
	}
	return nil
}

// checkScopeSpelling reports (bad) an orders table named other than the one
// way its scope (Store.Scope) is spelled: qualified with the connection's
// own schema, or in another case than the catalog's where the database
// folds names. Two stores of one tenant whose mappings spell the table
// differently would have two scopes on the same rows, and a payment id
// refunded through one would be refunded again through the other.
func (s *Store) checkScopeSpelling(ctx context.Context, table string, bad func(string, ...any)) error {
	sch, name, qualified := strings.Cut(table, ".")
	if !qualified {
		name = table
	}
	if qualified {
		var own string
		q := map[Dialect]string{MySQL: "SELECT DATABASE()", Postgres: "SELECT current_schema()", SQLite: "SELECT 'main'"}[s.dialect]
		if err := s.db.QueryRowContext(ctx, q).Scan(&own); err != nil {
			return fmt.Errorf("the connection's schema: %w", err)
		}
		if sch == own {
			bad("orders table %s: name it %s, without the connection's own schema: the store's scope is spelled from the name, and one table must have one scope", table, name)
		}
		return nil
	}
	var stored string
	var err error
	switch s.dialect {
	case MySQL:
		err = s.db.QueryRowContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", name).Scan(&stored)
	case SQLite:
		err = s.db.QueryRowContext(ctx, "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE", name).Scan(&stored)
	default:
		return nil // quoted: PostgreSQL finds the name only in its own case
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("the name of %s: %w", table, err)
	}
	if err == nil && stored != name {
		bad("orders table %s: name it %s, as the database spells it: the store's scope is spelled from the name, and one table must have one scope", table, stored)
	}
	return nil
}

// checkLiveClaimKey reports (bad) a claims table without a unique key that
// keeps one live claim per seat: one holding the show and the seat and,
// beside them, only the claims' Where columns whose condition is a value
// (a column of an IS NULL condition, such as a soft delete's, holds NULL in
// every live claim, and NULLs are distinct in a unique key), or, with a
// State column, a generated column computed from the state (NULL for a
// released claim, as MySQL has no partial index). A partial unique index
// must have a predicate on the state column (with State) or on an IS NULL
// condition's column. A key holding the state column itself lets a locked
// and a sold claim of one seat coexist: a double sale once the seat store
// has lost its data.
func (s *Store) checkLiveClaimKey(ctx context.Context, c *Claims, idx []index, bad func(string, ...any)) error {
	var valued, nulls []string
	for _, w := range s.m.cWhere {
		if w.null {
			nulls = append(nulls, w.name)
		} else {
			valued = append(valued, w.name)
		}
	}
	gen, preds, err := s.keyDetail(ctx, c.Table)
	if err != nil {
		return err
	}
	mentions := func(expr string, cols ...string) bool {
		for _, col := range cols {
			if col != "" && identIn(expr, col) {
				return true
			}
		}
		return false
	}
	for _, ix := range idx {
		if !ix.unique || !slices.Contains(ix.cols, c.ShowID) || !slices.Contains(ix.cols, c.SeatID) {
			continue
		}
		ok := true
		for _, col := range ix.cols {
			switch {
			case col == c.ShowID, col == c.SeatID, slices.Contains(valued, col):
			case c.State != "" && col != "" && mentions(gen[col], c.State):
			default:
				ok = false
			}
		}
		if ix.partial && !mentions(preds[ix.name], append([]string{c.State}, nulls...)...) {
			ok = false
		}
		if ok {
			return nil
		}
	}
	with := ""
	if len(valued) > 0 {
		with = " with " + strings.Join(valued, ", ")
	}
	switch {
	case c.State != "":
		bad("claims table %s: no unique key keeps one live claim per seat, the last defence against a double sale: want a unique key on (%s, %s)%s, partial WHERE %s <> the released state, or on MySQL with a generated column that is NULL for a released claim (never the state column itself: a locked and a sold claim of one seat would both fit)", c.Table, c.ShowID, c.SeatID, with, c.State)
	case len(nulls) > 0:
		bad("claims table %s: no unique key keeps one live claim per seat, the last defence against a double sale: want a unique key on (%s, %s)%s, partial WHERE %s IS NULL (never with the column itself: NULLs are distinct in a unique key)", c.Table, c.ShowID, c.SeatID, with, strings.Join(nulls, ", "))
	default:
		bad("claims table %s: no unique key keeps one live claim per seat, the last defence against a double sale: want a unique key on (%s, %s)%s", c.Table, c.ShowID, c.SeatID, with)
	}
	return nil
}

// identIn reports whether expr (SQL text) names the column col as a whole
// word, quoted or not, in any case.
func identIn(expr, col string) bool {
	expr, col = strings.ToLower(expr), strings.ToLower(col)
	word := func(b byte) bool { return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' }
	for i := 0; ; {
		j := strings.Index(expr[i:], col)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(col)
		if (j == 0 || !word(expr[j-1])) && (end == len(expr) || !word(expr[end])) {
			return true
		}
		i = j + 1
	}
}

// keyDetail reads what checkLiveClaimKey needs beyond describe: the
// expression of each generated column of table, and the predicate of each
// partial index (lower case, as the database prints them).
func (s *Store) keyDetail(ctx context.Context, table string) (gen, preds map[string]string, err error) {
	gen, preds = map[string]string{}, map[string]string{}
	var schema any
	name := table
	if sch, t, ok := strings.Cut(table, "."); ok {
		schema, name = sch, t
	}
	collect := func(into map[string]string, q string, args ...any) error {
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var v sql.NullString
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			into[k] = strings.ToLower(v.String)
		}
		return rows.Err()
	}
	switch s.dialect {
	case MySQL:
		err = collect(gen, "SELECT COLUMN_NAME, GENERATION_EXPRESSION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND IS_GENERATED <> 'NEVER'", schema, name)
	case Postgres:
		err = collect(gen, "SELECT column_name, generation_expression FROM information_schema.columns WHERE table_schema = COALESCE(CAST($1 AS TEXT), current_schema()) AND table_name = $2 AND is_generated = 'ALWAYS'", schema, name)
		if err == nil {
			err = collect(preds, `SELECT c.relname, pg_get_expr(ix.indpred, ix.indrelid) FROM pg_index ix
JOIN pg_class c ON c.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = COALESCE(CAST($1 AS TEXT), current_schema()) AND t.relname = $2 AND ix.indpred IS NOT NULL`, schema, name)
		}
	default:
		// SQLite keeps both only in the statements that created them.
		err = collect(preds, "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", name)
		if err == nil {
			for k, v := range preds {
				_, where, _ := strings.Cut(v, " where ")
				preds[k] = where
			}
			var create sql.NullString
			if err = s.db.QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&create); err == nil {
				cols := map[string]string{}
				if err = collect(cols, "SELECT name, CAST(hidden AS TEXT) FROM pragma_table_xinfo(?) WHERE hidden IN (2, 3)", name); err == nil {
					for col := range cols {
						gen[col] = sqliteColumnDef(strings.ToLower(create.String), strings.ToLower(col))
					}
				}
			}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("generated columns and partial indexes of %s: %w", table, err)
	}
	return gen, preds, nil
}

// sqliteColumnDef is the definition of column col in a CREATE TABLE
// statement (lower case): from the column's name to the next comma outside
// parentheses.
func sqliteColumnDef(create, col string) string {
	_, body, ok := strings.Cut(create, "(")
	if !ok {
		return ""
	}
	depth, start := 0, 0
	for i := 0; i <= len(body); i++ {
		if i < len(body) {
			switch body[i] {
			case '(':
				depth++
				continue
			case ')':
				if depth > 0 {
					depth--
					continue
				}
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		def := strings.TrimSpace(body[start:i])
		if name, _, _ := strings.Cut(def, " "); strings.Trim(name, "\"`[]") == col {
			return def
		}
		start = i + 1
	}
	return ""
}

// charLen is the length n of a declared type "…(n)" of MySQL or PostgreSQL.
func charLen(t string) (int, bool) {
	_, rest, ok := strings.Cut(t, "(")
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, ")")
	n, err := strconv.Atoi(num)
	return n, err == nil
}

// index is one index of a table: its columns in order ("" for an
// expression), whether it is unique, whether it is partial.
type index struct {
	name            string
	unique, partial bool
	cols            []string
	suffix          []string // InnoDB's implicit primary-key columns
}

// describe returns the columns of table (name → declared or data type,
// lower case) and its indexes; no columns when it does not exist.
func (s *Store) describe(ctx context.Context, table string) (map[string]string, []index, error) {
	var schema any // NULL: the connection's own
	name := table
	if sch, t, ok := strings.Cut(table, "."); ok {
		schema, name = sch, t
	}
	cols := map[string]string{}
	var colQ string
	args := []any{schema, name}
	switch s.dialect {
	case MySQL:
		colQ = "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?"
	case Postgres:
		colQ = "SELECT column_name, data_type || COALESCE('(' || character_maximum_length || ')', '') FROM information_schema.columns WHERE table_schema = COALESCE(CAST($1 AS TEXT), current_schema()) AND table_name = $2"
	default:
		colQ, args = "SELECT name, type FROM pragma_table_info(?)", []any{name}
	}
	rows, err := s.db.QueryContext(ctx, colQ, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return nil, nil, err
		}
		cols[c] = strings.ToLower(t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(cols) == 0 {
		return cols, nil, nil
	}
	idx, err := s.indexes(ctx, schema, name)
	if err != nil {
		return nil, nil, fmt.Errorf("indexes of %s: %w", table, err)
	}
	return cols, idx, nil
}

// indexes lists the indexes of table name in schema (nil: the
// connection's).
func (s *Store) indexes(ctx context.Context, schema any, name string) ([]index, error) {
	var out []index
	add := func(ixName string, unique, partial bool, col sql.NullString) {
		if len(out) == 0 || out[len(out)-1].name != ixName {
			out = append(out, index{name: ixName, unique: unique, partial: partial})
		}
		out[len(out)-1].cols = append(out[len(out)-1].cols, col.String)
	}
	switch s.dialect {
	case MySQL:
		rows, err := s.db.QueryContext(ctx, "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX", schema, name)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var ix string
			var nonUnique int
			var col sql.NullString
			if err := rows.Scan(&ix, &nonUnique, &col); err != nil {
				return nil, err
			}
			add(ix, nonUnique == 0, false, col)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		// InnoDB appends the primary key's columns to every secondary index.
		var pk []string
		for _, ix := range out {
			if ix.name == "PRIMARY" {
				pk = ix.cols
			}
		}
		for i := range out {
			if out[i].name != "PRIMARY" {
				out[i].suffix = pk
			}
		}
		return out, nil
	case Postgres:
		rows, err := s.db.QueryContext(ctx, `SELECT c.relname, ix.indisunique, ix.indpred IS NOT NULL, a.attname
FROM pg_index ix
JOIN pg_class c ON c.oid = ix.indexrelid
JOIN pg_class t ON t.oid = ix.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum AND k.attnum > 0
WHERE n.nspname = COALESCE(CAST($1 AS TEXT), current_schema()) AND t.relname = $2
ORDER BY c.relname, k.ord`, schema, name)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var ix string
			var unique, partial bool
			var col sql.NullString
			if err := rows.Scan(&ix, &unique, &partial, &col); err != nil {
				return nil, err
			}
			add(ix, unique, partial, col)
		}
		return out, rows.Err()
	default:
		rows, err := s.db.QueryContext(ctx, `SELECT name, "unique", partial FROM pragma_index_list(?)`, name)
		if err != nil {
			return nil, err
		}
		var list []index
		for rows.Next() {
			var ix index
			if err := rows.Scan(&ix.name, &ix.unique, &ix.partial); err != nil {
				rows.Close()
				return nil, err
			}
			list = append(list, ix)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, ix := range list {
			cr, err := s.db.QueryContext(ctx, "SELECT name FROM pragma_index_info(?) ORDER BY seqno", ix.name)
			if err != nil {
				return nil, err
			}
			for cr.Next() {
				var col sql.NullString
				if err := cr.Scan(&col); err != nil {
					cr.Close()
					return nil, err
				}
				ix.cols = append(ix.cols, col.String)
			}
			cr.Close()
			if err := cr.Err(); err != nil {
				return nil, err
			}
			out = append(out, ix)
		}
		return out, nil
	}
}

// hasIndex reports a non-partial index whose columns are: some of lead (in
// any order), then must (in any order, all of it), then tail in order (all
// of it, or with prefixOnly just its first column).
func hasIndex(idx []index, lead, must, tail []string, prefixOnly bool) bool {
	for _, ix := range idx {
		if ix.partial {
			continue
		}
		cols := append(slices.Clone(ix.cols), ix.suffix...)
		need := slices.Clone(must)
		i := 0
		for ; i < len(cols); i++ {
			if j := slices.Index(need, cols[i]); j >= 0 {
				need = slices.Delete(need, j, j+1)
				continue
			}
			if len(need) == 0 && cols[i] == tail[0] {
				break
			}
			if !slices.Contains(lead, cols[i]) {
				break
			}
		}
		if len(need) > 0 {
			continue
		}
		want := tail
		if prefixOnly {
			want = tail[:1]
		}
		if len(cols)-i >= len(want) && slices.Equal(cols[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// hasUnique reports a non-partial unique index holding every column of
// must and nothing beyond must and may.
func hasUnique(idx []index, must, may []string) bool {
	for _, ix := range idx {
		if !ix.unique || ix.partial {
			continue
		}
		ok := true
		for _, m := range must {
			ok = ok && slices.Contains(ix.cols, m)
		}
		if ok && subset(ix.cols, append(slices.Clone(must), may...)) {
			return true
		}
	}
	return false
}

func subset(cols, of []string) bool {
	for _, c := range cols {
		if !slices.Contains(of, c) {
			return false
		}
	}
	return true
}

// typeClass sorts a declared type into string, integer, bigint (an integer
// of 64 bits), datetime, timestamp, text-or-datetime (SQLite's text) or
// other.
func typeClass(d Dialect, t string) string {
	switch d {
	case MySQL:
		base, _, _ := strings.Cut(t, "(")
		base, _, _ = strings.Cut(base, " ")
		switch base {
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
			return "string"
		case "bigint":
			return "bigint"
		case "tinyint", "smallint", "mediumint", "int", "integer":
			return "integer"
		case "datetime":
			return "datetime"
		case "timestamp":
			return "timestamp"
		}
	case Postgres:
		t, _, _ = strings.Cut(t, "(")
		switch t {
		case "character varying", "character", "text":
			return "string"
		case "bigint":
			return "bigint"
		case "smallint", "integer":
			return "integer"
		case "timestamp without time zone":
			return "datetime"
		case "timestamp with time zone":
			return "timestamp"
		}
	default:
		// SQLite's affinity rules (datatype3.html, 3.1).
		switch {
		case strings.Contains(t, "int"):
			return "bigint"
		case strings.Contains(t, "char"), strings.Contains(t, "clob"), strings.Contains(t, "text"):
			return "string"
		case strings.Contains(t, "date"), strings.Contains(t, "time"):
			return "datetime"
		}
	}
	return "other"
}

// classOK reports whether a column of class got (declared type t) can hold
// what class want needs.
func classOK(want, got, t string) bool {
	switch want {
	case "integer":
		return got == "integer" || got == "bigint"
	case "string":
		return got == "string"
	case "text datetime": // SQLite: text or a date-ish declared type
		return got == "string" || got == "datetime"
	}
	return got == want
}

// kindClass is the class a column holding l's kind needs.
func kindClass(l lit) string {
	if l.str {
		return "string"
	}
	return "integer"
}

// timeClass is the class a time column of type t needs in d.
func timeClass(d Dialect, t TimeType) string {
	switch t {
	case EpochMillis:
		return "bigint"
	case EpochSeconds:
		return "integer"
	case DateTimeUTC:
		if d == SQLite {
			return "text datetime"
		}
		return "datetime"
	default:
		return "timestamp"
	}
}

// idClass is the column class an id column needs: "integer" for a numeric
// one (Orders.NumericUserID, NumericShowID), else "string".
func idClass(numeric bool) string {
	if numeric {
		return "integer"
	}
	return "string"
}
