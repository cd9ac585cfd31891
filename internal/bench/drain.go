package main

import (
	"context"
	"database/sql/driver"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// drainSet is one table (small or large) with its reconciler.
type drainSet struct {
	label   string
	total   int
	bd      *benchDB
	store   *sqlstore.Store
	rdb     *redis.Client
	rclose  func()
	rec     *reconcile.Reconciler
	load    time.Duration
	spent   time.Duration
	rounds  int
	drained int
	lost    int
	seatsN  int
	scanT   time.Duration // inside Orders.Expired
	cancelT time.Duration // inside Service.Cancel (SQL transaction + Redis release)
	claimsT time.Duration // inside Orders.Claims and Seats.Restore
	reads   int64         // MariaDB: Innodb_buffer_pool_reads during its rounds (server-wide)
}

// timedOrders, timedSeats and timedService split a round's time between the
// expired scan, the cancels and the claims pass.
type timedOrders struct {
	cancel.OrderStore
	scan, claims *time.Duration
}

func (t timedOrders) Expired(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	t0 := time.Now()
	defer func() { *t.scan += time.Since(t0) }()
	return t.OrderStore.Expired(ctx, cursor, limit)
}

func (t timedOrders) Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error) {
	t0 := time.Now()
	defer func() { *t.claims += time.Since(t0) }()
	return t.OrderStore.Claims(ctx, cursor, limit)
}

type timedSeats struct {
	cancel.SeatStore
	claims *time.Duration
}

func (t timedSeats) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	t0 := time.Now()
	defer func() { *t.claims += time.Since(t0) }()
	return t.SeatStore.Restore(ctx, claims)
}

type timedService struct {
	reconcile.Service
	d *time.Duration
}

func (t timedService) ExpireDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.Service.ExpireDue(ctx, nos, reason)
}

func (t timedService) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.Service.Cancel(ctx, req)
}

func bufferPoolReads(ctx context.Context, bd *benchDB) int64 {
	var name string
	var v int64
	_ = bd.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'").Scan(&name, &v)
	return v
}

func runDrain(c *common, args []string) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	backlog := fs.Int("backlog", 10_000, "expired pending orders to drain")
	small := fs.Int("small", 20_000, "orders in the small table (backlog included)")
	large := fs.Int("large", 1_000_000, "orders in the large table (backlog included)")
	perRound := fs.Int("per-round", 1000, "reconcile MaxPerRound; rounds alternate between the two tables")
	batch := fs.Int("batch", 200, "reconcile Batch (the scan's LIMIT)")
	paidSeats := fs.Bool("paid-seats", true, "give paid orders their (sold) seat rows too")
	layout := fs.String("layout", "spread", "where the backlog sits: spread (evenly through the table, 5 % of the table pending and not yet due) or recent (order numbers follow time: backlog and the not-yet-due orders are the newest rows, the rest of a bigger table is history)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	paid := map[bool]string{true: "", false: ", not loaded"}[*paidSeats]
	lay := fmt.Sprintf("Layout `spread`: the backlog is spread evenly through the primary key; of the rest, 5 %% are pending and not yet due (10–15 min ahead, 2 locked seats in SQL), 60 %% paid (2 sold seats%s), 35 %% cancelled, expire_at spread over the last 30 days.", paid)
	if *layout == "recent" {
		lay = fmt.Sprintf("Layout `recent`: order numbers follow time, so the backlog (every other row of the newest 2×backlog rows) and the last 1000 rows' pending, not-yet-due orders are at the end of the primary key; older rows are history: 65 %% paid (2 sold seats%s), 35 %% cancelled (the pending not-yet-due orders are the same few in both tables).", paid)
	}
	fmt.Printf("Backlog: %d pending orders past expire_at (2 seats each, locked in Redis), inside a table of %d and one of %d orders. %s "+
		"Bulk-loaded in 100k-row chunks (`-load fast`: LOAD DATA LOCAL INFILE / COPY; `-load insert`: 1000-row INSERTs), then ANALYZE. "+
		"Drain: `reconcile.Reconciler.Round` (Batch %d, MaxPerRound %d), rounds alternating between the two tables so both see the same background load; "+
		"the rate counts round time only. Each table has its own Redis database, so the lock pass sees only its own locks.\n\n",
		*backlog, *small, *large, lay, *batch, *perRound)
	summary := newTable("database", "table", "load time", "drain rounds", "drained", "drain time", "of which scan / cancel / claims pass", "**orders/s**", "**large / small**", "MariaDB buffer-pool reads / order")
	for _, e := range engines {
		sets, err := c.drainEngine(e, *backlog, *small, *large, *perRound, *batch, *paidSeats, *layout)
		if err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
		rs := float64(sets[0].drained) / sets[0].spent.Seconds()
		rl := float64(sets[1].drained) / sets[1].spent.Seconds()
		for i, s := range sets {
			r := "—"
			if i == 1 {
				r = ratio(rl, rs)
			}
			reads := "—"
			if e == engMySQL {
				reads = fmt.Sprintf("%.1f", float64(s.reads)/float64(s.drained))
			}
			summary.add(engineName(e), fmt.Sprintf("%d orders", s.total), fmtDur(s.load), s.rounds, fmt.Sprintf("%d (+%d lost races)", s.drained, s.lost), fmtDur(s.spent),
				fmtDur(s.scanT)+" / "+fmtDur(s.cancelT)+" / "+fmtDur(s.claimsT), fmt.Sprintf("%.0f", float64(s.drained)/s.spent.Seconds()), r, reads)
		}
	}
	fmt.Printf("\n### Drain summary\n\n")
	summary.print(os.Stdout)
	fmt.Printf("\nGoal: large / small within 20 %% (80 %%–120 %%).\n")
	return nil
}

