package sqlstore_test

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// The schema generator of issue 36: a host's orders table (and optionally
// its claims table and a settings row) as a point in a small product of
// axes, each an int whose zero is the plainest choice, written as DDL per
// dialect in that dialect's real types, and its Mapping. A point's size is
// the number of its non-zero axes: shrink moves axes back to zero one at a
// time, so the schema a failure prints is a small one.

// genSchema is one point of the space. Field order is the print order.
type genSchema struct {
	NoType   int // order number: 0 VARCHAR(64), 1 CHAR(40), 2 TEXT, 3 integer (NumericOrderNo)
	UserType int // user: as NoType (3: NumericUserID)
	ShowType int // show: as NoType (3: NumericShowID); the claims' show column too
	IntWidth int // the integer id columns: 0 BIGINT, 1 INTEGER, 2 SMALLINT
	Fold     int // id collations: 0 exact (MySQL ascii_bin, SQLite/PostgreSQL default), 1 folding (utf8mb4_general_ci, NOCASE, ICU level 2)
	Status   int // 0 SMALLINT 0/1/2/3, 1 VARCHAR(16) NEW/PAID/..., 2 CHAR(12) of the same
	Deadline int // 0 BIGINT ms, 1 BIGINT s, 2 DATETIME (DateTimeUTC), 3 TIMESTAMP (Timestamp; not SQLite), 4 CreatedAt ms + Window, 5 CreatedAt DATETIME + WindowFrom
	Setting  int // WindowFrom's column and value: 0 INT 120, 1 VARCHAR(32) '120', 2 '' and 3 'abc' at startup (Check reads it), 4 '' and 5 'abc' written by the host mid-run ('120' at startup)
	Null     int // user, show, status, deadline: 0 NOT NULL, 1 NULL, 2 NOT NULL with a DEFAULT (payment id: NULL, NULL, NOT NULL DEFAULT '')
	Payment  int // payment id column: 0 none, 1 VARCHAR(64), 2 CHAR(40)
	Tenant   int // Orders.Where tenant_id = 7: 0 none, 1 order number unique alone, 2 unique only with tenant_id
	Soft     int // Orders.Where: 0 none, 1 deleted_at IS NULL, 2 deleted = 0
	Claims   int // 0 none, 1 claims without State (a cancel deletes), 2 with State HELD/SOLD/FREE
	Key      int // claims unique key: 0 (show, seat), 1 (show, seat, tenant), 2 (show, seat, state), 3 (show, seat, deleted_at) with deleted_at IS NULL, 4 live claims only (partial WHERE state <> 'FREE', MySQL a generated column)
	NoTenant int // 1: claims without the tenant (no column, no condition) when the orders are tenant scoped
}

// axisMax is each axis's number of values, in field order.
var axisMax = []int{4, 4, 4, 3, 2, 3, 6, 6, 3, 3, 3, 3, 3, 5, 2}

// normal clears the axes a point does not use, so that equal schemas are
// equal points.
func (g genSchema) normal() genSchema {
	if g.NoType != 3 && g.UserType != 3 && g.ShowType != 3 {
		g.IntWidth = 0
	}
	if g.Deadline != 5 {
		g.Setting = 0
	}
	if g.Claims == 0 {
		g.Key, g.NoTenant = 0, 0
	}
	if g.Tenant == 0 {
		g.NoTenant = 0
	}
	if g.Key == 1 && (g.Tenant == 0 || g.NoTenant == 1) || (g.Key == 2 || g.Key == 4) && g.Claims != 2 {
		g.Key = 0
	}
	return g
}

func (g genSchema) axes() []int {
	v := reflect.ValueOf(g)
	out := make([]int, v.NumField())
	for i := range out {
		out[i] = int(v.Field(i).Int())
	}
	return out
}

func fromAxes(a []int) genSchema {
	var g genSchema
	v := reflect.ValueOf(&g).Elem()
	for i := range a {
		v.Field(i).SetInt(int64(a[i]))
	}
	return g.normal()
}

// size is the number of non-zero axes.
func (g genSchema) size() int {
	n := 0
	for _, a := range g.axes() {
		if a != 0 {
			n++
		}
	}
	return n
}

