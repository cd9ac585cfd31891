package sqlstore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestCaseInsensitiveHostTableExactAndIndexed (I10): on a host's
// MySQL/MariaDB table whose id columns are utf8mb4_general_ci (the server's
// default), the store still matches ids byte for byte (a case variant of an
// order number or a user finds nothing) and every lookup by id is still an
// index lookup: the exact comparison is a second condition on the
// argument's bytes, beside the one in the column's collation that the index
// serves.
func TestCaseInsensitiveHostTableExactAndIndexed(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	for _, q := range []string{
		`CREATE TABLE order_info (
			id BIGINT AUTO_INCREMENT PRIMARY KEY,
			order_no VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL, show_id VARCHAR(64) NOT NULL,
			status TINYINT NOT NULL DEFAULT 0, expire_time DATETIME NOT NULL, pay_no VARCHAR(64) NULL,
			UNIQUE KEY uk_order_no (order_no), KEY idx_status_expire (status, expire_time, order_no)
		) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`,
		`CREATE TABLE order_seat (
			show_id VARCHAR(64) NOT NULL, seat_id VARCHAR(64) NOT NULL, order_no VARCHAR(64) NOT NULL,
			PRIMARY KEY (show_id, seat_id), KEY idx_seat_order (order_no)
		) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`,
		// 10k orders of one seat each, due at 2020-01-01 + n s.
		"INSERT INTO order_info (order_no, user_id, show_id, status, expire_time) SELECT " + padded(MySQL, "o", "n", 7) + ", 'u1', 's1', 0, TIMESTAMPADD(SECOND, n, '2020-01-01 00:00:00') FROM (" + series(4) + ") g",
		"INSERT INTO order_seat (show_id, seat_id, order_no) SELECT 's1', " + padded(MySQL, "x", "n", 7) + ", " + padded(MySQL, "o", "n", 7) + " FROM (" + series(4) + ") g",
		"ANALYZE TABLE order_info, order_seat",
	} {
		rows, err := db.QueryContext(ctx, q)
		require.NoError(t, err, q)
		rows.Close()
	}
	var collation string
	require.NoError(t, db.QueryRow("SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'order_info' AND COLUMN_NAME = 'order_no'").Scan(&collation))
	require.Equal(t, "utf8mb4_general_ci", collation)
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM order_info WHERE order_no = 'O0005000'").Scan(&n))
	require.Equal(t, 1, n, "the table itself folds case: O0005000 finds o0005000")

	s, err := New(db, MySQL, Mapping{
		Orders: Orders{Table: "order_info", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses: Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline: Time{Column: "expire_time", Type: DateTimeUTC}, PaymentID: "pay_no"},
		Claims: &Claims{Table: "order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))

	// Exact: case variants find nothing and change nothing.
	_, err = s.Order(ctx, "O0005000")
	assert.ErrorIs(t, err, expiry.ErrNotFound, "O0005000 is not o0005000")
	_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "O0005000", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	assert.ErrorIs(t, err, expiry.ErrNotFound)
	_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "o0005000", Reason: cancel.ReasonUser, UserID: "U1"})
	assert.ErrorIs(t, err, cancel.ErrNotOwner, "U1 is not u1")
	_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "o0005000", UserID: "U1", PaymentID: "p1"})
	assert.ErrorIs(t, err, cancel.ErrNotOwner)
	st, err := s.Statuses(ctx, []string{"O0005000", "o0005001"})
	require.NoError(t, err)
	require.Len(t, st, 1, "only the exact number answers")
	assert.Equal(t, expiry.StatusPending, st["o0005001"].Status)
	o, err := s.Order(ctx, "o0005000")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status, "untouched by its case variants")
	assert.Equal(t, time.Date(2020, 1, 1, 1, 23, 20, 0, time.UTC), o.ExpireAt.UTC(), "DATETIME read as UTC")

	require.True(t, s.isMariaDB(ctx), "the test servers are MariaDB: a cancel deletes its claims with DELETE … RETURNING")
	res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "o0000007", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, []string{"x0000007"}, res.Seats)
	assert.Equal(t, "u1", res.Order.UserID)
	assert.Equal(t, "s1", res.Order.ShowID)
	assert.Equal(t, time.Date(2020, 1, 1, 0, 0, 7, 0, time.UTC), res.Order.ExpireAt.UTC())

	// Indexed: the plans of the statements with their arguments.
	v := vals{no: "o0005000", user: "u1", status: 2, reason: "user", payment: "p1", showKey: "s1", seatKey: "x0005500", limit: 200}
	for _, tc := range []struct {
		name  string
		q     stmt
		table string
		keys  []string
	}{
		{"order", s.q.order, "order_info", []string{"uk_order_no"}},
		{"cancel by owner", s.q.cancelOwner, "order_info", []string{"uk_order_no"}},
		{"timeout", s.q.cancelDue, "order_info", []string{"uk_order_no"}},
		{"pay by owner", s.q.payOwner, "order_info", []string{"uk_order_no"}},
		{"order and seats: order", s.q.orderSeats, "o", []string{"uk_order_no"}},
		{"order and seats: seats", s.q.orderSeats, "s", []string{"idx_seat_order"}},
		{"delete seats", s.q.deleteSeats, "order_seat", []string{"idx_seat_order"}},
		{"delete seats returning", s.q.deleteReturning, "order_seat", []string{"idx_seat_order"}},
		{"claims page", s.q.claims, "s", []string{"PRIMARY"}},
		{"claims page: its orders", s.q.claims, "o", []string{"uk_order_no"}},
		{"expired page", s.q.expired, "order_info", []string{"idx_status_expire"}},
		{"overdue", s.q.overdue, "order_info", []string{"idx_status_expire"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := s.args(tc.q, v)
			if tc.q.sql == s.q.expired.sql {
				args = s.args(tc.q, vals{key: int64(1577836800000000 + 5000*1000000), no: "o0005000", limit: 200})
			}
			plan := explainMySQL(t, db, tc.q.sql, args...)
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

// TestOverdueIsARangeOfTheIndex: Overdue reads the
// index range of the overdue orders, not the table: with 1 % of 100k
// pending orders (10k on SQLite) overdue, the plan is a range of the
// (status, expire_at_ms, order_no) index and PostgreSQL and MariaDB read
// about that 1 %. (Before, on PostgreSQL, the clock in a subquery hid its
// value from the planner, which guessed a third of the table and chose a
// sequential scan.)
func TestOverdueIsARangeOfTheIndex(t *testing.T) {
	ctx := context.Background()
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		s := migrated(t, db, d)
		n := fill(t, db, d) // pending, due at 0 … n-1 ms
		// All but the first 1 % are due in a day.
		_, err := db.ExecContext(ctx, rebind(d, "UPDATE oe_order SET expire_at_ms = expire_at_ms + ? WHERE expire_at_ms >= ?"), time.Now().Add(24*time.Hour).UnixMilli(), n/100)
		require.NoError(t, err)
		analyze := "ANALYZE"
		if d == MySQL {
			analyze = "ANALYZE TABLE oe_order"
		}
		rows, err := db.QueryContext(ctx, analyze)
		require.NoError(t, err)
		rows.Close()
		got, oldest, err := s.Overdue(ctx)
		require.NoError(t, err)
		assert.Equal(t, n/100, got)
		assert.Greater(t, oldest, 50*365*24*time.Hour, "the oldest was due at 1970-01-01")
		read, plan := rowsRead(t, db, d, "oe_order", "oe_order", s.q.overdue.sql)
		t.Logf("%s: Overdue over %d orders, %d overdue, read %d rows; plan:\n%s", d, n, n/100, read, plan)
		switch d {
		case SQLite:
			assert.Contains(t, plan, "USING COVERING INDEX oe_order_due (status=? AND expire_at_ms<?)")
		case Postgres:
			assert.Contains(t, plan, `"Index Name": "oe_order_due"`)
			assert.LessOrEqual(t, read, 2*n/100)
		default:
			assert.LessOrEqual(t, read, 2*n/100)
		}
	})
}
