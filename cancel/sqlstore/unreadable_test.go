package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// legacy is SeatFlow's schema as an older release of the host left it:
// the user column allows NULL, and rows its old code wrote have none.
var legacy = hostSchema{
	name:    "legacy",
	mapping: seatflow.mapping,
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			out = append(out, strings.Replace(q, "user_id       VARCHAR(64) NOT NULL", "user_id       VARCHAR(64) NULL", 1))
		}
		return out
	},
}

// unreadableWorld is a store whose tables hold legacy rows next to
// ordinary orders: orders (table, number and user columns) and claims
// (table, number column) name where to write them.
type unreadableWorld struct {
	db                           *sql.DB
	d                            sqlstore.Dialect
	orders, ordersNo, ordersUser string
	claims, claimsNo             string
}

func (w unreadableWorld) exec(t *testing.T, q string, args ...any) {
	_, err := w.db.Exec(bindQ(w.d, q), args...)
	require.NoError(t, err, q)
}

// nullUser makes no's user NULL, as the host's old code wrote it.
func (w unreadableWorld) nullUser(t *testing.T, no string) {
	w.exec(t, "UPDATE "+w.orders+" SET "+w.ordersUser+" = NULL WHERE "+w.ordersNo+" = ?", no)
}

// renumber gives order no (and its claims) the number junk.
func (w unreadableWorld) renumber(t *testing.T, no, junk string) {
	w.exec(t, "UPDATE "+w.orders+" SET "+w.ordersNo+" = ? WHERE "+w.ordersNo+" = ?", junk, no)
	w.exec(t, "UPDATE "+w.claims+" SET "+w.claimsNo+" = ? WHERE "+w.claimsNo+" = ?", junk, no)
}

// unreadableCase is one dialect and schema of eachUnreadable: the store,
// its legacy rows' world, the seat store and the service on them.
type unreadableCase struct {
	d   sqlstore.Dialect
	db  *sql.DB
	s   *sqlstore.Store
	w   unreadableWorld
	rs  *redisseat.Seats
	ev  *events // what the service reported
	svc *cancel.Service
	now time.Time // the store's clock at the start
}

// eachUnreadable runs test, in parallel, on every dialect with each of
// unreadableStore's schemas (SQLite cannot drop a NOT NULL: only its
// legacy table).
func eachUnreadable(t *testing.T, test func(t *testing.T, c unreadableCase)) {
	for _, d := range allDialects {
		for _, schema := range []string{"library", "legacy"} {
			if d == sqlstore.SQLite && schema == "library" {
				continue
			}
			t.Run(string(d)+"/"+schema, func(t *testing.T) {
				t.Parallel() // most of it waits for deadlines
				c := unreadableCase{d: d, db: openDB(t, d), ev: &events{}}
				c.s, c.w = unreadableStore(t, c.db, d, schema)
				c.rs = redisSeats(t, c.s)
				var err error
				c.svc, err = cancel.New(cancel.Config{Store: c.s, Seats: c.rs, Runtime: expiry.Runtime{Observer: c.ev}})
				require.NoError(t, err)
				c.now, err = c.s.Now(context.Background())
				require.NoError(t, err)
				test(t, c)
			})
		}
	}
}

// unreadableStore is a store on schema ("library": the library's own, its
// user column made nullable; "legacy") and where its legacy rows go.
func unreadableStore(t *testing.T, db *sql.DB, d sqlstore.Dialect, schema string) (*sqlstore.Store, unreadableWorld) {
	w := unreadableWorld{db: db, d: d}
	var s *sqlstore.Store
	if schema == "library" {
		s = raceStore(t, db, d, schema)
		w.orders, w.ordersNo, w.ordersUser, w.claims, w.claimsNo = "oe_order", "order_no", "user_id", "oe_order_seat", "order_no"
		if d == sqlstore.MySQL {
			w.exec(t, "ALTER TABLE oe_order MODIFY user_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL")
		} else {
			w.exec(t, "ALTER TABLE oe_order ALTER COLUMN user_id DROP NOT NULL")
		}
	} else {
		s = hostStore(t, db, d, legacy)
		w.orders, w.ordersNo, w.ordersUser, w.claims, w.claimsNo = "order_info", "order_no", "user_id", "order_seat", "order_no"
	}
	return s, w
}

