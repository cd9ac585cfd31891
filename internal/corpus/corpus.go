// Package corpus is the corpus of public order schemas the sqlstore mapping
// is proven on: for each project, its tables as its own DDL or ORM creates
// them (cancel/sqlstore/testdata/corpus/<name>.<dialect>.sql, each file
// naming its source), the nearest sqlstore.Mapping with today's options,
// what New and Check say of it, and, where the host can close the gap by
// adding to its own schema, what it adds and what then happens. The store
// suite (cancel/sqlstore's TestCorpusMapping) and the model test
// (internal/e2e's TestModelCorpus*) run on every schema that maps.
package corpus

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// Entry is one project's tables.
type Entry struct {
	// Name is the fixture's name: testdata/corpus/<Name>.<dialect>.sql.
	Name string
	// Source is the project, file and commit.
	Source string
	// Mapping is the nearest Mapping of the tables as shipped, with
	// today's options (time types differ by dialect where the ORM's do).
	Mapping func(d sqlstore.Dialect) sqlstore.Mapping
	// NewErr is New's error for Mapping, one line per problem (nil:
	// accepted); CheckErr is Check's problems on the shipped tables (nil:
	// they match). Check runs only when New accepts.
	NewErr   []string
	CheckErr map[sqlstore.Dialect][]string
	// Adds is what the host must add to its schema; nil when it needs
	// nothing (it maps as shipped) or when additions cannot close the gap.
	Adds *Adds
	// CaseFolding: on MySQL the tables' keys fold case (a *_ci collation).
	CaseFolding bool
	// Translated is the dialect whose fixture is this corpus's translation
	// of a schema the project ships for the other only ("": it ships
	// both, or the fixture says so). New, Check and the model test run on
	// the translation; the store suite runs where the project ships.
	Translated sqlstore.Dialect
}

// Adds is a host's additions to its own schema and the mapping then.
type Adds struct {
	// Mapping is the mapping once the additions ran (nil: Entry.Mapping).
	Mapping func(d sqlstore.Dialect) sqlstore.Mapping
	// DDL adds the columns and keys the mapping needs.
	DDL func(d sqlstore.Dialect) []string
	// Before is Check's problems with Mapping on the shipped tables, After
	// those once DDL ran (nil: they match, and the first Place places).
	Before, After map[sqlstore.Dialect][]string
}

// Final is the mapping the suites run on: with the additions, if any.
func (e Entry) Final(d sqlstore.Dialect) sqlstore.Mapping {
	if e.Adds != nil && e.Adds.Mapping != nil {
		return e.Adds.Mapping(d)
	}
	return e.Mapping(d)
}

// Maps reports whether the suites can run on e in d: the mapping, with
// the additions, passes New and Check.
func (e Entry) Maps(d sqlstore.Dialect) bool {
	if e.Adds == nil {
		return e.NewErr == nil && e.CheckErr[d] == nil
	}
	return e.Adds.After[d] == nil
}

// FullDDL is everything the suites create in d: the shipped tables and the
// additions.
func (e Entry) FullDDL(d sqlstore.Dialect) ([]string, error) {
	out, err := DDL(e.Name, d)
	if err != nil {
		return nil, err
	}
	if a := e.Adds; a != nil {
		out = append(out, a.DDL(d)...)
	}
	return out, nil
}

// Dialects are the dialects the corpus is written in.
var Dialects = []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres}

// DDL reads testdata/corpus/<name>.<dialect>.sql of cancel/sqlstore:
// statements end with ";" at the end of a line; "--" lines are comments.
func DDL(name string, d sqlstore.Dialect) ([]string, error) {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("corpus: cannot locate the fixtures")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "cancel", "sqlstore", "testdata", "corpus", name+"."+string(d)+".sql"))
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
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
	return out, nil
}

// Entries is the corpus.
var Entries = []Entry{mall, newbee, litemall, gomall, saleor, pretix, ttms, hievents, alfio}

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

