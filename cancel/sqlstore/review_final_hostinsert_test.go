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

// Review (final) of df1eb4e: two submits of one order number AT ONCE
// (a double click: both pass Service.Place's pre-read while neither has
// committed), the host's order insert idempotent on the number, no claims
// table (the side row holds the seats). The first submit's transaction has
// run placeBefore (side row inserted) and waits in its rows; the second
// runs placeBefore meanwhile, then the first commits. Documented: exactly
// one places, the other is cancel.ErrOrderExists and its seats are freed;
// the first order's side row is untouched, so its cancel frees its own
// seats (I2). Variants: a fresh number, and a number whose old order the
// host deleted (an orphan side row left); MariaDB at its default
// (REPEATABLE READ) and at READ COMMITTED (a host's pool set so), and
// PostgreSQL.
func TestReviewFinalHostOrderConcurrentDoubleSubmit(t *testing.T) {
	type variant struct {
		name   string
		d      sqlstore.Dialect
		rc     bool
		orphan bool
	}
	var vs []variant
	for _, orphan := range []bool{false, true} {
		vs = append(vs,
			variant{"mysql-rr", sqlstore.MySQL, false, orphan},
			variant{"mysql-rc", sqlstore.MySQL, true, orphan},
			variant{"postgres", sqlstore.Postgres, false, orphan})
	}
	for _, v := range vs {
		name := v.name + "/fresh"
		if v.orphan {
			name = v.name + "/orphan"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, v.d)
			if v.rc {
				// Every connection of the pool at READ COMMITTED.
				db.SetMaxOpenConns(4)
				db.SetMaxIdleConns(4)
				db.SetConnMaxIdleTime(0)
				var conns []*sql.Conn
				for range 4 {
					c, err := db.Conn(ctx)
					require.NoError(t, err)
					_, err = c.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
					require.NoError(t, err)
					conns = append(conns, c)
				}
				for _, c := range conns {
					c.Close()
				}
			}
			applyDDL(t, db, fillSchema.ddl(v.d))
			m := fillSchema.mapping
			m.Claims = nil
			m.Orders.Fill = hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version")
			s, err := sqlstore.New(db, v.d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			rows := idempotentHostRow(v.d, now)

			show, no := "cs"+testenv.Unique(), "cs"+testenv.Unique()
			if v.orphan {
				old := cancel.Placement{OrderNo: no, UserID: "old", ShowID: show, Seats: []string{"Z9"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, old, s.Insert(db, rows)))
				_, err := svc.UserCancel(ctx, no, "old")
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, rebindQ(v.d, "DELETE FROM fill_order WHERE order_no = ?"), no) // the host deletes the closed order
				require.NoError(t, err)
			}
			first := cancel.Placement{OrderNo: no, UserID: "ann", ShowID: show, Seats: []string{"A1", "A2"}, ExpireAt: now.Add(time.Hour)}
			second := first
			second.Seats = []string{"B1"}

			entered, release := make(chan struct{}), make(chan struct{})
			gated := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				close(entered)
				<-release
				return rows(ctx, tx, p)
			}
			firstErr, secondErr := make(chan error, 1), make(chan error, 1)
			go func() { firstErr <- svc.Place(ctx, first, s.Insert(db, gated)) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the first submit did not reach its rows")
			}
			go func() { secondErr <- svc.Place(ctx, second, s.Insert(db, rows)) }()
			time.Sleep(500 * time.Millisecond) // the second's placeBefore meets the first's side row
			close(release)
			e1, e2 := <-firstErr, <-secondErr
			t.Logf("first: %v", e1)
			t.Logf("second: %v", e2)

			held, err := seats.Show(ctx, show)
			require.NoError(t, err)
			t.Logf("seats after both submits: %+v", held)
			winners := 0
			for _, e := range []error{e1, e2} {
				if e == nil {
					winners++
				}
			}
			assert.Equal(t, 1, winners, "exactly one submit places")
			for _, e := range []error{e1, e2} {
				if e != nil {
					assert.ErrorIs(t, e, cancel.ErrOrderExists, "the other submit of a placed number")
				}
			}
			if winners == 1 {
				loser := second
				if e1 != nil {
					loser = first
				}
				for _, seat := range loser.Seats {
					if st, ok := held[seat]; ok {
						assert.NotEqual(t, cancel.SeatLocked, st.Status, "the losing submit's seat %s is still locked", seat)
					}
				}
			}
			if winners >= 1 {
				res, cerr := svc.UserCancel(ctx, no, "ann")
				require.NoError(t, cerr)
				require.True(t, res.Changed)
				t.Logf("cancel: seats %v released %d", res.Seats, res.Released)
				held, err = seats.Show(ctx, show)
				require.NoError(t, err)
				for seat, st := range held {
					if st.OrderNo == no && st.Status == cancel.SeatLocked {
						t.Errorf("I2: seat %s still locked (lock %s) by order %s after its cancel", seat, st.LockID, no)
					}
				}
			}
		})
	}
}
