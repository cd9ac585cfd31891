package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/internal/testenv"
)

// These tests look at what the database does with the store's own queries:
// the plan of a page from the middle of a keyset scan, and the clock.

// dialects opens a fresh database of every dialect, each in its own subtest
// of t, so that without servers (a plain go test) only theirs skip.
func dialects(t *testing.T, run func(t *testing.T, d Dialect, db *sql.DB)) {
	for _, d := range []Dialect{SQLite, MySQL, Postgres} {
		t.Run(string(d), func(t *testing.T) {
			var db *sql.DB
			switch d {
			case MySQL:
				db = testenv.MySQL(t)
			case Postgres:
				db = testenv.Postgres(t)
			default:
				var err error
				db, err = sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "oe.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
				require.NoError(t, err)
				t.Cleanup(func() { db.Close() })
			}
			run(t, d, db)
		})
	}
}

func migrated(t *testing.T, db *sql.DB, d Dialect) *Store {
	s, err := New(db, d)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	t.Cleanup(func() { s.Close() })
	return s
}

// series is a SELECT of one column n, 0 to 10^digits-1, in any dialect.
func series(digits int) string {
	d := "(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	var from, sum []string
	for i := 0; i < digits; i++ {
		from = append(from, fmt.Sprintf("%s d%d", d, i))
		sum = append(sum, fmt.Sprintf("d%d.n*%d", i, pow10(i)))
	}
	return "SELECT " + strings.Join(sum, "+") + " AS n FROM " + strings.Join(from, " CROSS JOIN ")
}

func pow10(i int) int {
	p := 1
	for ; i > 0; i-- {
		p *= 10
	}
	return p
}

// padded is the SQL of prefix followed by the number expression n in width
// digits, zero-padded.
func padded(d Dialect, prefix, n string, width int) string {
	switch d {
	case SQLite:
		return fmt.Sprintf("printf('%s%%0%dd', %s)", prefix, width, n)
	case MySQL:
		return fmt.Sprintf("CONCAT('%s', LPAD(%s, %d, '0'))", prefix, n, width)
	default:
		return fmt.Sprintf("'%s' || LPAD(CAST(%s AS TEXT), %d, '0')", prefix, n, width)
	}
}

// fillClaims inserts 10^digits pending orders of one seat each, perShow
// seats per show: show s0000…, seat x0000000…, order o0000000….
func fillClaims(t testing.TB, db *sql.DB, d Dialect, digits, perShow int) {
	ctx := context.Background()
	div := "n / " + fmt.Sprint(perShow)
	if d == MySQL {
		div = "n DIV " + fmt.Sprint(perShow)
	}
	for _, q := range []string{
		"INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms) SELECT " +
			padded(d, "o", "n", 7) + ", 'u1', " + padded(d, "s", div, 4) + ", 0, n, 0, 0 FROM (" + series(digits) + ") g",
		"INSERT INTO oe_order_seat (show_id, seat_id, order_no, state) SELECT " +
			padded(d, "s", div, 4) + ", " + padded(d, "x", "n", 7) + ", " + padded(d, "o", "n", 7) + ", 1 FROM (" + series(digits) + ") g",
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	var analyze string
	switch d {
	case MySQL:
		analyze = "ANALYZE TABLE oe_order, oe_order_seat"
	default:
		analyze = "ANALYZE"
	}
	rows, err := db.QueryContext(ctx, analyze)
	require.NoError(t, err)
	rows.Close()
}

// fill fills a plan test's database with fillClaims: 100k orders, 4 shows;
// 1k on SQLite, whose plans are checked by their text only (the same plan as
// at 10k or 100k rows, which the race detector fills slowly). It returns the
// number.
func fill(t *testing.T, db *sql.DB, d Dialect) int {
	digits := 5
	if d == SQLite {
		digits = 3
	}
	n := pow10(digits)
	fillClaims(t, db, d, digits, n/4)
	return n
}

// rowsRead runs q under the database's own instrumentation and returns the
// rows the scan of table read (returned plus filtered out), with the plan as
// text for messages. SQLite has no row counts: it returns -1 and the plan.
func rowsRead(t *testing.T, db *sql.DB, d Dialect, table, alias, q string, args ...any) (int, string) {
	ctx := context.Background()
	switch d {
	case Postgres:
		var js string
		require.NoError(t, db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q, args...).Scan(&js))
		var plan []struct{ Plan map[string]any }
		require.NoError(t, json.Unmarshal([]byte(js), &plan))
		n := 0
		var walk func(node map[string]any)
		walk = func(node map[string]any) {
			if node["Relation Name"] == table {
				loops, _ := node["Actual Loops"].(float64)
				rows, _ := node["Actual Rows"].(float64)
				removed, _ := node["Rows Removed by Filter"].(float64)
				n += int((rows + removed) * loops)
			}
			children, _ := node["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0].Plan)
		return n, js
	case MySQL:
		// ANALYZE runs the statement and reports r_rows, the rows read per
		// loop, for each table (MariaDB; MySQL 8 has EXPLAIN ANALYZE).
		var js string
		require.NoError(t, db.QueryRowContext(ctx, "ANALYZE FORMAT=JSON "+inline(q, args)).Scan(&js))
		var doc any
		require.NoError(t, json.Unmarshal([]byte(js), &doc))
		n := -1
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if v["table_name"] == alias {
					rows, _ := v["r_rows"].(float64)
					loops, _ := v["r_loops"].(float64)
					n = int(rows * loops)
				}
				for _, c := range v {
					walk(c)
				}
			case []any:
				for _, c := range v {
					walk(c)
				}
			}
		}
		walk(doc)
		return n, js
	default:
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err)
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			lines = append(lines, detail)
		}
		require.NoError(t, rows.Err())
		return -1, strings.Join(lines, "\n")
	}
}

