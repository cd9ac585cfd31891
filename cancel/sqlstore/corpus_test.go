package sqlstore_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The corpus: the order tables of public projects the mapping was
// not designed around, as their own DDL (or ORM) creates them, in
// testdata/corpus/<name>.<dialect>.sql (each file names its source). For
// each, TestCorpusMapping records what maps today, word for word:
//
//   - the nearest Mapping of the tables as shipped, and New's and Check's
//     answer to it;
//   - where the host can close the gap by adding to its own schema, what it
//     must add (columns, keys, a claims table), Check's answer before and
//     after, the first Place's answer, the defaults Place then needs; and
//     the whole store suite on the result.
//
// The messages are asserted exactly, so this test fails when a gap closes
// or a message changes: update the entry and the table in README.md
// ("Corpus of public schemas").

// corpusEntry is one project's tables.
type corpusEntry struct {
	name   string // testdata/corpus/<name>.<dialect>.sql
	source string // project, file, commit
	// mapping is the nearest Mapping of the tables as shipped, with today's
	// options (time types differ by dialect where the ORM's do).
	mapping func(d sqlstore.Dialect) sqlstore.Mapping
	// newErr is New's error for mapping, one line per problem (nil:
	// accepted); checkErr is Check's problems on the shipped tables (nil:
	// they match). Check runs only when New accepts.
	newErr   []string
	checkErr map[sqlstore.Dialect][]string
	// adds is what the host must add to its schema for the library today;
	// nil when additions cannot close the gap.
	adds *corpusAdds
	// caseFolding: on MySQL the tables' keys fold case (a *_ci collation).
	caseFolding bool
}

// corpusAdds is a host's additions to its own schema and the mapping then.
type corpusAdds struct {
	mapping func(d sqlstore.Dialect) sqlstore.Mapping
	ddl     func(d sqlstore.Dialect) []string
	// before is Check's problems with mapping on the shipped tables, after
	// those once ddl ran (nil: they match).
	before, after map[sqlstore.Dialect][]string
	// place is the first Place's error once ddl ran ("": placed); defaults
	// give the NOT NULL columns Place does not write a default, so that it
	// can (nil: none needed).
	place    map[sqlstore.Dialect]string
	defaults func(d sqlstore.Dialect) []string
}

var corpusDialects = []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres}

// onBoth is the same answer on both dialects.
func onBoth(lines ...string) map[sqlstore.Dialect][]string {
	return map[sqlstore.Dialect][]string{sqlstore.MySQL: lines, sqlstore.Postgres: lines}
}

// noShowColumn is New's answer to a mapping without a show column: no
// shop's order table has one.
const noShowColumn = `sqlstore: mapping: show column "": a name is 1-64 bytes of A-Z a-z 0-9 _, not starting with a digit`

// byDialect picks the MySQL or the PostgreSQL form.
func byDialect[T any](d sqlstore.Dialect, mysql, postgres T) T {
	if d == sqlstore.MySQL {
		return mysql
	}
	return postgres
}

// awareTime is the TimeType of an ORM's time column: MySQL DATETIME(n), read
// as UTC (Django writes UTC; GORM with loc=Local the process's zone, a gap of
// its own), PostgreSQL timestamptz.
func awareTime(d sqlstore.Dialect) sqlstore.TimeType {
	return byDialect(d, sqlstore.DateTimeUTC, sqlstore.Timestamp)
}

// claimsTable is the seat-claims table a host without one must add today:
// one row per claimed seat, unique per (show, seat), found by order number.
func claimsTable(d sqlstore.Dialect, table, orderCol, orderType, mysqlOpts string) []string {
	return []string{
		"CREATE TABLE " + table + " (show_id VARCHAR(64) NOT NULL, seat_id VARCHAR(64) NOT NULL, " + orderCol + " " + orderType + " NOT NULL, PRIMARY KEY (show_id, seat_id))" + byDialect(d, mysqlOpts, ""),
		"CREATE INDEX " + table + "_order ON " + table + " (" + orderCol + ")",
	}
}

func mallMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "oms_order", OrderNo: "order_sn", UserID: "member_id", NumericUserID: true, Status: "status",
		Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1, 2, 3}, Cancelled: []any{4, 5}},
		// The window is oms_order_setting.normal_order_overtime (120
		// minutes): read once by the host, not followed.
		CreatedAt: sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC},
		Window:    120 * time.Minute,
		UpdatedAt: sqlstore.Time{Column: "modify_time", Type: sqlstore.DateTimeUTC},
		Where:     []sqlstore.Condition{{Column: "delete_status", Value: 0}},
	}}
}

var mallEntry = corpusEntry{
	name:    "mall",
	source:  "macrozheng/mall document/sql/mall.sql @ 74eebe0",
	mapping: mallMapping,
	newErr:  []string{noShowColumn},
	adds: &corpusAdds{
		mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := mallMapping(d)
			m.Orders.ShowID, m.Orders.PaymentID = "show_id", "pay_no"
			m.Claims = &sqlstore.Claims{Table: "oms_order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_sn"}
			return m
		},
		before: onBoth(
			"orders table oms_order has no show column show_id",
			"orders table oms_order has no payment id column pay_no",
			"orders table oms_order: no index serves the expiry scan: want one on (status, create_time, order_sn), the condition columns [delete_status] may lead",
			"orders table oms_order: the order number order_sn is not unique: want a unique key on (order_sn) (the condition columns [delete_status] may join it)",
			"claims table oms_order_seat does not exist",
		),
		place: map[sqlstore.Dialect]string{
			sqlstore.MySQL:    "sqlstore: place order corpus-1: Error 1364 (HY000): Field 'receiver_name' doesn't have a default value",
			sqlstore.Postgres: `sqlstore: place order corpus-1: ERROR: null value in column "receiver_name" of relation "oms_order" violates not-null constraint (SQLSTATE 23502)`,
		},
		ddl: func(d sqlstore.Dialect) []string {
			return append([]string{
				"ALTER TABLE oms_order ADD COLUMN show_id VARCHAR(64) NULL, ADD COLUMN pay_no VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_sn ON oms_order (order_sn)",
				"CREATE INDEX idx_status_create_time ON oms_order (status, create_time, order_sn)",
			}, claimsTable(d, "oms_order_seat", "order_sn", "VARCHAR(64)", " DEFAULT CHARSET=utf8")...)
		},
		defaults: func(sqlstore.Dialect) []string {
			return []string{"ALTER TABLE oms_order ALTER COLUMN receiver_name SET DEFAULT '', ALTER COLUMN receiver_phone SET DEFAULT ''"}
		},
	},
	caseFolding: true,
}

func newbeeMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "tb_newbee_mall_order", OrderNo: "order_no", UserID: "user_id", NumericUserID: true, Status: "order_status",
		Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1, 2, 3, 4}, Cancelled: []any{-1, -2, -3},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonUser: -1, cancel.ReasonTimeout: -2, cancel.ReasonReconcile: -2}},
		// The project has no window: 30 minutes is the host's choice.
		CreatedAt: sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC},
		Window:    30 * time.Minute,
		UpdatedAt: sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
		Where:     []sqlstore.Condition{{Column: "is_deleted", Value: 0}},
	}}
}

var newbeeEntry = corpusEntry{
	name:    "newbeemall",
	source:  "newbee-ltd/newbee-mall src/main/resources/newbee_mall_schema.sql @ a069069",
	mapping: newbeeMapping,
	newErr:  []string{noShowColumn},
	adds: &corpusAdds{
		mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := newbeeMapping(d)
			m.Orders.ShowID, m.Orders.PaymentID = "show_id", "pay_no"
			m.Claims = &sqlstore.Claims{Table: "tb_newbee_mall_order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"}
			return m
		},
		before: onBoth(
			"orders table tb_newbee_mall_order has no show column show_id",
			"orders table tb_newbee_mall_order has no payment id column pay_no",
			"orders table tb_newbee_mall_order: no index serves the expiry scan: want one on (order_status, create_time, order_no), the condition columns [is_deleted] may lead",
			"orders table tb_newbee_mall_order: the order number order_no is not unique: want a unique key on (order_no) (the condition columns [is_deleted] may join it)",
			"claims table tb_newbee_mall_order_seat does not exist",
		),
		ddl: func(d sqlstore.Dialect) []string {
			return append([]string{
				"ALTER TABLE tb_newbee_mall_order ADD COLUMN show_id VARCHAR(64) NULL, ADD COLUMN pay_no VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_no ON tb_newbee_mall_order (order_no)",
				"CREATE INDEX idx_status_create_time ON tb_newbee_mall_order (order_status, create_time, order_no)",
			}, claimsTable(d, "tb_newbee_mall_order_seat", "order_no", "VARCHAR(20)", " DEFAULT CHARSET=utf8")...)
		},
	},
	caseFolding: true,
}

func litemallMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "litemall_order", OrderNo: "order_sn", UserID: "user_id", NumericUserID: true, Status: "order_status",
		Statuses: sqlstore.Statuses{Pending: 101, Paid: []any{201, 202, 203, 301, 401, 402}, Cancelled: []any{102, 103, 104},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonUser: 102, cancel.ReasonTimeout: 103, cancel.ReasonReconcile: 103}},
		// The window is the litemall_system row litemall_order_unpaid
		// (30 minutes): read once by the host, not followed.
		CreatedAt: sqlstore.Time{Column: "add_time", Type: sqlstore.DateTimeUTC},
		Window:    30 * time.Minute,
		UpdatedAt: sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
		PaymentID: "pay_id",
		Where:     []sqlstore.Condition{{Column: "deleted", Value: 0}},
	}}
}

var litemallEntry = corpusEntry{
	name:    "litemall",
	source:  "linlinjava/litemall litemall-db/sql/litemall_table.sql @ a1ef964",
	mapping: litemallMapping,
	newErr:  []string{noShowColumn},
	adds: &corpusAdds{
		mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := litemallMapping(d)
			m.Orders.ShowID = "show_id"
			m.Claims = &sqlstore.Claims{Table: "litemall_order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_sn"}
			return m
		},
		before: onBoth(
			"orders table litemall_order has no show column show_id",
			"orders table litemall_order: no index serves the expiry scan: want one on (order_status, add_time, order_sn), the condition columns [deleted] may lead",
			"orders table litemall_order: the order number order_sn is not unique: want a unique key on (order_sn) (the condition columns [deleted] may join it)",
			"claims table litemall_order_seat does not exist",
		),
		place: map[sqlstore.Dialect]string{
			sqlstore.MySQL:    "sqlstore: place order corpus-1: Error 1364 (HY000): Field 'consignee' doesn't have a default value",
			sqlstore.Postgres: `sqlstore: place order corpus-1: ERROR: null value in column "consignee" of relation "litemall_order" violates not-null constraint (SQLSTATE 23502)`,
		},
		ddl: func(d sqlstore.Dialect) []string {
			return append([]string{
				"ALTER TABLE litemall_order ADD COLUMN show_id VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_sn ON litemall_order (order_sn)",
				"CREATE INDEX idx_status_add_time ON litemall_order (order_status, add_time, order_sn)",
			}, claimsTable(d, "litemall_order_seat", "order_sn", "VARCHAR(63)", " DEFAULT CHARSET=utf8mb4")...)
		},
		defaults: func(sqlstore.Dialect) []string {
			return []string{"ALTER TABLE litemall_order ALTER COLUMN consignee SET DEFAULT '', ALTER COLUMN mobile SET DEFAULT '', " +
				"ALTER COLUMN address SET DEFAULT '', ALTER COLUMN order_price SET DEFAULT 0, ALTER COLUMN actual_price SET DEFAULT 0"}
		},
	},
	caseFolding: true,
}

func gomallMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "order", OrderNo: "order_id", UserID: "user_id", NumericUserID: true, Status: "order_state",
		Statuses: sqlstore.Statuses{Pending: "placed", Paid: []any{"paid"}, Cancelled: []any{"canceled"}},
		// gomall never expires an order: 15 minutes is the host's choice.
		CreatedAt: sqlstore.Time{Column: "created_at", Type: awareTime(d)},
		Window:    15 * time.Minute,
		UpdatedAt: sqlstore.Time{Column: "updated_at", Type: awareTime(d)},
	}}
}

