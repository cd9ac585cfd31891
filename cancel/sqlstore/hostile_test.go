package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Hostile-but-legal input on the host's own tables (I13): what a
// real orders table holds besides the library's rows.

// placeTx places p on s in a transaction of its own.
func placeTx(t *testing.T, db *sql.DB, s *sqlstore.Store, p cancel.Placement) error {
	t.Helper()
	tx, err := db.Begin()
	require.NoError(t, err)
	if err := s.Place(context.Background(), tx, p); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func rebindQ(d sqlstore.Dialect, q string) string {
	if d != sqlstore.Postgres {
		return q
	}
	n := 0
	var b strings.Builder
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestTenantsShareOrderNumbers: another tenant's order under the same
// number, with the same seats, in the same tables, is invisible to a store
// scoped to tenant 7, and none of its calls touches it.
func TestTenantsShareOrderNumbers(t *testing.T) {
	ctx := context.Background()
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			s := hostStore(t, db, d, shop)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			due := now.Add(-time.Minute).Unix()
			// Tenant 8's rows, written by the host: same number, same show and seat.
			for _, q := range []string{
				"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (8, 'o-1', 'alice', 'ev', 'NEW', ?)",
				"INSERT INTO shop_ticket (tenant_id, event_id, seat_code, order_code, status) VALUES (8, 'ev', 'A1', 'o-1', 'HELD')",
			} {
				args := []any{}
				if strings.Contains(q, "due_at") {
					args = append(args, due)
				}
				_, err := db.ExecContext(ctx, rebindQ(d, q), args...)
				require.NoError(t, err, q)
			}
			_, err = s.Order(ctx, "o-1")
			assert.ErrorIs(t, err, expiry.ErrNotFound, "tenant 8's order is not tenant 7's")
			nos, _, err := s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Empty(t, nos, "tenant 8's due order is not in tenant 7's scan")
			n, _, err := s.Overdue(ctx)
			require.NoError(t, err)
			assert.Zero(t, n)

			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "o-1", UserID: "alice", ShowID: "ev", Seats: []string{"A1"}, ExpireAt: now.Add(-time.Second)}),
				"tenant 7 places its own o-1 and claims its own A1")
			res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "o-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.Equal(t, []string{"A1"}, res.Seats)

			var state, ticket string
			require.NoError(t, db.QueryRowContext(ctx, "SELECT o.state, t.status FROM shop_order o JOIN shop_ticket t ON t.tenant_id = o.tenant_id AND t.order_code = o.order_code WHERE o.tenant_id = 8").Scan(&state, &ticket))
			assert.Equal(t, "NEW", state, "tenant 8's order untouched")
			assert.Equal(t, "HELD", ticket, "tenant 8's claim untouched")
			require.NoError(t, db.QueryRowContext(ctx, "SELECT state FROM shop_order WHERE tenant_id = 7").Scan(&state))
			assert.Equal(t, "EXPIRED", state, "a timeout writes the host's timeout code")
			st, err := s.Statuses(ctx, []string{"o-1"})
			require.NoError(t, err)
			require.Len(t, st, 1)
			assert.Equal(t, expiry.StatusCancelled, st["o-1"].Status)
		})
	}
}

