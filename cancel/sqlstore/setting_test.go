package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// setting keeps its payment window in a row of another table, in minutes,
// as a shop's settings page writes it (macrozheng/mall's
// oms_order_setting.normal_order_overtime): the deadline is the creation
// time plus the window read in the statement, so a change applies at once.
var setting = hostSchema{
	name: "setting",
	mapping: sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "shop_orders", OrderNo: "order_sn", UserID: "member", ShowID: "show_id", Status: "status",
		Statuses:   sqlstore.Statuses{Pending: 0, Paid: []any{1, 2}, Cancelled: []any{4, 5}, CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: 5, cancel.ReasonReconcile: 5}},
		CreatedAt:  sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC},
		WindowFrom: &sqlstore.WindowSetting{Table: "shop_setting", Column: "unpaid_minutes", Unit: time.Minute, Where: []sqlstore.Condition{{Column: "id", Value: 1}}},
		UpdatedAt:  sqlstore.Time{Column: "modify_time", Type: sqlstore.DateTimeUTC},
		Where:      []sqlstore.Condition{{Column: "delete_status", Value: 0}},
	}},
	ddl: func(d sqlstore.Dialect) []string {
		return []string{
			sub(d, `CREATE TABLE shop_orders (
				{pk},
				order_sn      VARCHAR(64) NOT NULL,
				member        VARCHAR(64) NOT NULL,
				show_id       VARCHAR(64) NOT NULL,
				status        INT NOT NULL DEFAULT 0,
				delete_status INT NOT NULL DEFAULT 0,
				create_time   {dt} NULL,
				modify_time   {dt} NULL
			)`),
			"CREATE UNIQUE INDEX shop_orders_sn ON shop_orders (order_sn)",
			"CREATE INDEX shop_orders_due ON shop_orders (status, create_time, order_sn)",
			"CREATE TABLE shop_setting (id INT NOT NULL PRIMARY KEY, flash_minutes INT NULL, unpaid_minutes INT NULL)",
			"INSERT INTO shop_setting (id, flash_minutes, unpaid_minutes) VALUES (1, 60, 120)",
		}
	},
	resolution: time.Second,
}

// The window is the setting row's, read by the database in each statement:
// Place writes the creation time as the deadline minus the window read
// then; shortening the setting makes a pending order due at once, for the
// reads, the expiry scan and the timeout's guard alike.
func TestWindowFromSettingRow(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, setting)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			at := now.Add(10 * time.Minute).Truncate(time.Second).Add(time.Second)
			require.NoError(t, placeTx(t, db, s, cancel.Placement{OrderNo: "w-1", UserID: "u1", ShowID: "sh", Seats: []string{"A1"}, ExpireAt: at}))
			o, err := s.Order(ctx, "w-1")
			require.NoError(t, err)
			assert.Equal(t, at.UnixMilli(), o.ExpireAt.UnixMilli(), "the placement's deadline, through the setting's window")
			nos, _, err := s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Empty(t, nos, "due in ten minutes")
			res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "w-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			assert.False(t, res.Changed, "not due")

			// The shop shortens its window from 120 to 100 minutes: the
			// order was created 110 minutes ago, so it is due now.
			_, err = db.Exec("UPDATE shop_setting SET unpaid_minutes = 100 WHERE id = 1")
			require.NoError(t, err)
			o, err = s.Order(ctx, "w-1")
			require.NoError(t, err)
			assert.Equal(t, at.Add(-20*time.Minute).UnixMilli(), o.ExpireAt.UnixMilli(), "the deadline follows the setting")
			nos, _, err = s.Expired(ctx, "", 10)
			require.NoError(t, err)
			assert.Equal(t, []string{"w-1"}, nos)
			n, _, err := s.Overdue(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n)
			res, err = s.CancelPending(ctx, cancel.Request{OrderNo: "w-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			require.NoError(t, err)
			assert.True(t, res.Changed, "due by the new window")
		})
	}
}

// Check reads the setting: its table and column must exist and the
// condition must select exactly one row with a value.
func TestWindowSettingCheck(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, setting.ddl(d))
			_, err := db.Exec("UPDATE shop_setting SET unpaid_minutes = NULL")
			require.NoError(t, err)
			s, err := sqlstore.New(db, d, setting.mapping)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			assert.EqualError(t, s.Check(ctx), checkErrText([]string{
				"window setting shop_setting.unpaid_minutes: want exactly one row with a value where [id = 1], found 0",
			}))
			m := setting.mapping
			w := *m.Orders.WindowFrom
			w.Column = "missing"
			m.Orders.WindowFrom = &w
			s2, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s2.Close() })
			assert.EqualError(t, s2.Check(ctx), checkErrText([]string{
				"window setting table shop_setting has no column missing",
			}))
		})
	}
}
