package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Issue 36's schema generator, run: host schemas sampled from the
// documented mapping space (generated_gen_test.go), each created in a
// fresh database and judged. Check refuses it: the error wraps ErrMapping
// and names a table or column of the schema (and the one at fault when the
// schema is one the README says Check refuses). Check accepts it: a short
// scenario through cancel.Service and the reconciler, judged by ledgers of
// outcomes only: money (every payment id honoured or refunded exactly
// once), seats (no seat held by two live orders), ids (a case variant never
// changes the other order: I10), deadlines (an order not due stays
// pending) and tenants (the other tenant's order keeps its status and
// claims: I16).

var (
	genSchemas = flag.Int("gen.schemas", 200, "TestGeneratedSchemas: how many schemas to generate")
	genSeed    = flag.Int64("gen.seed", 36, "TestGeneratedSchemas: the sampler's seed")
	genShrink  = flag.Int("gen.shrink", 30, "TestGeneratedSchemas: at most this many reruns to shrink a failing schema")
)

// genVerdict is one schema's judgement on one dialect.
type genVerdict struct {
	accepted bool
	refusal  string // the class of Check's refusal
	steps    int
	viol     []string
}

// genStats are the FIGURE's counts per dialect.
type genStats struct {
	mu                        sync.Mutex
	generated, accepted, viol map[sqlstore.Dialect]int
	steps                     map[sqlstore.Dialect]int
	refused                   map[sqlstore.Dialect]map[string]int
	failing                   map[sqlstore.Dialect]int
	smallest                  map[sqlstore.Dialect]string
	smallestSize              map[sqlstore.Dialect]int
}

func newGenStats() *genStats {
	return &genStats{generated: map[sqlstore.Dialect]int{}, accepted: map[sqlstore.Dialect]int{}, viol: map[sqlstore.Dialect]int{},
		steps: map[sqlstore.Dialect]int{}, refused: map[sqlstore.Dialect]map[string]int{}, failing: map[sqlstore.Dialect]int{},
		smallest: map[sqlstore.Dialect]string{}, smallestSize: map[sqlstore.Dialect]int{}}
}

func (s *genStats) add(d sqlstore.Dialect, v genVerdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.generated[d]++
	s.steps[d] += v.steps
	s.viol[d] += len(v.viol)
	if len(v.viol) > 0 {
		s.failing[d]++
	}
	if v.accepted {
		s.accepted[d]++
		return
	}
	if s.refused[d] == nil {
		s.refused[d] = map[string]int{}
	}
	s.refused[d][v.refusal]++
}

func (s *genStats) figure(wall time.Duration) string {
	var parts []string
	total := [5]int{}
	for _, d := range allDialects {
		var rs []string
		n := 0
		for r, c := range s.refused[d] {
			rs = append(rs, fmt.Sprintf("%s:%d", r, c))
			n += c
		}
		sort.Strings(rs)
		parts = append(parts, fmt.Sprintf("%s generated=%d accepted=%d refused=%d [%s] steps=%d violations=%d (schemas %d)",
			d, s.generated[d], s.accepted[d], n, strings.Join(rs, " "), s.steps[d], s.viol[d], s.failing[d]))
		total[0] += s.generated[d]
		total[1] += s.accepted[d]
		total[2] += n
		total[3] += s.steps[d]
		total[4] += s.viol[d]
	}
	return fmt.Sprintf("FIGURE generated schemas: %s; total generated=%d accepted=%d refused=%d steps=%d violations=%d; wall %.1fs",
		strings.Join(parts, "; "), total[0], total[1], total[2], total[3], total[4], wall.Seconds())
}

// refusalClass names what a Check refusal is about, for the FIGURE.
func refusalClass(msg string) string {
	for _, c := range []struct{ key, class string }{
		{"one live claim per seat", "claims-key"},
		{"unique only with it", "claims-tenant"},
		{"window setting", "setting"},
		{"not unique", "orders-unique"},
		{"no index", "index"},
		{"the mapping needs", "column-type"},
		{"is ", "column"},
	} {
		if strings.Contains(msg, c.key) {
			return c.class
		}
	}
	return "other"
}

