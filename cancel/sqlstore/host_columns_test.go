package sqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// Column types and collations the host picked, which Check accepts: each
// must keep I10 (ids match byte for byte) and keep every order readable.

// edited is hs with its DDL edited by the old, new string pairs (a column
// type, a value), as a host's migrations would have left it.
func edited(hs hostSchema, oldnew ...string) hostSchema {
	ddl, r := hs.ddl, strings.NewReplacer(oldnew...)
	hs.ddl = func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range ddl(d) {
			out = append(out, r.Replace(q))
		}
		return out
	}
	return hs
}

// foldingIDs is SeatFlow's schema with every id column on a collation that
// folds case: SQLite's NOCASE, a PostgreSQL nondeterministic collation.
func foldingIDs(t *testing.T, d sqlstore.Dialect, db *sql.DB) []string {
	coll := " COLLATE NOCASE"
	if d == sqlstore.Postgres {
		_, err := db.Exec("CREATE COLLATION IF NOT EXISTS oe_fold (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
		require.NoError(t, err)
		coll = " COLLATE oe_fold"
	}
	var out []string
	for _, q := range seatflow.ddl(d) {
		out = append(out, strings.ReplaceAll(q, "VARCHAR(64) NOT NULL", "VARCHAR(64)"+coll+" NOT NULL"))
	}
	return out
}

// Ids on a folding collation outside MySQL: "ALICE" is not alice, "O1" is
// not o1, on the one-order path as on the batch path (I10).
func TestHostFoldingCollationKeepsIDsExact(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, foldingIDs(t, d, db))
			s, err := sqlstore.New(db, d, seatflow.mapping)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			for _, no := range []string{"o1", "o2"} {
				p := cancel.Placement{OrderNo: no, UserID: "alice", ShowID: "ev", Seats: []string{no + "-a"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
			}

			_, err = svc.UserCancel(ctx, "o1", "ALICE")
			assert.ErrorIs(t, err, cancel.ErrNotOwner, "I10: ALICE is not alice")
			res, err := svc.UserCancel(ctx, "O1", "alice")
			if err == nil {
				assert.False(t, res.Changed, "I10: O1 is not o1")
			}
			res, err = s.PayPending(ctx, cancel.Payment{OrderNo: "O2", PaymentID: "pay-x"})
			if err == nil {
				assert.False(t, res.Changed, "I10: O2 is not o2")
			}
			for _, no := range []string{"o1", "o2"} {
				o, err := s.Order(ctx, no)
				require.NoError(t, err)
				assert.Equal(t, expiry.StatusPending, o.Status, "%s untouched by its case variants", no)
			}
			_, err = s.Order(ctx, "O1")
			assert.ErrorIs(t, err, expiry.ErrNotFound)
		})
	}
}

// PostgreSQL pads CHAR(n) on read: a status and a payment id in CHAR
// columns must read as the values the mapping names and the provider sent.
func TestHostPaddedCharStatusAndPaymentID(t *testing.T) {
	ctx := context.Background()
	d := sqlstore.Postgres
	db := openDB(t, d)
	s := hostStore(t, db, d, edited(shop, "state        VARCHAR(16) NOT NULL", "state        CHAR(12) NOT NULL",
		"payment_ref  VARCHAR(64) NULL", "payment_ref  CHAR(40) NULL"))
	book := &refundBook{}
	seats := memstore.NewSeats(nil).Scoped(s.Scope())
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: book.hook(s.Scope())})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	for _, no := range []string{"p1", "p2"} {
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "ev", Seats: []string{no + "-a"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
	}
	o, err := s.Order(ctx, "p1")
	require.NoError(t, err, "an order with a padded status is readable")
	assert.Equal(t, expiry.StatusPending, o.Status)
	cancelled, o, err := svc.Timeout(ctx, "p1")
	require.NoError(t, err, "an early message is a re-arm, not an error")
	assert.False(t, cancelled)
	assert.Equal(t, expiry.StatusPending, o.Status)

	res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "p1", PaymentID: "pay-1"})
	require.NoError(t, err)
	require.True(t, res.Changed)
	for i := 0; i < 2; i++ {
		_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "p1", PaymentID: "pay-1"})
		require.NoError(t, err, "a repeated callback of the payment that paid is not a second payment")
	}
	assert.Zero(t, book.count(s.Scope(), "pay-1"), "I14: the payment that paid is never refunded")

	_, err = svc.UserCancel(ctx, "p2", "u1")
	require.NoError(t, err)
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "p2", PaymentID: "pay-2"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.Equal(t, 1, book.count(s.Scope(), "pay-2"), "I9: a payment for a cancelled order is refunded once")
}

