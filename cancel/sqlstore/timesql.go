// How each dialect reads the database's clock and converts the time types
// a host's table may use to and from epoch milliseconds.

package sqlstore

import (
	"strconv"
	"strings"
	"time"
)

// nowMS is the database's clock in epoch milliseconds, truncated, per dialect.
var nowMS = map[Dialect]string{
	// UTC_TIMESTAMP does not go through the session's time zone, so the
	// clock does not jump at a daylight-saving change.
	MySQL: "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)",
	// Truncated to the millisecond like MySQL's DIV (a CAST of the epoch
	// rounds: a cancel could come half a millisecond early). date_trunc
	// works on the timestamp's integer microseconds, so it is exact; the
	// ROUND only removes the binary fraction of a double-precision EXTRACT
	// (PostgreSQL 12 and 13; numeric since 14).
	Postgres: "CAST(ROUND(EXTRACT(EPOCH FROM date_trunc('milliseconds', clock_timestamp()))*1000) AS BIGINT)",
	// SQLite's 'now' is whole milliseconds, truncated from the system clock
	// by the VFS (unixCurrentTimeInt64), so this is a truncation too: the
	// ROUND only removes the binary fraction of the Julian day number
	// (about 0.04 ms at today's dates).
	SQLite: "CAST(ROUND((julianday('now')-2440587.5)*86400000) AS INTEGER)",
}

// nowAs is the database's clock in a column of type t, minus back (0, or a
// payment window): the right-hand side of a guard "col <= nowAs(…)", so the
// column itself is never wrapped in a function and its index serves.
func nowAs(d Dialect, t TimeType, back time.Duration) string {
	ms := strconv.FormatInt(back.Milliseconds(), 10)
	sec := strconv.FormatInt(int64(back/time.Second), 10)
	us := strconv.FormatInt(back.Microseconds(), 10)
	minus := func(now, amount string) string {
		if back == 0 {
			return now
		}
		return "(" + now + " - " + amount + ")"
	}
	switch t {
	case EpochMillis:
		return minus(nowMS[d], ms)
	case EpochSeconds:
		switch d {
		case MySQL:
			return minus("UNIX_TIMESTAMP()", sec)
		case Postgres:
			return minus("CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp())) AS BIGINT)", sec)
		default:
			return minus("CAST(strftime('%s', 'now') AS INTEGER)", sec)
		}
	case DateTimeUTC:
		switch d {
		case MySQL:
			return minus("UTC_TIMESTAMP(6)", "INTERVAL "+us+" MICROSECOND")
		case Postgres:
			return minus("(clock_timestamp() AT TIME ZONE 'UTC')", "INTERVAL '"+us+" microseconds'")
		default:
			if back == 0 {
				return "strftime('%Y-%m-%d %H:%M:%f', 'now')"
			}
			return "strftime('%Y-%m-%d %H:%M:%f', 'now', '-" + sec + " seconds')"
		}
	default: // Timestamp
		if d == MySQL {
			return minus("NOW(6)", "INTERVAL "+us+" MICROSECOND")
		}
		return minus("clock_timestamp()", "INTERVAL '"+us+" microseconds'")
	}
}

// stable is a PostgreSQL clock expression on statement_timestamp() (stable:
// its value is known when the statement is planned) instead of
// clock_timestamp() (volatile).
func stable(expr string) string {
	return strings.ReplaceAll(expr, "clock_timestamp()", "statement_timestamp()")
}

// asMS reads column col of type t as epoch milliseconds, plus add.
func asMS(d Dialect, t TimeType, col string, add time.Duration) string {
	var e string
	switch t {
	case EpochMillis:
		e = col
	case EpochSeconds:
		e = "(" + col + " * 1000)"
		if d == Postgres {
			// An integer (int4) column times an int4 literal stays int4 on
			// PostgreSQL, which overflows for any date after January 1970.
			e = "(CAST(" + col + " AS BIGINT) * 1000)"
		}
	default:
		switch d {
		case MySQL:
			if t == Timestamp {
				e = "CAST(FLOOR(UNIX_TIMESTAMP(" + col + ") * 1000) AS SIGNED)"
			} else {
				e = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ") DIV 1000)"
			}
		case Postgres:
			e = "CAST(FLOOR(EXTRACT(EPOCH FROM " + col + ") * 1000) AS BIGINT)"
		default:
			e = "CAST(ROUND((julianday(" + col + ") - 2440587.5) * 86400000) AS INTEGER)"
		}
	}
	if add != 0 {
		return "(" + e + " + " + strconv.FormatInt(add.Milliseconds(), 10) + ")"
	}
	return e
}

// fromArg is the SQL that turns a deadline argument (epoch ms for
// EpochMillis, epoch seconds otherwise: see Store.timeArg) into type t.
func fromArg(d Dialect, t TimeType, b *sb, s slot) {
	switch t {
	case EpochMillis, EpochSeconds:
		b.p(s)
	case DateTimeUTC:
		switch d {
		case MySQL:
			b.w("TIMESTAMPADD(SECOND, ").p(s).w(", '1970-01-01 00:00:00')")
		case Postgres:
			b.w("(TIMESTAMP 'epoch' + CAST(").p(s).w(" AS BIGINT) * INTERVAL '1 second')")
		default:
			b.w("strftime('%Y-%m-%d %H:%M:%S', ").p(s).w(", 'unixepoch')")
		}
	default:
		if d == MySQL {
			b.w("FROM_UNIXTIME(").p(s).w(")")
		} else {
			b.w("to_timestamp(CAST(").p(s).w(" AS BIGINT))")
		}
	}
}

// keyOf is the scan key of a time column of type t: an integer that orders
// as the column does and converts back exactly (keyArg), or the SQLite text.
func keyOf(d Dialect, t TimeType, col string) string {
	if t == EpochMillis || t == EpochSeconds || d == SQLite {
		return col
	}
	if d == MySQL {
		return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
	}
	return "CAST(EXTRACT(EPOCH FROM " + col + ") * 1000000 AS BIGINT)"
}

// keyArg is the SQL turning a key argument back into type t.
func keyArg(d Dialect, t TimeType) string {
	if t == EpochMillis || t == EpochSeconds || d == SQLite {
		return "?"
	}
	if d == MySQL {
		return "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')"
	}
	if t == Timestamp {
		return "(TIMESTAMPTZ 'epoch' + CAST(? AS BIGINT) * INTERVAL '1 microsecond')"
	}
	return "(TIMESTAMP 'epoch' + CAST(? AS BIGINT) * INTERVAL '1 microsecond')"
}

// textKey reports a scan key that is the SQLite text itself.
func textKey(d Dialect, t TimeType) bool {
	return d == SQLite && (t == DateTimeUTC || t == Timestamp)
}
