package sqlstore_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Fourth review (1f10c9a: Shorten gives a NULL-deadline order one), on the
// schemas with a deadline column of their own.

// nullOrder places an order through svc and clears its deadline (NULL).
func nullOrder(t *testing.T, ctx context.Context, svc *cancel.Service, s *sqlstore.Store, db *sql.DB, d sqlstore.Dialect, c nullDeadlineCase, user string) cancel.Placement {
	now, err := s.Now(ctx)
	require.NoError(t, err)
	u := testenv.Unique()
	p := cancel.Placement{OrderNo: "N" + u, UserID: user, ShowID: "ev" + u, Seats: []string{"n1"}, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
	_, err = db.ExecContext(ctx, bindQ(d, "UPDATE "+c.table+" SET "+c.col+" = NULL WHERE "+c.no+" = ?"+c.where), p.OrderNo)
	require.NoError(t, err)
	return p
}

// Concurrent Shortens of one NULL-deadline order: exactly one of them gives
// it its first deadline (Previous zero); every other change moves it from
// the deadline the one before set (Previous exact, each change reported
// once); a call that changed nothing finds it due no later than it asked.
func TestReview4ShortenNullRace(t *testing.T) {
	for _, c := range nullDeadlineCases[:2] {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
				ctx := context.Background()
				s := hostStore(t, db, d, c.hs)
				svc, err := cancel.New(cancel.Config{Store: s, Seats: redisSeats(t, s), Runtime: quiet})
				require.NoError(t, err)
				for round := 0; round < 3; round++ {
					p := nullOrder(t, ctx, svc, s, db, d, c, "u1")
					const k = 6
					res := make([]cancel.DeadlineResult, k)
					errs := make([]error, k)
					var wg sync.WaitGroup
					for i := 0; i < k; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							res[i], errs[i] = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: time.Duration(10+10*((i*5)%k)) * time.Minute, Shorten: true})
						}()
					}
					wg.Wait()
					o, err := s.Order(ctx, p.OrderNo)
					require.NoError(t, err)
					require.False(t, o.ExpireAt.IsZero(), "it has a deadline")
					first, prevs := 0, map[int64]int{}
					for i := 0; i < k; i++ {
						require.NoError(t, errs[i])
						r := res[i]
						if !r.Changed {
							continue
						}
						if r.Previous.IsZero() {
							first++
						} else {
							prevs[r.Previous.UnixMilli()]++
						}
						assert.True(t, r.Previous.IsZero() || r.Order.ExpireAt.Before(r.Previous), "a shortening moves earlier: %v -> %v", r.Previous, r.Order.ExpireAt)
					}
					assert.Equal(t, 1, first, "one call gave it its first deadline")
					for ms, n := range prevs {
						assert.Equal(t, 1, n, "the deadline %d was moved from once", ms)
					}
				}
			})
		})
	}
}

// Tenants (I16) and owners: a Shorten through tenant 7's wiring never gives
// tenant 8's NULL-deadline row of the same order number a deadline; a
// buyer's Shorten of another buyer's NULL-deadline order is ErrNotOwner and
// leaves it without one.
func TestReview4ShortenNullTenantAndOwner(t *testing.T) {
	c := nullDeadlineCases[1] // shop: Where tenant_id = 7
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		svc, err := cancel.New(cancel.Config{Store: s, Seats: redisSeats(t, s), Runtime: quiet})
		require.NoError(t, err)
		p := nullOrder(t, ctx, svc, s, db, d, c, "u1")
		_, err = db.ExecContext(ctx, bindQ(d, "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (8, ?, 'u1', ?, 'NEW', NULL)"), p.OrderNo, p.ShowID)
		require.NoError(t, err)
		other := func() sql.NullInt64 {
			var v sql.NullInt64
			require.NoError(t, db.QueryRowContext(ctx, bindQ(d, "SELECT due_at FROM shop_order WHERE tenant_id = 8 AND order_code = ?"), p.OrderNo).Scan(&v))
			return v
		}
		_, err = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, UserID: "u2", In: time.Minute, Shorten: true})
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		o, err := s.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.True(t, o.ExpireAt.IsZero(), "another buyer gives it no deadline")
		r, err := s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, UserID: "u1", In: time.Minute, Shorten: true})
		require.NoError(t, err)
		assert.True(t, r.Changed)
		assert.False(t, other().Valid, "I16: tenant 8's row keeps no deadline")
		// Tenant 8's order alone (tenant 7's gone): not found, nothing written.
		_, err = db.ExecContext(ctx, bindQ(d, "DELETE FROM shop_order WHERE tenant_id = 7 AND order_code = ?"), p.OrderNo)
		require.NoError(t, err)
		_, err = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: time.Minute, Shorten: true})
		assert.ErrorIs(t, err, expiry.ErrNotFound)
		assert.False(t, other().Valid, "I16")
	})
}