// events collects what the Service and the Reconciler report.
type events struct {
	mu  sync.Mutex
	all []expiry.Event
}

func (e *events) Observe(_ context.Context, ev expiry.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// of returns the events of kind (and reason, if not "") naming no.
func (e *events) of(kind expiry.Kind, reason, no string) []expiry.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []expiry.Event
	for _, ev := range e.all {
		if ev.Kind == kind && ev.OrderNo == no && (reason == "" || ev.Reason == reason) {
			out = append(out, ev)
		}
	}
	return out
}

// TestUnreadableRowsDoNotStopTheReconciler: legacy rows the library cannot
// read as it reads its own (an order and its claims with a NULL user, an
// order number with a space in it) sit beside ordinary orders, on the
// library's schema (its user column made nullable, as a hand-made table
// might have it) and on a host's legacy table. One reconcile round, judged
// by outcomes:
//   - every ordinary due order is cancelled and its seats are free in the
//     seat store; a pending order's seat the seat store lost is restored
//     (the claims pass goes past the unreadable claim);
//   - an order whose cancel committed (the NULL-user order is due: the
//     compare-and-set needs no user) is reported expired, never skipped;
//   - the unreadable rows are reported by order number (a skipped event,
//     reason "unreadable"), not guessed at;
//   - no seat of a pending or paid order is freed, the NULL-user paid
//     order's included;
//   - no round fails because of them, this one nor the next ones.
func TestUnreadableRowsDoNotStopTheReconciler(t *testing.T) {
	eachUnreadable(t, func(t *testing.T, c unreadableCase) {
		ctx := context.Background()
		d, db, s, w, rs, ev, svc, now := c.d, c.db, c.s, c.w, c.rs, c.ev, c.svc, c.now
		show := "ev" + testenv.Unique()
		u := testenv.Unique()
		due, later := now.Add(-2*time.Second), now.Add(time.Hour)
		place := func(no, user, seat string, at time.Time) cancel.Placement {
			p := cancel.Placement{OrderNo: no + u, UserID: user, ShowID: show, Seats: []string{seat}, ExpireAt: at}
			require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
			return p
		}
		var ordinary []cancel.Placement
		for i, seat := range []string{"d1", "d2", "d3"} {
			ordinary = append(ordinary, place("D"+string(rune('1'+i)), "u"+string(rune('1'+i)), seat, due))
		}
		waiting := place("F", "u1", "f1", later)
		paid := place("P", "u2", "p1", later)
		lost := place("L", "u3", "z9", later) // its lock is lost below
		nullDue := place("N", "u4", "n1", due)
		nullPaid := place("NP", "u5", "a0", later) // sorts first among the claims
		junkFrom := place("Z", "u6", "j1", due)    // after N: the expired pass reaches N first
		for _, p := range []cancel.Placement{paid, nullPaid} {
			res, err := svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay" + p.OrderNo})
			require.NoError(t, err)
			require.True(t, res.Changed)
		}
		st, err := rs.Show(ctx, show)
		require.NoError(t, err)
		n, err := rs.Release(ctx, cancel.Hold{ShowID: show, OrderNo: lost.OrderNo, UserID: lost.UserID, Seats: lost.Seats, LockID: st["z9"].LockID})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the seat store lost the lock of L")
		w.nullUser(t, nullDue.OrderNo)
		w.nullUser(t, nullPaid.OrderNo)
		junk := "Z " + u
		w.renumber(t, junkFrom.OrderNo, junk)
		untilDue(t, s, due)

		// Pages of one order: a page ends at every row, the
		// unreadable ones too.
		r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Batch: 1, Runtime: expiry.Runtime{Observer: ev}})
		require.NoError(t, err)
		rep, err := r.Round(ctx)
		assert.NoError(t, err, "the round fails on the legacy rows")
		t.Logf("round 1: %+v", rep)

		st, err = rs.Show(ctx, show)
		require.NoError(t, err)
		for _, p := range ordinary {
			o, err := s.Order(ctx, p.OrderNo)
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusCancelled, o.Status, "I3: ordinary due order %s not expired in the first round", p.OrderNo)
			_, held := st[p.Seats[0]]
			assert.False(t, held, "I2: the seat of cancelled order %s is still held after the first round", p.OrderNo)
		}
		for _, no := range []string{ordinary[0].OrderNo, ordinary[1].OrderNo, ordinary[2].OrderNo, nullDue.OrderNo} {
			var status int
			require.NoError(t, db.QueryRow(bindQ(d, "SELECT status FROM "+w.orders+" WHERE "+w.ordersNo+" = ?"), no).Scan(&status))
			if status != 2 { // cancelled, on both schemas
				assert.NotEmpty(t, ev.of(expiry.KindSkipped, "unreadable", no), "order %s was left pending and not reported", no)
				continue
			}
			assert.NotEmpty(t, ev.of(expiry.KindRepaired, "expired", no), "order %s was cancelled but not reported expired", no)
			assert.Empty(t, ev.of(expiry.KindSkipped, "", no), "order %s was cancelled but reported skipped", no)
		}
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatLocked, OrderNo: waiting.OrderNo, UserID: waiting.UserID},
			cancel.SeatState{Status: st["f1"].Status, OrderNo: st["f1"].OrderNo, UserID: st["f1"].UserID}, "the pending order F keeps its seat")
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatLocked, OrderNo: lost.OrderNo, UserID: lost.UserID},
			cancel.SeatState{Status: st["z9"].Status, OrderNo: st["z9"].OrderNo, UserID: st["z9"].UserID}, "the claims pass restores L's lost lock past the unreadable claim")
		assert.Equal(t, cancel.SeatSold, st["p1"].Status, "the paid order P keeps its seat")
		assert.Equal(t, paid.OrderNo, st["p1"].OrderNo)
		assert.Equal(t, cancel.SeatSold, st["a0"].Status, "the paid order with no user keeps its seat")
		assert.Equal(t, nullPaid.OrderNo, st["a0"].OrderNo)
		o, err := s.Order(ctx, paid.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, o.Status)

		assert.NotEmpty(t, ev.of(expiry.KindSkipped, "unreadable", junk), "the order numbered %q is not reported", junk)
		assert.NotEmpty(t, ev.of(expiry.KindSkipped, "unreadable", nullPaid.OrderNo), "the claim with no user is not reported")

		for i := 2; i <= 3; i++ {
			rep, err = r.Round(ctx)
			assert.NoError(t, err, "round %d fails on the legacy rows", i)
			t.Logf("round %d: %+v", i, rep)
		}
	})
}

