package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The variants of part 2. Each cancels its own orders (an order can be
// cancelled once), all loaded the same way: expired a minute ago, pending,
// `seats` seats each, locked in Redis.
const (
	vSQL    = "sql"     // raw: BEGIN; UPDATE … WHERE status=0 AND due; SELECT seats; DELETE seats; COMMIT
	vRedis  = "redis"   // raw: EVALSHA of the release script
	vRaw    = "raw"     // raw: the transaction, then EVALSHA (the work the library must do)
	vMirror = "mirror"  // the library's statement sequence issued directly, then EVALSHA
	vOurs   = "ours"    // expiry.Shell.Process → Handler → cancel.Service → sqlstore → redisseat
	vOursIP = "ours-ip" // ours on a second pool whose DSN adds interpolateParams=true (MariaDB only)
	vUpdate = "update"  // raw: one single-row UPDATE … WHERE order_no=? AND status=0 (autocommit): the floor of any cancel
	vStore  = "store"   // sqlstore.Store.CancelPending alone (the SQL side of ours, no Redis)
)

var allVariants = []string{vUpdate, vSQL, vStore, vRedis, vRaw, vMirror, vOurs, vOursIP}

type tpOrder struct {
	row  orderRow
	body []byte
}

// outcomeCounter is the Observer of the library under test.
type outcomeCounter struct {
	cancelled, handled, other atomic.Int64
}

func (o *outcomeCounter) Observe(_ context.Context, e expiry.Event) {
	switch e.Kind {
	case expiry.KindCancelled:
		o.cancelled.Add(1)
	case expiry.KindHandled:
		o.handled.Add(1)
	case expiry.KindReleaseFailed, expiry.KindSendFailed, expiry.KindBadMessage:
		o.other.Add(1)
	}
}

// noRearm is the Handler's DelaySender: every order is due, a re-arm is a bug.
type noRearm struct{ n atomic.Int64 }

func (s *noRearm) Send(context.Context, expiry.Message, time.Duration) error {
	s.n.Add(1)
	return errors.New("bench: unexpected re-arm")
}

func runThroughput(c *common, args []string) error {
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	concF := fs.String("conc", "1,4,16,32", "concurrencies (goroutines handling expired orders)")
	n := fs.Int("n", 100, "orders per slice at concurrency ≤ 10; a slice is max(n, 10×concurrency) orders")
	reps := fs.Int("rounds", 8, "rounds per concurrency; each round runs one slice of every variant (ours between raw and mirror; odd rounds in reverse order)")
	seats := fs.Int("seats", 2, "seats per order")
	variantsF := fs.String("variants", strings.Join(allVariants, ","), "variants to run: "+strings.Join(allVariants, ","))
	rtN := fs.Int("rt-orders", 100, "orders per variant in the round-trip count pass (0: skip)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	conc, err := parseInts(*concF)
	if err != nil {
		return err
	}
	variants := strings.Split(*variantsF, ",")
	fmt.Printf("Each concurrency k runs %d rounds; a round runs one slice of max(%d, 10·k) orders of every variant back to back (raw SQL, raw EVALSHA, raw tx+EVALSHA, ours, mirror; odd rounds in reverse), so all variants see the same background load and ours always runs right next to its two baselines. "+
		"Rates are total orders / total time; the paired ratio is the median over rounds of (ours in the round / raw in the same round), which is robust to load bursts from other users of the machine. "+
		"Every order is pending, due (expired a minute ago) and holds %d seats locked in Redis. Variants:\n\n"+
		"- **single UPDATE**: `UPDATE oe_order SET status=2 WHERE order_no=? AND status=0` alone, autocommit: the floor of any cancel on this database;\n"+
		"- **store**: `sqlstore.Store.CancelPending` (timeout, due guard) alone, without Redis: the SQL side of ours;\n"+
		"- **raw SQL**: `BEGIN; UPDATE oe_order SET status=2 … WHERE order_no=? AND status=0 AND expire_at_ms<=now; SELECT seat_id …; DELETE FROM oe_order_seat …; COMMIT` with database/sql (the library's own SQL text);\n"+
		"- **raw EVALSHA**: the release script (cancel/redisseat's, verbatim) with go-redis EvalSha;\n"+
		"- **raw tx+EVALSHA**: the two in sequence per order: the work the library has to do, the baseline for the ratio;\n"+
		"- **mirror**: the library's statement sequence issued directly (its order lookup, then the transaction with its extra in-transaction order read), then EVALSHA;\n"+
		"- **ours**: `expiry.Shell.Process(body)` → `Handler.Handle` → `cancel.Service.Timeout` → `sqlstore.Store.CancelPending` → `redisseat.Seats.Release`;\n"+
		"- **ours, interpolateParams** (MariaDB only): ours on a second pool whose DSN adds `interpolateParams=true`.\n\n"+
		"The DSNs are used as given (go-sql-driver without interpolateParams: each statement with arguments is a prepare + execute).\n\n",
		*reps, *n, *seats)
	for _, e := range engines {
		if err := c.throughputEngine(e, conc, *n, *reps, *seats, variants, *rtN); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	return nil
}

func has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (c *common) throughputEngine(engine string, conc []int, n, reps, nSeats int, variants []string, rtN int) error {
	ctx := context.Background()
	if engine != engMySQL {
		variants = slices.DeleteFunc(slices.Clone(variants), func(v string) bool { return v == vOursIP })
	}
	maxC := 1
	for _, k := range conc {
		maxC = max(maxC, k)
	}
	bd, err := c.openDB(ctx, engine, "tp", maxC+2)
	if err != nil {
		return err
	}
	defer bd.drop()
	rdb, rclose, err := c.redisClient(ctx, 0, maxC+8)
	if err != nil {
		return err
	}
	defer rclose()
	store, err := sqlstore.New(bd.DB, bd.dialect)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}

	// Build the groups.
	tok := token()
	groups := map[string][]tpOrder{} // key "variant/conc/rep"
	var all []orderRow
	var holds []cancel.Hold
	expired := time.Now().Add(-time.Minute).UnixMilli()
	mk := func(key string, count int, inSQL, locked bool) {
		g := make([]tpOrder, count)
		for i := range g {
			no := fmt.Sprintf("%s-%s-%d", tok, strings.ReplaceAll(key, "/", "-"), i)
			r := orderRow{no: no, user: fmt.Sprintf("u%d", i%997), show: fmt.Sprintf("b%s-s%d", tok, i%16), status: expiry.StatusPending, expireMS: expired}
			for s := 0; s < nSeats; s++ {
				r.seats = append(r.seats, fmt.Sprintf("%s-%d", no, s))
			}
			body, err := expiry.EncodeMessage(expiry.Message{OrderNo: no, Hop: 1})
			if err != nil {
				panic(err)
			}
			g[i] = tpOrder{row: r, body: body}
			if inSQL {
				all = append(all, r)
			}
			if locked {
				holds = append(holds, r.hold())
			}
		}
		groups[key] = g
	}
	slice := func(k int) int { return max(n, 10*k) }
	for _, k := range conc {
		for r := 0; r < reps; r++ {
			for _, v := range variants {
				mk(fmt.Sprintf("%s/%d/%d", v, k, r), slice(k), v != vRedis, v != vSQL && v != vUpdate && v != vStore)
			}
		}
	}
	if rtN > 0 {
		for _, v := range []string{vUpdate, vSQL, vStore, vRaw, vMirror, vOurs} {
			mk("rt"+v, rtN, true, true)
		}
	}
	t0 := time.Now()
	if err := bulkLoad(ctx, bd, len(all), func(i int) orderRow { return all[i] }); err != nil {
		return err
	}
	seats := newSeats(rdb)
	if err := lockAll(ctx, seats, holds, 32); err != nil {
		return err
	}
	c.log.Info("throughput: loaded", "orders", len(all), "holds", len(holds), "took", time.Since(t0))
	if engine == engPG {
		_, _ = bd.ExecContext(ctx, "ANALYZE oe_order")
		_, _ = bd.ExecContext(ctx, "ANALYZE oe_order_seat")
	}
	sha, err := rdb.ScriptLoad(ctx, releaseLua).Result()
	if err != nil {
		return err
	}

	// The library under test.
	obs := &outcomeCounter{}
	rearm := &noRearm{}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
	if err != nil {
		return err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: rearm, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
	if err != nil {
		return err
	}
	shell := expiry.NewShell(h)
	q := rawStatements(bd.dialect)
	var shellIP *expiry.Shell
	if has(variants, vOursIP) {
		cfg, err := mysql.ParseDSN(bd.dsn)
		if err != nil {
			return err
		}
		cfg.InterpolateParams = true
		ipDB, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		defer ipDB.Close()
		pool(ipDB, maxC+2)
		ipStore, _ := sqlstore.New(ipDB, bd.dialect)
		ipSvc, _ := cancel.New(cancel.Config{Store: ipStore, Seats: seats, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
		ipH, _ := expiry.NewHandler(expiry.HandlerConfig{Canceller: ipSvc, Sender: rearm, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
		shellIP = expiry.NewShell(ipH)
	}

	update := rebindBench(bd.dialect, "UPDATE oe_order SET status = 2 WHERE order_no = ? AND status = 0")
	do := func(db *sql.DB, v string, o tpOrder) error {
		switch v {
		case vUpdate:
			r, err := db.ExecContext(ctx, update, o.row.no)
			if err != nil {
				return err
			}
			if k, err := r.RowsAffected(); err != nil || k != 1 {
				return fmt.Errorf("order %s: UPDATE changed %d rows (%v)", o.row.no, k, err)
			}
			return nil
		case vStore:
			res, err := store.CancelPending(ctx, cancel.Request{OrderNo: o.row.no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			if err == nil && (!res.Changed || len(res.Seats) != len(o.row.seats)) {
				err = fmt.Errorf("order %s: store cancel changed=%v seats %d", o.row.no, res.Changed, len(res.Seats))
			}
			return err
		case vOurs, vOursIP:
			sh := shell
			if v == vOursIP {
				sh = shellIP
			}
			if sh.Process(ctx, expiry.Delivery{Body: o.body}) != expiry.Ack {
				return errors.New("shell asked for a retry")
			}
			return nil
		case vRedis:
			k, err := rawRelease(ctx, rdb, sha, o.row.hold())
			if err == nil && int(k) != len(o.row.seats) {
				err = fmt.Errorf("released %d of %d", k, len(o.row.seats))
			}
			return err
		}
		got, err := rawCancel(ctx, db, q, o.row.no, v == vMirror)
		if err != nil {
			return err
		}
		if len(got) != len(o.row.seats) {
			return fmt.Errorf("order %s: %d seats in SQL, want %d", o.row.no, len(got), len(o.row.seats))
		}
		if v == vSQL {
			return nil
		}
		k, err := rawRelease(ctx, rdb, sha, cancel.Hold{ShowID: o.row.show, OrderNo: o.row.no, UserID: o.row.user, Seats: got})
		if err == nil && int(k) != len(got) {
			err = fmt.Errorf("released %d of %d", k, len(got))
		}
		return err
	}

	type acc struct {
		orders int
		wall   time.Duration
		cpu    time.Duration
	}
	res := map[string]*acc{}
	roundRate := map[string]float64{} // "variant/k/r" → orders/s of that slice
	for _, k := range conc {
		for r := 0; r < reps; r++ {
			// ours sits between raw and mirror in every round; odd rounds run
			// the list backwards, so each pair is adjacent and alternates
			// which goes first.
			order := make([]string, 0, len(variants))
			for _, v := range []string{vUpdate, vSQL, vStore, vRedis, vRaw, vOurs, vMirror, vOursIP} {
				if has(variants, v) {
					order = append(order, v)
				}
			}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, v := range order {
				g := groups[fmt.Sprintf("%s/%d/%d", v, k, r)]
				before := obs.cancelled.Load()
				cpu0 := selfCPU()
				wall, failed, err := runWorkers(k, len(g), func(i int) error { return do(bd.DB, v, g[i]) })
				cpu := selfCPU() - cpu0
				if err != nil {
					return fmt.Errorf("%s at concurrency %d: %d failed, first: %w", v, k, failed, err)
				}
				if v == vOurs || v == vOursIP {
					if got := obs.cancelled.Load() - before; got != int64(len(g)) {
						return fmt.Errorf("ours at concurrency %d: %d cancelled, want %d (re-arms %d, failures %d)", k, got, len(g), rearm.n.Load(), obs.other.Load())
					}
				}
				roundRate[fmt.Sprintf("%s/%d/%d", v, k, r)] = float64(len(g)) / wall.Seconds()
				key := fmt.Sprintf("%s/%d", v, k)
				if res[key] == nil {
					res[key] = &acc{}
				}
				res[key].orders += len(g)
				res[key].wall += wall
				res[key].cpu += cpu
			}
		}
	}
	rate := func(v string, k int) float64 {
		a := res[fmt.Sprintf("%s/%d", v, k)]
		if a == nil || a.wall == 0 {
			return 0
		}
		return float64(a.orders) / a.wall.Seconds()
	}
	cpuPer := func(v string, k int) string {
		a := res[fmt.Sprintf("%s/%d", v, k)]
		if a == nil || a.orders == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f", float64(a.cpu.Microseconds())/float64(a.orders))
	}
	paired := func(a, b string, k int) string {
		if !has(variants, a) || !has(variants, b) {
			return "n/a"
		}
		var rs []float64
		for r := 0; r < reps; r++ {
			rs = append(rs, roundRate[fmt.Sprintf("%s/%d/%d", a, k, r)]/roundRate[fmt.Sprintf("%s/%d/%d", b, k, r)])
		}
		sort.Float64s(rs)
		return fmt.Sprintf("%.0f %%", 100*rs[len(rs)/2])
	}
	cell := func(v string, k int) string {
		if !has(variants, v) {
			return "—"
		}
		return fmt.Sprintf("%.0f", rate(v, k))
	}
	fmt.Printf("### %s (pool %d connections)\n\n", engineName(engine), maxC+2)
	t := newTable("conc", "slice", "raw SQL tx/s", "raw EVALSHA/s", "raw tx+EVALSHA/s", "mirror/s", "**ours/s**", "**ours / raw tx+EVALSHA** (totals; paired median)", "ours / mirror (paired)", "ours / raw SQL (paired)", "bench CPU µs/order: raw / mirror / ours")
	for _, k := range conc {
		t.add(k, slice(k), cell(vSQL, k), cell(vRedis, k), cell(vRaw, k), cell(vMirror, k), cell(vOurs, k),
			ratio(rate(vOurs, k), rate(vRaw, k))+"; "+paired(vOurs, vRaw, k), paired(vOurs, vMirror, k), paired(vOurs, vSQL, k),
			cpuPer(vRaw, k)+" / "+cpuPer(vMirror, k)+" / "+cpuPer(vOurs, k))
	}
	t.print(os.Stdout)
	if has(variants, vUpdate) {
		fmt.Printf("\nAgainst the floor: one single-row `UPDATE oe_order SET status = 2 WHERE order_no = ? AND status = 0` (autocommit, no seats), interleaved in the same rounds; **store** is `sqlstore.Store.CancelPending` alone (compare-and-set with the due guard, read and delete the seats; one data-modifying statement on PostgreSQL, a transaction of three elsewhere), without Redis:\n\n")
		tu := newTable("conc", "single UPDATE/s", "raw SQL tx/s", "**store/s**", "ours/s", "**store / single UPDATE** (paired)", "raw SQL tx / single UPDATE (paired)", "store / raw SQL tx (paired)", "ours / single UPDATE (paired)")
		for _, k := range conc {
			tu.add(k, cell(vUpdate, k), cell(vSQL, k), cell(vStore, k), cell(vOurs, k), paired(vStore, vUpdate, k), paired(vSQL, vUpdate, k), paired(vStore, vSQL, k), paired(vOurs, vUpdate, k))
		}
		tu.print(os.Stdout)
	}
	if has(variants, vOursIP) {
		fmt.Printf("\nThe same library on a second pool whose DSN adds `interpolateParams=true` (go-sql-driver then sends each statement once, with its arguments inlined, instead of prepare + execute), interleaved in the same rounds:\n\n")
		ti := newTable("conc", "ours/s", "ours, interpolateParams/s", "ours, interpolateParams / ours (paired)", "ours, interpolateParams / raw tx+EVALSHA (paired)")
		for _, k := range conc {
			ti.add(k, cell(vOurs, k), cell(vOursIP, k), paired(vOursIP, vOurs, k), paired(vOursIP, vRaw, k))
		}
		ti.print(os.Stdout)
	}

	if rtN > 0 {
		cdb, cnt, err := countingDB(bd)
		if err != nil {
			return err
		}
		defer cdb.Close()
		// The library again, on the counting pool.
		cstore, _ := sqlstore.New(cdb, bd.dialect)
		csvc, _ := cancel.New(cancel.Config{Store: cstore, Seats: seats, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
		ch, _ := expiry.NewHandler(expiry.HandlerConfig{Canceller: csvc, Sender: rearm, Runtime: expiry.Runtime{Observer: obs, Logger: c.log}})
		cshell := expiry.NewShell(ch)
		fmt.Printf("\nSQL round trips per expired order (%d orders each, concurrency 1, counted by a wrapping database/sql driver):\n\n", rtN)
		rt := newTable("variant", "round trips / order", "breakdown (totals)")
		for _, v := range []string{vUpdate, vSQL, vStore, vRaw, vMirror, vOurs} {
			cnt.reset()
			g := groups["rt"+v]
			for i := range g {
				var err error
				switch v {
				case vOurs:
					if cshell.Process(ctx, expiry.Delivery{Body: g[i].body}) != expiry.Ack {
						err = errors.New("retry")
					}
				case vStore:
					var res cancel.Result
					res, err = cstore.CancelPending(ctx, cancel.Request{OrderNo: g[i].row.no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
					if err == nil && !res.Changed {
						err = errors.New("not cancelled")
					}
				default:
					err = do(cdb, v, g[i])
				}
				if err != nil {
					return fmt.Errorf("round-trip pass %s: %w", v, err)
				}
			}
			rt.add(v, fmt.Sprintf("%.1f", float64(cnt.total())/float64(len(g))), cnt.String())
		}
		rt.print(os.Stdout)
	}
	fmt.Println()
	return nil
}

// rebindBench turns ? into $n for PostgreSQL.
func rebindBench(d sqlstore.Dialect, q string) string {
	if d != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// rawCancel is the cancel transaction issued directly. With mirror it also
// issues the two reads the library adds (the Handler's lookup before, the
// store's order read inside the transaction).
func rawCancel(ctx context.Context, db *sql.DB, q rawSQL, no string, mirror bool) ([]string, error) {
	var user, show string
	var status int
	var exp, now int64
	if mirror {
		if err := db.QueryRowContext(ctx, q.lookup, no).Scan(&user, &show, &status, &exp, &now); err != nil {
			return nil, err
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, q.cancelDue, "timeout", no)
	if err != nil {
		return nil, err
	}
	if k, err := r.RowsAffected(); err != nil || k != 1 {
		return nil, fmt.Errorf("order %s: CAS changed %d rows (%v)", no, k, err)
	}
	if mirror {
		if err := tx.QueryRowContext(ctx, q.orderInTx, no).Scan(&user, &show, &exp, &now); err != nil {
			return nil, err
		}
	}
	rows, err := tx.QueryContext(ctx, q.seats, no)
	if err != nil {
		return nil, err
	}
	var seats []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return nil, err
		}
		seats = append(seats, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, q.deleteSeats, no); err != nil {
		return nil, err
	}
	return seats, tx.Commit()
}