// fill is the mapping's constants for NOT NULL columns without a default
// (Orders.Fill), as column, value pairs.
func fill(pairs ...any) []sqlstore.Condition {
	var out []sqlstore.Condition
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, sqlstore.Condition{Column: pairs[i].(string), Value: pairs[i+1]})
	}
	return out
}

func mallMapping(sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "oms_order", OrderNo: "order_sn", UserID: "member_id", NumericUserID: true, Status: "status",
		Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1, 2, 3}, Cancelled: []any{4, 5}},
		// The window is oms_order_setting.normal_order_overtime, in
		// minutes, read where the host reads it.
		CreatedAt: sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC},
		WindowFrom: &sqlstore.WindowSetting{Table: "oms_order_setting", Column: "normal_order_overtime", Unit: time.Minute,
			Where: []sqlstore.Condition{{Column: "id", Value: 1}}},
		UpdatedAt: sqlstore.Time{Column: "modify_time", Type: sqlstore.DateTimeUTC},
		Where:     []sqlstore.Condition{{Column: "delete_status", Value: 0}},
		// NOT NULL without a default: what mall's checkout would write.
		Fill: fill("receiver_name", "", "receiver_phone", ""),
	}}
}

var mall = Entry{
	Name:    "mall",
	Source:  "macrozheng/mall document/sql/mall.sql @ 74eebe0",
	Mapping: mallMapping,
	NewErr:  []string{noShowColumn},
	Adds: &Adds{
		Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := mallMapping(d)
			m.Orders.ShowID = "show_id"
			return m
		},
		Before: onBoth(
			"orders table oms_order has no show column show_id",
			"orders table oms_order: no index serves the expiry scan: want one on (status, create_time, order_sn), the condition columns [delete_status] may lead",
			"orders table oms_order: the order number order_sn is not unique: want a unique key on (order_sn) (the condition columns [delete_status] may join it)",
		),
		DDL: func(sqlstore.Dialect) []string {
			return []string{
				"ALTER TABLE oms_order ADD COLUMN show_id VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_sn ON oms_order (order_sn)",
				"CREATE INDEX idx_status_create_time ON oms_order (status, create_time, order_sn)",
			}
		},
	},
	CaseFolding: true,
}

func newbeeMapping(sqlstore.Dialect) sqlstore.Mapping {
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

var newbee = Entry{
	Name:    "newbeemall",
	Source:  "newbee-ltd/newbee-mall src/main/resources/newbee_mall_schema.sql @ a069069",
	Mapping: newbeeMapping,
	NewErr:  []string{noShowColumn},
	Adds: &Adds{
		Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := newbeeMapping(d)
			m.Orders.ShowID = "show_id"
			return m
		},
		Before: onBoth(
			"orders table tb_newbee_mall_order has no show column show_id",
			"orders table tb_newbee_mall_order: no index serves the expiry scan: want one on (order_status, create_time, order_no), the condition columns [is_deleted] may lead",
			"orders table tb_newbee_mall_order: the order number order_no is not unique: want a unique key on (order_no) (the condition columns [is_deleted] may join it)",
		),
		DDL: func(sqlstore.Dialect) []string {
			return []string{
				"ALTER TABLE tb_newbee_mall_order ADD COLUMN show_id VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_no ON tb_newbee_mall_order (order_no)",
				"CREATE INDEX idx_status_create_time ON tb_newbee_mall_order (order_status, create_time, order_no)",
			}
		},
	},
	CaseFolding: true,
}

func litemallMapping(sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "litemall_order", OrderNo: "order_sn", UserID: "user_id", NumericUserID: true, Status: "order_status",
		Statuses: sqlstore.Statuses{Pending: 101, Paid: []any{201, 202, 203, 301, 401, 402}, Cancelled: []any{102, 103, 104},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonUser: 102, cancel.ReasonTimeout: 103, cancel.ReasonReconcile: 103}},
		// The window is the litemall_system row litemall_order_unpaid,
		// minutes as a string, read where the host reads it.
		CreatedAt: sqlstore.Time{Column: "add_time", Type: sqlstore.DateTimeUTC},
		WindowFrom: &sqlstore.WindowSetting{Table: "litemall_system", Column: "key_value", Unit: time.Minute,
			Where: []sqlstore.Condition{{Column: "key_name", Value: "litemall_order_unpaid"}, {Column: "deleted", Value: 0}}},
		UpdatedAt: sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
		PaymentID: "pay_id",
		Where:     []sqlstore.Condition{{Column: "deleted", Value: 0}},
		Fill:      fill("consignee", "", "mobile", "", "address", "", "order_price", 0, "actual_price", 0),
	}}
}