// inline puts args into q's ? placeholders as literals, for statements that
// cannot be prepared (MariaDB's ANALYZE). The tests' args are ids and
// numbers only.
func inline(q string, args []any) string {
	var b strings.Builder
	i := 0
	for _, r := range q {
		if r == '?' && i < len(args) {
			switch a := args[i].(type) {
			case string:
				b.WriteString("'" + a + "'")
			default:
				fmt.Fprint(&b, a)
			}
			i++
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestClaimsMiddlePageIsARange: a rebuild pages through
// every claim; each page must start where the last ended (an index range
// from the cursor), or a rebuild of n claims reads n²/(2·limit) rows. On
// PostgreSQL the OR form of the keyset (show_id > ? OR (show_id = ? AND
// seat_id > ?)) is a filter over the primary key from its start.
func TestClaimsMiddlePageIsARange(t *testing.T) {
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		s := migrated(t, db, d)
		n := fill(t, db, d)     // n claims in 4 shows
		limit := min(200, n/10) // a page within the second show
		// The middle of the second show: a range that starts at the
		// show reads n/8 rows before the first one of the page.
		mid := n * 3 / 8
		show, seat := fmt.Sprintf("s%04d", mid/(n/4)), fmt.Sprintf("x%07d", mid)
		claims, next, err := s.Claims(context.Background(), claimsCursorOf(show, seat), limit)
		require.NoError(t, err)
		require.Len(t, claims, limit)
		assert.Equal(t, fmt.Sprintf("x%07d", mid+1), claims[0].SeatID)
		assert.Equal(t, claimsCursorOf(show, fmt.Sprintf("x%07d", mid+limit)), next)

		n, plan := rowsRead(t, db, d, "oe_order_seat", "s", s.q.claims.sql, s.claimsArgs(show, seat, limit)...)
		t.Logf("%s: a page of %d from the middle read %d rows of oe_order_seat; plan:\n%s", d, limit, n, plan)
		if d == SQLite {
			assert.Regexp(t, `SEARCH s USING \S*INDEX \S+ \(\(show_id,seat_id\)>\(\?,\?\)\)`, plan, "the range starts at the cursor's (show, seat)")
			assert.NotContains(t, plan, "TEMP B-TREE", "no sort")
			return
		}
		assert.LessOrEqual(t, n, 2*limit, "a middle page reads about one page of rows, not the table up to the cursor")
	})
}

// TestNowTruncates: the store's clock is the database's
// time truncated to the millisecond on every dialect, as MySQL's DIV does,
// so a cancel never comes up to half a millisecond early (I4). The clock
// function is replaced with a fixed time to see the arithmetic.
func TestNowTruncates(t *testing.T) {
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		s := migrated(t, db, d)
		for _, tc := range []struct {
			at   string // 2024-01-01 00:00:00 plus this fraction of a second
			want int64
		}{
			{"000000", 1704067200000},
			{"000600", 1704067200000},
			{"001000", 1704067200001},
			{"499999", 1704067200499},
			{"500500", 1704067200500},
			{"999999", 1704067200999},
		} {
			ts := "2024-01-01 00:00:00." + tc.at
			var q string
			switch d {
			case MySQL:
				q = strings.Replace(s.q.now.sql, "UTC_TIMESTAMP(6)", "TIMESTAMP'"+ts+"'", 1)
			case Postgres:
				q = strings.Replace(s.q.now.sql, "clock_timestamp()", "TIMESTAMPTZ '"+ts+"+00'", 1)
			case SQLite:
				// SQLite's 'now' has millisecond resolution, truncated by
				// the VFS; only its arithmetic can round. A literal time
				// is rounded by SQLite's parser, so give it whole ms.
				q = strings.ReplaceAll(s.q.now.sql, "'now'", "'"+ts[:len(ts)-3]+"'")
			}
			require.NotEqual(t, s.q.now.sql, q, "the test knows the clock function")
			var got int64
			require.NoError(t, db.QueryRow(q).Scan(&got), q)
			assert.Equal(t, tc.want, got, "%s: %s", ts, q)
		}
		if d != SQLite {
			return
		}
		// SQLite runs in this process, on this clock: its millisecond is
		// never ahead of the host's truncated one.
		for i := 0; i < 500; i++ {
			before := time.Now().UnixMilli()
			var got int64
			require.NoError(t, db.QueryRow(s.q.now.sql).Scan(&got))
			after := time.Now().UnixMilli()
			require.True(t, before <= got && got <= after, "SQLite's clock %d outside the host's [%d, %d]", got, before, after)
		}
	})
}

