package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Review of 877489b (placeBefore / placeAfter, a host-inserted order).

// racingStore is a *sqlstore.Store whose Order runs race once, right after
// a read that found nothing: the other submit of a double submit placing
// its order between Service.Place's pre-read and its Lock (the race
// Service.Place's doc names).
type racingStore struct {
	*sqlstore.Store
	race func()
}

func (r *racingStore) Order(ctx context.Context, no string) (expiry.Order, error) {
	o, err := r.Store.Order(ctx, no)
	if f := r.race; f != nil && errors.Is(err, expiry.ErrNotFound) {
		r.race = nil
		f()
	}
	return o, err
}

// idempotentHostRow inserts fillSchema's order row for p the way many hosts
// write an order insert: idempotent on the order number (ON CONFLICT DO
// NOTHING; on MySQL ON DUPLICATE KEY UPDATE a no-op: a retried request
// finds its order there and goes on).
func idempotentHostRow(d sqlstore.Dialect, now time.Time) func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
	return func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		q := `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
			VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', ?, 0)`
		if d == sqlstore.MySQL {
			q += " ON DUPLICATE KEY UPDATE order_no = order_no"
		} else {
			q += " ON CONFLICT (order_no) DO NOTHING"
		}
		_, err := tx.ExecContext(ctx, rebindQ(d, q), p.OrderNo, p.UserID, p.ShowID, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime), true)
		return err
	}
}

// TestReview2HostOrderDoubleSubmitKeepsTheFirst: a double submit of one
// order number, the two racing past Service.Place's pre-read with other
// seats (the user changed the selection and submitted again; each locks
// its own seats). The first places. The second's Insert upserts the side
// row FIRST (placeBefore: seats, lock id, warned flag of the existing
// order replaced), then the host's rows, whose insert is idempotent on the
// number, insert nothing; the read-back (hostPlacedOrder) finds the FIRST
// order's row — pending, same user, same show — and cannot tell it from a
// row this transaction inserted; no claims table, so COMMIT: the second
// Place succeeds and schedules, instead of ErrOrderExists, and the first
// order's side row now names the second's seats and lock. Judged by the
// seat store: when the order is cancelled, no seat is left locked by it
// (I2); the documented answer to the second submit is ErrOrderExists with
// its own seats released.
func TestReview2HostOrderDoubleSubmitKeepsTheFirst(t *testing.T) {
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
			rs := &racingStore{Store: s}
			svc, err := cancel.New(cancel.Config{Store: rs, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)

			show, no := "ds"+testenv.Unique(), "ds"+testenv.Unique()
			first := cancel.Placement{OrderNo: no, UserID: "ann", ShowID: show, Seats: []string{"A1", "A2"}, ExpireAt: now.Add(time.Hour)}
			second := first
			second.Seats = []string{"B1"}
			rows := idempotentHostRow(d, now)
			rs.race = func() {
				require.NoError(t, svc.Place(ctx, first, s.Insert(db, rows)), "the first submit places")
			}
			err = svc.Place(ctx, second, s.Insert(db, rows))
			t.Logf("second submit: %v", err)
			held, serr := seats.Show(ctx, show)
			require.NoError(t, serr)
			t.Logf("seat store after both submits: %+v", held)

			res, cerr := svc.UserCancel(ctx, no, "ann")
			require.NoError(t, cerr)
			require.True(t, res.Changed)
			t.Logf("cancel: seats %v, released %d", res.Seats, res.Released)
			held, serr = seats.Show(ctx, show)
			require.NoError(t, serr)
			for seat, st := range held {
				assert.NotEqual(t, no, st.OrderNo, "I2: seat %s still locked (lock %s) by order %s after its cancel", seat, st.LockID, no)
			}
			assert.ErrorIs(t, err, cancel.ErrOrderExists, "the second submit of a placed number: ErrOrderExists, the first order untouched")
		})
	}
}

