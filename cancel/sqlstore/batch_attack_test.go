package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
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
	"github.com/seatflow/orderexpiry/internal/onebyone"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Attacks on the batch cancels (Service.ExpireDue over sqlstore's CancelDue
// and redisseat's ReleaseAll), judged by outcomes only: who paid, which
// orders are cancelled, who holds which seat in Redis (expiry/doc.go's
// invariants I1, I2, I4, I10, I15, I16).

// attackSeats is a redisseat store whose releases can be held at a gate
// (a release that runs late: a slow round trip, a paused host) and whose
// sales can be made to fail (Redis unreachable for that one call).
type attackSeats struct {
	*redisseat.Seats
	mu       sync.Mutex
	gate     chan struct{} // non-nil: Release and ReleaseAll wait for it
	entered  chan struct{} // closed when a release reached the gate
	failSell bool
}

func (a *attackSeats) wait() {
	a.mu.Lock()
	gate, entered := a.gate, a.entered
	a.mu.Unlock()
	if gate == nil {
		return
	}
	select {
	case <-entered:
	default:
		close(entered)
	}
	<-gate
}

func (a *attackSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	a.wait()
	return a.Seats.Release(ctx, h)
}

func (a *attackSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	a.wait()
	return a.Seats.ReleaseAll(ctx, holds)
}

func (a *attackSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	a.mu.Lock()
	fail := a.failSell
	a.mu.Unlock()
	if fail {
		return 0, errors.New("attack: the seat store did not answer the sale")
	}
	return a.Seats.Sell(ctx, h)
}

// redisSeats is a redisseat store in a fresh namespace, scoped as s.
func redisSeats(t *testing.T, s *sqlstore.Store) *redisseat.Seats {
	seats, err := redisseat.New(testenv.Redis(t), "atk"+testenv.Unique())
	require.NoError(t, err)
	return seats.Scoped(s.Scope())
}

// untilDue waits until the database's clock is past deadline by more than
// the schema's resolution.
func untilDue(t *testing.T, s *sqlstore.Store, deadline time.Time) {
	ctx := context.Background()
	for i := 0; ; i++ {
		now, err := s.Now(ctx)
		require.NoError(t, err)
		if now.After(deadline.Add(1100 * time.Millisecond)) {
			return
		}
		require.Less(t, i, 100, "the database's clock does not move")
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBatchReleaseLateNeverFreesANewerLock: a cancel's seat release that
// runs late must act only on the lock the cancelled order held (I15, the
// doc of Service.Cancel), never on the newer lock a late payment took for
// the same order number.
//
// The story (fails on a host's tables with a claims table, shop): order X is due;
// the expiry cancels it, and its release is slow (held at a gate). Meanwhile
// the reconciler frees X's lock (a cancelled order's lock), the buyer's late
// payment reinstates X (AcceptLatePayments: a new lock, then paid), and its
// sale to Redis fails (left to the reconciler: the seats stay locked by the
// new lock). Then the slow release runs.
//
// Expected (and what the one-by-one path, Cancel, does): the slow release
// frees nothing; X is paid and its seats are still X's in Redis, so nobody
// else can lock them. Seen with the batch path (ExpireDue → CancelDue): the
// Result carries no LockID on a host's table with claims (the batch reads
// the lock id from oe_order.lock_id only, NULL for a host's table), so the
// release names "any lock of X" and frees the paid order's seats; another
// buyer then locks them (a seat sold twice: I2, I15). The library's schema
// and a host's table without claims (whose lock id the batch reads from
// the side table) hold, on both paths.
func TestBatchReleaseLateNeverFreesANewerLock(t *testing.T) {
	for _, d := range allDialects {
		for _, schema := range []string{"shop", "shop-noclaims", "library"} {
			for _, path := range []string{"batch", "one"} {
				t.Run(string(d)+"/"+schema+"/"+path, func(t *testing.T) {
					t.Parallel() // most of each run waits for a deadline
					ctx := context.Background()
					db := openDB(t, d)
					var s *sqlstore.Store
					switch schema {
					case "shop-noclaims":
						s = (mixedMapping{hs: &shop, noClaims: true}).store(t, db, d)
					default:
						s = raceStore(t, db, d, schema)
					}
					rs := redisSeats(t, s)
					slow := &attackSeats{Seats: rs, gate: make(chan struct{}), entered: make(chan struct{})}
					late := &attackSeats{Seats: rs, failSell: true}
					expirer, err := cancel.New(cancel.Config{Store: s, Seats: slow})
					require.NoError(t, err)
					refunds := &bfRefunds{}
					buyer, err := cancel.New(cancel.Config{Store: s, Seats: late, AcceptLatePayments: true, OnDiscrepancy: refunds.hook})
					require.NoError(t, err)

					now, err := s.Now(ctx)
					require.NoError(t, err)
					show := "ev" + testenv.Unique()
					p := cancel.Placement{OrderNo: "X" + testenv.Unique(), UserID: "u1", ShowID: show, Seats: []string{"a1", "a2"}, ExpireAt: now.Add(-2 * time.Second)}
					bfPlace(t, db, s, buyer, p)
					st, err := rs.Show(ctx, show)
					require.NoError(t, err)
					first := st["a1"].LockID
					require.NotEmpty(t, first)
					untilDue(t, s, p.ExpireAt)

					done := make(chan error, 1)
					go func() {
						var err error
						if path == "batch" {
							var res []cancel.Result
							res, err = expirer.ExpireDue(ctx, []string{p.OrderNo}, cancel.ReasonTimeout)
							if err == nil && len(res) != 1 {
								err = fmt.Errorf("the expiry cancelled %d orders, want 1", len(res))
							}
						} else {
							var res cancel.Result
							res, err = expirer.Cancel(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
							if err == nil && !res.Changed {
								err = errors.New("the expiry did not cancel X")
							}
						}
						done <- err
					}()
					select {
					case <-slow.entered:
					case err := <-done:
						t.Fatalf("the expiry returned before its release: %v", err)
					case <-time.After(20 * time.Second):
						t.Fatal("the expiry never reached its release")
					}
					// The cancel committed; its release is held. The reconciler's
					// lock pass frees the lock of the cancelled order, by its id.
					n, err := rs.Release(ctx, cancel.Hold{ShowID: show, OrderNo: p.OrderNo, UserID: "u1", Seats: p.Seats, LockID: first})
					require.NoError(t, err)
					require.Equal(t, 2, n)
					// The late payment reinstates X under a new lock; its sale to
					// Redis fails and is left to the reconciler.
					res, err := buyer.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "P" + testenv.Unique()})
					require.NoError(t, err)
					require.True(t, res.Changed, "the late payment reinstated X")
					o, err := s.Order(ctx, p.OrderNo)
					require.NoError(t, err)
					require.Equal(t, expiry.StatusPaid, o.Status)
					st, err = rs.Show(ctx, show)
					require.NoError(t, err)
					require.Equal(t, p.OrderNo, st["a1"].OrderNo, "X holds its seats again")
					require.NotEqual(t, first, st["a1"].LockID, "under a new lock")

					close(slow.gate) // the slow release runs now
					require.NoError(t, <-done)

					st, err = rs.Show(ctx, show)
					require.NoError(t, err)
					for _, seat := range p.Seats {
						assert.Equal(t, p.OrderNo, st[seat].OrderNo, "I15: seat %s of the paid order X was freed by a release that named an older lock", seat)
					}
					_, err = rs.Lock(ctx, cancel.Hold{ShowID: show, OrderNo: "Y" + testenv.Unique(), UserID: "u2", Seats: []string{"a1"}}, 0)
					assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "I2: another buyer locks a seat of the paid order X")
				})
			}
		}
	}
}

// raceSchemas are the schemas the races run on: the library's own and a
// host's with a tenant, string statuses and claims that keep their history.
var raceSchemas = []string{"library", "shop"}

func raceStore(t *testing.T, db *sql.DB, d sqlstore.Dialect, schema string) *sqlstore.Store {
	if schema == "shop" {
		return hostStore(t, db, d, shop)
	}
	ctx := context.Background()
	s, err := sqlstore.New(db, d)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	return s
}

// decision is one call's outcome for one order.
type decision struct {
	who      string
	released int
}

// TestBatchRacesEveryDecider: two hosts' batches (ExpireDue) run over the
// same orders again and again while the buyers pay, cancel or extend them,
// a single timeout fires for some and an operator expires some at once,
// all at the moment the orders fall due. Judged from outcomes:
//   - I1: every order decided by exactly one call, and ends as it decided
//     (paid by the payment that changed it, cancelled by the cancel that
//     changed it), never both;
//   - I4: an order whose deadline an Extend moved later (Changed) is still
//     pending at the end: no batch cancels it on the old deadline;
//   - I2: the seats of each cancelled order are freed exactly once (the
//     released counts of its one decider sum to its seats), a paid order's
//     seats are sold to it in Redis, a pending order's still locked by it;
//   - I8: each user's counter equals the seats of its pending and paid orders.
func TestBatchRacesEveryDecider(t *testing.T) {
	for _, d := range allDialects {
		for _, schema := range raceSchemas {
			t.Run(string(d)+"/"+schema, func(t *testing.T) {
				t.Parallel() // most of each run waits for deadlines
				ctx := context.Background()
				db := openDB(t, d)
				s := raceStore(t, db, d, schema)
				rs := redisSeats(t, s)
				svcA, err := cancel.New(cancel.Config{Store: s, Seats: rs})
				require.NoError(t, err)
				svcB, err := cancel.New(cancel.Config{Store: s, Seats: rs})
				require.NoError(t, err)

				now, err := s.Now(ctx)
				require.NoError(t, err)
				show := "ev" + testenv.Unique()
				const orders = 40
				ps := make([]cancel.Placement, orders)
				nos := make([]string, orders)
				var last time.Time
				for i := range ps {
					// Half due at once, half falling due while the race runs.
					deadline := now.Add(-time.Second)
					if i%2 == 1 {
						deadline = now.Add(time.Second)
					}
					last = deadline
					ps[i] = cancel.Placement{OrderNo: fmt.Sprintf("R%02d%s", i, testenv.Unique()), UserID: fmt.Sprintf("u%d", i%4), ShowID: show,
						Seats: []string{fmt.Sprintf("s%02da", i), fmt.Sprintf("s%02db", i)}, ExpireAt: deadline}
					nos[i] = ps[i].OrderNo
					require.NoError(t, svcA.Place(ctx, ps[i], s.Insert(db, nil)))
				}
				reversed := make([]string, orders)
				for i, no := range nos {
					reversed[orders-1-i] = no
				}

				var mu sync.Mutex
				decided := map[string][]decision{}
				extended := map[string]bool{}
				note := func(no, who string, released int) {
					mu.Lock()
					decided[no] = append(decided[no], decision{who, released})
					mu.Unlock()
				}
				var errs []error
				fail := func(err error) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				dbNow := func() time.Time {
					n, err := s.Now(ctx)
					if err != nil {
						fail(err)
						return last.Add(time.Hour)
					}
					return n
				}
				stop := last.Add(1100 * time.Millisecond)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for k, run := range []struct {
					svc  *cancel.Service
					list []string
				}{{svcA, nos}, {svcB, reversed}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						// Until one batch has begun at stop or later, when
						// every order is due whatever its column's resolution:
						// on a loaded machine the batch under way at stop may
						// have read its orders before the last were due.
						for {
							began := dbNow()
							res, err := run.svc.ExpireDue(ctx, run.list, "")
							if err != nil {
								fail(fmt.Errorf("batch %d: %w", k, err))
							}
							for _, r := range res {
								note(r.Order.No, "batch", r.Released)
							}
							if !began.Before(stop) {
								break
							}
							time.Sleep(5 * time.Millisecond)
						}
					}()
				}
				for i, p := range ps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						// The odd orders' callers act around their deadline.
						if i%2 == 1 {
							for dbNow().Before(p.ExpireAt.Add(-time.Duration(i%5) * 150 * time.Millisecond)) {
								time.Sleep(20 * time.Millisecond)
							}
						}
						switch i % 5 {
						case 0:
							r, err := svcB.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "P" + p.OrderNo})
							if err != nil && !errors.Is(err, cancel.ErrDiscrepancy) {
								fail(err)
							}
							if r.Changed {
								note(p.OrderNo, "pay", 0)
							}
						case 1:
							r, err := svcA.UserCancel(ctx, p.OrderNo, p.UserID)
							if err != nil {
								fail(err)
							}
							if r.Changed {
								note(p.OrderNo, "user", r.Released)
							}
						case 2:
							r, err := svcB.Cancel(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
							if err != nil {
								fail(err)
							}
							if r.Changed {
								note(p.OrderNo, "timeout", r.Released)
							}
						case 3:
							r, err := svcA.Extend(ctx, p.OrderNo, p.UserID, 30*time.Minute)
							if err != nil {
								fail(err)
							}
							if r.Changed {
								mu.Lock()
								extended[p.OrderNo] = true
								mu.Unlock()
							}
						case 4:
							r, err := svcB.ExpireNow(ctx, p.OrderNo)
							if err != nil {
								fail(err)
							}
							if r.Changed {
								note(p.OrderNo, "now", r.Released)
							}
						}
					}()
				}
				close(start)
				wg.Wait()
				require.Empty(t, errs)

				st, err := rs.Show(ctx, show)
				require.NoError(t, err)
				held := map[string]int{}
				for i, p := range ps {
					o, err := s.Order(ctx, p.OrderNo)
					require.NoError(t, err)
					ds := decided[p.OrderNo]
					switch o.Status {
					case expiry.StatusPending:
						assert.Empty(t, ds, "I1: %s is pending but %v decided it", p.OrderNo, ds)
						assert.True(t, extended[p.OrderNo], "I3: %s (caller %d) pending past its deadline without an extension", p.OrderNo, i%5)
						held[p.UserID] += len(p.Seats)
						for _, seat := range p.Seats {
							assert.Equal(t, cancel.SeatLocked, st[seat].Status, "a pending order's seat %s stays locked", seat)
							assert.Equal(t, p.OrderNo, st[seat].OrderNo)
						}
						continue
					case expiry.StatusPaid:
						require.Len(t, ds, 1, "I1: %s paid, decided by %v", p.OrderNo, ds)
						assert.Equal(t, "pay", ds[0].who, "I1: %s paid, decided by %v", p.OrderNo, ds)
						held[p.UserID] += len(p.Seats)
						for _, seat := range p.Seats {
							assert.Equal(t, cancel.SeatSold, st[seat].Status, "I2: seat %s of the paid order %s", seat, p.OrderNo)
							assert.Equal(t, p.OrderNo, st[seat].OrderNo)
						}
					case expiry.StatusCancelled:
						require.Len(t, ds, 1, "I1: %s cancelled, decided by %v", p.OrderNo, ds)
						assert.NotEqual(t, "pay", ds[0].who, "I1: %s cancelled, decided by %v", p.OrderNo, ds)
						assert.Equal(t, len(p.Seats), ds[0].released, "I2: %s's seats freed exactly once, by its decider %s", p.OrderNo, ds[0].who)
						assert.False(t, extended[p.OrderNo] && ds[0].who == "batch", "I4: %s extended, then cancelled by a batch on the old deadline", p.OrderNo)
						for _, seat := range p.Seats {
							assert.NotContains(t, st, seat, "I2: seat %s of the cancelled order %s is free", seat, p.OrderNo)
						}
					}
				}
				by := map[string]int{}
				for _, ds := range decided {
					for _, d := range ds {
						by[d.who]++
					}
				}
				t.Logf("deciders %v, extended %d", by, len(extended))
				assert.NotZero(t, by["batch"], "the batches decided some orders (else this race proves nothing)")
				for u := 0; u < 4; u++ {
					user := fmt.Sprintf("u%d", u)
					n, err := rs.Held(ctx, show, user)
					require.NoError(t, err)
					assert.Equal(t, held[user], n, "I8: the counter of %s", user)
				}
			})
		}
	}
}