func (c *common) drainEngine(engine string, backlog, small, large, perRound, batch int, paidSeats bool, layout string) ([]*drainSet, error) {
	ctx := context.Background()
	sets := []*drainSet{{label: "small", total: small}, {label: "large", total: large}}
	defer func() {
		for _, s := range sets {
			if s.bd != nil {
				s.bd.drop()
			}
			if s.rclose != nil {
				s.rclose()
			}
		}
	}()
	now := time.Now()
	for i, s := range sets {
		var err error
		if s.bd, err = c.openDB(ctx, engine, "drain_"+s.label, 8); err != nil {
			return nil, err
		}
		if s.rdb, s.rclose, err = c.redisClient(ctx, 1+i, 16); err != nil {
			return nil, err
		}
		if s.store, err = sqlstore.New(s.bd.DB, s.bd.dialect); err != nil {
			return nil, err
		}
		if err := s.store.Migrate(ctx); err != nil {
			return nil, err
		}
		seats := newSeats(s.rdb)
		t0 := time.Now()
		rows, holds := drainRows(s.total, backlog, now, paidSeats, layout)
		if err := bulkLoad(ctx, s.bd, s.total, rows); err != nil {
			return nil, err
		}
		if err := lockAll(ctx, seats, holds, 16); err != nil {
			return nil, err
		}
		// The seat store was filled above: no rebuild from SQL (its claims
		// pass still runs in every round, as in production).
		token, lost, err := seats.Lost(ctx)
		if err != nil {
			return nil, err
		}
		if lost {
			if err := seats.MarkRestored(ctx, token); err != nil {
				return nil, err
			}
		}
		if engine == engMySQL {
			_, err = s.bd.ExecContext(ctx, "ANALYZE TABLE oe_order, oe_order_seat")
		} else {
			_, err = s.bd.ExecContext(ctx, "VACUUM ANALYZE oe_order")
			if err == nil {
				_, err = s.bd.ExecContext(ctx, "VACUUM ANALYZE oe_order_seat")
			}
		}
		if err != nil {
			return nil, err
		}
		s.load = time.Since(t0)
		if err := s.bd.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_order_seat").Scan(&s.seatsN); err != nil {
			return nil, err
		}
		svc, err := cancel.New(cancel.Config{Store: s.store, Seats: seats, Runtime: expiry.Runtime{Logger: c.log}})
		if err != nil {
			return nil, err
		}
		s.rec, err = reconcile.New(reconcile.Config{Orders: timedOrders{s.store, &s.scanT, &s.claimsT}, Seats: timedSeats{seats, &s.claimsT},
			Service: timedService{svc, &s.cancelT}, Batch: batch, MaxPerRound: perRound, Grace: time.Hour, Runtime: expiry.Runtime{Logger: c.log}})
		if err != nil {
			return nil, err
		}
	}
	fmt.Printf("### %s\n\n", engineName(engine))
	for _, s := range sets {
		fmt.Printf("- %s table: %d orders, %d seat rows, loaded in %v\n", s.label, s.total, s.seatsN, s.load.Round(100*time.Millisecond))
	}
	scanQ, err := storeScan(ctx, sets[1].bd, batch)
	if err != nil {
		return nil, err
	}
	fmt.Printf("\nThe scan as `sqlstore.Store.Expired` issues it for a first page (captured from the driver with its arguments bound: cursor \"\", LIMIT %d):\n\n```sql\n%s\n```\n\n", batch, scanQ)
	if err := explain(ctx, sets[1].bd, engine, scanQ, "large table, before the drain (backlog present)"); err != nil {
		return nil, err
	}

	// Drain, alternating rounds.
	for sets[0].drained < backlog || sets[1].drained < backlog {
		progress := false
		for _, s := range sets {
			if s.drained >= backlog {
				continue
			}
			var r0 int64
			if engine == engMySQL {
				r0 = bufferPoolReads(ctx, s.bd)
			}
			t0 := time.Now()
			rep, err := s.rec.Round(ctx)
			s.spent += time.Since(t0)
			if engine == engMySQL {
				s.reads += bufferPoolReads(ctx, s.bd) - r0
			}
			if err != nil {
				return nil, fmt.Errorf("%s round: %w", s.label, err)
			}
			s.rounds++
			s.drained += rep.Expired
			s.lost += rep.LostRaces
			if rep.Expired > 0 {
				progress = true
			}
		}
		if !progress {
			return nil, fmt.Errorf("drain stalled: small %d, large %d of %d", sets[0].drained, sets[1].drained, backlog)
		}
	}
	for _, s := range sets {
		var pending int
		if err := s.bd.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_order WHERE status = 0 AND expire_at_ms <= "+fmt.Sprint(time.Now().UnixMilli())).Scan(&pending); err != nil {
			return nil, err
		}
		if pending != 0 {
			return nil, fmt.Errorf("%s: %d expired orders still pending after the drain", s.label, pending)
		}
	}
	if err := explain(ctx, sets[1].bd, engine, scanQ, "large table, after the drain (backlog empty)"); err != nil {
		return nil, err
	}
	// An empty scan (the last call of every round once caught up).
	t := newTable("table", "Expired(\"\", limit) on an empty backlog: median of 21", "max")
	for _, s := range sets {
		var ds []time.Duration
		for i := 0; i < 21; i++ {
			t0 := time.Now()
			nos, _, err := s.store.Expired(ctx, "", batch)
			ds = append(ds, time.Since(t0))
			if err != nil || len(nos) != 0 {
				return nil, fmt.Errorf("empty scan: %v, %d rows", err, len(nos))
			}
		}
		t.add(fmt.Sprintf("%s (%d orders)", s.label, s.total), pct(ds, 50), maxDur(ds))
	}
	fmt.Println()
	t.print(os.Stdout)
	fmt.Println()
	return sets, nil
}

