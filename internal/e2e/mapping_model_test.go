package e2e_test

// The model test (model_test.go) on SeatFlow's own tables through a
// sqlstore.Mapping: order_info with a numeric primary key beside
// the unique order number, TINYINT statuses 0/1/2, a DATETIME deadline in
// UTC (kept to the second, rounded up), order_seat rows a cancel deletes,
// and on MariaDB the server's case-insensitive utf8mb4_general_ci for the
// order and user ids (the seat key stays byte-exact: the model's seat pool
// holds S1 and s1, two seats; on a case-folding seat key the library
// refuses the second, as cancel/canceltest's CaseFoldingKeys shows).

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// seatflowMapping is SeatFlow's schema as a Mapping.
var seatflowMapping = sqlstore.Mapping{
	Orders: sqlstore.Orders{
		Table: "order_info", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
		Statuses:     sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
		Deadline:     sqlstore.Time{Column: "expire_time", Type: sqlstore.DateTimeUTC},
		UpdatedAt:    sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
		CancelReason: "cancel_reason", PaymentID: "pay_no",
	},
	Claims: &sqlstore.Claims{Table: "order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"},
}

// seatflowDDL is SeatFlow's migration of those tables in d.
func seatflowDDL(d sqlstore.Dialect) []string {
	pk, dt, tiny, ci, bin := "id BIGSERIAL PRIMARY KEY", "TIMESTAMP", "SMALLINT", "", ""
	switch d {
	case sqlstore.MySQL:
		pk, dt, tiny = "id BIGINT AUTO_INCREMENT PRIMARY KEY", "DATETIME", "TINYINT"
		ci, bin = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci", " COLLATE utf8mb4_bin"
	case sqlstore.SQLite:
		pk, dt = "id INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT"
	}
	return []string{
		`CREATE TABLE order_info (` + pk + `, order_no VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL,
			show_id VARCHAR(64) NOT NULL, status ` + tiny + ` NOT NULL DEFAULT 0, expire_time ` + dt + ` NOT NULL,
			pay_no VARCHAR(64) NULL, cancel_reason VARCHAR(32) NULL, update_time ` + dt + ` NULL,
			amount_cents INT NOT NULL DEFAULT 0, remark VARCHAR(255) NULL)` + ci,
		"CREATE UNIQUE INDEX uk_order_no ON order_info (order_no)",
		"CREATE INDEX idx_status_expire ON order_info (status, expire_time, order_no)",
		`CREATE TABLE order_seat (show_id VARCHAR(64)` + bin + ` NOT NULL, seat_id VARCHAR(64)` + bin + ` NOT NULL,
			order_no VARCHAR(64) NOT NULL, price_cents INT NOT NULL DEFAULT 0, PRIMARY KEY (show_id, seat_id))` + ci,
		"CREATE INDEX idx_seat_order ON order_seat (order_no)",
	}
}

func TestModelSeatFlowSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "model.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	mRunSeatFlow(t, "seatflow-sqlite", db, sqlstore.SQLite, 10, 40)
}

func TestModelSeatFlowMariaDB(t *testing.T) {
	mRunSeatFlow(t, "seatflow-mariadb", testenv.MySQL(t), sqlstore.MySQL, 10, 40)
}

func TestModelSeatFlowPostgres(t *testing.T) {
	mRunSeatFlow(t, "seatflow-postgres", testenv.Postgres(t), sqlstore.Postgres, 10, 40)
}

// mRunSeatFlow is mRunSQL on SeatFlow's tables: the store is built on the
// mapping (checked against the tables first), and each run deletes its rows
// from them when it ends.
func mRunSeatFlow(t *testing.T, name string, db *sql.DB, d sqlstore.Dialect, checks, steps int) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	for _, q := range seatflowDDL(d) {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	store, err := sqlstore.New(db, d, seatflowMapping)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	require.NoError(t, store.Migrate(ctx))
	require.NoError(t, store.Check(ctx))
	mRapidBudget(t, checks, steps, true)
	mRun(t, name, func(rt *rapid.T) *mEnv {
		prefix := "m" + testenv.Unique() + "-"
		ns := "oe-" + strings.TrimSuffix(prefix, "-")
		root, err := redisseat.New(rdb, ns)
		if err != nil {
			rt.Fatal(err)
		}
		seats := root.Scoped(store.Scope()) // the store's table: a scope of its own
		env := &mEnv{
			prefix: prefix,
			store:  store,
			seats:  seats,
			place: func(ctx context.Context, p cancel.Placement) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := store.Place(ctx, tx, p); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			grace: 100 * time.Millisecond, settle: 300 * time.Millisecond,
			lease: 20 * time.Millisecond,
			// Whole seconds: a DATETIME deadline. Expiries a bit longer than
			// mRunSQL's, so that some are still ahead after the rounding up.
			resolution: time.Second,
			// Late payments, deadline control and warnings work on it too:
			// what the host's table lacks is kept in the side table.
			expiryMin: -1500 * time.Millisecond, expiryMax: 3500 * time.Millisecond,
		}
		ns += ":" + url.QueryEscape(store.Scope()) // the scoped seat store's keys (redisseat.Seats.Scoped)
		keys := func(show string) []string {
			return []string{ns + ":{" + show + "}:seats", ns + ":{" + show + "}:limit", ns + ":{" + show + "}:locked"}
		}
		env.wipeShow = func(show string) {
			if err := rdb.Del(ctx, keys(show)...).Err(); err != nil {
				rt.Fatalf("wipe %s: %v", show, err)
			}
		}
		env.wipe = func() {
			var all []string
			for _, show := range []string{prefix + "showA", prefix + "showB"} {
				all = append(all, keys(show)...)
			}
			all = append(all, ns+":shows", ns+":restored", ns+":rebuild")
			if err := rdb.Del(ctx, all...).Err(); err != nil {
				rt.Fatalf("wipe: %v", err)
			}
		}
		env.cleanup = func(shows []string) {
			// The prefix is ours ([a-z0-9-]), so the LIKE pattern is a constant.
			for _, q := range []string{"DELETE FROM order_seat WHERE order_no LIKE '" + prefix + "%'", "DELETE FROM order_info WHERE order_no LIKE '" + prefix + "%'",
				"DELETE FROM oe_payment_discrepancy WHERE order_no LIKE '" + prefix + "%'"} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					rt.Errorf("cleanup: %v", err)
				}
			}
			env.wipe()
		}
		return env
	})
}