var litemall = Entry{
	Name:    "litemall",
	Source:  "linlinjava/litemall litemall-db/sql/litemall_table.sql @ a1ef964",
	Mapping: litemallMapping,
	NewErr:  []string{noShowColumn},
	Adds: &Adds{
		Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := litemallMapping(d)
			m.Orders.ShowID = "show_id"
			return m
		},
		Before: onBoth(
			"orders table litemall_order has no show column show_id",
			"orders table litemall_order: no index serves the expiry scan: want one on (order_status, add_time, order_sn), the condition columns [deleted] may lead",
			"orders table litemall_order: the order number order_sn is not unique: want a unique key on (order_sn) (the condition columns [deleted] may join it)",
		),
		DDL: func(sqlstore.Dialect) []string {
			return []string{
				"ALTER TABLE litemall_order ADD COLUMN show_id VARCHAR(64) NULL",
				"CREATE UNIQUE INDEX uk_order_sn ON litemall_order (order_sn)",
				"CREATE INDEX idx_status_add_time ON litemall_order (order_status, add_time, order_sn)",
			}
		},
	},
	CaseFolding: true,
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

var gomall = Entry{
	Name:    "gomall",
	Source:  "cloudwego/biz-demo gomall/app/order/biz/model/order.go @ 1f5ae2c",
	Mapping: gomallMapping,
	NewErr:  []string{noShowColumn},
	Adds: &Adds{
		Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := gomallMapping(d)
			m.Orders.ShowID = "show_id"
			return m
		},
		Before: onBoth(
			"orders table order has no show column show_id",
			"orders table order: no index serves the expiry scan: want one on (order_state, created_at, order_id), the condition columns [] may lead",
		),
		DDL: func(d sqlstore.Dialect) []string {
			o := byDialect(d, "`order`", `"order"`)
			return []string{
				"ALTER TABLE " + o + " ADD COLUMN show_id VARCHAR(64) NULL",
				// order_state is longtext on MySQL: an index takes a prefix.
				"CREATE INDEX idx_order_state_created ON " + o + " (" + byDialect(d, "order_state(32)", "order_state") + ", created_at, order_id)",
			}
		},
	},
	CaseFolding: true,
}

// saleorPaid are saleor's statuses of an order past its payment, and
// "partially fulfilled", which no Statuses value can be.
var saleorPaid = []any{"unfulfilled", "partially fulfilled", "fulfilled", "partially_returned", "returned"}

func saleorMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		// The order's key is a uuid (Django on MySQL: CHAR(32)); its number,
		// the one a buyer sees, is an integer column of its own.
		Table: "order_order", OrderNo: "number", NumericOrderNo: true, UserID: "user_email", Status: "status",
		Statuses: sqlstore.Statuses{Pending: "unconfirmed", Paid: saleorPaid, Cancelled: []any{"canceled", "expired"},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "expired", cancel.ReasonReconcile: "expired"}},
		// The window is the channel's expire_orders_after, in minutes:
		// one store per channel.
		CreatedAt: sqlstore.Time{Column: "created_at", Type: awareTime(d)},
		WindowFrom: &sqlstore.WindowSetting{Table: "channel_channel", Column: "expire_orders_after", Unit: time.Minute,
			Where: []sqlstore.Condition{{Column: "id", Value: 1}}},
		UpdatedAt: sqlstore.Time{Column: "updated_at", Type: awareTime(d)},
		Where:     []sqlstore.Condition{{Column: "channel_id", Value: 1}},
		// Django's defaults are Python's: the database has none. The uuid
		// key id, one per order, is no constant: the host gives it a
		// default (Adds).
		Fill: fill("use_old_id", false, "authorize_status", "none", "charge_status", "none", "origin", "checkout",
			"currency", "USD", "lines_count", 0, "total_gross_amount", 0, "customer_note", ""),
	}}
}

