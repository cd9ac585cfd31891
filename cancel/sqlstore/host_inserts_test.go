package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// hostWrites lists cols as Fill entries the host's own rows write.
func hostWrites(cols ...string) []sqlstore.Condition {
	var out []sqlstore.Condition
	for _, c := range cols {
		out = append(out, sqlstore.Condition{Column: c, Value: sqlstore.HostWrites})
	}
	return out
}

// TestHostInsertedOrderIsAFullCitizen: a host whose order table has NOT
// NULL columns the library cannot fill, and no claims table, inserts its
// own order row in the rows function it hands Store.Insert. The order is
// the library's as much as one it inserted: a timeout frees its seats
// right after the commit (its seats and lock are known without the
// reconciler), and it is warned once. Judged from the seat store and the
// host's rows.
func TestHostInsertedOrderIsAFullCitizen(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))
			m := fillSchema.mapping
			m.Claims = nil
			m.Orders.Fill = hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version")
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)

			show := "hi" + testenv.Unique()
			insertHostRow := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				_, err := tx.ExecContext(ctx, rebindQ(d, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
					VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', ?, 0)`), p.OrderNo, p.UserID, p.ShowID, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime), true)
				return err
			}
			due := cancel.Placement{OrderNo: "hd" + testenv.Unique(), UserID: "ann", ShowID: show, Seats: []string{"A1", "A2"}, ExpireAt: now.Add(2 * time.Second)}
			warned := cancel.Placement{OrderNo: "hw" + testenv.Unique(), UserID: "bob", ShowID: show, Seats: []string{"B1"}, ExpireAt: now.Add(time.Minute)}
			for _, p := range []cancel.Placement{due, warned} {
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, insertHostRow)))
			}
			held, err := seats.Show(ctx, show)
			require.NoError(t, err)
			require.Len(t, held, 3, "the placement locked its seats")

			// Due: the timeout's commit frees the seats, not a later pass.
			time.Sleep(time.Until(now.Add(2*time.Second)) + 1100*time.Millisecond) // DATETIME: whole seconds
			cancelled, _, err := svc.Timeout(ctx, due.OrderNo)
			require.NoError(t, err)
			require.True(t, cancelled)
			held, err = seats.Show(ctx, show)
			require.NoError(t, err)
			for seat, st := range held {
				assert.NotEqual(t, due.OrderNo, st.OrderNo, "seat %s still locked by the cancelled order", seat)
			}
			var status, version int
			var channel string
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT status, lock_version, channel FROM fill_order WHERE order_no = ?"), due.OrderNo).Scan(&status, &version, &channel))
			assert.Equal(t, []any{2, 1, "app"}, []any{status, version, channel}, "cancelled by the library, the host's columns kept")

			// Warned once, within its lead.
			first, err := svc.Warn(ctx, warned.OrderNo, time.Hour)
			require.NoError(t, err)
			assert.True(t, first.Fired, "the host-inserted order is warned")
			again, err := svc.Warn(ctx, warned.OrderNo, time.Hour)
			require.NoError(t, err)
			assert.False(t, again.Fired, "once")
		})
	}
}

// TestHostInsertedOrderMustBeThePlacement: the rows function must insert
// the order the placement names, pending, for its user and show: anything
// else places nothing (the seats go back), so the library never keeps
// seats for an order that is not there or is another's.
func TestHostInsertedOrderMustBeThePlacement(t *testing.T) {
	d := sqlstore.SQLite
	ctx := context.Background()
	db := openDB(t, d)
	applyDDL(t, db, fillSchema.ddl(d))
	m := fillSchema.mapping
	m.Claims = nil
	m.Orders.Fill = hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version")
	s, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	seats := memstore.NewSeats(nil).Scoped(s.Scope())
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	row := func(tenant int, user string, status int) func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		return func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
				VALUES (?, ?, ?, ?, ?, ?, ?, 0, 'app', '', 0, 0)`, tenant, p.OrderNo, user, p.ShowID, status, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime))
			return err
		}
	}
	for name, rows := range map[string]func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error{
		"nothing":        func(context.Context, *sql.Tx, cancel.Placement) error { return nil },
		"another tenant": row(8, "ann", 0),
		"another user":   row(7, "eve", 0),
		"paid already":   row(7, "ann", 1),
	} {
		p := cancel.Placement{OrderNo: "hm" + testenv.Unique(), UserID: "ann", ShowID: "hm-show", Seats: []string{"C1"}, ExpireAt: now.Add(time.Hour)}
		err := svc.Place(ctx, p, s.Insert(db, rows))
		require.Error(t, err, name)
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM fill_order WHERE order_no = ?", p.OrderNo).Scan(&n))
		assert.Zero(t, n, "%s: nothing placed", name)
		held, err := seats.Show(ctx, "hm-show")
		require.NoError(t, err)
		assert.Empty(t, held, "%s: the seats went back", name)
	}
	// Without a rows function nothing writes the host's columns.
	err = svc.Place(ctx, cancel.Placement{OrderNo: "hn" + testenv.Unique(), UserID: "ann", ShowID: "hm-show", Seats: []string{"C1"}, ExpireAt: now.Add(time.Hour)}, s.Insert(db, nil))
	require.ErrorIs(t, err, cancel.ErrUnsupported)
}

// TestHostOrderRowsCommitThenCancelledGetsNoClaims: a host's rows insert
// the order and COMMIT (against Insert's doc), and the buyer's cancel of
// that committed order lands before Insert learns of it. The claims Insert
// writes afterwards for such an order (finishEnded) must not outlive the
// cancel: a live claim of a cancelled order holds its seat in SQL, and a
// rebuild of the seat store would lock it again (I2).
func TestHostOrderRowsCommitThenCancelledGetsNoClaims(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))
			m := withFill(fillSchema.mapping, hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version"), []sqlstore.Condition{{Column: "price_cents", Value: 1500}})
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			host := hostOrderRow(d, now, "", "", "", false)
			var cancelled bool
			rows := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				if err := host(ctx, tx, p); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
					return err
				}
				res, err := svc.UserCancel(ctx, p.OrderNo, p.UserID) // on another connection, after the COMMIT
				cancelled = err == nil && res.Changed
				return nil
			}
			p := cancel.Placement{OrderNo: "rx" + testenv.Unique(), UserID: "u1", ShowID: "rx" + testenv.Unique(), Seats: []string{"X1"}, ExpireAt: now.Add(time.Hour)}
			t.Logf("place: %v", svc.Place(ctx, p, s.Insert(db, rows)))
			require.True(t, cancelled, "the buyer cancelled the committed order")
			var live int
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT COUNT(*) FROM fill_seat WHERE order_no = ?"), p.OrderNo).Scan(&live))
			assert.Zero(t, live, "I2: no claim of the cancelled order")
		})
	}
}