// explainMySQL runs EXPLAIN on q with args bound as the store binds them
// (a prepared statement) and returns one map per plan row.
func explainMySQL(t *testing.T, db *sql.DB, q string, args ...any) []map[string]string {
	rows, err := db.Query("EXPLAIN "+q, args...)
	require.NoError(t, err, q)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		m := map[string]string{}
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestMySQLIDsAreBinaryAndIndexed (I10): on MySQL/MariaDB
// the id columns are ascii_bin, so they match byte for byte even from a
// utf8mb4_general_ci connection, and every lookup by id is still an index
// lookup (the collation of the column, not of the parameter, decides).
func TestMySQLIDsAreBinaryAndIndexed(t *testing.T) {
	db := testenv.MySQL(t)
	s := migrated(t, db, MySQL)
	fillClaims(t, db, MySQL, 4, 1000) // 10k orders of one seat
	var conn string
	require.NoError(t, db.QueryRow("SELECT @@collation_connection").Scan(&conn))
	t.Logf("connection collation %s", conn)

	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM oe_order WHERE order_no = ?", "O0005000").Scan(&n))
	assert.Zero(t, n, "O0005000 is not o0005000")
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM oe_order_seat WHERE show_id = ? AND seat_id = ?", "s0005", "X0005000").Scan(&n))
	assert.Zero(t, n, "X0005000 is not x0005000")

	for _, tc := range []struct {
		name, q string
		args    []any
		table   string   // the plan row to look at
		keys    []string // acceptable keys
	}{
		{"order", s.q.order.sql, []any{"o0005000"}, "oe_order", []string{"PRIMARY"}},
		{"cancel by owner", s.q.cancelOwner.sql, []any{2, "user", "o0005000", "u1"}, "oe_order", []string{"PRIMARY"}},
		{"pay by owner", s.q.payOwner.sql, []any{1, "pay-1", "o0005000", "u1"}, "oe_order", []string{"PRIMARY"}},
		{"order and seats: order", s.q.orderSeats.sql, []any{"o0005000", "o0005000"}, "o", []string{"PRIMARY"}},
		{"order and seats: seats", s.q.orderSeats.sql, []any{"o0005000", "o0005000"}, "s", []string{"oe_order_seat_order"}},
		{"delete seats", s.q.deleteSeats.sql, []any{"o0005000"}, "oe_order_seat", []string{"oe_order_seat_order"}},
		{"sell seats", s.q.sellSeats.sql, []any{"o0005000"}, "oe_order_seat", []string{"oe_order_seat_order"}},
		{"claims page", s.q.claims.sql, s.claimsArgs("s0005", "x0005500", 200), "s", []string{"PRIMARY"}},
		{"seat claim", "SELECT order_no FROM oe_order_seat WHERE show_id = ? AND seat_id = ?", []any{"s0005", "x0005000"}, "oe_order_seat", []string{"PRIMARY"}},
		{"statuses", "SELECT order_no, status FROM oe_order WHERE order_no IN (?, ?)", []any{"o0005000", "o0005001"}, "oe_order", []string{"PRIMARY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := explainMySQL(t, db, tc.q, tc.args...)
			var row map[string]string
			for _, r := range plan {
				if r["table"] == tc.table {
					row = r
				}
			}
			require.NotNil(t, row, "no plan row for %s: %v", tc.table, plan)
			t.Logf("%s: type=%s key=%s rows=%s extra=%s", tc.name, row["type"], row["key"], row["rows"], row["Extra"])
			assert.Contains(t, tc.keys, row["key"], "%s uses its index: %v", tc.name, plan)
			assert.Contains(t, []string{"const", "eq_ref", "ref", "range"}, row["type"], "%s is an index lookup, not a scan: %v", tc.name, plan)
		})
	}
}

// TestExpiredMiddlePageIsARange: the reconciler pages
// through expired orders by (expire_at, order number); a page from the
// middle of a backlog must read one page of the index, not the backlog
// before it.
func TestExpiredMiddlePageIsARange(t *testing.T) {
	const limit = 200
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		s := migrated(t, db, d)
		n := fill(t, db, d) // n pending orders, due at 0…n-1 ms
		mid := int64(n / 2)
		cursor := expiredCursor(time.UnixMilli(mid), fmt.Sprintf("o%07d", mid))
		nos, next, err := s.Expired(context.Background(), cursor, limit)
		require.NoError(t, err)
		require.Len(t, nos, limit)
		assert.Equal(t, fmt.Sprintf("o%07d", mid+1), nos[0])
		assert.Equal(t, expiredCursor(time.UnixMilli(mid+limit), fmt.Sprintf("o%07d", mid+limit)), next)

		ms, no, err := parseExpiredCursor(cursor)
		require.NoError(t, err)
		n, plan := rowsRead(t, db, d, "oe_order", "oe_order", s.q.expired.sql, s.args(s.q.expired, vals{key: ms, no: no, limit: limit})...)
		t.Logf("%s: a page of %d from the middle read %d rows of oe_order; plan:\n%s", d, limit, n, plan)
		if d == SQLite {
			assert.Regexp(t, `SEARCH oe_order USING COVERING INDEX oe_order_due \(status=\? AND \(expire_at_ms,order_no\)>\(\?,\?\)`, plan)
			assert.NotContains(t, plan, "TEMP B-TREE", "no sort")
			return
		}
		assert.LessOrEqual(t, n, 2*limit, "a middle page reads about one page of rows")
	})
}