var saleor = Entry{
	Name:    "saleor",
	Source:  "saleor/saleor saleor/order/models.py @ 723cd4e",
	Mapping: saleorMapping,
	NewErr: []string{
		noShowColumn,
		`sqlstore: mapping: paid status "partially fulfilled": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
	},
	Adds: &Adds{
		Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
			m := saleorMapping(d)
			m.Orders.ShowID = "show_id"
			// "partially fulfilled" left out: such an order reads as the
			// host's (expiry.StatusHost), which the library leaves alone.
			m.Orders.Statuses.Paid = []any{"unfulfilled", "fulfilled", "partially_returned", "returned"}
			return m
		},
		Before: onBoth(
			"orders table order_order has no show column show_id",
			"orders table order_order: no index serves the expiry scan: want one on (status, created_at, number), the condition columns [channel_id] may lead",
			"orders table order_order: NOT NULL columns without a default that Place does not write: id (the first Place would fail): give each a constant in Orders.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in Orders.Fill with the value sqlstore.HostWrites",
		),
		DDL: func(d sqlstore.Dialect) []string {
			return []string{
				"ALTER TABLE order_order ADD COLUMN show_id VARCHAR(64) NULL",
				"CREATE INDEX order_status_created_number ON order_order (status, created_at, number)",
				// A key per order: Django's uuid4 in the database.
				"ALTER TABLE order_order ALTER COLUMN id SET DEFAULT " + byDialect(d, "(REPLACE(UUID(), '-', ''))", "gen_random_uuid()"),
			}
		},
	},
	CaseFolding: true,
}

func pretixMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "pretixbase_order", OrderNo: "code", UserID: "email", ShowID: "event_id", NumericShowID: true, Status: "status",
		Statuses: sqlstore.Statuses{Pending: "n", Paid: []any{"p"}, Cancelled: []any{"c", "e"},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "e", cancel.ReasonReconcile: "e"}},
		Deadline:  sqlstore.Time{Column: "expires", Type: awareTime(d)},
		CreatedAt: sqlstore.Time{Column: "datetime", Type: awareTime(d)},
		UpdatedAt: sqlstore.Time{Column: "last_modified", Type: awareTime(d)},
		// The order code is unique per organizer: one store per organizer.
		Where: []sqlstore.Condition{{Column: "organizer_id", Value: 1}},
		// NOT NULL without a default (Django's defaults are Python's).
		Fill: fill("testmode", false, "secret", "", "total", 0, "comment", "", "require_approval", false, "sales_channel_id", 1),
	}}
	// Positions name their order by its integer key, not its code, and a
	// seat by the integer key of pretixbase_seat: no claims table (the
	// store keeps each order's seats in its side table).
}

var pretix = Entry{
	Name:    "pretix",
	Source:  "pretix/pretix src/pretix/base/models/orders.py @ 000b66d",
	Mapping: pretixMapping,
	CheckErr: onBoth(
		"orders table pretixbase_order: no index serves the expiry scan: want one on (status, expires, code), the condition columns [organizer_id] may lead",
	),
	Adds: &Adds{
		Before: onBoth(
			"orders table pretixbase_order: no index serves the expiry scan: want one on (status, expires, code), the condition columns [organizer_id] may lead",
		),
		DDL: func(sqlstore.Dialect) []string {
			return []string{"CREATE INDEX pretixbase_order_due ON pretixbase_order (organizer_id, status, expires, code)"}
		},
	},
}

var ttms = Entry{
	Name:   "ttms",
	Source: "XianPostsandTelecommunications/TTMS ttms-backend/internal/model/automigrate/order.go @ a9b890b",
	Mapping: func(d sqlstore.Dialect) sqlstore.Mapping {
		return sqlstore.Mapping{Orders: sqlstore.Orders{
			Table: "orders", OrderNo: "order_id", UserID: "user_id", NumericUserID: true, ShowID: "plan_id", NumericShowID: true, Status: "status",
			// json.Marshal's output, quotes included; no cancelled
			// value: a cancel soft-deletes the order.
			Statuses:  sqlstore.Statuses{Pending: `"未支付"`, Paid: []any{`"已支付"`}},
			CreatedAt: sqlstore.Time{Column: "created_at", Type: awareTime(d)},
			Window:    15 * time.Minute,
			UpdatedAt: sqlstore.Time{Column: "updated_at", Type: awareTime(d)},
			// GORM's soft delete: deleted_at IS NULL.
			Where: []sqlstore.Condition{{Column: "deleted_at", Value: sqlstore.IsNull}},
		}}
		// A ticket does not name its order: no claims table.
	},
	NewErr: []string{
		`sqlstore: mapping: pending status "\"未支付\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		`sqlstore: mapping: Statuses need at least one paid and one cancelled value`,
		`sqlstore: mapping: paid status "\"已支付\"": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
	},
}

func hieventsMapping(sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		// public_id is the order reference, unique as shipped; the buyer
		// is the checkout session that holds the reservation (email is
		// written only when the buyer completes the form).
		Table: "orders", OrderNo: "public_id", UserID: "session_id", ShowID: "event_id", NumericShowID: true, Status: "status",
		// One cancelled value: the project writes none when a reservation
		// lapses, so a timeout's cancel and an organiser's read the same
		// (a late payment is refunded, as hi.events refunds one). The
		// payment step keeps RESERVED (payment_status, a column of its own,
		// says AWAITING_PAYMENT): no Paying value. Statuses of later
		// versions (ABANDONED, AWAITING_OFFLINE_PAYMENT: not at this
		// commit) would read as the host's.
		Statuses: sqlstore.Statuses{Pending: "RESERVED", Paid: []any{"COMPLETED"}, Cancelled: []any{"CANCELLED"}},
		// The reservation's deadline, written per order (the event's
		// order timeout); timestamp(0) and created_at hold UTC.
		Deadline:  sqlstore.Time{Column: "reserved_until", Type: sqlstore.DateTimeUTC},
		CreatedAt: sqlstore.Time{Column: "created_at", Type: sqlstore.DateTimeUTC},
		UpdatedAt: sqlstore.Time{Column: "updated_at", Type: sqlstore.DateTimeUTC},
		// Eloquent's soft delete (a session's earlier reservations for
		// the event are soft-deleted when it reserves again).
		Where: []sqlstore.Condition{{Column: "deleted_at", Value: sqlstore.IsNull}},
		// NOT NULL without a default: the event's currency, one store's
		// constant. short_id is one per order, no constant (Adds).
		Fill: fill("currency", "USD"),
	}}
	// Order items name their order by its integer key and a ticket type
	// with a quantity, no seat: no claims table.
}

// What Check says of hi.events' tables as shipped: its index on (event_id,
// status, reserved_until, deleted_at) leads with the show, not the status,
// and short_id, the project's per-order URL id, has no default.
const (
	hieventsIndex   = "orders table orders: no index serves the expiry scan: want one on (status, reserved_until, public_id), the condition columns [deleted_at] may lead"
	hieventsShortID = "orders table orders: NOT NULL columns without a default that Place does not write: short_id (the first Place would fail): give each a constant in Orders.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in Orders.Fill with the value sqlstore.HostWrites"
)

var hievents = Entry{
	Name:     "hievents",
	Source:   "HiEventsDev/hi.events backend/database/migrations/schema.sql @ 11310bf",
	Mapping:  hieventsMapping,
	CheckErr: onBoth(hieventsIndex, hieventsShortID),
	Adds: &Adds{
		Before: onBoth(hieventsIndex, hieventsShortID),
		DDL: func(d sqlstore.Dialect) []string {
			return []string{
				"CREATE INDEX orders_status_reserved_until_public_id ON orders (status, reserved_until, public_id)",
				// A short id per order, as the project's 'o' and 13 random
				// characters.
				"ALTER TABLE orders ALTER COLUMN short_id SET DEFAULT " + byDialect(d, "(CONCAT('o', LEFT(MD5(RAND()), 13)))", "('o' || substr(md5(random()::text), 1, 13))"),
			}
		},
	},
	CaseFolding: true,
	Translated:  sqlstore.MySQL,
}

func alfioMapping(d sqlstore.Dialect) sqlstore.Mapping {
	return sqlstore.Mapping{Orders: sqlstore.Orders{
		// The reservation's id, a random UUID as character(36) (not the
		// uuid type), is the number in the buyer's URLs. The buyer is the
		// signed-in user written at creation (user_id_fk; NULL for an
		// anonymous buyer, which reads as ""); the email comes later, with
		// the buyer's form. event_id_fk is NULL for a subscription's
		// purchase.
		Table: "tickets_reservation", OrderNo: "id", UserID: "user_id_fk", NumericUserID: true,
		ShowID: "event_id_fk", NumericShowID: true, Status: "status",
		// COMPLETE, and FINALIZING / OFFLINE_FINALIZING (the payment taken,
		// the tickets being written); CANCELLED and CREDIT_NOTE_ISSUED are
		// an organiser's cancel: the project writes no status when a
		// reservation lapses (it deletes the row), so a timeout writes
		// CANCELLED and a late payment is refunded (no CancelledBy). Paying:
		// a card charge under way, the buyer on the provider's page, the
		// provider's webhook said pending (the project's webhooks take a
		// payment in the last two). OFFLINE_PAYMENT, CUSTOM_OFFLINE_PAYMENT,
		// DEFERRED_OFFLINE_PAYMENT (a transfer awaited, its validity the
		// payment deadline) and STUCK stay the host's.
		Statuses: sqlstore.Statuses{Pending: "PENDING",
			Paid:      []any{"COMPLETE", "FINALIZING", "OFFLINE_FINALIZING"},
			Cancelled: []any{"CANCELLED", "CREDIT_NOTE_ISSUED"},
			Paying:    []any{"IN_PAYMENT", "EXTERNAL_PROCESSING_PAYMENT", "WAITING_EXTERNAL_CONFIRMATION"}},
		// validity is the reservation's deadline, written per reservation
		// (now + the event's reservation timeout).
		Deadline:  sqlstore.Time{Column: "validity", Type: awareTime(d)},
		CreatedAt: sqlstore.Time{Column: "creation_ts", Type: awareTime(d)},
		// Rows are an organization's (row-level security per
		// organization_id_fk, NOT NULL, which a trigger copies from the
		// event): one store per organization.
		Where: []sqlstore.Condition{{Column: "organization_id_fk", Value: 1}},
	}}
	// ticket is an inventory: its rows exist before the sale (FREE) and a
	// reservation attaches them (tickets_reservation_id). Claims are rows
	// Place inserts, one per (show, seat): no claims table.
}

// What Check says of alf.io's tables as shipped: the project's own cleanup
// (validity < now and status = 'PENDING') has no index either.
const alfioIndex = "orders table tickets_reservation: no index serves the expiry scan: want one on (status, validity, id), the condition columns [organization_id_fk] may lead"

var alfio = Entry{
	Name:     "alfio",
	Source:   "alfio-event/alf.io src/main/resources/alfio/db/PGSQL/ (Flyway migrations) @ 61ee430",
	Mapping:  alfioMapping,
	CheckErr: onBoth(alfioIndex),
	Adds: &Adds{
		Before: onBoth(alfioIndex),
		DDL: func(sqlstore.Dialect) []string {
			// Also serves the project's cleanup, across organizations.
			return []string{"CREATE INDEX tickets_reservation_status_validity_id ON tickets_reservation (status, validity, id)"}
		},
	},
	CaseFolding: true,
	Translated:  sqlstore.MySQL,
}
