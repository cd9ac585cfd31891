package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A payment window kept in another table (Orders.WindowFrom): every
// statement reads it with a scalar subquery, in milliseconds, so the
// deadline of a pending order is its creation time plus the window the
// setting holds now, as the host's own code reads it.

// settingNumber is the setting's value (column col) as an integer, per
// dialect: a key-value table keeps it as a string, and a value that is not
// one to eighteen decimal digits (an empty string, a word, a sign, a blank)
// is NULL. A cast alone reads such a value as 0 on MySQL and SQLite, a
// window of zero that makes every pending order due at once; NULL makes no
// order due while the host's setting is unreadable (Check names it).
func settingNumber(d Dialect, col string) string {
	text := "CAST(" + col + " AS CHAR)"
	switch d {
	case Postgres:
		text = "CAST(" + col + " AS TEXT)"
		return "(CASE WHEN " + text + " ~ '^[0-9]{1,18}$' THEN CAST(" + text + " AS BIGINT) END)"
	case SQLite:
		text = "CAST(" + col + " AS TEXT)"
		return "(CASE WHEN length(" + text + ") BETWEEN 1 AND 18 AND " + text + " NOT GLOB '*[^0-9]*' THEN CAST(" + text + " AS INTEGER) END)"
	}
	return "(CASE WHEN " + text + " REGEXP '^[0-9]{1,18}$' THEN CAST(" + text + " AS SIGNED) END)"
}

// div1000 is the integer division of milliseconds into seconds.
var div1000 = map[Dialect]string{MySQL: " DIV 1000", Postgres: " / 1000", SQLite: " / 1000"}

// resolveWindow validates w for r (CreatedAt resolved, no Deadline) and
// sets r.windowSQL, the window in milliseconds as SQL.
func resolveWindow(r *resolved, o Orders, id func(what, name string, table bool) string, resolveConds func(what string, cs []Condition) []cond) error {
	w := o.WindowFrom
	var errs []error
	switch {
	case r.deadline.Column != "":
		errs = append(errs, errors.New("sqlstore: mapping: a WindowFrom is for a table without a Deadline column"))
	case o.Window != 0:
		errs = append(errs, errors.New("sqlstore: mapping: give Window or WindowFrom, not both"))
	case r.created.Column == "":
		errs = append(errs, errors.New("sqlstore: mapping: a WindowFrom needs CreatedAt"))
	}
	if w.Unit <= 0 || w.Unit%time.Millisecond != 0 || (r.created.Type != EpochMillis && w.Unit%time.Second != 0) {
		errs = append(errs, fmt.Errorf("sqlstore: mapping: WindowFrom unit %v: whole seconds (whole milliseconds with CreatedAt in epoch milliseconds)", w.Unit))
	}
	if len(w.Where) == 0 {
		errs = append(errs, errors.New("sqlstore: mapping: a WindowFrom needs a Where that selects its row"))
	}
	r.windowTable = id("window setting table", w.Table, true)
	r.windowCol = id("window setting column", w.Column, false)
	r.windowWhere = resolveConds("window setting", w.Where)
	unit := strconv.FormatInt(w.Unit.Milliseconds(), 10)
	b := &sb{}
	b.w("(SELECT ", settingNumber(r.d, r.windowCol), " * ", unit, " FROM ", r.windowTable, " WHERE 1 = 1")
	r.conds(b, "", r.windowWhere)
	r.windowSQL = b.w(")").b.String()
	return errors.Join(errs...)
}

// nowBack is the database's clock in type t minus the payment window: the
// right-hand side of the due guard on the creation time.
func (r *resolved) nowBack(t TimeType) string {
	if r.windowSQL == "" {
		return nowAs(r.d, t, r.window)
	}
	b := &sb{}
	switch t {
	case EpochMillis:
		b.w("(", nowMS[r.d], " - ", r.windowSQL, ")")
	case EpochSeconds:
		b.w("(", nowAs(r.d, EpochSeconds, 0), " - ", r.windowSQL, div1000[r.d], ")")
	case DateTimeUTC, Timestamp:
		switch r.d {
		case MySQL:
			b.w("(", nowAs(r.d, t, 0), " - INTERVAL (", r.windowSQL, " * 1000) MICROSECOND)")
		case Postgres:
			b.w("(", nowAs(r.d, t, 0), " - ", r.windowSQL, " * INTERVAL '1 millisecond')")
		default:
			b.w("strftime('%Y-%m-%d %H:%M:%f', 'now', (-", r.windowSQL, div1000[r.d], ") || ' seconds')")
		}
	}
	return b.b.String()
}

// createdFrom writes the creation time Place stores: the deadline argument
// s (epoch ms in an EpochMillis column, else epoch seconds) minus the
// window, in type t.
func (r *resolved) createdFrom(b *sb, t TimeType, s slot) {
	if r.windowSQL == "" {
		fromArg(r.d, t, b, s) // Store.timeArg subtracted the window
		return
	}
	switch {
	case t == EpochMillis:
		b.w("(").p(s).w(" - ", r.windowSQL, ")")
	case t == EpochSeconds:
		b.w("(").p(s).w(" - ", r.windowSQL, div1000[r.d], ")")
	case r.d == MySQL:
		b.w("(")
		fromArg(r.d, t, b, s)
		b.w(" - INTERVAL (", r.windowSQL, " * 1000) MICROSECOND)")
	case r.d == Postgres:
		b.w("(")
		fromArg(r.d, t, b, s)
		b.w(" - ", r.windowSQL, " * INTERVAL '1 millisecond')")
	default:
		b.w("strftime('%Y-%m-%d %H:%M:%S', ").p(s).w(" - ", r.windowSQL, div1000[r.d], ", 'unixepoch')")
	}
}

// checkWindow reads the window setting for Check: its table and column
// exist, and its Where selects exactly one row with a value.
func (s *Store) checkWindow(ctx context.Context, bad func(format string, a ...any)) error {
	w := s.m.raw.Orders.WindowFrom
	if w == nil {
		return nil
	}
	cols, _, err := s.describe(ctx, w.Table)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		bad("window setting table %s does not exist", w.Table)
		return nil
	}
	typ, ok := cols[w.Column]
	if !ok {
		bad("window setting table %s has no column %s", w.Table, w.Column)
		return nil
	}
	if c := typeClass(s.dialect, typ); c != "integer" && c != "bigint" && c != "string" {
		bad("window setting column %s.%s: is %s (%s), the mapping needs an integer (or a string of one)", w.Table, w.Column, typ, c)
		return nil
	}
	r := s.m
	q := &sb{}
	q.w("SELECT COUNT(*), COUNT(", settingNumber(s.dialect, r.windowCol), ") FROM ", r.windowTable, " WHERE ", r.windowCol, " IS NOT NULL")
	r.conds(q, "", r.windowWhere)
	var n, numbers int
	if err := s.db.QueryRowContext(ctx, q.b.String()).Scan(&n, &numbers); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if n == 1 && numbers == 0 {
		bad("window setting %s.%s: its value is not a whole number of %v (1 to 18 decimal digits): no pending order is due until it is", w.Table, w.Column, w.Unit)
		return nil
	}
	if n != 1 {
		var where []string
		for _, c := range r.windowWhere {
			where = append(where, c.name+" = "+c.v.sql)
		}
		bad("window setting %s.%s: want exactly one row with a value where [%s], found %d", w.Table, w.Column, strings.Join(where, ", "), n)
	}
	return nil
}