// TestGeneratedSchemas samples -gen.schemas schemas (about three in five on
// SQLite, the rest on MariaDB and PostgreSQL) and judges each; a failing
// schema is shrunk (axes back to their plainest value while it still fails)
// and printed with its DDL.
func TestGeneratedSchemas(t *testing.T) {
	start := time.Now()
	stats := newGenStats()
	rng := rand.New(rand.NewSource(*genSeed))
	order := []sqlstore.Dialect{sqlstore.SQLite, sqlstore.SQLite, sqlstore.SQLite, sqlstore.MySQL, sqlstore.Postgres}
	t.Run("schemas", func(t *testing.T) {
		for i := 0; i < *genSchemas; i++ {
			g := randomSchema(rng)
			d := order[i%len(order)]
			for k := 1; !g.expressible(d); k++ {
				d = allDialects[(i+k)%len(allDialects)]
			}
			t.Run(fmt.Sprintf("%03d-%s", i, d), func(t *testing.T) {
				t.Parallel()
				v := judgeSchema(t, d, g)
				stats.add(d, v)
				if len(v.viol) == 0 {
					return
				}
				small, sv := shrinkSchema(t, d, g, v)
				t.Errorf("schema %v on %s: %d violations:\n  %s\nsmallest failing schema (%d axes) %v:\n  %s\nits DDL:\n%s",
					g, d, len(v.viol), strings.Join(v.viol, "\n  "), small.size(), small, strings.Join(sv.viol, "\n  "), strings.Join(small.ddl(d), ";\n")+";")
			})
		}
	})
	t.Log(stats.figure(time.Since(start)))
	fmt.Println(stats.figure(time.Since(start)))
}

// shrinkSchema moves the axes of failing g back to zero one at a time,
// keeping each move after which g still fails on d.
func shrinkSchema(t *testing.T, d sqlstore.Dialect, g genSchema, v genVerdict) (genSchema, genVerdict) {
	runs := 0
	for progress := true; progress && runs < *genShrink; {
		progress = false
		a := g.axes()
		for i := range a {
			if a[i] == 0 || runs >= *genShrink {
				continue
			}
			b := append([]int(nil), a...)
			b[i] = 0
			c := fromAxes(b)
			if c == g || !c.expressible(d) {
				continue
			}
			runs++
			var cv genVerdict
			t.Run(fmt.Sprintf("shrink-%02d", runs), func(t *testing.T) { cv = judgeSchema(t, d, c) })
			if len(cv.viol) > 0 {
				g, v, progress = c, cv, true
				break
			}
		}
	}
	return g, v
}

// judgeSchema creates g on d in a fresh database and judges it.
func judgeSchema(t *testing.T, d sqlstore.Dialect, g genSchema) genVerdict {
	ctx := context.Background()
	db := openDB(t, d)
	applyDDL(t, db, g.ddl(d))
	var v genVerdict
	stores := map[int]*sqlstore.Store{}
	for _, tenant := range []int{7, 8} {
		if tenant == 8 && g.Tenant == 0 {
			break
		}
		s, err := sqlstore.New(db, d, g.mapping(d, tenant))
		if err == nil {
			t.Cleanup(func() { s.Close() })
			err = s.Migrate(ctx)
			require.NoError(t, err, "Migrate creates the library's own tables")
			err = s.Check(ctx)
		}
		if err != nil {
			if tenant == 8 && v.accepted {
				v.viol = append(v.viol, fmt.Sprintf("tenant 8's store is refused on the tables tenant 7's accepted: %v", err))
				return v
			}
			v.refusal = refusalClass(err.Error())
			if !errors.Is(err, sqlstore.ErrMapping) {
				v.viol = append(v.viol, fmt.Sprintf("New/Check failed without ErrMapping: %v", err))
			}
			named := false
			for _, n := range g.names() {
				named = named || strings.Contains(err.Error(), n)
			}
			if !named {
				v.viol = append(v.viol, fmt.Sprintf("the refusal names no table or column of the schema: %v", err))
			}
			switch why := g.mustRefuse(); {
			case strings.HasPrefix(why, "claims") && !strings.Contains(err.Error(), "gen_claims"),
				strings.HasPrefix(why, "window") && !strings.Contains(err.Error(), "unpaid_minutes"):
				v.viol = append(v.viol, fmt.Sprintf("refused (%s) without naming its table or column: %v", why, err))
			}
			return v
		}
		stores[tenant] = s
		v.accepted = true
	}
	if why := g.mustRefuse(); why != "" {
		v.viol = append(v.viol, "Check accepted a schema it must refuse: "+why)
	}
	v.steps, v.viol = genScenario(t, d, g, db, stores[7], stores[8], v.viol)
	return v
}

