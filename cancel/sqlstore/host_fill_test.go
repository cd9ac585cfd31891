package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// A host's tables as they ship often have NOT NULL columns without a
// default that the library's mapping does not know (an amount, a channel,
// an ORM's version counter, a price per ticket). Place writes only what the
// mapping names, so the first Place fails on them: Check must say so at
// startup, by table and column, and the mapping must be able to fill them.

// fillSchema is an orders table and a claims table with such columns, and
// beside them every kind of column Place need not write: an auto-increment
// or identity key (on SQLite an INTEGER PRIMARY KEY, the rowid, declared
// NOT NULL), a column with a default, a nullable one, a generated one, and
// the mapped and Where columns (NOT NULL, no default: Place writes them).
var fillSchema = hostSchema{
	name: "fill",
	mapping: sqlstore.Mapping{
		Orders: sqlstore.Orders{
			Table: "fill_order", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses:     sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline:     sqlstore.Time{Column: "expire_time", Type: sqlstore.DateTimeUTC},
			UpdatedAt:    sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
			CancelReason: "cancel_reason", PaymentID: "pay_no", Version: "lock_version",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: 7}},
		},
		Claims: &sqlstore.Claims{Table: "fill_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no",
			Where: []sqlstore.Condition{{Column: "tenant_id", Value: 7}}},
	},
	ddl: func(d sqlstore.Dialect) []string {
		key := map[sqlstore.Dialect]string{
			sqlstore.MySQL:    "id BIGINT AUTO_INCREMENT PRIMARY KEY",
			sqlstore.Postgres: "id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
			sqlstore.SQLite:   "id INTEGER PRIMARY KEY NOT NULL",
		}[d]
		gen := map[sqlstore.Dialect]string{
			sqlstore.MySQL:    "amount_x2 INT AS (amount_cents * 2) STORED", // MariaDB: no NOT NULL on a generated column
			sqlstore.Postgres: "amount_x2 INT GENERATED ALWAYS AS (amount_cents * 2) STORED NOT NULL",
			sqlstore.SQLite:   "amount_x2 INT GENERATED ALWAYS AS (amount_cents * 2) STORED NOT NULL",
		}[d]
		return []string{
			sub(d, `CREATE TABLE fill_order (
				`+key+`,
				tenant_id     INT         NOT NULL,
				order_no      VARCHAR(64) NOT NULL,
				user_id       VARCHAR(64) NOT NULL,
				show_id       VARCHAR(64) NOT NULL,
				status        {tiny}      NOT NULL,
				expire_time   {dt}        NOT NULL,
				update_time   {dt}        NOT NULL,
				pay_no        VARCHAR(64) NULL,
				cancel_reason VARCHAR(32) NULL,
				amount_cents  INT         NOT NULL,
				`+gen+`,
				channel       VARCHAR(16) NOT NULL,
				remark        VARCHAR(64) NOT NULL,
				testmode      BOOLEAN     NOT NULL,
				lock_version  INT         NOT NULL,
				note          VARCHAR(64) NOT NULL DEFAULT '',
				coupon        VARCHAR(64) NULL
			)`),
			"CREATE UNIQUE INDEX uk_fill_order_no ON fill_order (order_no)",
			"CREATE INDEX idx_fill_status_expire ON fill_order (tenant_id, status, expire_time, order_no)",
			`CREATE TABLE fill_seat (
				tenant_id   INT         NOT NULL,
				show_id     VARCHAR(64) NOT NULL,
				seat_id     VARCHAR(64) NOT NULL,
				order_no    VARCHAR(64) NOT NULL,
				price_cents INT         NOT NULL,
				PRIMARY KEY (show_id, seat_id, tenant_id)
			)`,
			"CREATE INDEX idx_fill_seat_order ON fill_seat (order_no)",
		}
	},
}

// The Check lines for fillSchema's unfilled columns.
const (
	fillOrdersLine = "orders table fill_order: NOT NULL columns without a default that Place does not write: amount_cents, channel, remark, testmode, lock_version (the first Place would fail): give each a constant in Orders.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in Orders.Fill with the value sqlstore.HostWrites"
	fillClaimsLine = "claims table fill_seat: NOT NULL columns without a default that Place does not write: price_cents (the first Place would fail): give each a constant in Claims.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in Claims.Fill with the value sqlstore.HostWrites"
)

// withFill is m with Orders.Fill and Claims.Fill set: the columns the
// mapping fills, with a constant or sqlstore.HostWrites.
func withFill(m sqlstore.Mapping, orders, claims []sqlstore.Condition) sqlstore.Mapping {
	c := *m.Claims
	m.Claims = &c
	m.Orders.Fill, m.Claims.Fill = orders, claims
	return m
}