// mixedMapping is a store under attack: the library's schema, a host's,
// or a host's without its claims table.
type mixedMapping struct {
	name     string
	hs       *hostSchema // nil: the library's schema
	noClaims bool
}

var mixedMappings = []mixedMapping{
	{name: "library"},
	{name: "seatflow", hs: &seatflow},
	{name: "seatflow-noclaims", hs: &seatflow, noClaims: true},
	{name: "shop", hs: &shop},
	{name: "window", hs: &window},
	{name: "numericorder", hs: &numericOrder},
	{name: "instant", hs: &instant},
	{name: "numericorder-noclaims", hs: &numericOrder, noClaims: true},
	{name: "charids", hs: &charIDs},
	{name: "charids-noclaims", hs: &charIDs, noClaims: true},
	{name: "softdelete", hs: &softDelete},
	{name: "setting", hs: &setting},
}

// charIDs is SeatFlow's schema with CHAR(n) ids: PostgreSQL pads them with
// spaces on the way out, MySQL strips the padding, SQLite keeps the text.
var charIDs = hostSchema{
	name:    "charids",
	mapping: seatflow.mapping,
	ddl: func(d sqlstore.Dialect) []string {
		var out []string
		for _, q := range seatflow.ddl(d) {
			out = append(out, strings.ReplaceAll(q, "VARCHAR(64)", "CHAR(24)"))
		}
		return out
	},
	caseFolding: true,
	resolution:  time.Second,
}