// genIDs are a scenario's order numbers, users and show in g's id types.
type genIDs struct {
	a, aVar, b, c, d, e, f, b8, e8, far string // orders; f: a user variant tries to cancel it; aVar a case variant of a ("" when ids are numbers); far a number the column cannot hold
	user, userVar, userFar, other       string
	show                                string
}

func (g genSchema) ids() genIDs {
	var x genIDs
	if g.NoType == 3 {
		x.a, x.b, x.c, x.d, x.e, x.f, x.e8 = "101", "102", "103", "104", "105", "106", "805"
		x.b8 = "802"
		if g.narrow() {
			x.far = "99999999999"
		}
	} else {
		x.a, x.aVar, x.b, x.c, x.d, x.e, x.f, x.e8 = "ga1", "GA1", "gb1", "gc1", "gd1", "ge1", "gf1", "t8e1"
		x.b8 = "t8b1"
	}
	if g.Tenant == 2 {
		x.b8 = x.b // the same number in the other tenant: numbers are unique per tenant
	}
	if g.UserType == 3 {
		x.user, x.userVar, x.other = "42", "042", "43"
		if g.narrow() {
			x.userFar = "99999999999"
		}
	} else {
		x.user, x.userVar, x.other = "alice", "ALICE", "bob"
	}
	x.show = "ev"
	if g.ShowType == 3 {
		x.show = "7"
	}
	return x
}

// genPlaced is an order a Place call reported placed.
type genPlaced struct {
	tenant   int
	no, user string
	seats    []string
}

