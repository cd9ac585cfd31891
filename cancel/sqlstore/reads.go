package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Expired returns up to limit numbers of pending orders past their deadline
// by the database's clock, in (deadline, order number) order, strictly after
// cursor ("" starts), and the cursor of the next page ("" when fewer than
// limit were returned). It is a keyset scan of the index on (status,
// deadline, order number) (InnoDB appends a primary key order_no to
// (status, expire_at_ms)): each page is an index range from the cursor,
// whatever precedes it. The cursor is "key|order_no", the key being the
// deadline column's value (epoch milliseconds on the library's schema). It
// implements cancel.OrderStore.
func (s *Store) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if limit <= 0 {
		return nil, "", nil
	}
	key, no, err := s.parseCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	st, err := s.prepared(ctx, s.q.expired.sql)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	rows, err := st.QueryContext(ctx, s.args(s.q.expired, vals{key: key, no: no, limit: limit})...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	defer rows.Close()
	out := make([]string, 0, limit)
	var last string
	for rows.Next() {
		if err := rows.Scan(&no, &last); err != nil {
			return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
		}
		out = append(out, no) // unpadded by the query (build.go)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlstore: expired: %w", err)
	}
	if len(out) < limit {
		return out, "", nil
	}
	return out, last + "|" + no, nil
}

// expiredCursor is the cursor of Expired on the library's schema that
// continues after order no, due at expireAt (in milliseconds, as the store
// keeps it). The in-memory fake (cancel/memstore) uses the same form.
func expiredCursor(expireAt time.Time, no string) string {
	return strconv.FormatInt(expireAt.UnixMilli(), 10) + "|" + no
}

// minMicros is the key before every deadline of the time types, as
// microseconds since 1970 (floored at 1000-01-01, the least MySQL
// DATETIME) of MySQL and PostgreSQL.
const minMicros = -30610224000000000

// maxCursorNo bounds the order number of a cursor of Expired, in bytes.
const maxCursorNo = 1024

var textKeyRE = regexp.MustCompile(`^[0-9 :.TZ+-]{1,40}$`)

// parseCursor returns the (key, order_no) after which a page of Expired
// starts: before every order for "".
func (s *Store) parseCursor(cursor string) (any, string, error) {
	t := s.m.scanCol().Type
	text := textKey(s.dialect, t)
	if cursor == "" {
		switch {
		case text:
			return "", "", nil
		case t == EpochMillis || t == EpochSeconds:
			return int64(math.MinInt64), "", nil
		default:
			return int64(minMicros), "", nil
		}
	}
	keyText, no, ok := strings.Cut(cursor, "|")
	bad := fmt.Errorf("%w: %q is not a cursor of Expired", expiry.ErrInvalidID, cursor)
	// The number is the last row's as the table holds it, which need not
	// be a valid id (a legacy row's "A 1"): refusing it would stop the scan
	// there for good. It is only ever bound as an argument.
	if !ok || len(no) > maxCursorNo {
		return nil, "", bad
	}
	if text {
		if !textKeyRE.MatchString(keyText) {
			return nil, "", bad
		}
		return keyText, no, nil
	}
	key, err := strconv.ParseInt(keyText, 10, 64)
	if err != nil {
		return nil, "", bad
	}
	return key, no, nil
}

// parseExpiredCursor returns the (expire_at_ms, order_no) after which a
// page starts on the library's schema: before every order for "".
func parseExpiredCursor(cursor string) (int64, string, error) {
	if cursor == "" {
		return math.MinInt64, "", nil
	}
	msText, no, ok := strings.Cut(cursor, "|")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if !ok || err != nil || expiry.ValidateID("order number", no) != nil {
		return 0, "", fmt.Errorf("%w: %q is not a cursor of Expired", expiry.ErrInvalidID, cursor)
	}
	return ms, no, nil
}

// Overdue returns the number of pending orders whose deadline has passed by
// the database's clock (deadline <= now, the guard of a timeout), and how
// long ago the oldest one's deadline passed (0 when there is none): the
// gauge of expiry messages being lost, since a healthy system cancels each
// order within moments of its deadline. One statement, a range of the
// index the expiry scan uses; it counts every row of the range, so on a
// backlog of n orders it reads n index entries.
func (s *Store) Overdue(ctx context.Context) (n int, oldest time.Duration, err error) {
	st, err := s.prepared(ctx, s.q.overdue.sql)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlstore: overdue: %w", err)
	}
	var minMS sql.NullInt64
	var nowMS int64
	if err := st.QueryRowContext(ctx, s.args(s.q.overdue, vals{})...).Scan(&n, &minMS, &nowMS); err != nil {
		return 0, 0, fmt.Errorf("sqlstore: overdue: %w", err)
	}
	if n > 0 && minMS.Valid && nowMS > minMS.Int64 {
		oldest = time.Duration(nowMS-minMS.Int64) * time.Millisecond
	}
	return n, oldest, nil
}

// maxIn bounds the IN list of one Statuses query.
const maxIn = 500