// TestSoftDeletedRowsAreInvisible: a row the host soft-deleted (deleted = 1)
// is never read, cancelled, paid or scanned, even when it is pending and
// due; its number stays taken (the unique key is the host's).
func TestSoftDeletedRowsAreInvisible(t *testing.T) {
	ctx := context.Background()
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			s := hostStore(t, db, d, window)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			created := now.Add(-time.Hour).UnixMilli() // due 45 minutes ago
			_, err = db.ExecContext(ctx, rebindQ(d, "INSERT INTO orders (number, customer, show_code, status, created_ms, deleted) VALUES ('gone-1', 'u1', 'sh', 10, ?, 1)"), created)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO order_seats (show_code, seat, number) VALUES ('sh', 'A1', 'gone-1')")
			require.NoError(t, err)

			_, err = s.Order(ctx, "gone-1")
			assert.ErrorIs(t, err, expiry.ErrNotFound)
			_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "gone-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			assert.ErrorIs(t, err, expiry.ErrNotFound)
			_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "gone-1", PaymentID: "pay-1"})
			assert.ErrorIs(t, err, expiry.ErrNotFound)
			nos, _, err := s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Empty(t, nos)
			n, _, err := s.Overdue(ctx)
			require.NoError(t, err)
			assert.Zero(t, n)
			st, err := s.Statuses(ctx, []string{"gone-1"})
			require.NoError(t, err)
			assert.Empty(t, st)
			claims, _, err := s.Claims(ctx, "", 10)
			require.NoError(t, err)
			assert.Empty(t, claims, "a soft-deleted order's claims are not restored into the seat store")
			err = placeTx(t, db, s, cancel.Placement{OrderNo: "gone-1", UserID: "u1", ShowID: "sh", Seats: []string{"B1"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, cancel.ErrOrderExists, "the number is still the host's unique key")

			var status, deleted, version int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT status, deleted, lock_version FROM orders WHERE number = 'gone-1'").Scan(&status, &deleted, &version))
			assert.Equal(t, []int{10, 1, 0}, []int{status, deleted, version}, "untouched")
			var seats int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM order_seats WHERE number = 'gone-1'").Scan(&seats))
			assert.Equal(t, 1, seats)
		})
	}
}

// TestVersionColumn: every write of the library increments the host's
// optimistic-locking column, so the host's ORM, holding the row it read
// before, fails its own update instead of overwriting the cancel; a bump
// by the host in between does not stop the library (it compares the
// status, not the version).
func TestVersionColumn(t *testing.T) {
	ctx := context.Background()
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			s := hostStore(t, db, d, window)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			version := func(no string) int {
				var v int
				require.NoError(t, db.QueryRowContext(ctx, rebindQ(d, "SELECT lock_version FROM orders WHERE number = ?"), no).Scan(&v))
				return v
			}
			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "v-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: now.Add(-time.Second)}))
			read := version("v-1") // the host's ORM read the row
			// The host bumps the version concurrently (its own edit).
			_, err = db.ExecContext(ctx, rebindQ(d, "UPDATE orders SET total = 100, lock_version = lock_version + 1 WHERE number = ? AND lock_version = ?"), "v-1", read)
			require.NoError(t, err)
			res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "v-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			assert.True(t, res.Changed, "the host's bump does not stop the cancel")
			assert.Equal(t, read+2, version("v-1"), "the cancel incremented the version")
			r, err := db.ExecContext(ctx, rebindQ(d, "UPDATE orders SET total = 200, lock_version = lock_version + 1 WHERE number = ? AND lock_version = ?"), "v-1", read+1)
			require.NoError(t, err)
			n, err := r.RowsAffected()
			require.NoError(t, err)
			assert.Zero(t, n, "the ORM's stale update fails on the version the library bumped")
			var status int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT status FROM orders WHERE number = 'v-1'").Scan(&status))
			assert.Equal(t, 31, status, "a timeout writes the host's timeout code")

			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "v-2", UserID: "u1", ShowID: "sh", Seats: []string{"A2"}, ExpireAt: now.Add(time.Hour)}))
			_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "v-2", PaymentID: "pay-2"})
			require.NoError(t, err)
			assert.Equal(t, 1, version("v-2"), "a payment increments it too")
			again, err := s.PayPending(ctx, cancel.Payment{OrderNo: "v-2", PaymentID: "pay-2"})
			require.NoError(t, err)
			assert.False(t, again.Changed)
			assert.Equal(t, 1, version("v-2"), "a repeated callback writes nothing")
			// A host value that also means paid (used) reads as paid.
			_, err = db.ExecContext(ctx, "UPDATE orders SET status = 21 WHERE number = 'v-2'")
			require.NoError(t, err)
			o, err := s.Order(ctx, "v-2")
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPaid, o.Status, "21 (used) is decided: paid")
		})
	}
}