// genScenario runs the scenario on the accepted schema (s8: the other
// tenant's store on the same tables, when tenant scoped) and returns the
// steps it ran and the violations, appended to viol.
func genScenario(t *testing.T, d sqlstore.Dialect, g genSchema, db *sql.DB, s7, s8 *sqlstore.Store, viol []string) (int, []string) {
	ctx := context.Background()
	steps := 0
	bad := func(format string, a ...any) { viol = append(viol, fmt.Sprintf(format, a...)) }
	x := g.ids()
	// The services' logs (a refused payment, a rebuilt seat store) are the
	// scenario's expected course; the ledgers judge it.
	quiet := expiry.Runtime{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	book := &refundBook{}
	stores := map[int]*sqlstore.Store{7: s7, 8: s8}
	service := func(s *sqlstore.Store) (*memstore.Seats, *cancel.Service) {
		seats := memstore.NewSeats(nil).Scoped(s.Scope())
		svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: book.hook(s.Scope()), Runtime: quiet})
		require.NoError(t, err)
		return seats, svc
	}
	now, err := s7.Now(ctx)
	require.NoError(t, err)
	var placed []genPlaced
	place := func(tenant int, svc *cancel.Service, no, user, seat string, at time.Time) error {
		steps++
		p := cancel.Placement{OrderNo: no, UserID: user, ShowID: x.show, Seats: []string{seat}, ExpireAt: at}
		err := svc.Place(ctx, p, stores[tenant].Insert(db, nil))
		if err == nil {
			placed = append(placed, genPlaced{tenant, no, user, p.Seats})
		}
		return err
	}
	must := func(what string, err error) bool {
		if err != nil {
			bad("%s: %v", what, err)
			return false
		}
		return true
	}
	later, past := now.Add(time.Hour), now.Add(-3*time.Second)

	// The other tenant first: an order under the number tenant 7 will
	// cancel (when numbers are unique per tenant), on a seat of its own.
	var svc8 *cancel.Service
	if s8 != nil {
		_, svc8 = service(s8)
		must("tenant 8 places "+x.b8, place(8, svc8, x.b8, x.other, "t8-s", later))
	}

	_, svc := service(s7)
	must("place "+x.a, place(7, svc, x.a, x.user, x.a+"-s", later))
	varPlaced := false
	if x.aVar != "" {
		// Placed or refused (a folding unique key makes it the same number
		// for the database), never the same order as a.
		varPlaced = place(7, svc, x.aVar, x.user, x.aVar+"-v", later) == nil
	}
	for _, no := range []string{x.b, x.c, x.f} {
		must("place "+no, place(7, svc, no, x.user, no+"-s", later))
	}
	must("place due "+x.d, place(7, svc, x.d, x.user, x.d+"-s", past))

	type payment struct {
		tenant  int
		no, pay string
	}
	var payments []payment
	pay := func(no, id string) (cancel.Result, error) {
		steps++
		payments = append(payments, payment{7, no, id})
		return svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: id})
	}
	// Pay c, and the provider repeats its callback twice.
	if res, err := pay(x.c, "pay-c"); must("pay "+x.c, err) && !res.Changed {
		bad("pay %s: not changed", x.c)
	}
	for i := 0; i < 2; i++ {
		_, err := pay(x.c, "pay-c")
		must("repeated callback pay-c", err)
	}
	// Cancel b, then its payment arrives: refunded once.
	steps++
	if res, err := svc.UserCancel(ctx, x.b, x.user); must("user cancel "+x.b, err) && !res.Changed {
		bad("user cancel %s: not changed", x.b)
	}
	_, _ = pay(x.b, "pay-b")
	// The case variant of a: placed, it is an order of its own and paid;
	// refused, a cancel and a payment for it change nothing of a's.
	if x.aVar != "" {
		if !varPlaced {
			steps++
			_, _ = svc.UserCancel(ctx, x.aVar, x.user)
		}
		_, _ = pay(x.aVar, "pay-v")
	}
	// A user cancel by a variant of the user is not the owner's (I10).
	for _, u := range []string{x.userVar, x.userFar} {
		if u == "" {
			continue
		}
		steps++
		if _, err := svc.UserCancel(ctx, x.f, u); !errors.Is(err, cancel.ErrNotOwner) {
			bad("UserCancel(%s, %q): want ErrNotOwner, got %v", x.f, u, err)
		}
	}

	// A number the column cannot hold: no order, a final answer.
	if x.far != "" {
		steps++
		if _, _, err := svc.Timeout(ctx, x.far); !errors.Is(err, expiry.ErrNotFound) {
			bad("Timeout(%s) for a number the column cannot hold: want ErrNotFound (final), got %v", x.far, err)
		}
		_, _ = pay(x.far, "pay-f")
	}
	// The due order's timeout.
	steps++
	if cancelled, _, err := svc.Timeout(ctx, x.d); must("timeout "+x.d, err) && !cancelled {
		bad("timeout of due order %s: not cancelled", x.d)
	}
	// The host edits its window setting mid-run.
	if g.setLate() {
		_, err := db.ExecContext(ctx, bindQ(d, "UPDATE gen_setting SET unpaid_minutes = ? WHERE id = 1"), g.setValue())
		require.NoError(t, err)
	}

	// The seat store loses its data: the services' seats are created anew.
	// A placement on a sold seat (and on the other tenant's held seat) can
	// only be refused by the claims' unique key now.
	seats2, svc2 := service(s7)
	var seats8b *memstore.Seats
	var svc8b *cancel.Service
	if s8 != nil {
		seats8b, svc8b = service(s8)
	}
	if g.Claims > 0 {
		_ = place(7, svc2, x.e, x.other, x.c+"-s", later)
		if s8 != nil {
			_ = place(8, svc8b, x.e8, x.other, "t8-s", later)
		}
	}
	rec := func(s *sqlstore.Store, seats *memstore.Seats, svc *cancel.Service) {
		// Pages of one claim: the keyset pagination over the host's
		// collation and types is part of the rebuild.
		r, err := reconcile.New(reconcile.Config{Orders: s, Seats: seats, Service: svc, Batch: 1, Runtime: quiet})
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			steps++
			_, err := r.Round(ctx)
			must("reconcile round", err)
		}
	}
	rec(s7, seats2, svc2)
	if s8 != nil {
		rec(s8, seats8b, svc8b)
	}

	// Ledgers, from outcomes only.
	status := func(tenant int, no string) (expiry.Status, bool) {
		o, err := stores[tenant].Order(ctx, no)
		if err != nil {
			if !errors.Is(err, expiry.ErrNotFound) {
				bad("read order %s (tenant %d): %v", no, tenant, err)
			}
			return 0, false
		}
		return o.Status, true
	}
	// Money: every payment id honoured (its order paid by it: a repeated
	// callback is answered without a discrepancy) or refunded exactly once.
	seen := map[string]bool{}
	for _, p := range payments {
		if seen[p.pay] {
			continue
		}
		seen[p.pay] = true
		honoured := false
		if st, ok := status(p.tenant, p.no); ok && st == expiry.StatusPaid {
			steps++
			_, err := svc2.Pay(ctx, cancel.Payment{OrderNo: p.no, PaymentID: p.pay})
			honoured = err == nil
		}
		refunds := book.count(stores[p.tenant].Scope(), p.pay)
		switch {
		case honoured && refunds != 0:
			bad("money: %s paid order %s and was refunded %d times", p.pay, p.no, refunds)
		case !honoured && refunds != 1:
			bad("money: %s (order %s) neither honoured nor refunded exactly once: refunded %d times", p.pay, p.no, refunds)
		}
	}
	// Seats: no seat held by two live orders.
	holders := map[string][]string{}
	for _, p := range placed {
		st, ok := status(p.tenant, p.no)
		if !ok || st != expiry.StatusPending && st != expiry.StatusPaid {
			continue
		}
		for _, seat := range p.seats {
			k := fmt.Sprintf("tenant %d seat %s", p.tenant, seat)
			holders[k] = append(holders[k], fmt.Sprintf("%s (%v)", p.no, st))
		}
	}
	for k, h := range holders {
		if len(h) > 1 {
			bad("double sale: %s held by %v", k, h)
		}
	}
	// The rebuild: every seat of a live order is back in the new seat
	// store, under that order and its user exactly as placed.
	if g.Claims > 0 {
		rebuilt := map[int]*memstore.Seats{7: seats2, 8: seats8b}
		for _, p := range placed {
			st, ok := status(p.tenant, p.no)
			if !ok || st != expiry.StatusPending && st != expiry.StatusPaid {
				continue
			}
			show, err := rebuilt[p.tenant].Show(ctx, x.show)
			require.NoError(t, err)
			for _, seat := range p.seats {
				if got := show[seat]; got.OrderNo != p.no || got.UserID != p.user {
					bad("rebuild: tenant %d seat %s of live order %s (user %s) is %+v in the rebuilt seat store", p.tenant, seat, p.no, p.user, got)
				}
			}
		}
	}
	// Ids (I10) and deadlines: a, never due and never cancelled by anyone
	// entitled to, is still pending; its variant, placed, is paid.
	if st, ok := status(7, x.a); !ok || st != expiry.StatusPending {
		bad("order %s: want pending (not due, its variants are other orders), got %v (found %v)", x.a, st, ok)
	}
	if st, ok := status(7, x.f); !ok || st != expiry.StatusPending {
		bad("order %s: want pending (not due, only its owner's variants tried to cancel it), got %v (found %v)", x.f, st, ok)
	}
	if varPlaced {
		if st, _ := status(7, x.aVar); st != expiry.StatusPaid {
			bad("case variant %s: placed and paid, got %v", x.aVar, st)
		}
	}
	if st, _ := status(7, x.d); st != expiry.StatusCancelled {
		bad("due order %s: want cancelled, got %v", x.d, st)
	}
	// The other tenant's order (I16): still pending, its claim kept.
	if s8 != nil {
		if st, ok := status(8, x.b8); !ok || st != expiry.StatusPending {
			bad("tenant 8's order %s: want pending, got %v (found %v)", x.b8, st, ok)
		}
		if g.Claims > 0 {
			claims, _, err := s8.Claims(ctx, "", 100)
			if must("tenant 8's claims", err) {
				kept := false
				for _, c := range claims {
					kept = kept || c.OrderNo == x.b8 && c.SeatID == "t8-s"
				}
				if !kept {
					bad("tenant 8's order %s lost its claim of t8-s: %v", x.b8, claims)
				}
			}
		}
	}
	return steps, viol
}