var gomallEntry = corpusEntry{
	name:    "gomall",
	source:  "cloudwego/biz-demo gomall/app/order/biz/model/order.go @ 1f5ae2c",
	mapping: gomallMapping,
	newErr:  []string{noShowColumn},
	adds: &corpusAdds{
		mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := gomallMapping(d)
			m.Orders.ShowID, m.Orders.PaymentID = "show_id", "pay_no"
			m.Claims = &sqlstore.Claims{Table: "order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_id"}
			return m
		},
		before: onBoth(
			"orders table order has no show column show_id",
			"orders table order has no payment id column pay_no",
			"orders table order: no index serves the expiry scan: want one on (order_state, created_at, order_id), the condition columns [] may lead",
			"claims table order_seat does not exist",
		),
		ddl: func(d sqlstore.Dialect) []string {
			o := byDialect(d, "`order`", `"order"`)
			return append([]string{
				"ALTER TABLE " + o + " ADD COLUMN show_id VARCHAR(64) NULL, ADD COLUMN pay_no VARCHAR(64) NULL",
				// order_state is longtext on MySQL: an index takes a prefix.
				"CREATE INDEX idx_order_state_created ON " + o + " (" + byDialect(d, "order_state(32)", "order_state") + ", created_at, order_id)",
			}, claimsTable(d, "order_seat", "order_id", "VARCHAR(256)", "")...)
		},
	},
	caseFolding: true,
}

// saleorPaid are saleor's statuses of an order past its payment, and
// "partially fulfilled", which no Statuses value can be.
var saleorPaid = []any{"unfulfilled", "partially fulfilled", "fulfilled", "partially_returned", "returned"}

func saleorMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "order_order", OrderNo: "id", UserID: "user_email", Status: "status",
		Statuses: sqlstore.Statuses{Pending: "unconfirmed", Paid: saleorPaid, Cancelled: []any{"canceled", "expired"},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "expired", cancel.ReasonReconcile: "expired"}},
		// The window is the channel's expire_orders_after (60 minutes for
		// channel 1): one store per channel.
		CreatedAt: sqlstore.Time{Column: "created_at", Type: awareTime(d)},
		Window:    60 * time.Minute,
		UpdatedAt: sqlstore.Time{Column: "updated_at", Type: awareTime(d)},
		Where:     []sqlstore.Condition{{Column: "channel_id", Value: 1}},
	}}
}