// String prints the non-zero axes.
func (g genSchema) String() string {
	t := reflect.TypeOf(g)
	var parts []string
	for i, a := range g.axes() {
		if a != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", t.Field(i).Name, a))
		}
	}
	if len(parts) == 0 {
		return "{plain}"
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func randomSchema(rng *rand.Rand) genSchema {
	a := make([]int, len(axisMax))
	for i, m := range axisMax {
		a[i] = rng.Intn(m)
	}
	return fromAxes(a)
}

// expressible says whether d can write g.
func (g genSchema) expressible(d sqlstore.Dialect) bool {
	switch {
	case g.Deadline == 3 && d == sqlstore.SQLite:
		return false // SQLite has no instant type (Timestamp is not on SQLite)
	case d == sqlstore.MySQL && (g.NoType == 2 || g.ShowType == 2 && g.Claims > 0):
		return false // MySQL indexes no TEXT column without a prefix length
	}
	return true
}

// mustRefuse is why Check must refuse g (the documented refusals), or "".
func (g genSchema) mustRefuse() string {
	switch {
	case g.Key == 2:
		return "claims key holds the state column"
	case g.Key == 3:
		return "claims key holds the IS NULL column"
	case g.Tenant == 2 && g.Claims > 0 && g.NoTenant == 1:
		return "claims without the tenant"
	case g.Setting == 2 || g.Setting == 3:
		return "window setting not a number"
	}
	return ""
}

func (g genSchema) intType() string {
	return []string{"BIGINT", "INTEGER", "SMALLINT"}[g.IntWidth]
}

// narrow: the integer id columns cannot hold every int64.
func (g genSchema) narrow() bool { return g.IntWidth != 0 }

func (g genSchema) coll(d sqlstore.Dialect) string {
	switch d {
	case sqlstore.MySQL:
		if g.Fold == 1 {
			return " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
		}
		return " CHARACTER SET ascii COLLATE ascii_bin"
	case sqlstore.SQLite:
		if g.Fold == 1 {
			return " COLLATE NOCASE"
		}
	case sqlstore.Postgres:
		if g.Fold == 1 {
			return " COLLATE oe_fold"
		}
	}
	return ""
}

// idType is an id column's type for kind (NoType, UserType, ShowType).
func (g genSchema) idType(d sqlstore.Dialect, kind int) string {
	switch kind {
	case 1:
		return "CHAR(40)" + g.coll(d)
	case 2:
		return "TEXT" + g.coll(d)
	case 3:
		return g.intType()
	}
	return "VARCHAR(64)" + g.coll(d)
}

// nullity is the NOT NULL / NULL / DEFAULT suffix of a column by g.Null.
func (g genSchema) nullity(def string) string {
	switch g.Null {
	case 1:
		return " NULL"
	case 2:
		return " NOT NULL DEFAULT " + def
	}
	return " NOT NULL"
}

func (g genSchema) idDefault(kind int) string {
	if kind == 3 {
		return "0"
	}
	return "''"
}

func dtType(d sqlstore.Dialect) string {
	return map[sqlstore.Dialect]string{sqlstore.MySQL: "DATETIME", sqlstore.Postgres: "TIMESTAMP", sqlstore.SQLite: "TEXT"}[d]
}

// timeCol is the deadline or creation column: its name, type and the
// mapping's Time.
func (g genSchema) timeCol(d sqlstore.Dialect) (string, sqlstore.Time) {
	const dtDef = "'2000-01-01 00:00:00'"
	switch g.Deadline {
	case 1:
		return "due_s BIGINT" + g.nullity("0"), sqlstore.Time{Column: "due_s", Type: sqlstore.EpochSeconds}
	case 2:
		return "due_at " + dtType(d) + g.nullity(dtDef), sqlstore.Time{Column: "due_at", Type: sqlstore.DateTimeUTC}
	case 3:
		ts := "TIMESTAMPTZ"
		if d == sqlstore.MySQL {
			ts = "TIMESTAMP"
		}
		n := g.nullity(dtDef)
		if d == sqlstore.MySQL && g.Null == 1 {
			n = " NULL DEFAULT NULL"
		}
		return "due_ts " + ts + n, sqlstore.Time{Column: "due_ts", Type: sqlstore.Timestamp}
	case 4:
		return "created_ms BIGINT" + g.nullity("0"), sqlstore.Time{Column: "created_ms", Type: sqlstore.EpochMillis}
	case 5:
		return "created_at " + dtType(d) + g.nullity(dtDef), sqlstore.Time{Column: "created_at", Type: sqlstore.DateTimeUTC}
	}
	return "due_ms BIGINT" + g.nullity("0"), sqlstore.Time{Column: "due_ms", Type: sqlstore.EpochMillis}
}

func (g genSchema) statuses() sqlstore.Statuses {
	if g.Status == 0 {
		return sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2, 3},
			CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: 3, cancel.ReasonReconcile: 3}}
	}
	return sqlstore.Statuses{Pending: "NEW", Paid: []any{"PAID", "USED"}, Cancelled: []any{"CANCELLED", "EXPIRED"},
		CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "EXPIRED", cancel.ReasonReconcile: "EXPIRED"}}
}