// TestMySQLTransitionsFindTheRowByNumber (I12): with few pending orders,
// MariaDB's planner estimated one row for the status index's range as for
// the primary key's and took the status index for a transition's UPDATE,
// range-scanning the pending orders and waiting on any of them another
// transaction held (a batch stuck in a hook, the host's row lock): a
// payment then waited on another order (TestReview6PaymentWaitsOnAStuckBatch).
// Every transition that finds its order by number reaches it by the
// primary key, whatever the table holds.
func TestMySQLTransitionsFindTheRowByNumber(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	s := migrated(t, db, MySQL)
	for i, st := range []int{0, 1, 1, 2, 1} { // one pending order: the status range estimates one row, as the key
		_, err := db.ExecContext(ctx, "INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms) VALUES (?, 'u1', 's1', ?, ?, 0, 0)",
			fmt.Sprintf("o%d", i), st, int64(1)+int64(i)*1e12)
		require.NoError(t, err)
	}
	_, err := db.ExecContext(ctx, "ANALYZE TABLE oe_order")
	require.NoError(t, err)
	v := vals{no: "o2", user: "u1", reason: "timeout", payment: "pay-1", status: 2}
	for _, tc := range []struct {
		name string
		st   stmt
	}{
		{"cancel", s.q.cancel},
		{"cancel by owner", s.q.cancelOwner},
		{"cancel due", s.q.cancelDue},
		{"pay", s.q.pay},
		{"pay by owner", s.q.payOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := explainMySQL(t, db, tc.st.sql, s.args(tc.st, v)...)
			require.Len(t, plan, 1, "%v", plan)
			assert.Equal(t, "PRIMARY", plan[0]["key"], "%s reaches its order by number: %v", tc.name, plan)
		})
	}
	for _, q := range []string{
		"UPDATE oe_order SET status = 1, payment_id = ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 2 AND cancel_reason IN ('timeout', 'reconcile')",
		"UPDATE oe_order SET expire_at_ms = NOW_MS + ?, updated_at_ms = NOW_MS WHERE order_no = ? AND status + 0 = 0 AND expire_at_ms = ? AND expire_at_ms > NOW_MS + ?",
	} {
		args := []any{"pay-1", "o2"} // a deadline far ahead, so that no condition is false on its face
		if strings.Contains(q, "expire_at_ms = ?") {
			args = []any{1, "o0", int64(4102444800000), 1}
		}
		plan := explainMySQL(t, db, s.lateSQL(q), args...)
		require.Len(t, plan, 1, "%v", plan)
		assert.Equal(t, "PRIMARY", plan[0]["key"], "%s: %v", q, plan)
	}
}