// TestNumericUserIDs: a host whose user column is an integer. A user id
// is its canonical decimal form; "042", "+42" and "alice" own no order (on
// MySQL "alice" = 0 and "042" = 42 would match numerically).
func TestNumericUserIDs(t *testing.T) {
	ctx := context.Background()
	m := window.mapping
	m.Orders.NumericUserID = true
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			db := openDB(t, d)
			ddl := window.ddl(d)
			ddl[0] = regexp.MustCompile(`customer\s+VARCHAR\(64\)[^,]*NOT NULL`).ReplaceAllString(ddl[0], "customer BIGINT NOT NULL")
			applyDDL(t, db, ddl)
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
			now, err := s.Now(ctx)
			require.NoError(t, err)
			err = placeTx(t, db, s, cancel.Placement{OrderNo: "n-0", UserID: "alice", ShowID: "sh", Seats: []string{"A0"}, ExpireAt: now.Add(time.Hour)})
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "alice is not a number")
			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "n-1", UserID: "42", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)}))
			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "n-2", UserID: "0", ShowID: "sh", Seats: []string{"A2"}, ExpireAt: now.Add(time.Hour)}))
			o, err := s.Order(ctx, "n-1")
			require.NoError(t, err)
			assert.Equal(t, "42", o.UserID)
			for _, u := range []string{"042", "+42", "42.0", "alice", "4 2"} {
				_, err := s.CancelPending(ctx, cancel.Request{OrderNo: "n-1", Reason: cancel.ReasonUser, UserID: u})
				assert.ErrorIs(t, err, cancel.ErrNotOwner, "%q is not user 42", u)
			}
			_, err = s.CancelPending(ctx, cancel.Request{OrderNo: "n-2", Reason: cancel.ReasonUser, UserID: "alice"})
			assert.ErrorIs(t, err, cancel.ErrNotOwner, "alice is not user 0")
			_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "n-2", UserID: "00", PaymentID: "p0"})
			assert.ErrorIs(t, err, cancel.ErrNotOwner, "00 is not user 0")
			res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "n-1", Reason: cancel.ReasonUser, UserID: "42"})
			require.NoError(t, err)
			assert.True(t, res.Changed)
			assert.Equal(t, 30, statusOf(t, db, d, "n-1"), "a user's cancel writes the first cancelled value")
		})
	}
}

func statusOf(t *testing.T, db *sql.DB, d sqlstore.Dialect, no string) int {
	var v int
	require.NoError(t, db.QueryRow(rebindQ(d, "SELECT status FROM orders WHERE number = ?"), no).Scan(&v))
	return v
}