// TestCancelDueReadsBackUnreadableRows: a batch of due orders, one of them
// with a NULL user. The batch cancels them all (the compare-and-set needs
// no user) and must say so: every order it cancelled is in its result
// (an error would have the caller believe nothing changed, while on
// PostgreSQL the one statement has committed), the ordinary orders' seats
// are freed at once, and the order whose user is unknown is reported by
// number (its release failed: the user's counter is not guessed), its
// seats left to the reconciler's lock pass.
func TestCancelDueReadsBackUnreadableRows(t *testing.T) {
	eachUnreadable(t, func(t *testing.T, c unreadableCase) {
		ctx := context.Background()
		d, db, s, w, rs, ev, svc, now := c.d, c.db, c.s, c.w, c.rs, c.ev, c.svc, c.now
		show := "ev" + testenv.Unique()
		u := testenv.Unique()
		due := now.Add(-2 * time.Second)
		var nos []string
		for _, no := range []string{"A", "N", "B"} {
			p := cancel.Placement{OrderNo: no + u, UserID: "u" + no, ShowID: show, Seats: []string{"s" + no}, ExpireAt: due}
			require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
			nos = append(nos, p.OrderNo)
		}
		w.nullUser(t, "N"+u)
		untilDue(t, s, due)

		res, err := svc.ExpireDue(ctx, nos, cancel.ReasonReconcile)
		require.NoError(t, err, "one order with no user fails the whole batch")
		got := map[string]bool{}
		for _, r := range res {
			assert.True(t, r.Changed)
			got[r.Order.No] = true
		}
		for _, no := range nos {
			var status int
			require.NoError(t, db.QueryRow(bindQ(d, "SELECT status FROM "+w.orders+" WHERE "+w.ordersNo+" = ?"), no).Scan(&status))
			assert.Equal(t, 2, status, "order %s is due: cancelled", no)
			assert.True(t, got[no], "order %s was cancelled by the batch but is not in its result", no)
		}
		st, err := rs.Show(ctx, show)
		require.NoError(t, err)
		for _, seat := range []string{"sA", "sB"} {
			_, held := st[seat]
			assert.False(t, held, "I2: seat %s of an ordinary cancelled order is still held", seat)
		}
		assert.NotEmpty(t, ev.of(expiry.KindReleaseFailed, "", "N"+u), "the order with no user is not reported")
	})
}