// drainRows generates a table of total orders with backlog expired pending
// ones spread evenly through it, and the Redis holds of the backlog.
func drainRows(total, backlog int, now time.Time, paidSeats bool, layout string) (func(int) orderRow, []cancel.Hold) {
	every, first := total/backlog, 0
	notDue := func(i int, h uint64) bool { return h%100 < 5 }
	if layout == "recent" {
		// The newest 2×backlog rows hold the backlog (every other row) and,
		// after it, the orders placed in the last 15 minutes (5 % of a
		// 20k-order table's worth, the same in both tables): only history
		// differs between the two tables.
		span := min(total, 2*backlog)
		every, first = span/backlog, total-span
		recentPending := total - 1000
		notDue = func(i int, h uint64) bool { return i >= recentPending && i%every != 0 }
	}
	nowMS := now.UnixMilli()
	gen := func(i int) orderRow {
		h := uint64(i)*0x9E3779B97F4A7C15 ^ 0xD1B54A32D192ED03
		h ^= h >> 29
		r := orderRow{no: fmt.Sprintf("D%08d", i), user: fmt.Sprintf("u%d", h%5000), show: fmt.Sprintf("show%d", h%20)}
		two := func() []string { return []string{r.no + "-a", r.no + "-b"} }
		switch {
		case i >= first && (i-first)%every == 0 && (i-first)/every < backlog: // expired backlog
			r.status, r.expireMS, r.seats = expiry.StatusPending, nowMS-1000-int64(h%600_000), two()
		case notDue(i, h): // pending, not yet due
			r.status, r.expireMS, r.seats = expiry.StatusPending, nowMS+600_000+int64(h%300_000), two()
		case h%100 < 65:
			r.status, r.expireMS = expiry.StatusPaid, nowMS-int64(h%(30*24*3600_000))
			if paidSeats {
				r.seats = two()
			}
		default:
			r.status, r.expireMS = expiry.StatusCancelled, nowMS-int64(h%(30*24*3600_000))
		}
		return r
	}
	var holds []cancel.Hold
	for i := first; i < total; i += every {
		if (i-first)/every < backlog {
			holds = append(holds, gen(i).hold())
		}
	}
	return gen, holds
}

