package sqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/canceltest"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// The host schemas the conformance suite runs on besides the library's own
//: each is a Mapping and its DDL per dialect, written the way
// the host's own migrations would, with columns the library does not know.

// hostSchema is one host's tables.
type hostSchema struct {
	name    string
	mapping sqlstore.Mapping
	ddl     func(d sqlstore.Dialect) []string
	// caseFolding: on MySQL the id columns are utf8mb4_general_ci.
	caseFolding bool
	resolution  time.Duration
	notOn       sqlstore.Dialect // a dialect the schema cannot be written in
}

// sub replaces the dialect words of a DDL template: {pk} an auto-increment
// primary key, {dt} a UTC datetime column type, {ci} the table options of a
// case-insensitive MySQL table, {ts} an instant's type.
func sub(d sqlstore.Dialect, q string) string {
	r := map[sqlstore.Dialect][]string{
		sqlstore.MySQL:    {"{pk}", "id BIGINT AUTO_INCREMENT PRIMARY KEY", "{dt}", "DATETIME", "{ci}", " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci", "{ts}", "TIMESTAMP NULL", "{tiny}", "TINYINT"},
		sqlstore.Postgres: {"{pk}", "id BIGSERIAL PRIMARY KEY", "{dt}", "TIMESTAMP", "{ci}", "", "{ts}", "TIMESTAMPTZ", "{tiny}", "SMALLINT"},
		sqlstore.SQLite:   {"{pk}", "id INTEGER PRIMARY KEY AUTOINCREMENT", "{dt}", "TEXT", "{ci}", "", "{ts}", "TEXT", "{tiny}", "SMALLINT"},
	}[d]
	return strings.NewReplacer(r...).Replace(q)
}

// seatflow is SeatFlow's own schema (the design's "Existing order services"):
// order_info with a numeric primary key beside the unique order number,
// TINYINT statuses 0/1/2, a DATETIME deadline in UTC, and order_seat rows a
// cancel deletes; utf8mb4_general_ci on MySQL, as its migrations left it.
var seatflow = hostSchema{
	name: "seatflow",
	mapping: sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "order_info", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses:     sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline:     sqlstore.Time{Column: "expire_time", Type: sqlstore.DateTimeUTC},
			UpdatedAt:    sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
			CancelReason: "cancel_reason", PaymentID: "pay_no",
		},
		Claims: &sqlstore.Claims{Table: "order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"},
	},
	ddl: func(d sqlstore.Dialect) []string {
		return []string{
			sub(d, `CREATE TABLE order_info (
				{pk},
				order_no      VARCHAR(64) NOT NULL,
				user_id       VARCHAR(64) NOT NULL,
				show_id       VARCHAR(64) NOT NULL,
				status        {tiny}      NOT NULL DEFAULT 0,
				expire_time   {dt}        NOT NULL,
				pay_no        VARCHAR(64) NULL,
				cancel_reason VARCHAR(32) NULL,
				update_time   {dt}        NULL,
				amount_cents  INT         NOT NULL DEFAULT 0,
				remark        VARCHAR(255) NULL
			){ci}`),
			"CREATE UNIQUE INDEX uk_order_no ON order_info (order_no)",
			"CREATE INDEX idx_status_expire ON order_info (status, expire_time, order_no)",
			sub(d, `CREATE TABLE order_seat (
				show_id  VARCHAR(64) NOT NULL,
				seat_id  VARCHAR(64) NOT NULL,
				order_no VARCHAR(64) NOT NULL,
				price_cents INT NOT NULL DEFAULT 0,
				PRIMARY KEY (show_id, seat_id)
			){ci}`),
			"CREATE INDEX idx_seat_order ON order_seat (order_no)",
		}
	},
	caseFolding: true,
	resolution:  time.Second,
}