// setValue is the setting value the axes name; setLate: the host writes
// it mid-run.
func (g genSchema) setValue() string { return []string{"120", "120", "", "abc", "", "abc"}[g.Setting] }

func (g genSchema) setLate() bool { return g.Setting >= 4 }

// ddl is the host's migrations for d.
func (g genSchema) ddl(d sqlstore.Dialect) []string {
	pk := map[sqlstore.Dialect]string{sqlstore.MySQL: "id BIGINT AUTO_INCREMENT PRIMARY KEY", sqlstore.Postgres: "id BIGSERIAL PRIMARY KEY", sqlstore.SQLite: "id INTEGER PRIMARY KEY AUTOINCREMENT"}[d]
	var q []string
	if d == sqlstore.Postgres && g.Fold == 1 {
		q = append(q, "CREATE COLLATION IF NOT EXISTS oe_fold (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
	}
	cols := []string{pk}
	if g.Tenant > 0 {
		cols = append(cols, "tenant_id INT NOT NULL")
	}
	cols = append(cols,
		"order_no "+g.idType(d, g.NoType)+" NOT NULL",
		"user_id "+g.idType(d, g.UserType)+g.nullity(g.idDefault(g.UserType)),
		"show_id "+g.idType(d, g.ShowType)+g.nullity(g.idDefault(g.ShowType)))
	switch g.Status {
	case 0:
		cols = append(cols, "status SMALLINT"+g.nullity("0"))
	case 1:
		cols = append(cols, "status VARCHAR(16)"+g.coll(d)+g.nullity("'NEW'"))
	case 2:
		cols = append(cols, "status CHAR(12)"+g.coll(d)+g.nullity("'NEW'"))
	}
	tc, tm := g.timeCol(d)
	cols = append(cols, tc)
	if g.Payment > 0 {
		typ := "VARCHAR(64)"
		if g.Payment == 2 {
			typ = "CHAR(40)"
		}
		n := " NULL"
		if g.Null == 2 {
			n = " NOT NULL DEFAULT ''"
		}
		cols = append(cols, "payment_id "+typ+g.coll(d)+n)
	}
	switch g.Soft {
	case 1:
		cols = append(cols, "deleted_at BIGINT NULL")
	case 2:
		cols = append(cols, "deleted SMALLINT NOT NULL DEFAULT 0")
	}
	cols = append(cols, "note VARCHAR(100) NULL")
	q = append(q, "CREATE TABLE gen_orders (\n\t"+strings.Join(cols, ",\n\t")+"\n)")
	if g.Tenant == 2 {
		q = append(q, "CREATE UNIQUE INDEX gen_orders_no ON gen_orders (tenant_id, order_no)")
	} else {
		q = append(q, "CREATE UNIQUE INDEX gen_orders_no ON gen_orders (order_no)")
	}
	q = append(q, "CREATE INDEX gen_orders_due ON gen_orders (status, "+tm.Column+", order_no)")

	if g.Deadline == 5 {
		typ, v := "INT", "120"
		if g.Setting > 0 {
			typ = "VARCHAR(32)"
			v = "'120'"
			if !g.setLate() {
				v = "'" + g.setValue() + "'"
			}
		}
		q = append(q, "CREATE TABLE gen_setting (id INT NOT NULL PRIMARY KEY, unpaid_minutes "+typ+" NULL)",
			"INSERT INTO gen_setting (id, unpaid_minutes) VALUES (1, "+v+")")
	}

	if g.Claims > 0 {
		tenant := g.Tenant > 0 && g.NoTenant == 0
		cols := []string{pk}
		if tenant {
			cols = append(cols, "tenant_id INT NOT NULL")
		}
		showType := g.idType(d, g.ShowType)
		cols = append(cols, "show_id "+showType+" NOT NULL", "seat_id VARCHAR(64)"+g.coll(d)+" NOT NULL", "order_no "+g.idType(d, g.NoType)+" NOT NULL")
		if g.Claims == 2 {
			cols = append(cols, "state VARCHAR(8) NOT NULL")
		}
		if g.Key == 3 {
			cols = append(cols, "deleted_at BIGINT NULL")
		}
		if g.Key == 4 && d == sqlstore.MySQL {
			cols = append(cols, "live TINYINT AS (IF(state = 'FREE', NULL, 1)) STORED")
		}
		q = append(q, "CREATE TABLE gen_claims (\n\t"+strings.Join(cols, ",\n\t")+"\n)")
		if tenant {
			q = append(q, "CREATE INDEX gen_claims_order ON gen_claims (tenant_id, order_no)")
		} else {
			q = append(q, "CREATE INDEX gen_claims_order ON gen_claims (order_no)")
		}
		switch g.Key {
		case 0:
			q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id)")
		case 1:
			q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id, tenant_id)")
		case 2:
			q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id, state)")
		case 3:
			q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id, deleted_at)")
		case 4:
			if d == sqlstore.MySQL {
				q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id, live)")
			} else {
				q = append(q, "CREATE UNIQUE INDEX gen_claims_seat ON gen_claims (show_id, seat_id) WHERE state <> 'FREE'")
			}
		}
	}
	return q
}