// Statuses returns the state of each existing order among nos (missing ones
// are absent from the map): its status (expiry.StatusHost for a value the
// mapping does not name: the host's own, which never fails the page, I19)
// and the time since its last write
// by the database's clock (whole milliseconds, as cancel.OrderAge gives it;
// the resolution of the Mapping's UpdatedAt column, and cancel.AgeUnknown
// without one or after the clock stepped back past the write). Only rows whose number equals a requested one byte for byte
// are kept, so a case-insensitive collation of the host's table cannot
// answer for a case variant (I10). It implements cancel.OrderStore.
func (s *Store) Statuses(ctx context.Context, nos []string) (map[string]cancel.OrderState, error) {
	out := make(map[string]cancel.OrderState, len(nos))
	want := make(map[string]bool, len(nos))
	for _, no := range nos {
		want[no] = true
	}
	for len(nos) > 0 {
		chunk := nos[:min(len(nos), maxIn)]
		nos = nos[len(chunk):]
		ph := "?"
		if s.m.raw.Orders.NumericOrderNo {
			ph = numArg(s.dialect, ph)
		}
		q := rebind(s.dialect, s.q.statusesPre+ph+strings.Repeat(", "+ph, len(chunk)-1)+s.q.statusesPost)
		args := make([]any, len(chunk))
		for i, no := range chunk {
			args[i] = no
			if s.m.raw.Orders.NumericOrderNo {
				args[i] = numNo(no) // not canonical: NULL, no order
			}
		}
		rows, err := s.db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
		for rows.Next() {
			var no, show string
			var key sql.NullString
			var ageMS sql.NullInt64
			var lockID, seats sql.NullString
			if err := rows.Scan(&no, &key, &ageMS, idCol{&show}, &lockID, &seats); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlstore: statuses: %w", err)
			}
			unpad(&no, &show)
			st := s.status(key) // the host's own status is an answer, not an error (I19)
			age := cancel.AgeUnknown
			if ageMS.Valid {
				age = cancel.OrderAge(time.Duration(ageMS.Int64) * time.Millisecond)
			}
			if want[no] {
				out[no] = cancel.OrderState{Status: st, Age: age, ShowID: show, LockID: lockID.String, Seats: splitSeats(seats.String), Paying: s.paying(key)}
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
		if err := s.sideRows(ctx, chunk, func(no, lockID, seats string) {
			if st, ok := out[no]; ok {
				st.LockID, st.Seats = lockID, splitSeats(seats)
				out[no] = st
			}
		}); err != nil {
			return nil, fmt.Errorf("sqlstore: statuses: %w", err)
		}
	}
	return out, nil
}

// sideRows calls found with the seat lock id ("" if none) and the seats
// list the side table keeps for each of nos that has a row, on a host's
// table (the library's keeps them in oe_order: nothing to do). The side
// table's ids are byte-exact (ascii_bin on MySQL), so no case variant
// answers.
func (s *Store) sideRows(ctx context.Context, nos []string, found func(no, lockID, seats string)) error {
	return s.sideRowsIn(ctx, s.db, nos, found)
}

// sideRowsIn is sideRows on q (a transaction's, to read within it).
func (s *Store) sideRowsIn(ctx context.Context, q cancel.Querier, nos []string, found func(no, lockID, seats string)) error {
	if s.m.defaultSchema || len(nos) == 0 {
		return nil
	}
	text := rebind(s.dialect, "SELECT order_no, lock_id, seats FROM oe_order_side WHERE scope = ? AND order_no IN (?"+strings.Repeat(", ?", len(nos)-1)+")")
	args := make([]any, 0, len(nos)+1)
	args = append(args, s.m.scope)
	for _, no := range nos {
		args = append(args, no)
	}
	rows, err := q.QueryContext(ctx, text, args...)
	if err != nil {
		return fmt.Errorf("side rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var no, seats string
		var lockID sql.NullString
		if err := rows.Scan(&no, &lockID, &seats); err != nil {
			return fmt.Errorf("side rows: %w", err)
		}
		found(no, lockID.String, seats)
	}
	return rows.Err()
}

// unpad removes the trailing spaces of ids read from a host's columns: a
// CHAR(n) column returns them padded on PostgreSQL. An id never contains a
// space (expiry.ValidateID), so they can only be padding.
func unpad(ids ...*string) {
	for _, id := range ids {
		*id = strings.TrimRight(*id, " ")
	}
}

// deadlineCol scans a deadline read as epoch milliseconds into t. NULL (a
// nullable deadline or creation column that holds none, a window setting
// that is not a number) is the zero time: the order has no deadline now,
// and is never due until it has one (see expiry.Order.ExpireAt).
type deadlineCol struct{ t *time.Time }

func (c deadlineCol) Scan(v any) error {
	var ms sql.NullInt64
	if err := ms.Scan(v); err != nil {
		return err
	}
	*c.t = time.Time{}
	if ms.Valid {
		*c.t = time.UnixMilli(ms.Int64)
	}
	return nil
}

// idCol scans an id column of a host's table: NULL as "" (a legacy row the
// host's old code left without a user or a show must not fail every read
// of its order: TestNullUserOrderIsReadable) and without a CHAR(n)'s
// padding (unpad).
type idCol struct{ s *string }

func (c idCol) Scan(v any) error {
	var ns sql.NullString
	if err := ns.Scan(v); err != nil {
		return err
	}
	*c.s = strings.TrimRight(ns.String, " ")
	return nil
}

// splitSeats is a seats list as oe_order.seats and oe_order_side.seats keep
// it ("" none).
func splitSeats(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// Claims returns up to limit seat claims of pending and paid orders in
// (show, seat) order after the cursor ("" starts; the returned cursor is ""
// when there are no more), following the claims' unique key. It implements
// cancel.OrderStore: the reconciler rebuilds the seat store from it.
// Without a claims table in the Mapping there are none. A live claim of an
// order in a status the host owns comes with Status expiry.StatusHost (the
// reconciler leaves it to the host), never as an error that would fail the
// page for the claims after it (I12, I19).
func (s *Store) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	if limit <= 0 || !s.m.claims {
		return nil, "", nil
	}
	show, seat, err := claimsCursor(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: claims: %w", err)
	}
	out, lastShow, lastSeat, err := s.readClaims(ctx, show, seat, limit)
	if err != nil {
		return nil, "", fmt.Errorf("sqlstore: claims: %w", err)
	}
	// A host's table: each order's lock id is in the side table.
	var nos []string
	at := map[string][]int{}
	for i, c := range out {
		if _, ok := at[c.OrderNo]; !ok {
			nos = append(nos, c.OrderNo)
		}
		at[c.OrderNo] = append(at[c.OrderNo], i)
	}
	for len(nos) > 0 {
		chunk := nos[:min(len(nos), maxIn)]
		nos = nos[len(chunk):]
		if err := s.sideRows(ctx, chunk, func(no, lockID, _ string) {
			for _, i := range at[no] {
				out[i].LockID = lockID
			}
		}); err != nil {
			return nil, "", fmt.Errorf("sqlstore: claims: %w", err)
		}
	}
	if len(out) < limit {
		return out, "", nil
	}
	return out, claimsCursorOf(lastShow, lastSeat), nil
}

// claimsCursorOf is the cursor of Claims after (show, seat).
func claimsCursorOf(show, seat string) string {
	return strconv.Itoa(len(show)) + "|" + show + "|" + seat
}

// claimsCursor reads a cursor of Claims: the show's length, "|", the show,
// "|", the seat. The length keeps it one pair whatever a host's legacy ids
// hold ("|" included: split at a "|" of the show, the next page would start
// before the last one, for ever).
func claimsCursor(cursor string) (show, seat string, err error) {
	if cursor == "" {
		return "", "", nil
	}
	n, rest, ok := strings.Cut(cursor, "|")
	size, perr := strconv.Atoi(n)
	if !ok || perr != nil || size < 0 || size >= len(rest) || rest[size] != '|' {
		return "", "", fmt.Errorf("malformed cursor %q", cursor)
	}
	return rest[:size], rest[size+1:], nil
}

// readClaims reads one page of Claims, and the show and seat of its last
// claim as the columns hold them, for the next page's cursor: unpadded, a
// legacy VARCHAR id ending in a space ("x ") would make a cursor ("x") that
// sorts before it, and the next page would read it again
// (TestClaimsPagesPastTrailingSpaces). A CHAR(n)'s padding compares as none.
func (s *Store) readClaims(ctx context.Context, show, seat string, limit int) (out []cancel.Claim, lastShow, lastSeat string, err error) {
	rows, err := s.db.QueryContext(ctx, s.q.claims.sql, s.claimsArgs(show, seat, limit)...)
	if err != nil {
		return nil, "", "", err
	}
	defer rows.Close()
	out = make([]cancel.Claim, 0, limit)
	for rows.Next() {
		var c cancel.Claim
		var key sql.NullString
		// A host's columns may hold NULL where the library never writes
		// one (a legacy row): read as "", an id the reconciler refuses and
		// reports for that claim alone, instead of failing the whole page.
		var show, seat, no, user, lockID sql.NullString
		if err := rows.Scan(&show, &seat, &no, &user, &key, &lockID); err != nil {
			return nil, "", "", err
		}
		c.ShowID, c.SeatID, c.OrderNo, c.UserID, c.LockID = show.String, seat.String, no.String, user.String, lockID.String
		lastShow, lastSeat = show.String, seat.String
		unpad(&c.ShowID, &c.SeatID, &c.UserID) // the order number is read unpadded (build.go)
		c.Status = s.status(key)
		out = append(out, c)
	}
	return out, lastShow, lastSeat, rows.Err()
}

// claimsArgs are the arguments of the claims query for a page of limit
// after (show, seat).
func (s *Store) claimsArgs(show, seat string, limit int) []any {
	num, _ := s.numericShow(show) // the cursor's show came from a numeric column: canonical
	return s.args(s.q.claims, vals{showKey: show, showKeyNum: num, seatKey: seat, limit: limit})
}