var saleorEntry = corpusEntry{
	name:    "saleor",
	source:  "saleor/saleor saleor/order/models.py @ 723cd4e",
	mapping: saleorMapping,
	newErr: []string{
		noShowColumn,
		`sqlstore: mapping: paid status "partially fulfilled": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
	},
	adds: &corpusAdds{
		mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := saleorMapping(d)
			m.Orders.ShowID, m.Orders.PaymentID = "show_id", "pay_no"
			// "partially fulfilled" left out: reading such an order is an
			// error (none of the mapping's statuses).
			m.Orders.Statuses.Paid = []any{"unfulfilled", "fulfilled", "partially_returned", "returned"}
			m.Claims = &sqlstore.Claims{Table: "order_orderseat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_id"}
			return m
		},
		before: map[sqlstore.Dialect][]string{
			sqlstore.MySQL: {
				"orders table order_order has no show column show_id",
				"orders table order_order has no payment id column pay_no",
				"orders table order_order: no index serves the expiry scan: want one on (status, created_at, id), the condition columns [channel_id] may lead",
				"claims table order_orderseat does not exist",
			},
			sqlstore.Postgres: {
				"orders column order_order.id (order number): is uuid (other), the mapping needs string",
				"orders table order_order has no show column show_id",
				"orders table order_order has no payment id column pay_no",
				"orders table order_order: no index serves the expiry scan: want one on (status, created_at, id), the condition columns [channel_id] may lead",
				"claims table order_orderseat does not exist",
			},
		},
		after: map[sqlstore.Dialect][]string{sqlstore.Postgres: {
			"orders column order_order.id (order number): is uuid (other), the mapping needs string",
			"claims column order_orderseat.order_id (order number): is uuid (other), the mapping needs string",
		}},
		place: map[sqlstore.Dialect]string{
			sqlstore.MySQL: "sqlstore: place order corpus-1: Error 1364 (HY000): Field 'number' doesn't have a default value",
		},
		ddl: func(d sqlstore.Dialect) []string {
			return append([]string{
				"ALTER TABLE order_order ADD COLUMN show_id VARCHAR(64) NULL, ADD COLUMN pay_no VARCHAR(64) NULL",
				"CREATE INDEX order_status_created_at ON order_order (status, created_at, id)",
			}, claimsTable(d, "order_orderseat", "order_id", byDialect(d, "CHAR(32)", "UUID"), "")...)
		},
		defaults: func(d sqlstore.Dialect) []string {
			return []string{"ALTER TABLE order_order " + byDialect(d,
				"MODIFY number integer NOT NULL AUTO_INCREMENT",
				"ALTER COLUMN number SET DEFAULT nextval('order_order_number_seq')") +
				", ALTER COLUMN use_old_id SET DEFAULT false, ALTER COLUMN authorize_status SET DEFAULT 'none'" +
				", ALTER COLUMN charge_status SET DEFAULT 'none', ALTER COLUMN origin SET DEFAULT 'checkout'" +
				", ALTER COLUMN currency SET DEFAULT 'USD', ALTER COLUMN lines_count SET DEFAULT 0" +
				", ALTER COLUMN total_gross_amount SET DEFAULT 0, ALTER COLUMN customer_note SET DEFAULT ''"}
		},
	},
	caseFolding: true,
}

var pretixEntry = corpusEntry{
	name:   "pretix",
	source: "pretix/pretix src/pretix/base/models/orders.py @ 000b66d",
	mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
		organizer := []sqlstore.Condition{{Column: "organizer_id", Value: 1}}
		return sqlstore.Mapping{
			Orders: sqlstore.Orders{
				Table: "pretixbase_order", OrderNo: "code", UserID: "email", ShowID: "event_id", Status: "status",
				Statuses: sqlstore.Statuses{Pending: "n", Paid: []any{"p"}, Cancelled: []any{"c", "e"},
					CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "e", cancel.ReasonReconcile: "e"}},
				Deadline:  sqlstore.Time{Column: "expires", Type: awareTime(d)},
				UpdatedAt: sqlstore.Time{Column: "last_modified", Type: awareTime(d)},
				Where:     organizer,
			},
			Claims: &sqlstore.Claims{Table: "pretixbase_orderposition", ShowID: "subevent_id", SeatID: "seat_id", OrderNo: "order_id", Where: organizer},
		}
	},
	checkErr: map[sqlstore.Dialect][]string{
		sqlstore.MySQL: {
			"orders column pretixbase_order.event_id (show): is int(11) (integer), the mapping needs string",
			"orders table pretixbase_order: no index serves the expiry scan: want one on (status, expires, code), the condition columns [organizer_id] may lead",
			"claims column pretixbase_orderposition.subevent_id (show): is int(11) (integer), the mapping needs string",
			"claims column pretixbase_orderposition.seat_id (seat): is int(11) (integer), the mapping needs string",
			"claims column pretixbase_orderposition.order_id (order number): is int(11) (integer), the mapping needs string",
			"claims table pretixbase_orderposition: no unique key on (subevent_id, seat_id): one live claim per seat is the last defence against a double sale",
		},
		sqlstore.Postgres: {
			"orders column pretixbase_order.event_id (show): is integer (integer), the mapping needs string",
			"orders table pretixbase_order: no index serves the expiry scan: want one on (status, expires, code), the condition columns [organizer_id] may lead",
			"claims column pretixbase_orderposition.subevent_id (show): is integer (integer), the mapping needs string",
			"claims column pretixbase_orderposition.seat_id (seat): is integer (integer), the mapping needs string",
			"claims column pretixbase_orderposition.order_id (order number): is integer (integer), the mapping needs string",
			"claims table pretixbase_orderposition: no unique key on (subevent_id, seat_id): one live claim per seat is the last defence against a double sale",
		},
	},
}

var ttmsEntry = corpusEntry{
	name:   "ttms",
	source: "XianPostsandTelecommunications/TTMS ttms-backend/internal/model/automigrate/order.go @ a9b890b",
	mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
		return sqlstore.Mapping{
			Orders: sqlstore.Orders{
				Table: "orders", OrderNo: "order_id", UserID: "user_id", NumericUserID: true, ShowID: "plan_id", Status: "status",
				// json.Marshal's output, quotes included; no cancelled
				// value: a cancel soft-deletes the order.
				Statuses:  sqlstore.Statuses{Pending: `"未支付"`, Paid: []any{`"已支付"`}},
				CreatedAt: sqlstore.Time{Column: "created_at", Type: awareTime(d)},
				Window:    15 * time.Minute,
				UpdatedAt: sqlstore.Time{Column: "updated_at", Type: awareTime(d)},
				// GORM's soft delete: deleted_at IS NULL.
				Where: []sqlstore.Condition{{Column: "deleted_at", Value: nil}},
			},
			// A ticket does not name its order.
			Claims: &sqlstore.Claims{Table: "tickets", ShowID: "plan_id", SeatID: "seat_id", OrderNo: "",
				State: "ticket_status", Locked: `"lock"`, Sold: `"saled"`, Released: `"for_sale"`},
		}
	},
	newErr: []string{
		`sqlstore: mapping: orders condition on deleted_at is missing`,
		`sqlstore: mapping: pending status "\"未支付\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		`sqlstore: mapping: Statuses need at least one paid and one cancelled value`,
		`sqlstore: mapping: paid status "\"已支付\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		`sqlstore: mapping: claims order number column "": a name is 1-64 bytes of A-Z a-z 0-9 _, not starting with a digit`,
		`sqlstore: mapping: claims locked state "\"lock\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		`sqlstore: mapping: claims sold state "\"saled\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		`sqlstore: mapping: claims released state "\"for_sale\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
	},
}