// names are the tables and columns of g's schema: a refusal must name one.
func (g genSchema) names() []string {
	return []string{"gen_orders", "gen_claims", "gen_setting", "order_no", "user_id", "show_id", "seat_id", "status", "state",
		"due_ms", "due_s", "due_at", "due_ts", "created_ms", "created_at", "payment_id", "tenant_id", "deleted_at", "deleted", "unpaid_minutes"}
}

// mapping is g's Mapping for tenant (7 for the store under test, 8 for
// the other tenant's on the same tables).
func (g genSchema) mapping(d sqlstore.Dialect, tenant int) sqlstore.Mapping {
	_, tm := g.timeCol(d)
	o := sqlstore.Orders{
		Table: "gen_orders", OrderNo: "order_no", NumericOrderNo: g.NoType == 3,
		UserID: "user_id", NumericUserID: g.UserType == 3, ShowID: "show_id", NumericShowID: g.ShowType == 3,
		Status: "status", Statuses: g.statuses(),
	}
	switch g.Deadline {
	case 4:
		o.CreatedAt, o.Window = tm, 15*time.Minute
	case 5:
		o.CreatedAt = tm
		o.WindowFrom = &sqlstore.WindowSetting{Table: "gen_setting", Column: "unpaid_minutes", Unit: time.Minute,
			Where: []sqlstore.Condition{{Column: "id", Value: 1}}}
	default:
		o.Deadline = tm
	}
	if g.Payment > 0 {
		o.PaymentID = "payment_id"
	}
	if g.Tenant > 0 {
		o.Where = append(o.Where, sqlstore.Condition{Column: "tenant_id", Value: tenant})
	}
	switch g.Soft {
	case 1:
		o.Where = append(o.Where, sqlstore.Condition{Column: "deleted_at", Value: sqlstore.IsNull})
	case 2:
		o.Where = append(o.Where, sqlstore.Condition{Column: "deleted", Value: 0})
	}
	m := sqlstore.Mapping{Orders: o}
	if g.Claims > 0 {
		c := &sqlstore.Claims{Table: "gen_claims", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"}
		if g.Claims == 2 {
			c.State, c.Locked, c.Sold, c.Released = "state", "HELD", "SOLD", "FREE"
		}
		if g.Tenant > 0 && g.NoTenant == 0 {
			c.Where = append(c.Where, sqlstore.Condition{Column: "tenant_id", Value: tenant})
		}
		if g.Key == 3 {
			c.Where = append(c.Where, sqlstore.Condition{Column: "deleted_at", Value: sqlstore.IsNull})
		}
		m.Claims = c
	}
	return m
}