// TestReview2HostOrderRowsCommitKeepsTheClaims: 877489b put the library's
// rows back before the host's, "but for what needs a host's order row": with
// HostWrites on the orders and the library's claims, the claims still go
// after the host's rows (placeAfter). A rows function that ends the
// transaction itself after inserting the order (a COMMIT; on MariaDB a DDL
// statement's implicit commit — the case Insert's endedInRows handles)
// commits the order row and the side row without the claims: Insert answers
// ErrCommitUnknown, Place keeps the seat locked and schedules the order it
// finds pending — an order with no claims. The earlier review's
// TestReviewRowsCommitKeepsTheWholePlacement, on a host-inserted order.
// Judged by who holds the seats: paid, its seat must be in the claims the
// reconciler rebuilds the seat store from (I2, I15); cancelled, its seat
// must be freed at the cancel.
func TestReview2HostOrderRowsCommitKeepsTheClaims(t *testing.T) {
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
			require.NoError(t, s.Check(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, Runtime: quiet})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)

			host := hostOrderRow(d, now, "", "", "", false)
			commit := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				if err := host(ctx, tx, p); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "COMMIT")
				return err
			}
			show := "rc" + testenv.Unique()
			paid := cancel.Placement{OrderNo: "rp" + testenv.Unique(), UserID: "u1", ShowID: show, Seats: []string{"P1"}, ExpireAt: now.Add(time.Hour)}
			err = svc.Place(ctx, paid, s.Insert(db, commit))
			t.Logf("place: %v", err)
			if o, oerr := s.Order(ctx, paid.OrderNo); oerr == nil && o.Status == expiry.StatusPending {
				res, err := svc.Pay(ctx, cancel.Payment{OrderNo: paid.OrderNo, PaymentID: "pay" + testenv.Unique()})
				require.NoError(t, err)
				require.True(t, res.Changed, "paid")
				claims, _, err := s.Claims(ctx, "", 100)
				require.NoError(t, err)
				var sold []string
				for _, c := range claims {
					if c.OrderNo == paid.OrderNo {
						sold = append(sold, c.SeatID)
					}
				}
				assert.Equal(t, []string{"P1"}, sold, "I2: the paid order's seat, as the rows say (what a rebuild restores)")
			}

			gone := cancel.Placement{OrderNo: "rg" + testenv.Unique(), UserID: "u1", ShowID: show, Seats: []string{"C1"}, ExpireAt: now.Add(time.Hour)}
			err = svc.Place(ctx, gone, s.Insert(db, commit))
			t.Logf("place: %v", err)
			if o, oerr := s.Order(ctx, gone.OrderNo); oerr == nil && o.Status == expiry.StatusPending {
				res, err := svc.UserCancel(ctx, gone.OrderNo, "u1")
				require.NoError(t, err)
				require.True(t, res.Changed)
				held, err := seats.Show(ctx, show)
				require.NoError(t, err)
				assert.NotEqual(t, gone.OrderNo, held["C1"].OrderNo, "the cancelled order's seat is freed at its cancel (Released %d, seats %v)", res.Released, res.Seats)
			}
		})
	}
}

// TestReview2HostRowBlobUserOnSQLite: on SQLite a value's storage class is
// the value's, not the column's: a Go host that binds an id as []byte (a
// byte slice it read from a request, a key) stores a BLOB in a VARCHAR
// column. hostPlacedOrder selects the user as the column is (asText is the
// identity on SQLite) and database/sql turns the BLOB into the string
// "ann", so the read-back accepts the row as user "ann"'s; every owner
// compare-and-set compares user_id = 'ann' (TEXT), which a BLOB never
// equals in SQLite. Judged as TestReviewHostRowUserReadBackIsByteForByte:
// either nothing is placed, or the placement's user owns the order she
// was told she placed (I10).
func TestReview2HostRowBlobUserOnSQLite(t *testing.T) {
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

	p := cancel.Placement{OrderNo: "bu" + testenv.Unique(), UserID: "ann", ShowID: "bu-show", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)}
	err = svc.Place(ctx, p, s.Insert(db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
			VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', 1, 0)`, p.OrderNo, []byte(p.UserID), p.ShowID, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime))
		return err
	}))
	if err != nil {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM fill_order WHERE order_no = ?", p.OrderNo).Scan(&n))
		assert.Zero(t, n, "refused: nothing placed")
		return
	}
	var typ string
	require.NoError(t, db.QueryRow("SELECT typeof(user_id) FROM fill_order WHERE order_no = ?", p.OrderNo).Scan(&typ))
	res, err := svc.UserCancel(ctx, p.OrderNo, p.UserID)
	require.NoError(t, err, "the placement was accepted as user %q's (the row's user_id is a %s): she cannot cancel her own order", p.UserID, typ)
	assert.True(t, res.Changed, "the placement was accepted as user %q's (the row's user_id is a %s): her own cancel changes nothing (%+v)", p.UserID, typ, res)
}