var corpus = []corpusEntry{mallEntry, newbeeEntry, litemallEntry, gomallEntry, saleorEntry, pretixEntry, ttmsEntry}

// corpusDDL reads testdata/corpus/<name>.<dialect>.sql: statements end with
// ";" at the end of a line; "--" lines are comments.
func corpusDDL(t testing.TB, name string, d sqlstore.Dialect) []string {
	b, err := os.ReadFile(filepath.Join("testdata", "corpus", name+"."+string(d)+".sql"))
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	var out []string
	for _, q := range regexp.MustCompile(`;\s*\n`).Split(strings.Join(lines, "\n")+"\n", -1) {
		if q = strings.TrimSpace(q); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// checkErrText is Check's error for problems (nil: none).
func checkErrText(problems []string) string {
	if problems == nil {
		return ""
	}
	return sqlstore.ErrMapping.Error() + ":\n  " + strings.Join(problems, "\n  ")
}

// assertErrText asserts err is want ("": no error), word for word.
func assertErrText(t *testing.T, want string, err error, what string) bool {
	t.Helper()
	if want == "" {
		return assert.NoError(t, err, what)
	}
	return assert.EqualError(t, err, want, what)
}

// TestCorpusMapping maps the store onto each corpus schema on MariaDB and
// PostgreSQL and asserts, word for word, what New and Check say of the
// tables as shipped and, where the host can add what is missing, of the
// tables with the additions; the first Place's answer there; and, once that
// places, runs the whole store suite on them.
func TestCorpusMapping(t *testing.T) {
	for _, e := range corpus {
		for _, d := range corpusDialects {
			t.Run(e.name+"/"+string(d), func(t *testing.T) {
				t.Parallel()
				runCorpusEntry(t, e, d)
			})
		}
	}
}

func runCorpusEntry(t *testing.T, e corpusEntry, d sqlstore.Dialect) {
	t.Logf("%s: %s", e.name, e.source)
	ctx := context.Background()
	db := openDB(t, d)
	shipped := corpusDDL(t, e.name, d)
	applyDDL(t, db, shipped)

	s, err := sqlstore.New(db, d, e.mapping(d))
	if !assertErrText(t, strings.Join(e.newErr, "\n"), err, "New, the shipped tables") {
		return
	}
	if err == nil {
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Migrate(ctx))
		if !assertErrText(t, checkErrText(e.checkErr[d]), s.Check(ctx), "Check, the shipped tables") {
			return
		}
		if e.checkErr[d] == nil {
			t.Errorf("%s maps as shipped on %s: run the suite on it", e.name, d)
		}
	}
	a := e.adds
	if a == nil {
		return
	}
	s, err = sqlstore.New(db, d, a.mapping(d))
	require.NoError(t, err, "New, the mapping with the additions")
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	if !assertErrText(t, checkErrText(a.before[d]), s.Check(ctx), "Check, the additions' mapping on the shipped tables") {
		return
	}
	applyDDL(t, db, a.ddl(d))
	if !assertErrText(t, checkErrText(a.after[d]), s.Check(ctx), "Check, with the additions") || a.after[d] != nil {
		return
	}

	ids := &numericIDs{}
	numeric := a.mapping(d).Orders.NumericUserID
	user := func(u string) string {
		if numeric {
			return ids.to(u)
		}
		return u
	}
	now, err := s.Now(ctx)
	require.NoError(t, err)
	probe := func(no string) error {
		return placeTx(t, db, s, cancel.Placement{OrderNo: no, UserID: user("u1"), ShowID: "show-1", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)})
	}
	if !assertErrText(t, a.place[d], probe("corpus-1"), "the first Place, with the additions") {
		return
	}
	var defaults []string
	if a.defaults != nil {
		defaults = a.defaults(d)
	}
	if a.place[d] != "" {
		applyDDL(t, db, defaults)
		require.NoError(t, probe("corpus-2"), "Place, once the NOT NULL columns have defaults")
	}

	hs := hostSchema{
		name:    e.name,
		mapping: a.mapping(d),
		ddl: func(d sqlstore.Dialect) []string {
			return append(append(append([]string(nil), shipped...), a.ddl(d)...), defaults...)
		},
		caseFolding: e.caseFolding,
		resolution:  time.Second,
	}
	canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
		h := hostHarness(t, openDB(t, d), d, hs)
		if !numeric {
			return h
		}
		ids := &numericIDs{}
		place := h.Place
		h.Place = func(ctx context.Context, p cancel.Placement) error {
			p.UserID = ids.to(p.UserID)
			return place(ctx, p)
		}
		h.Store = numericUserStore{Store: h.Store, ids: ids}
		return h
	})
}