// TestCheckNamesUnfilledRequiredColumns: on the tables as they ship, Check
// names the NOT NULL columns without a default that Place does not write,
// by table, and none of the columns it need not write; the first Place
// fails on them. With the mapping filling them, Check passes, Place places,
// and the rows hold the filled values (read from the rows, not from what
// Place returns); a cancel then increments the version column it filled.
func TestCheckNamesUnfilledRequiredColumns(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))

			s, err := sqlstore.New(db, d, fillSchema.mapping)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			assertErrText(t, checkErrText([]string{fillOrdersLine, fillClaimsLine}), s.Check(ctx), "Check, the tables as shipped")
			now, err := s.Now(ctx)
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "f-0", UserID: "ann", ShowID: "ev", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)}
			require.Error(t, placeTx(t, db, s, p), "Place without the fill: a NOT NULL column without a value")

			m := withFill(fillSchema.mapping,
				[]sqlstore.Condition{{Column: "amount_cents", Value: 0}, {Column: "channel", Value: "web"}, {Column: "remark", Value: ""},
					{Column: "testmode", Value: false}, {Column: "lock_version", Value: 0}},
				[]sqlstore.Condition{{Column: "price_cents", Value: 1500}})
			s, err = sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Check(ctx), "Check, the mapping filling every required column")

			svc, err := cancel.New(cancel.Config{Store: s, Seats: memstore.NewSeats(nil).Scoped(s.Scope())})
			require.NoError(t, err)
			for _, no := range []string{"f-1", "f-2"} {
				p := cancel.Placement{OrderNo: no, UserID: "ann", ShowID: "ev", Seats: []string{no + "-A1", no + "-A2"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)), "Place on the tables as they ship")
			}
			_, err = svc.UserCancel(ctx, "f-2", "ann")
			require.NoError(t, err)

			type row struct {
				status, amount, amountX2, version, tenant int
				channel, remark, note                     string
				testmode                                  bool
			}
			read := func(no string) row {
				var r row
				require.NoError(t, db.QueryRow(rebindQ(d, "SELECT status, amount_cents, amount_x2, lock_version, tenant_id, channel, remark, note, testmode FROM fill_order WHERE order_no = ?"), no).
					Scan(&r.status, &r.amount, &r.amountX2, &r.version, &r.tenant, &r.channel, &r.remark, &r.note, &r.testmode))
				return r
			}
			assert.Equal(t, row{status: 0, tenant: 7, channel: "web"}, read("f-1"), "the pending order's row holds the filled values")
			assert.Equal(t, row{status: 2, version: 1, tenant: 7, channel: "web"}, read("f-2"), "the cancel wrote its status and the version over the filled 0")

			var prices []int
			rows, err := db.Query(rebindQ(d, "SELECT price_cents FROM fill_seat WHERE order_no = ? AND tenant_id = 7 ORDER BY seat_id"), "f-1")
			require.NoError(t, err)
			for rows.Next() {
				var n int
				require.NoError(t, rows.Scan(&n))
				prices = append(prices, n)
			}
			require.NoError(t, rows.Err())
			rows.Close()
			assert.Equal(t, []int{1500, 1500}, prices, "each claim holds the filled price")
			var left int
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT COUNT(*) FROM fill_seat WHERE order_no = ?"), "f-2").Scan(&left))
			assert.Zero(t, left, "the cancel deleted the cancelled order's claims")
		})
	}
}