// TestOverdue: the count of pending orders past their
// deadline by the database's clock, and how long ago the oldest passed, on
// the library's schema and on every host schema, on every dialect.
func TestOverdue(t *testing.T) {
	ctx := context.Background()
	for _, hs := range append([]hostSchema{{name: "default"}}, hostSchemas...) {
		for _, d := range allDialects {
			if d == hs.notOn {
				continue
			}
			t.Run(hs.name+"/"+string(d), func(t *testing.T) {
				db := openDB(t, d)
				var s *sqlstore.Store
				if hs.ddl == nil {
					var err error
					s, err = sqlstore.New(db, d)
					require.NoError(t, err)
					require.NoError(t, s.Migrate(ctx))
				} else {
					s = hostStore(t, db, d, hs)
				}
				n, oldest, err := s.Overdue(ctx)
				require.NoError(t, err)
				assert.Zero(t, n)
				assert.Zero(t, oldest, "0 when none")
				now, err := s.Now(ctx)
				require.NoError(t, err)
				for i, ago := range []time.Duration{-time.Hour, 10 * time.Second, 90 * time.Second, 30 * time.Second, 50 * time.Second} {
					require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: fmt.Sprintf("od-%d", i), UserID: "u1", ShowID: "sh", Seats: []string{fmt.Sprintf("S%d", i)}, ExpireAt: now.Add(-ago)}))
				}
				_, err = s.PayPending(ctx, cancel.Payment{OrderNo: "od-4", PaymentID: "p4"}) // decided: not overdue
				require.NoError(t, err)
				n, oldest, err = s.Overdue(ctx)
				require.NoError(t, err)
				assert.Equal(t, 3, n, "pending and past the deadline; the future one and the paid one are not")
				assert.InDelta(t, (90 * time.Second).Seconds(), oldest.Seconds(), 5, "the oldest deadline passed 90 s ago (by the database's clock)")
				res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "od-2", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				require.NoError(t, err)
				require.True(t, res.Changed)
				n, oldest, err = s.Overdue(ctx)
				require.NoError(t, err)
				assert.Equal(t, 2, n)
				assert.InDelta(t, (30 * time.Second).Seconds(), oldest.Seconds(), 5)
			})
		}
	}
}

// TestMappingRefusesHostileNames: a mapping is the host's configuration,
// but its names and values still never reach SQL unless they are plain
// identifiers and plain constants.
func TestMappingRefusesHostileNames(t *testing.T) {
	db := openSQLite(t)
	for _, tc := range []struct {
		name string
		edit func(m *sqlstore.Mapping)
	}{
		{"quote in a table", func(m *sqlstore.Mapping) { m.Orders.Table = `order"; DROP TABLE x; --` }},
		{"backtick in a column", func(m *sqlstore.Mapping) { m.Orders.OrderNo = "no`x" }},
		{"space in a column", func(m *sqlstore.Mapping) { m.Orders.Status = "status code" }},
		{"three-part table", func(m *sqlstore.Mapping) { m.Orders.Table = "a.b.c" }},
		{"digit first", func(m *sqlstore.Mapping) { m.Orders.UserID = "1user" }},
		{"empty column", func(m *sqlstore.Mapping) { m.Orders.ShowID = "" }},
		{"quote in a status", func(m *sqlstore.Mapping) { m.Orders.Statuses.Pending = "NEW'); --" }},
		{"float status", func(m *sqlstore.Mapping) { m.Orders.Statuses.Pending = 0.5 }},
		{"mixed status kinds", func(m *sqlstore.Mapping) { m.Orders.Statuses.Paid = []any{"PAID"} }},
		{"status twice", func(m *sqlstore.Mapping) { m.Orders.Statuses.Cancelled = []any{0} }},
		{"paying is pending", func(m *sqlstore.Mapping) { m.Orders.Statuses.Paying = []any{0} }},
		{"paying is paid", func(m *sqlstore.Mapping) { m.Orders.Statuses.Paying = []any{1} }},
		{"paying of another kind", func(m *sqlstore.Mapping) { m.Orders.Statuses.Paying = []any{"PAYING"} }},
		{"quote in a paying status", func(m *sqlstore.Mapping) { m.Orders.Statuses.Paying = []any{"x' OR '1"} }},
		{"reason's status paying", func(m *sqlstore.Mapping) {
			m.Orders.Statuses.Paying = []any{5}
			m.Orders.Statuses.CancelledBy = map[cancel.Reason]any{cancel.ReasonTimeout: 5}
		}},
		{"reason's status not cancelled", func(m *sqlstore.Mapping) {
			m.Orders.Statuses.CancelledBy = map[cancel.Reason]any{cancel.ReasonTimeout: 1}
		}},
		{"hostile condition value", func(m *sqlstore.Mapping) {
			m.Orders.Where = []sqlstore.Condition{{Column: "tenant", Value: "1 OR 1=1"}}
		}},
		{"hostile condition column", func(m *sqlstore.Mapping) {
			m.Orders.Where = []sqlstore.Condition{{Column: "tenant=1 OR tenant", Value: 1}}
		}},
		{"no deadline", func(m *sqlstore.Mapping) { m.Orders.Deadline = sqlstore.Time{} }},
		{"window in seconds not whole", func(m *sqlstore.Mapping) {
			m.Orders.Deadline = sqlstore.Time{}
			m.Orders.CreatedAt = sqlstore.Time{Column: "c", Type: sqlstore.EpochSeconds}
			m.Orders.Window = 1500 * time.Millisecond
		}},
		{"claim states without a column", func(m *sqlstore.Mapping) { m.Claims.State = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sqlstore.DefaultMapping()
			tc.edit(&m)
			_, err := sqlstore.New(db, sqlstore.SQLite, m)
			assert.Error(t, err)
			t.Log(err)
		})
	}
	_, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.DefaultMapping(), sqlstore.DefaultMapping())
	assert.Error(t, err, "one mapping")
}