func (mm mixedMapping) store(t *testing.T, db *sql.DB, d sqlstore.Dialect) *sqlstore.Store {
	ctx := context.Background()
	if mm.hs == nil {
		return raceStore(t, db, d, "library")
	}
	applyDDL(t, db, mm.hs.ddl(d))
	m := mm.hs.mapping
	if mm.noClaims {
		m.Claims = nil
	}
	s, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))
	return s
}

// TestBatchOfMixedOrders: one ExpireDue over a list that holds everything a
// real list can: two due orders (one listed twice), one not due, one paid,
// one cancelled by its user, a missing number, a case variant of a due
// order's number (a non-canonical form on an integer column), and on the
// shop schema the same numbers in another tenant. Outcomes: exactly the due
// orders are cancelled and their seats freed in Redis, once (I2, I5); the
// case variant matches nothing (I10); everything else keeps its state and
// seats (I1, I4); the other tenant's orders and Redis keys are untouched
// (I16). The same list expired order by order (Cancel) must end the same.
func TestBatchOfMixedOrders(t *testing.T) {
	for _, d := range allDialects {
		for _, mm := range mixedMappings {
			if mm.hs != nil && mm.hs.notOn == d {
				continue
			}
			for _, path := range []string{"batch", "one"} {
				t.Run(string(d)+"/"+mm.name+"/"+path, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					db := openDB(t, d)
					s := mm.store(t, db, d)
					rs := redisSeats(t, s)
					var orders cancel.OrderStore = s
					if path == "one" {
						orders = onebyone.Store{OrderStore: s}
					}
					svc, err := cancel.New(cancel.Config{Store: orders, Seats: rs})
					require.NoError(t, err)
					placer, err := cancel.New(cancel.Config{Store: s, Seats: rs})
					require.NoError(t, err)
					var other *sqlstore.Store // tenant 8 of the shop schema
					var otherRS *redisseat.Seats
					var otherSvc *cancel.Service
					if mm.name == "shop" {
						m := shop.mapping
						m.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: 8}}
						c := *m.Claims
						c.Where = []sqlstore.Condition{{Column: "tenant_id", Value: 8}}
						m.Claims = &c
						other, err = sqlstore.New(db, d, m)
						require.NoError(t, err)
						t.Cleanup(func() { other.Close() })
						otherRS = redisSeats(t, other)
						otherSvc, err = cancel.New(cancel.Config{Store: other, Seats: otherRS})
						require.NoError(t, err)
					}

					now, err := s.Now(ctx)
					require.NoError(t, err)
					show := "ev" + testenv.Unique()
					base := time.Now().UnixNano() % 1e15
					no := func(name string, i int64) string {
						if mm.hs != nil && mm.hs.mapping.Orders.NumericOrderNo {
							return fmt.Sprint(base + i)
						}
						return name + testenv.Unique()
					}
					mk := func(name string, i int64, user string, deadline time.Time, seats ...string) cancel.Placement {
						return cancel.Placement{OrderNo: no(name, i), UserID: user, ShowID: show, Seats: seats, ExpireAt: deadline}
					}
					past := now.Add(-2 * time.Hour)
					dueA := mk("a", 1, "u1", past, "a1", "a2")
					dueB := mk("b", 2, "u2", past, "b1")
					later := mk("c", 3, "u1", now.Add(time.Hour), "c1")
					paid := mk("d", 4, "u3", past, "d1")
					gone := mk("e", 5, "u3", past, "e1")
					for _, p := range []cancel.Placement{dueA, dueB, later, paid, gone} {
						require.NoError(t, placer.Place(ctx, p, s.Insert(db, nil)))
					}
					if other != nil {
						for _, p := range []cancel.Placement{dueA, dueB} {
							require.NoError(t, otherSvc.Place(ctx, p, other.Insert(db, nil)))
						}
					}
					_, err = placer.Pay(ctx, cancel.Payment{OrderNo: paid.OrderNo, PaymentID: "P" + testenv.Unique()})
					require.NoError(t, err)
					_, err = placer.UserCancel(ctx, gone.OrderNo, gone.UserID)
					require.NoError(t, err)
					variant := strings.ToUpper(dueB.OrderNo)
					if mm.hs != nil && mm.hs.mapping.Orders.NumericOrderNo {
						variant = "0" + dueB.OrderNo
					}
					list := []string{later.OrderNo, dueA.OrderNo, paid.OrderNo, no("m", 99), gone.OrderNo, variant, dueA.OrderNo, dueB.OrderNo}

					res, err := svc.ExpireDue(ctx, list, "")
					require.NoError(t, err)
					got := map[string]cancel.Result{}
					for _, r := range res {
						_, twice := got[r.Order.No]
						assert.False(t, twice, "I5: %s in the result twice", r.Order.No)
						got[r.Order.No] = r
					}
					assert.ElementsMatch(t, []string{dueA.OrderNo, dueB.OrderNo}, keys(got), "exactly the due orders")
					assert.Equal(t, 2, got[dueA.OrderNo].Released, "I2: A's two seats freed once")
					assert.Equal(t, 1, got[dueB.OrderNo].Released, "I2: B's seat freed once")
					status := func(st *sqlstore.Store, no string) expiry.Status {
						o, err := st.Order(ctx, no)
						require.NoError(t, err)
						return o.Status
					}
					for no, want := range map[string]expiry.Status{dueA.OrderNo: expiry.StatusCancelled, dueB.OrderNo: expiry.StatusCancelled,
						later.OrderNo: expiry.StatusPending, paid.OrderNo: expiry.StatusPaid, gone.OrderNo: expiry.StatusCancelled} {
						assert.Equal(t, want, status(s, no), no)
					}
					st, err := rs.Show(ctx, show)
					require.NoError(t, err)
					holders := map[string]string{}
					for seat, v := range st {
						holders[seat] = v.Status.String() + ":" + v.OrderNo
					}
					assert.Equal(t, map[string]string{"c1": "locked:" + later.OrderNo, "d1": "sold:" + paid.OrderNo}, holders,
						"I2: the due orders' seats freed, the others' kept")
					for user, want := range map[string]int{"u1": 1, "u2": 0, "u3": 1} {
						n, err := rs.Held(ctx, show, user)
						require.NoError(t, err)
						assert.Equal(t, want, n, "I8: the counter of %s", user)
					}
					if other != nil {
						for _, p := range []cancel.Placement{dueA, dueB} {
							assert.Equal(t, expiry.StatusPending, status(other, p.OrderNo), "I16: tenant 8's %s", p.OrderNo)
						}
						ost, err := otherRS.Show(ctx, show)
						require.NoError(t, err)
						assert.Len(t, ost, 3, "I16: tenant 8's seats stay locked in its own keys")
					}
					again, err := svc.ExpireDue(ctx, list, "")
					require.NoError(t, err)
					assert.Empty(t, again, "I5: the same list again changes nothing")
				})
			}
		}
	}
}