// TestNullUserOrderIsReadable: an order whose user the host's old code
// left NULL is read by Order (as the message handler and a late payment
// read it) with an empty user, not a scan error that fails every
// delivery of its message; its due message then cancels it, and the
// release it cannot make is reported.
func TestNullUserOrderIsReadable(t *testing.T) {
	eachUnreadable(t, func(t *testing.T, c unreadableCase) {
		ctx := context.Background()
		db, s, w, svc, now := c.db, c.s, c.w, c.svc, c.now
		p := cancel.Placement{OrderNo: "N" + testenv.Unique(), UserID: "u1", ShowID: "nu" + testenv.Unique(), Seats: []string{"a1"}, ExpireAt: now.Add(time.Second)}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
		w.nullUser(t, p.OrderNo)

		o, err := s.Order(ctx, p.OrderNo)
		require.NoError(t, err, "a NULL user is read as none")
		assert.Equal(t, "", o.UserID)
		assert.Equal(t, p.ShowID, o.ShowID)
		assert.Equal(t, expiry.StatusPending, o.Status)

		h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: sendNothing{}})
		require.NoError(t, err)
		untilDue(t, s, p.ExpireAt)
		out, err := h.Handle(ctx, expiry.Message{OrderNo: p.OrderNo, Hop: 1})
		require.NoError(t, err)
		assert.Equal(t, expiry.OutcomeCancelled, out, "its due message cancels it")
		o, err = s.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status)
		// Its seat's release needs the user (the purchase-limit counter is
		// not guessed): reported by number, left to the lock pass, as
		// TestCancelDueReadsBackUnreadableRows shows for the batch.
		assert.NotEmpty(t, c.ev.of(expiry.KindReleaseFailed, "", p.OrderNo), "the order with no user is not reported")
	})
}

// TestClaimsPagesPastLegacyShowIDs: a host's old code wrote show ids the
// library would refuse, "|" among their bytes, the byte a claims cursor
// once split at. Paged one claim at a time, every claim is read once and
// the pages end.
func TestClaimsPagesPastLegacyShowIDs(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			u := testenv.Unique()
			want := map[string]bool{}
			for i, show := range []string{"a|b", "a", "a|b|c", "a|"} {
				p := cancel.Placement{OrderNo: fmt.Sprintf("L%d%s", i, u), UserID: "u1", ShowID: fmt.Sprintf("legacy%d", i), Seats: []string{"x"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
				for _, q := range []string{"UPDATE order_info SET show_id = ? WHERE order_no = ?", "UPDATE order_seat SET show_id = ? WHERE order_no = ?"} {
					_, err := db.ExecContext(ctx, bindQ(d, q), show, p.OrderNo)
					require.NoError(t, err)
				}
				_, err := db.ExecContext(ctx, bindQ(d, "UPDATE order_seat SET seat_id = ? WHERE order_no = ? AND seat_id = ?"), "x|1", p.OrderNo, "x")
				require.NoError(t, err)
				want[show+" "+"x|1"] = true
			}
			seen := map[string]int{}
			cursor := ""
			for page := 0; ; page++ {
				require.Less(t, page, 2*len(want)+2, "the pages do not end (seen %v)", seen)
				claims, next, err := s.Claims(ctx, cursor, 1)
				require.NoError(t, err)
				for _, c := range claims {
					seen[c.ShowID+" "+c.SeatID]++
				}
				if next == "" {
					break
				}
				cursor = next
			}
			for k := range want {
				assert.Equal(t, 1, seen[k], "claim %q read once", k)
			}
		})
	}
}