// TestMappingWithoutStatusSaysWhatToMap: some shops keep the checkout
// hold in a table of its own whose rows are deleted when they expire, with
// no status column. It cannot be the orders table (a status is what says
// paid or cancelled), and New says what to map instead.
func TestMappingWithoutStatusSaysWhatToMap(t *testing.T) {
	m := sqlstore.DefaultMapping()
	m.Orders.Status = ""
	_, err := sqlstore.New(openSQLite(t), sqlstore.SQLite, m)
	require.Error(t, err)
	for _, want := range []string{"Orders.Status is empty", "hold table", "as Claims", "without a Mapping"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestSessionTimeZone: a connection whose session time zone is not UTC
// (+05:30, no whole hour) changes nothing: DATETIME/timestamp columns hold
// UTC wall times compared with the UTC clock, TIMESTAMP/timestamptz
// columns are instants, and the deadline read back is the one placed.
func TestSessionTimeZone(t *testing.T) {
	ctx := context.Background()
	for _, hs := range []hostSchema{seatflow, instant} {
		for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
			t.Run(hs.name+"/"+string(d), func(t *testing.T) {
				db := openDB(t, d)
				db.SetMaxOpenConns(1) // the one session whose zone is set
				set := "SET time_zone = '+05:30'"
				if d == sqlstore.Postgres {
					set = "SET TIME ZONE 'Asia/Kolkata'"
				}
				_, err := db.ExecContext(ctx, set)
				require.NoError(t, err)
				s := hostStore(t, db, d, hs)
				now, err := s.Now(ctx)
				require.NoError(t, err)
				assert.WithinDuration(t, time.Now(), now, 5*time.Second, "the store's clock is UTC-based")
				past, future := now.Add(-10*time.Second).Truncate(time.Second), now.Add(time.Hour).Truncate(time.Second)
				require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "tz-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: past}))
				require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "tz-2", UserID: "u1", ShowID: "sh", Seats: []string{"A2"}, ExpireAt: future}))
				o, err := s.Order(ctx, "tz-2")
				require.NoError(t, err)
				assert.Equal(t, future.UTC(), o.ExpireAt.UTC(), "read back as placed")
				nos, _, err := s.Expired(ctx, "", 10)
				require.NoError(t, err)
				assert.Equal(t, []string{"tz-1"}, nos)
				n, oldest, err := s.Overdue(ctx)
				require.NoError(t, err)
				assert.Equal(t, 1, n)
				assert.InDelta(t, 10, oldest.Seconds(), 3)
				res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "tz-2", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				require.NoError(t, err)
				assert.False(t, res.Changed, "not due for an hour, whatever the session's zone (I4)")
				res, err = s.CancelPending(ctx, cancel.Request{OrderNo: "tz-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				require.NoError(t, err)
				assert.True(t, res.Changed)
			})
		}
	}
}