// TestBatchAtItsLimits: MaxBatch+1 due orders of one show with five seats
// each (2505 seats: more than one seat-store script takes), on every
// dialect. CancelDue refuses MaxBatch+1 numbers and changes nothing; it
// takes exactly MaxBatch; an empty list is no error and changes nothing;
// ExpireDue cuts MaxBatch+1 into two transactions and cancels every order,
// frees every seat once (the released counts sum to the seats) and leaves
// every counter at zero (I2, I8).
func TestBatchAtItsLimits(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := raceStore(t, db, d, "library")
			rs := redisSeats(t, s)
			svc, err := cancel.New(cancel.Config{Store: s, Seats: rs})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			show := "ev" + testenv.Unique()
			nos := make([]string, cancel.MaxBatch+1)
			for i := range nos {
				seats := make([]string, 5)
				for k := range seats {
					seats[k] = fmt.Sprintf("s%03d-%d", i, k)
				}
				p := cancel.Placement{OrderNo: fmt.Sprintf("L%03d%s", i, testenv.Unique()), UserID: fmt.Sprintf("u%d", i%7), ShowID: show, Seats: seats, ExpireAt: now.Add(-time.Minute)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
				nos[i] = p.OrderNo
			}
			_, err = s.CancelDue(ctx, nos, cancel.ReasonReconcile)
			require.ErrorIs(t, err, expiry.ErrInvalidID, "MaxBatch+1 numbers")
			res, err := s.CancelDue(ctx, nil, cancel.ReasonReconcile)
			require.NoError(t, err)
			assert.Empty(t, res)
			res, err = svc.ExpireDue(ctx, []string{}, "")
			require.NoError(t, err)
			assert.Empty(t, res)
			for _, no := range nos {
				o, err := s.Order(ctx, no)
				require.NoError(t, err)
				require.Equal(t, expiry.StatusPending, o.Status, "the refused batch changed nothing")
			}

			res, err = svc.ExpireDue(ctx, nos, "")
			require.NoError(t, err)
			assert.Len(t, res, len(nos))
			released := 0
			for _, r := range res {
				released += r.Released
			}
			assert.Equal(t, 5*len(nos), released, "I2: every seat freed once")
			st, err := rs.Show(ctx, show)
			require.NoError(t, err)
			assert.Empty(t, st, "I2: every seat free in Redis")
			for u := 0; u < 7; u++ {
				n, err := rs.Held(ctx, show, fmt.Sprintf("u%d", u))
				require.NoError(t, err)
				assert.Zero(t, n, "I8")
			}
			for _, no := range []string{nos[0], nos[cancel.MaxBatch-1], nos[cancel.MaxBatch]} {
				o, err := s.Order(ctx, no)
				require.NoError(t, err)
				assert.Equal(t, expiry.StatusCancelled, o.Status, no)
			}
		})
	}
}

