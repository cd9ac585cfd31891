package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// pageAllClaims pages s's claims limit at a time and counts how often each
// (show, seat, order) was read; it fails when the pages do not end within bound.
func pageAllClaims(t *testing.T, s *sqlstore.Store, limit, bound int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, bound, "the pages do not end (seen %q)", seen)
		claims, next, err := s.Claims(context.Background(), cursor, limit)
		require.NoError(t, err)
		for _, c := range claims {
			seen[c.ShowID+"/"+c.SeatID+"/"+c.OrderNo]++ // "x " reads as "x": the order tells them apart
		}
		if next == "" {
			return seen
		}
		cursor = next
	}
}

// TestClaimsPagesPastTrailingSpaces: a host's old code wrote ids the
// library would refuse, a seat or a show id ending in a space, in VARCHAR
// columns (no CHAR padding: "x " is not "x" there). Read back, the ids are
// unpadded; a cursor made of the unpadded ids starts the next page before
// the claim it ended at, so a page that ends at such a claim is read again,
// and at one claim a page the reconciler's claims pass reads the same claim
// for ever (its rebuild never completes). Every claim is read once and the
// pages end.
func TestClaimsPagesPastTrailingSpaces(t *testing.T) {
	// Not MySQL: its PAD SPACE collations take "x " for "x", and the
	// claims' key refuses the pair.
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			u := testenv.Unique()
			// Legacy (show, seat) pairs: a seat ending in a space beside
			// the same seat without it, a show ending in one.
			legacy := [][2]string{{"tsA" + u, "x"}, {"tsA" + u, "x "}, {"tsA" + u, "y"}, {"tsB" + u + " ", "x"}, {"tsB" + u + " ", "z"}}
			for i, c := range legacy {
				p := cancel.Placement{OrderNo: fmt.Sprintf("T%d%s", i, u), UserID: "u1", ShowID: fmt.Sprintf("tsP%d%s", i, u), Seats: []string{"p"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
				_, err := db.ExecContext(ctx, bindQ(d, "UPDATE order_info SET show_id = ? WHERE order_no = ?"), c[0], p.OrderNo)
				require.NoError(t, err)
				_, err = db.ExecContext(ctx, bindQ(d, "UPDATE order_seat SET show_id = ?, seat_id = ? WHERE order_no = ?"), c[0], c[1], p.OrderNo)
				require.NoError(t, err)
			}
			var rows int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM order_seat").Scan(&rows))
			for _, limit := range []int{1, 2} {
				seen := pageAllClaims(t, s, limit, 2*rows+2)
				total := 0
				for k, n := range seen {
					total += n
					assert.Equal(t, 1, n, "page size %d: claim %q read %d times", limit, k, n)
				}
				assert.Equal(t, rows, total, "page size %d: every claim read once", limit)
			}
		})
	}
}

// nullShow is SeatFlow's schema as an older release of the host left it:
// the order's show column allows NULL.
var nullShow = hostSchema{
	name:    "nullshow",
	mapping: seatflow.mapping,
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			out = append(out, strings.Replace(q, "show_id       VARCHAR(64) NOT NULL", "show_id       VARCHAR(64) NULL", 1))
		}
		return out
	},
}

// miniSeats is a seat store on miniredis, scoped to s.
func miniSeats(t *testing.T, s *sqlstore.Store) *redisseat.Seats {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	seats, err := redisseat.New(rdb, "atk3")
	require.NoError(t, err)
	return seats.Scoped(s.Scope())
}