// TestFillHostWrites: a host whose own rows insert its orders (and claims)
// writes its NOT NULL columns itself. Its mapping says so with
// sqlstore.HostWrites: Check accepts those columns and still names the
// others; Insert without rows refuses to place, naming the columns, rather
// than failing on them in the database; a placing function of the host's
// own places, and so does Insert with the host's rows, which must write
// the placement's seats; the library cancels what was placed.
func TestFillHostWrites(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))
			host := func(cols ...string) []sqlstore.Condition {
				var out []sqlstore.Condition
				for _, c := range cols {
					out = append(out, sqlstore.Condition{Column: c, Value: sqlstore.HostWrites})
				}
				return out
			}
			partial := withFill(fillSchema.mapping, host("amount_cents", "channel"), host("price_cents"))
			s, err := sqlstore.New(db, d, partial)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			assertErrText(t, checkErrText([]string{
				"orders table fill_order: NOT NULL columns without a default that Place does not write: remark, testmode, lock_version (the first Place would fail): give each a constant in Orders.Fill (every insert writes it), or a default; if the host's own rows insert them (the rows function handed to Store.Insert), list them in Orders.Fill with the value sqlstore.HostWrites",
			}), s.Check(ctx), "Check names only the columns nothing fills")

			m := withFill(fillSchema.mapping, host("amount_cents", "channel", "remark", "testmode", "lock_version"), host("price_cents"))
			s, err = sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Check(ctx))
			now, err := s.Now(ctx)
			require.NoError(t, err)
			svc, err := cancel.New(cancel.Config{Store: s, Seats: memstore.NewSeats(nil).Scoped(s.Scope())})
			require.NoError(t, err)

			p := cancel.Placement{OrderNo: "h-0", UserID: "ann", ShowID: "ev", Seats: []string{"B1"}, ExpireAt: now.Add(time.Hour)}
			err = svc.Place(ctx, p, s.Insert(db, nil))
			require.ErrorIs(t, err, cancel.ErrUnsupported)
			assert.Contains(t, err.Error(), "the mapping leaves amount_cents, channel, remark, testmode, lock_version, price_cents to the host's own rows")
			var n int
			require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM fill_order").Scan(&n))
			assert.Zero(t, n, "nothing placed")

			// The host's own insert, as examples/brownfield places.
			p.OrderNo = "h-1"
			require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, rebindQ(d, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
					VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', ?, 0)`), p.OrderNo, p.UserID, p.ShowID, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime), true)
				if err == nil {
					_, err = tx.ExecContext(ctx, rebindQ(d, "INSERT INTO fill_seat (tenant_id, show_id, seat_id, order_no, price_cents) VALUES (7, ?, ?, ?, 2500)"), p.ShowID, p.Seats[0], p.OrderNo)
				}
				if err != nil {
					return errors.Join(err, tx.Rollback())
				}
				return tx.Commit()
			}))
			res, err := svc.UserCancel(ctx, "h-1", "ann")
			require.NoError(t, err)
			assert.True(t, res.Changed)
			var status, version int
			var channel string
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT status, lock_version, channel FROM fill_order WHERE order_no = ?"), "h-1").Scan(&status, &version, &channel))
			assert.Equal(t, []any{2, 1, "app"}, []any{status, version, channel}, "cancelled by the library, the host's columns kept")
			var left sql.NullString
			err = db.QueryRow(rebindQ(d, "SELECT seat_id FROM fill_seat WHERE order_no = ?"), "h-1").Scan(&left)
			assert.ErrorIs(t, err, sql.ErrNoRows, "the cancel deleted the claim")

			// The host's rows in Insert's transaction: the order and its
			// claims theirs, the side row the library's; read back before
			// the commit, so claims of other seats place nothing.
			hostRows := func(seats ...string) func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				return func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
					_, err := tx.ExecContext(ctx, rebindQ(d, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
						VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', ?, 0)`), p.OrderNo, p.UserID, p.ShowID, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime), true)
					for _, seat := range seats {
						if err == nil {
							_, err = tx.ExecContext(ctx, rebindQ(d, "INSERT INTO fill_seat (tenant_id, show_id, seat_id, order_no, price_cents) VALUES (7, ?, ?, ?, 2500)"), p.ShowID, seat, p.OrderNo)
						}
					}
					return err
				}
			}
			p.OrderNo, p.Seats = "h-2", []string{"C1", "C2"}
			err = svc.Place(ctx, p, s.Insert(db, hostRows("C1")))
			require.ErrorContains(t, err, `its live claims are seats [C1] (0 of them not of show "ev"), the placement's [C1 C2]`)
			require.NoError(t, svc.Place(ctx, p, s.Insert(db, hostRows("C1", "C2"))))
			res, err = svc.UserCancel(ctx, "h-2", "ann")
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{"C1", "C2"}, res.Seats, "the seats the host's claims hold")
			assert.Equal(t, 2, res.Released)
		})
	}
}

// TestFillRefusedByNew: a Fill is validated when the store is created, as
// the Where constants are.
func TestFillRefusedByNew(t *testing.T) {
	m := withFill(fillSchema.mapping, []sqlstore.Condition{
		{Column: "status", Value: 0},
		{Column: "tenant_id", Value: 7},
		{Column: "amount_cents", Value: 0},
		{Column: "amount_cents", Value: 1},
		{Column: "coupon", Value: sqlstore.IsNull},
		{Column: "remark", Value: "it's"},
		{Column: "channel", Value: 1.5},
		{Column: "bad name", Value: 1},
	}, []sqlstore.Condition{{Column: "seat_id", Value: "x"}, {Column: "price_cents", Value: nil}})
	_, err := sqlstore.New(openSQLite(t), sqlstore.SQLite, m)
	require.Error(t, err)
	assert.Equal(t, []string{
		"sqlstore: mapping: orders fill of status: Place writes it already (the status)",
		"sqlstore: mapping: orders fill of tenant_id: Place writes it already (a Where condition)",
		"sqlstore: mapping: orders fill of amount_cents listed twice",
		"sqlstore: mapping: orders fill of coupon: IsNull is a Where condition, a Fill writes a value (a nullable column needs none)",
		`sqlstore: mapping: orders fill of remark "it's": a string value is 1-64 bytes of A-Z a-z 0-9 _ . -`,
		"sqlstore: mapping: orders fill of channel 1.5: values are integers or strings, not float64",
		`sqlstore: mapping: orders fill column "bad name": a name is 1-64 bytes of A-Z a-z 0-9 _, not starting with a digit`,
		"sqlstore: mapping: claims fill of seat_id: Place writes it already (the seat)",
		"sqlstore: mapping: claims fill of price_cents is missing",
	}, strings.Split(err.Error(), "\n"))
}