// TestBatchFollowsTheWindowSetting: the window is a setting row the shop
// edits (setting schema). An order placed with a deadline a minute ago is
// due; the shop then lengthens its window from 120 to 240 minutes, which
// moves every pending order's deadline two hours later. I4: a batch right
// after the change cancels nothing (by the database's clock and the
// setting it reads now); shortened again, the batch cancels it.
func TestBatchFollowsTheWindowSetting(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, setting)
			rs := redisSeats(t, s)
			svc, err := cancel.New(cancel.Config{Store: s, Seats: rs})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "w" + testenv.Unique(), UserID: "u1", ShowID: "ev" + testenv.Unique(), Seats: []string{"a1"}, ExpireAt: now.Add(-time.Minute)}
			require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
			_, err = db.ExecContext(ctx, "UPDATE shop_setting SET unpaid_minutes = 240 WHERE id = 1")
			require.NoError(t, err)
			res, err := svc.ExpireDue(ctx, []string{p.OrderNo}, "")
			require.NoError(t, err)
			assert.Empty(t, res, "I4: not due under the lengthened window")
			o, err := s.Order(ctx, p.OrderNo)
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusPending, o.Status, "I4")
			st, err := rs.Show(ctx, p.ShowID)
			require.NoError(t, err)
			assert.Equal(t, p.OrderNo, st["a1"].OrderNo, "its seat stays locked")

			_, err = db.ExecContext(ctx, "UPDATE shop_setting SET unpaid_minutes = 120 WHERE id = 1")
			require.NoError(t, err)
			res, err = svc.ExpireDue(ctx, []string{p.OrderNo}, "")
			require.NoError(t, err)
			require.Len(t, res, 1, "due again under the old window")
			assert.Equal(t, 1, res[0].Released)
		})
	}
}