// What the Service reports of a shortening that gives a NULL-deadline order
// its first deadline: KindDeadlineChanged "shortened" with Delay "the
// change (negative when it moved earlier)" (expiry/observer.go). A deadline
// given where there was none is earlier than none; a positive Delay of
// centuries is no change that happened. The message is scheduled by the
// deadline read back, never before it by the store's clock (I4).
func TestReview4ShortenNullEvent(t *testing.T) {
	c := nullDeadlineCases[1]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		var mu sync.Mutex
		var evs []expiry.Event
		obs := expiry.ObserverFunc(func(_ context.Context, e expiry.Event) {
			mu.Lock()
			defer mu.Unlock()
			evs = append(evs, e)
		})
		rt := quiet
		rt.Observer = obs
		sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: &countingSender{}, Runtime: quiet})
		require.NoError(t, err)
		svc, err := cancel.New(cancel.Config{Store: s, Seats: redisSeats(t, s), Scheduler: sched, Runtime: rt})
		require.NoError(t, err)
		p := nullOrder(t, ctx, svc, s, db, d, c, "u1")
		res, err := svc.Shorten(ctx, p.OrderNo, "", 5*time.Minute)
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.False(t, res.Order.ExpireAt.Before(res.Order.ReadAt.Add(5*time.Minute-time.Second)), "I4: due about 5 min from the store's clock, not before")
		mu.Lock()
		defer mu.Unlock()
		var found bool
		for _, e := range evs {
			if e.Kind == expiry.KindDeadlineChanged && e.OrderNo == p.OrderNo {
				found = true
				assert.Equal(t, "shortened", e.Reason)
				assert.LessOrEqual(t, e.Delay, time.Duration(0), "a shortening's Delay is not positive: %v", e.Delay)
			}
		}
		assert.True(t, found, "the change is observed")
	})
}

// The operator's hand-made order (inserted by the host with no deadline and
// a claim, never through Place: no side row), given a deadline by Shorten
// with atMost 0, racing the host writing a deadline of its own: no error,
// Previous is none or the host's, and once due by the store's clock a
// timeout cancels it and frees its claim (I2), never before (I4).
func TestReview4ShortenNullHandMade(t *testing.T) {
	c := nullDeadlineCases[1]
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		s := hostStore(t, db, d, c.hs)
		sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: &countingSender{}, Runtime: quiet})
		require.NoError(t, err)
		svc, err := cancel.New(cancel.Config{Store: s, Seats: redisSeats(t, s), Scheduler: sched, Runtime: quiet})
		require.NoError(t, err)
		for round := 0; round < 4; round++ {
			u := testenv.Unique()
			no, show := "M"+u, "ev"+u
			_, err = db.ExecContext(ctx, bindQ(d, c.insert), no, "u4", show)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, bindQ(d, c.claim), show, "m1", no)
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			host := now.Add(2 * time.Hour).Unix()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := db.ExecContext(ctx, bindQ(d, "UPDATE shop_order SET due_at = ? WHERE tenant_id = 7 AND order_code = ?"), host, no)
				assert.NoError(t, err)
			}()
			res, err := svc.Shorten(ctx, no, "", 0)
			wg.Wait()
			require.NoError(t, err)
			if res.Changed {
				assert.True(t, res.Previous.IsZero() || res.Previous.Unix() == host, "Previous %v", res.Previous)
			}
			o, err := s.Order(ctx, no)
			require.NoError(t, err)
			if o.ExpireAt.IsZero() || o.ExpireAt.Unix() == host {
				continue // the host's write came last
			}
			untilDue(t, s, o.ExpireAt)
			r, err := svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout})
			require.NoError(t, err)
			assert.True(t, r.Changed, "due: a timeout cancels it")
			var st string
			require.NoError(t, db.QueryRowContext(ctx, bindQ(d, "SELECT status FROM shop_ticket WHERE tenant_id = 7 AND order_code = ?"), no).Scan(&st))
			assert.Equal(t, "FREE", st, "I2: its claim is freed")
		}
	})
}