// storeScan returns the SQL text sqlstore.Store.Expired sends for a first
// page (cursor ""), captured by the counting driver with the arguments it
// was given bound into it, so the plans below are the library's own query
// and not a copy that could drift.
func storeScan(ctx context.Context, bd *benchDB, limit int) (string, error) {
	db, cnt, err := countingDB(bd)
	if err != nil {
		return "", err
	}
	defer db.Close()
	store, err := sqlstore.New(db, bd.dialect)
	if err != nil {
		return "", err
	}
	if _, _, err := store.Expired(ctx, "", limit); err != nil {
		return "", fmt.Errorf("capture the scan: %w", err)
	}
	q, args := cnt.lastSQL.Load(), cnt.lastArgs.Load()
	if q == nil || args == nil {
		return "", fmt.Errorf("capture the scan: the driver saw no query")
	}
	return bindArgs(*q, *args)
}

// bindArgs writes args into q's placeholders (? in order, or $n) as SQL
// literals, for EXPLAIN.
func bindArgs(q string, args []driver.NamedValue) (string, error) {
	lit := make([]string, len(args))
	for i, a := range args {
		switch v := a.Value.(type) {
		case int64:
			lit[i] = strconv.FormatInt(v, 10)
		case int:
			lit[i] = strconv.Itoa(v)
		case string:
			lit[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		default:
			return "", fmt.Errorf("bind the scan: argument %d is a %T", i+1, a.Value)
		}
	}
	var b strings.Builder
	next := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '?':
			if next >= len(lit) {
				return "", fmt.Errorf("bind the scan: more placeholders than the %d arguments", len(lit))
			}
			b.WriteString(lit[next])
			next++
		case c == '$' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			n, err := strconv.Atoi(q[i+1 : j])
			if err != nil || n < 1 || n > len(lit) {
				return "", fmt.Errorf("bind the scan: placeholder %s of %d arguments", q[i:j], len(lit))
			}
			b.WriteString(lit[n-1])
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func explain(ctx context.Context, bd *benchDB, engine, q, title string) error {
	var stmts []string
	if engine == engMySQL {
		stmts = []string{"EXPLAIN " + q, "ANALYZE " + q}
	} else {
		stmts = []string{"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + q}
	}
	fmt.Printf("EXPLAIN, %s:\n\n```\n", title)
	for _, s := range stmts {
		out, err := queryText(ctx, bd, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		fmt.Print(out)
	}
	fmt.Printf("```\n\n")
	return nil
}

// queryText runs q and renders its rows as text (a header line for
// multi-column results).
func queryText(ctx context.Context, bd *benchDB, q string) (string, error) {
	rows, err := bd.QueryContext(ctx, q)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	if len(cols) > 1 {
		b.WriteString(strings.Join(cols, " | ") + "\n")
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		cells := make([]string, len(cols))
		for i, v := range vals {
			switch x := v.(type) {
			case nil:
				cells[i] = "NULL"
			case []byte:
				cells[i] = string(x)
			default:
				cells[i] = fmt.Sprint(x)
			}
		}
		b.WriteString(strings.Join(cells, " | ") + "\n")
	}
	return b.String(), rows.Err()
}