// numericIDs gives the suite's user ids ("alice", "u1") to a store whose
// user column is an integer, as the host would give its own: each valid id
// gets a number of its own, the same id always the same one, and a number
// read back is turned back into its id. A bijection, so ownership and exact
// matching ("ALICE" is not "alice") mean what they meant.
type numericIDs struct {
	mu     sync.Mutex
	number map[string]string
	id     map[string]string
}

func (n *numericIDs) to(u string) string {
	if expiry.ValidateID("user id", u) != nil {
		return u // invalid ids reach the store as they are
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.number == nil {
		n.number, n.id = map[string]string{}, map[string]string{}
	}
	v, ok := n.number[u]
	if !ok {
		v = strconv.Itoa(1000 + len(n.number))
		n.number[u], n.id[v] = v, u
	}
	return v
}

func (n *numericIDs) from(v string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if u, ok := n.id[v]; ok {
		return u
	}
	return v
}

// numericUserStore is a store of numeric user ids seen through numericIDs.
type numericUserStore struct {
	canceltest.Store
	ids *numericIDs
}

func (s numericUserStore) Order(ctx context.Context, no string) (expiry.Order, error) {
	o, err := s.Store.Order(ctx, no)
	o.UserID = s.ids.from(o.UserID)
	return o, err
}

func (s numericUserStore) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	req.UserID = s.ids.to(req.UserID)
	res, err := s.Store.CancelPending(ctx, req)
	res.Order.UserID = s.ids.from(res.Order.UserID)
	return res, err
}

func (s numericUserStore) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	p.UserID = s.ids.to(p.UserID)
	res, err := s.Store.PayPending(ctx, p)
	res.Order.UserID = s.ids.from(res.Order.UserID)
	return res, err
}

func (s numericUserStore) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	cs, next, err := s.Store.Claims(ctx, cursor, limit)
	for i := range cs {
		cs[i].UserID = s.ids.from(cs[i].UserID)
	}
	return cs, next, err
}

// TestCorpusDDLSplits: every corpus file parses into statements, so a
// fixture with a stray ";" fails here, not as a confusing SQL error.
func TestCorpusDDLSplits(t *testing.T) {
	for _, e := range corpus {
		for _, d := range corpusDialects {
			stmts := corpusDDL(t, e.name, d)
			require.NotEmpty(t, stmts, "%s.%s.sql", e.name, d)
			for _, q := range stmts {
				if !strings.HasPrefix(q, "CREATE ") && !strings.HasPrefix(q, "INSERT ") {
					t.Errorf("%s.%s.sql: not a CREATE or INSERT: %s", e.name, d, q)
				}
			}
		}
	}
}
