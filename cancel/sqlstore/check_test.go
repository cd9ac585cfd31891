package sqlstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// TestCheckNamesWhatIsWrong: Check reads the live database and
// names each way SeatFlow's tables can fail the mapping, one problem per
// case, on every dialect, so a host learns it at startup rather than from
// a SQL error at the first expiry.
func TestCheckNamesWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	without := func(frag string) func([]string) []string {
		return func(ddl []string) []string {
			var out []string
			for _, q := range ddl {
				if !strings.Contains(q, frag) {
					out = append(out, q)
				}
			}
			return out
		}
	}
	replace := func(old, new string) func([]string) []string {
		return func(ddl []string) []string {
			out := make([]string, len(ddl))
			for i, q := range ddl {
				out[i] = strings.ReplaceAll(q, old, new)
			}
			return out
		}
	}
	for _, tc := range []struct {
		name      string
		ddl       func([]string) []string
		mapping   func(*sqlstore.Mapping)
		noMigrate bool
		notOn     sqlstore.Dialect // SQLite ignores lengths
		want      string
		also      string // a second problem the case makes
	}{
		{name: "reason column too short", ddl: replace("cancel_reason VARCHAR(32)", "cancel_reason VARCHAR(8)"), notOn: sqlstore.SQLite, want: "order_info.cancel_reason (cancel reason) holds 8 characters"},
		{name: "orders table missing", mapping: func(m *sqlstore.Mapping) { m.Orders.Table = "order_infos" }, want: "orders table order_infos does not exist"},
		{name: "column missing", mapping: func(m *sqlstore.Mapping) { m.Orders.Deadline.Column = "expire_at" }, want: "orders table order_info has no deadline column expire_at",
			also: "orders table order_info: NOT NULL columns without a default that Place does not write: expire_time"},
		{name: "optional column missing", mapping: func(m *sqlstore.Mapping) { m.Orders.Version = "version" }, want: "has no version column version"},
		{name: "string statuses on an integer column", mapping: func(m *sqlstore.Mapping) {
			m.Orders.Statuses = sqlstore.Statuses{Pending: "NEW", Paid: []any{"PAID"}, Cancelled: []any{"CANCELLED"}}
		}, want: "order_info.status (status): is"},
		{name: "epoch milliseconds on a datetime", mapping: func(m *sqlstore.Mapping) { m.Orders.Deadline.Type = sqlstore.EpochMillis }, want: "order_info.expire_time (deadline): is"},
		{name: "an id in an integer column", ddl: replace("user_id       VARCHAR(64)", "user_id       BIGINT"), want: "order_info.user_id (user): is"},
		{name: "no scan index", ddl: without("idx_status_expire"), want: "no index serves the expiry scan"},
		{name: "scan index without the order number", ddl: replace("(status, expire_time, order_no)", "(status, expire_time)"), want: "no index serves the expiry scan"},
		{name: "scan index in the wrong order", ddl: replace("(status, expire_time, order_no)", "(expire_time, status, order_no)"), want: "no index serves the expiry scan"},
		{name: "order number not unique", ddl: replace("CREATE UNIQUE INDEX uk_order_no", "CREATE INDEX uk_order_no"), want: "the order number order_no is not unique"},
		{name: "condition column missing", mapping: func(m *sqlstore.Mapping) { m.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: 1}} }, want: "has no condition column tenant_id"},
		{name: "claims table missing", mapping: func(m *sqlstore.Mapping) { m.Claims.Table = "order_seats" }, want: "claims table order_seats does not exist"},
		{name: "claims column missing", mapping: func(m *sqlstore.Mapping) { m.Claims.SeatID = "seat_no" }, want: "claims table order_seat has no seat column seat_no",
			also: "claims table order_seat: NOT NULL columns without a default that Place does not write: seat_id"},
		{name: "a NOT NULL column without a default that Place does not write", ddl: replace("amount_cents  INT         NOT NULL DEFAULT 0", "amount_cents  INT         NOT NULL"),
			want: "orders table order_info: NOT NULL columns without a default that Place does not write: amount_cents (the first Place would fail)"},
		{name: "a fill column missing", mapping: func(m *sqlstore.Mapping) { m.Claims.Fill = []sqlstore.Condition{{Column: "price", Value: 0}} }, want: "claims table order_seat has no fill column price"},
		{name: "claims without an order number index", ddl: without("idx_seat_order"), want: "no index leads with the order number order_no"},
		{name: "claims not unique per seat", ddl: replace("PRIMARY KEY (show_id, seat_id)", "PRIMARY KEY (show_id, seat_id, order_no)"), want: "no unique key keeps one live claim per seat, the last defence against a double sale: want a unique key on (show_id, seat_id)"},
		{name: "the library's own table missing", noMigrate: true, want: "oe_payment_discrepancy does not exist"},
	} {
		for _, d := range allDialects {
			if d == tc.notOn {
				continue
			}
			t.Run(tc.name+"/"+string(d), func(t *testing.T) {
				db := openDB(t, d)
				ddl := seatflow.ddl(d)
				if tc.ddl != nil {
					ddl = tc.ddl(ddl)
				}
				applyDDL(t, db, ddl)
				m := seatflow.mapping
				c := *m.Claims
				m.Claims = &c
				if tc.mapping != nil {
					tc.mapping(&m)
				}
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				if !tc.noMigrate {
					require.NoError(t, s.Migrate(ctx))
				}
				err = s.Check(ctx)
				require.ErrorIs(t, err, sqlstore.ErrMapping)
				assert.Contains(t, err.Error(), tc.want)
				n := 1
				if tc.also != "" {
					assert.Contains(t, err.Error(), tc.also)
					n = 2
				}
				assert.Equal(t, n, strings.Count(err.Error(), "\n  "), "exactly %d problem(s): %v", n, err)
				t.Log(err)
			})
		}
	}
}