// An order number column of INTEGER (32 bits), mapped with NumericOrderNo:
// a number it cannot hold is no order of the table ("missing"), never an
// error that a consumer retries for ever, on every read and transition.
func TestHostNarrowIntegerOrderNumber(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, edited(numericOrder, "number       BIGINT      NOT NULL", "number       INTEGER     NOT NULL",
			"order_number BIGINT      NOT NULL", "order_number INTEGER     NOT NULL"))
		seats := memstore.NewSeats(nil).Scoped(s.Scope())
		svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
		require.NoError(t, err)
		now, err := s.Now(ctx)
		require.NoError(t, err)
		p := cancel.Placement{OrderNo: "2147483647", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(-2 * time.Second)}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))

		for _, no := range []string{"2147483648", "99999999999", "9223372036854775807"} {
			_, err := s.Order(ctx, no)
			assert.ErrorIs(t, err, expiry.ErrNotFound, "%s: no order", no)
			cancelled, _, err := svc.Timeout(ctx, no)
			assert.False(t, cancelled)
			assert.ErrorIs(t, err, expiry.ErrNotFound, "%s: a message for it is final, not retried", no)
			_, err = svc.UserCancel(ctx, no, "u1")
			assert.ErrorIs(t, err, expiry.ErrNotFound, "%s", no)
			st, err := s.Statuses(ctx, []string{no, "2147483647"})
			require.NoError(t, err, "%s: one number the column cannot hold does not fail the page", no)
			assert.Len(t, st, 1)
			res, err := s.CancelDue(ctx, []string{no}, cancel.ReasonReconcile)
			require.NoError(t, err, "%s", no)
			assert.Empty(t, res)
		}
		res, err := s.CancelDue(ctx, []string{"99999999999", "2147483647"}, cancel.ReasonReconcile)
		require.NoError(t, err)
		require.Len(t, res, 1, "the due order beside it is cancelled")
	})
}

// The host edits the setting the mapping reads its payment window from
// (WindowFrom) to something that is not a number: an empty string, a word.
// No pending order may become due for it (a zero window would cancel every
// pending order at once); Check names the setting.
func TestHostWindowSettingNotANumber(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, edited(setting, "unpaid_minutes INT NULL", "unpaid_minutes VARCHAR(32) NULL", "VALUES (1, 60, 120)", "VALUES (1, 60, '120')"))
		seats := memstore.NewSeats(nil).Scoped(s.Scope())
		svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
		require.NoError(t, err)
		now, err := s.Now(ctx)
		require.NoError(t, err)
		p := cancel.Placement{OrderNo: "w1", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour).Truncate(time.Second)}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))

		for _, v := range []string{"", "abc", "12abc", " "} {
			_, err := db.ExecContext(ctx, bindQ(d, "UPDATE shop_setting SET unpaid_minutes = ? WHERE id = 1"), v)
			require.NoError(t, err)
			nos, _, err := s.Expired(ctx, "", 10)
			if err == nil {
				assert.Empty(t, nos, "setting %q: no order is due for a setting that is not a number", v)
			}
			cancelled, _, _ := svc.Timeout(ctx, "w1")
			assert.False(t, cancelled, "setting %q: the order is not cancelled", v)
			err = s.Check(ctx)
			require.ErrorIs(t, err, sqlstore.ErrMapping, "setting %q", v)
			assert.ErrorContains(t, err, "unpaid_minutes")
		}
		o, err := s.Order(ctx, "w1")
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPending, o.Status)
	})
}

