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