// shop has string statuses with several decided values and a code per
// cancel reason, epoch-seconds deadlines, a tenant column on both tables,
// and claims that keep their history in a state column (a partial unique
// index, or on MySQL a generated column, keeps live claims unique).
var shop = hostSchema{
	name: "shop",
	mapping: sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "shop_order", OrderNo: "order_code", UserID: "buyer", ShowID: "event_id", Status: "state",
			Statuses: sqlstore.Statuses{Pending: "NEW", Paid: []any{"PAID", "USED", "REFUNDED"}, Cancelled: []any{"CANCELLED", "EXPIRED"},
				CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: "EXPIRED", cancel.ReasonReconcile: "EXPIRED"}},
			Deadline:  sqlstore.Time{Column: "due_at", Type: sqlstore.EpochSeconds},
			UpdatedAt: sqlstore.Time{Column: "modified_at", Type: sqlstore.EpochSeconds},
			PaymentID: "payment_ref", CancelReason: "close_reason",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: 7}},
		},
		Claims: &sqlstore.Claims{Table: "shop_ticket", ShowID: "event_id", SeatID: "seat_code", OrderNo: "order_code",
			State: "status", Locked: "HELD", Sold: "SOLD", Released: "FREE",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: 7}}},
	},
	ddl: func(d sqlstore.Dialect) []string {
		q := []string{
			`CREATE TABLE shop_order (
				tenant_id    INT         NOT NULL,
				order_code   VARCHAR(64) NOT NULL,
				buyer        VARCHAR(64) NOT NULL,
				event_id     VARCHAR(64) NOT NULL,
				state        VARCHAR(16) NOT NULL,
				due_at       BIGINT      NOT NULL,
				modified_at  BIGINT      NULL,
				payment_ref  VARCHAR(64) NULL,
				close_reason VARCHAR(16) NULL,
				note         VARCHAR(200) NULL,
				PRIMARY KEY (tenant_id, order_code)
			)`,
			"CREATE INDEX shop_order_due ON shop_order (tenant_id, state, due_at, order_code)",
		}
		if d == sqlstore.MySQL {
			return append(q, `CREATE TABLE shop_ticket (
				id BIGINT AUTO_INCREMENT PRIMARY KEY,
				tenant_id  INT         NOT NULL,
				event_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				seat_code  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				order_code VARCHAR(64) NOT NULL,
				status     VARCHAR(8)  NOT NULL,
				live       TINYINT AS (IF(status = 'FREE', NULL, 1)) STORED,
				UNIQUE KEY shop_ticket_live (tenant_id, event_id, seat_code, live),
				KEY shop_ticket_order (tenant_id, order_code)
			)`)
		}
		return append(q, sub(d, `CREATE TABLE shop_ticket (
				{pk},
				tenant_id  INT         NOT NULL,
				event_id   VARCHAR(64) NOT NULL,
				seat_code  VARCHAR(64) NOT NULL,
				order_code VARCHAR(64) NOT NULL,
				status     VARCHAR(8)  NOT NULL
			)`),
			"CREATE UNIQUE INDEX shop_ticket_live ON shop_ticket (tenant_id, event_id, seat_code) WHERE status <> 'FREE'",
			"CREATE INDEX shop_ticket_order ON shop_ticket (tenant_id, order_code)")
	},
	resolution: time.Second,
}

// window has no deadline column (creation time + a 15-minute window),
// integer statuses with several decided values and one per cancel reason,
// a version column the host's ORM increments, and a soft-delete flag.
var window = hostSchema{
	name: "window",
	mapping: sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "orders", OrderNo: "number", UserID: "customer", ShowID: "show_code", Status: "status",
			Statuses: sqlstore.Statuses{Pending: 10, Paid: []any{20, 21, 22}, Cancelled: []any{30, 31, 32},
				CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: 31, cancel.ReasonReconcile: 32}},
			CreatedAt: sqlstore.Time{Column: "created_ms", Type: sqlstore.EpochMillis},
			Window:    15 * time.Minute,
			PaymentID: "paid_txn", Version: "lock_version",
			Where: []sqlstore.Condition{{Column: "deleted", Value: 0}},
		},
		Claims: &sqlstore.Claims{Table: "order_seats", ShowID: "show_code", SeatID: "seat", OrderNo: "number"},
	},
	ddl: func(d sqlstore.Dialect) []string {
		bin := ""
		if d == sqlstore.MySQL {
			bin = " CHARACTER SET ascii COLLATE ascii_bin"
		}
		return []string{
			sub(d, `CREATE TABLE orders (
				{pk},
				number       VARCHAR(64)`+bin+` NOT NULL,
				customer     VARCHAR(64)`+bin+` NOT NULL,
				show_code    VARCHAR(64)`+bin+` NOT NULL,
				status       SMALLINT    NOT NULL,
				created_ms   BIGINT      NOT NULL,
				paid_txn     VARCHAR(64) NULL,
				lock_version INT         NOT NULL DEFAULT 0,
				deleted      SMALLINT    NOT NULL DEFAULT 0,
				total        INT         NOT NULL DEFAULT 0
			)`),
			"CREATE UNIQUE INDEX orders_number ON orders (number)",
			"CREATE INDEX orders_due ON orders (status, created_ms, number)",
			`CREATE TABLE order_seats (
				show_code VARCHAR(64)` + bin + ` NOT NULL,
				seat      VARCHAR(64)` + bin + ` NOT NULL,
				number    VARCHAR(64)` + bin + ` NOT NULL,
				PRIMARY KEY (show_code, seat)
			)`,
			"CREATE INDEX order_seats_number ON order_seats (number)",
		}
	},
}

// instant is SeatFlow's schema with instants instead of UTC wall times:
// MySQL/MariaDB TIMESTAMP (shown in the session's zone), PostgreSQL
// timestamptz. SQLite has no such type.
var instant = hostSchema{
	name: "instant",
	mapping: func() sqlstore.Mapping {
		m := seatflow.mapping
		m.Orders.Deadline.Type = sqlstore.Timestamp
		m.Orders.UpdatedAt.Type = sqlstore.Timestamp
		return m
	}(),
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			if d == sqlstore.MySQL {
				// NULL DEFAULT NULL: no implicit ON UPDATE CURRENT_TIMESTAMP.
				q = strings.ReplaceAll(q, "{dt}", "TIMESTAMP NULL DEFAULT NULL")
				q = strings.Replace(q, "expire_time   DATETIME        NOT NULL", "expire_time   TIMESTAMP NULL DEFAULT NULL", 1)
				q = strings.Replace(q, "update_time   DATETIME        NULL", "update_time   TIMESTAMP NULL DEFAULT NULL", 1)
			} else {
				q = strings.ReplaceAll(q, "TIMESTAMP ", "TIMESTAMPTZ ")
			}
			out = append(out, q)
		}
		return out
	},
	caseFolding: true,
	resolution:  time.Second,
	notOn:       sqlstore.SQLite,
}