// TestNullShowOrderKeepsItsSeats: an order placed through the library
// (its lock id kept in the side table) whose show column the host's code
// later left NULL. Statuses reads the NULL show as "" since it stopped
// failing on it; the reconciler's lock pass must not take "" for another
// show and free the seat of the pending order (I2, I15): anyone could lock
// it then while the order can still be paid.
func TestNullShowOrderKeepsItsSeats(t *testing.T) {
	ctx := context.Background()
	d := sqlstore.SQLite
	db := openDB(t, d)
	s := hostStore(t, db, d, nullShow)
	rs := miniSeats(t, s)
	svc, err := cancel.New(cancel.Config{Store: s, Seats: rs})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	show := "ns" + testenv.Unique()
	p := cancel.Placement{OrderNo: "NS" + testenv.Unique(), UserID: "u1", ShowID: show, Seats: []string{"a1", "a2"}, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
	r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Grace: time.Millisecond, Settle: time.Millisecond})
	require.NoError(t, err)
	rep, err := r.Round(ctx) // a new seat store is rebuilt from SQL first
	require.NoError(t, err)
	require.True(t, rep.Rebuilt)
	require.Zero(t, rep.Released)

	_, err = db.ExecContext(ctx, "UPDATE order_info SET show_id = NULL WHERE order_no = ?", p.OrderNo)
	require.NoError(t, err)
	st, err := s.Statuses(ctx, []string{p.OrderNo})
	require.NoError(t, err, "a NULL show is read")
	require.Equal(t, expiry.StatusPending, st[p.OrderNo].Status)

	time.Sleep(20 * time.Millisecond) // the lock is older than the grace period
	// The claims pass puts a freed seat back from SQL later in the same
	// round, without the order's lock id, and the next round frees it
	// again: the seat is free for a while in every round.
	for i := 1; i <= 2; i++ {
		rep, err = r.Round(ctx)
		require.NoError(t, err)
		assert.Zero(t, rep.Released, "round %d: I2: the lock pass freed seats of the pending order", i)
	}

	seats, err := rs.Show(ctx, show)
	require.NoError(t, err)
	for _, seat := range p.Seats {
		assert.Equal(t, cancel.SeatLocked, seats[seat].Status, "I2: seat %s of the pending order was freed", seat)
		assert.Equal(t, p.OrderNo, seats[seat].OrderNo, "seat %s", seat)
	}
	o, err := s.Order(ctx, p.OrderNo)
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
}

// nullClaims is SeatFlow's schema with a claims table an older release
// of the host left without NOT NULL on its show and seat (a unique key, not
// a primary key, over them).
var nullClaims = hostSchema{
	name:    "nullclaims",
	mapping: seatflow.mapping,
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			q = strings.Replace(q, "show_id  VARCHAR(64) NOT NULL", "show_id  VARCHAR(64) NULL", 1)
			q = strings.Replace(q, "seat_id  VARCHAR(64) NOT NULL", "seat_id  VARCHAR(64) NULL", 1)
			q = strings.Replace(q, "PRIMARY KEY (show_id, seat_id)", "UNIQUE (show_id, seat_id)", 1)
			out = append(out, q)
		}
		return out
	},
}

// TestClaimsPagesPastNullIDs: legacy claims with a NULL show or seat, which
// sort where a keyset cursor cannot name them. Every claim with a show and a
// seat is read once, the others at most once, and the pages end, at one
// and two claims a page, on every dialect. (A NULL show never passes the
// keyset condition: such a claim is neither read nor reported.)
func TestClaimsPagesPastNullIDs(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, nullClaims)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			u := testenv.Unique()
			for i, c := range []struct{ show, seat any }{{nil, "a"}, {nil, "b"}, {"nn" + u, "x"}, {"nn" + u, nil}, {"nn" + u, "y"}} {
				p := cancel.Placement{OrderNo: fmt.Sprintf("NC%d%s", i, u), UserID: "u1", ShowID: fmt.Sprintf("ncP%d%s", i, u), Seats: []string{"p"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
				_, err = db.ExecContext(ctx, bindQ(d, "UPDATE order_seat SET show_id = ?, seat_id = ? WHERE order_no = ?"), c.show, c.seat, p.OrderNo)
				require.NoError(t, err)
			}
			var rows int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM order_seat").Scan(&rows))
			for _, limit := range []int{1, 2} {
				seen := pageAllClaims(t, s, limit, 2*rows+2)
				for k, n := range seen {
					assert.LessOrEqual(t, n, 1, "page size %d: claim %q read %d times", limit, k, n)
				}
				for _, k := range []string{"nn" + u + "/x/NC2" + u, "nn" + u + "/y/NC4" + u} {
					assert.Equal(t, 1, seen[k], "page size %d: claim %q read once (seen %q)", limit, k, seen)
				}
			}
		})
	}
}