// Claims keys Check must refuse, each a way to two live claims of one seat
// (a double sale once the seat store has lost its data), and tenant-scoped
// orders whose claims carry no tenant (one tenant's cancel frees another's
// claims). Each refusal names the table and says what to add.
func TestHostCheckRefusesClaimsThatDoNotStopADoubleSale(t *testing.T) {
	stateKey := func(d sqlstore.Dialect) []string { // (tenant, event, seat, status): HELD and SOLD may coexist
		var out []string
		for _, q := range shop.ddl(d) {
			switch {
			case strings.Contains(q, "live       TINYINT AS"):
				q = strings.Replace(q, "				live       TINYINT AS (IF(status = 'FREE', NULL, 1)) STORED,\n", "", 1)
				q = strings.Replace(q, "UNIQUE KEY shop_ticket_live (tenant_id, event_id, seat_code, live)", "UNIQUE KEY shop_ticket_live (tenant_id, event_id, seat_code, status)", 1)
			case strings.HasPrefix(q, "CREATE UNIQUE INDEX shop_ticket_live"):
				q = "CREATE UNIQUE INDEX shop_ticket_live ON shop_ticket (tenant_id, event_id, seat_code, status)"
			}
			out = append(out, q)
		}
		return out
	}
	softKey := func(d sqlstore.Dialect) []string { // claims soft-deleted: (show, seat, deleted_at), NULLs distinct
		return []string{
			sub(d, `CREATE TABLE sd_orders ({pk}, order_no VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL, show_id VARCHAR(64) NOT NULL,
				status SMALLINT NOT NULL, expire_time BIGINT NOT NULL)`),
			"CREATE UNIQUE INDEX sd_orders_no ON sd_orders (order_no)",
			"CREATE INDEX sd_orders_due ON sd_orders (status, expire_time, order_no)",
			sub(d, `CREATE TABLE sd_seats ({pk}, show_id VARCHAR(64) NOT NULL, seat_id VARCHAR(64) NOT NULL, order_no VARCHAR(64) NOT NULL, deleted_at BIGINT NULL)`),
			"CREATE UNIQUE INDEX sd_seats_live ON sd_seats (show_id, seat_id, deleted_at)",
			"CREATE INDEX sd_seats_order ON sd_seats (order_no)",
		}
	}
	softMapping := sqlstore.Mapping{
		Orders: sqlstore.Orders{Table: "sd_orders", OrderNo: "order_no", UserID: "user_id", ShowID: "show_id", Status: "status",
			Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
			Deadline: sqlstore.Time{Column: "expire_time", Type: sqlstore.EpochMillis}},
		Claims: &sqlstore.Claims{Table: "sd_seats", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no",
			Where: []sqlstore.Condition{{Column: "deleted_at", Value: sqlstore.IsNull}}},
	}
	untenanted := func() sqlstore.Mapping { // orders per tenant, claims without the tenant
		m := shop.mapping
		c := *m.Claims
		c.Where = nil
		m.Claims = &c
		return m
	}()
	for _, tc := range []struct {
		name    string
		ddl     func(sqlstore.Dialect) []string
		m       sqlstore.Mapping
		mention []string
	}{
		{"state in the key", stateKey, shop.mapping, []string{"shop_ticket", "status"}},
		{"soft delete in the key", softKey, softMapping, []string{"sd_seats", "deleted_at"}},
		{"claims without the tenant", func(d sqlstore.Dialect) []string {
			return append(shop.ddl(d), "CREATE INDEX shop_ticket_code ON shop_ticket (order_code)")
		}, untenanted, []string{"shop_ticket", "tenant_id"}},
	} {
		for _, d := range allDialects {
			t.Run(tc.name+"/"+string(d), func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				applyDDL(t, db, tc.ddl(d))
				s, err := sqlstore.New(db, d, tc.m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				err = s.Check(ctx)
				require.ErrorIs(t, err, sqlstore.ErrMapping)
				for _, w := range tc.mention {
					assert.ErrorContains(t, err, w)
				}
			})
		}
	}
}