var hostSchemas = []hostSchema{seatflow, shop, window, instant, softDelete, setting}

// applyDDL runs the host's migrations.
func applyDDL(t testing.TB, db *sql.DB, stmts []string) {
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
}

// hostStore creates hs's tables in db, then a store on them, migrated (its
// own table only) and checked.
func hostStore(t testing.TB, db *sql.DB, d sqlstore.Dialect, hs hostSchema) *sqlstore.Store {
	ctx := context.Background()
	applyDDL(t, db, hs.ddl(d))
	s, err := sqlstore.New(db, d, hs.mapping)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx), "the host's tables match the mapping")
	return s
}

func hostHarness(t *testing.T, db *sql.DB, d sqlstore.Dialect, hs hostSchema) canceltest.StoreHarness {
	s := hostStore(t, db, d, hs)
	// A mapping without a deadline column answers SetDeadline with
	// cancel.ErrUnsupported, and the suite skips deadline control.
	return canceltest.StoreHarness{
		Store: s,
		Now:   s.Now,
		Place: func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := s.Place(ctx, tx, p); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		CaseFoldingKeys: hs.caseFolding && d == sqlstore.MySQL,
		Resolution:      hs.resolution,
		// The host schemas' updated-at columns keep seconds (DATETIME,
		// TIMESTAMP, epoch seconds) or finer.
		WriteResolution: time.Second,
		NoWriteTime:     hs.mapping.Orders.UpdatedAt.Column == "",
		NoClaims:        hs.mapping.Claims == nil,
		Delete: func(ctx context.Context, no string) error {
			o := hs.mapping.Orders
			if c := hs.mapping.Claims; c != nil {
				return hostDelete(ctx, db, d, o.Table, o.OrderNo, c.Table, c.OrderNo, no)
			}
			return hostDelete(ctx, db, d, o.Table, o.OrderNo, "", "", no)
		},
	}
}

// openDB opens a fresh database of d for t.
func openDB(t *testing.T, d sqlstore.Dialect) *sql.DB {
	switch d {
	case sqlstore.MySQL:
		return testenv.MySQL(t)
	case sqlstore.Postgres:
		return testenv.Postgres(t)
	}
	return openSQLite(t)
}

var allDialects = []sqlstore.Dialect{sqlstore.SQLite, sqlstore.MySQL, sqlstore.Postgres}

// TestHostSchemas runs the whole store suite on every host schema on every
// dialect (the library's own schema: TestSQLite, TestMySQL, TestPostgres).
func TestHostSchemas(t *testing.T) {
	for _, hs := range hostSchemas {
		for _, d := range allDialects {
			if d == hs.notOn {
				continue
			}
			t.Run(hs.name+"/"+string(d), func(t *testing.T) {
				// Each in databases of its own; most of the time is the
				// suite's waits (a lease, an age), so they overlap.
				t.Parallel()
				canceltest.RunStore(t, func(t *testing.T) canceltest.StoreHarness {
					return hostHarness(t, openDB(t, d), d, hs)
				})
			})
		}
	}
}

// TestDefaultMappingIsTheSchema: DefaultMapping given to New is the zero
// Mapping (Migrate creates the whole schema), and an edited copy is a
// host's (Migrate creates only the library's own tables).
func TestDefaultMappingIsTheSchema(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.DefaultMapping())
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx), "the library's schema passes its own check")
	require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "d-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: time.Now()}))

	other := openSQLite(t)
	m := sqlstore.DefaultMapping()
	m.Orders.Table = "orders"
	s2, err := sqlstore.New(other, sqlstore.SQLite, m)
	require.NoError(t, err)
	require.NoError(t, s2.Migrate(ctx))
	var n int
	require.NoError(t, other.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'oe_%'").Scan(&n))
	require.Equal(t, 2, n, "only oe_payment_discrepancy and oe_order_side")
	require.ErrorIs(t, s2.Check(ctx), sqlstore.ErrMapping, "the host's orders table does not exist")
}

// TestMappedStoreRefusesTheLibrarysOwnTransitions: deadline control needs
// a deadline column, and says so on a mapping whose deadline is the host's
// creation time plus a window.
func TestMappedStoreRefusesTheLibrarysOwnTransitions(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	s := hostStore(t, db, sqlstore.SQLite, window)
	_, err := s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "o-1", In: time.Minute})
	require.ErrorIs(t, err, cancel.ErrUnsupported, "the window's deadline is the host's")
}
