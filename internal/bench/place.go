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

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// The variants of part 9. Each places its own orders on its own seats (a
// seat can be locked once), so no variant ever waits for another's.
const (
	pTx      = "tx"       // by hand: BEGIN; INSERT order; one multi-row INSERT of the claims; COMMIT
	pStore   = "store"    // sqlstore.Store.Insert alone (no lock, no send): the library's SQL transaction
	pHandIP  = "hand-ip"  // by hand: EVALSHA of a lock script of our own, the tx, then the in-process send
	pOursIP  = "ours-ip"  // cancel.Service.Place with store.Insert(db, nil), Config.Scheduler on expiry/inproc
	pHandMQ  = "hand-mq"  // hand-ip with the RocketMQ Sender's Send instead
	pOursMQ  = "ours-mq"  // ours-ip with expiry/rocketmq (timer mode)
	pLock    = "lock"     // redisseat.Seats.Lock alone (ours' Redis side)
	pHLock   = "hlock"    // the by-hand EVALSHA alone
	pRead    = "read"     // sqlstore.Store.Order of a number not placed (ours' existence check)
	pOursMQA = "ours-mqa" // ours-mq with expiry.SchedulerConfig.Async: Place returns at the commit, the sends run behind it
)

var allPlaceVariants = []string{pTx, pStore, pHandIP, pOursIP, pHandMQ, pOursMQ}

// handLockLua is the by-hand lock: every seat free, the limit, then the
// seats and the counter, at the server's time. It does the work a host
// writing placing itself must do, nothing more (no lock index, no
// generation, no show list).
//
// KEYS[1] the show's seats hash; KEYS[2] its limit hash. ARGV[1] order,
// ARGV[2] user, ARGV[3] limit (0 none), ARGV[4..] seats. Returns 1, 0 (a
// seat taken) or -1 (over the limit).
const handLockLua = `
for i = 4, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then return 0 end
end
local n = #ARGV - 3
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
local limit = tonumber(ARGV[3])
if limit > 0 and held + n > limit then return -1 end
local t = redis.call('TIME')
local v = 'L|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. t[1] .. string.sub(t[2], 1, 3)
for i = 4, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], v) end
redis.call('HINCRBY', KEYS[2], ARGV[2], n)
return 1
`

// rtCounter counts the round trips of the Redis client it hooks (a pipeline
// is one) and of the sends through it.
type rtCounter struct {
	redisCmds, redisRTs, sends, sendCalls atomic.Int64
}

func (r *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.redisCmds.Add(1)
		r.redisRTs.Add(1)
		return next(ctx, cmd)
	}
}
func (r *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.redisCmds.Add(int64(len(cmds)))
		r.redisRTs.Add(1)
		return next(ctx, cmds)
	}
}

// countingSender counts the messages and the calls that reach the transport.
type countingSender struct {
	expiry.DelaySender
	c *rtCounter
}

func (s countingSender) Send(ctx context.Context, m expiry.Message, d time.Duration) error {
	s.c.sends.Add(1)
	s.c.sendCalls.Add(1)
	return s.DelaySender.Send(ctx, m, d)
}

// placeSetup is what one engine's run of part 9 places with.
type placeSetup struct {
	db       *sql.DB
	dialect  sqlstore.Dialect
	rdb      *redis.Client
	handSHA  string
	store    *sqlstore.Store
	svcIP    *cancel.Service // places, then sends through senderIP (Config.Scheduler)
	svcMQ    *cancel.Service // places, then sends through senderMQ
	seats    cancel.SeatStore
	senderIP expiry.DelaySender
	senderMQ expiry.DelaySender
	svcMQA   *cancel.Service // places, then queues the send (SchedulerConfig.Async) to senderMQ
	schedMQA *expiry.Scheduler
	sentMQA  atomic.Int64 // sends svcMQA's scheduler finished (either way)
	limit    int
	insOrder string
	insSeats map[int]string
}

func runPlace(c *common, args []string) error {
	fs := flag.NewFlagSet("place", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	concF := fs.String("conc", "1,4,16,64", "concurrencies (goroutines placing)")
	n := fs.Int("n", 150, "orders per slice at concurrency ≤ n/10; a slice is max(n, 10×concurrency) orders")
	reps := fs.Int("rounds", 6, "rounds per concurrency; each round runs one slice of every variant (odd rounds in reverse order)")
	seats := fs.Int("seats", 2, "seats per order")
	variantsF := fs.String("variants", strings.Join(allPlaceVariants, ","), "variants: "+strings.Join(allPlaceVariants, ",")+"; parts of a placement: lock, hlock, read")
	rtN := fs.Int("rt-orders", 50, "orders per variant in the round-trip count pass (0: skip)")
	mq := fs.Bool("rocketmq", true, "run the RocketMQ variants (needs -namesrv and -broker)")
	async := fs.Int("async", 16, "ours-mqa: SchedulerConfig.Async (sending goroutines, and the queue's places)")
	reqCtx := fs.Bool("request-ctx", false, "give every placement of every variant its own cancellable context, as an HTTP handler's request context is (the drivers then watch it on every statement)")
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
	if !*mq {
		variants = slices.DeleteFunc(variants, func(v string) bool { return strings.HasSuffix(v, "-mq") || v == pOursMQA })
	}
	if *async <= 0 {
		return fmt.Errorf("place: -async must be positive")
	}
	fmt.Printf("Each concurrency k runs %d rounds; a round runs one slice of max(%d, 10·k) placements of every variant back to back (odd rounds in reverse), so ours and by hand always run next to each other under the same background load. "+
		"Every placement is a new order number, a new user and %d new seats (16 shows), purchase limit 4, due in an hour (no message fires during the run). "+
		"Rates are total placements / total time; **paired** is the median over rounds of the ratio of the two slices of one round. Variants:\n\n"+
		"- **tx**: the SQL transaction by hand: `BEGIN; INSERT INTO oe_order (…10 columns…); INSERT INTO oe_order_seat … VALUES (…),(…); COMMIT` (database/sql, unprepared);\n"+
		"- **store**: `sqlstore.Store.Insert(db, nil)` alone: the library's transaction, no lock and no send;\n"+
		"- **hand**: the placement by hand: one EVALSHA of a lock script of our own (seats free? limit? HSET, HINCRBY), **tx**, then one `Send` of the expiry message;\n"+
		"- **ours**: `cancel.Service.Place(ctx, p, store.Insert(db, nil))`: validate, lock (redisseat), the transaction, the after-commit send through `cancel.Config.Scheduler`;\n"+
		"- suffix **-ip**: the in-process sender (`expiry/inproc`); **-mq**: RocketMQ (`expiry/rocketmq`, timer mode, one `SendSync` per message)"+
		"; **-mqa**: ours-mq with `SchedulerConfig.Async: %d`: `Place` returns at the commit, %d goroutines send behind it; a slice's time runs until its last send has returned, so the rate is the sustained one.\n\n",
		*reps, *n, *seats, *async, *async)
	for _, e := range engines {
		if err := c.placeEngine(e, conc, *n, *reps, *seats, variants, *rtN, *reqCtx, *async); err != nil {
			return fmt.Errorf("%s: %w", engineName(e), err)
		}
	}
	return nil
}

func (c *common) placeEngine(engine string, conc []int, n, reps, nSeats int, variants []string, rtN int, reqCtx bool, async int) error {
	ctx := context.Background()
	maxC := 1
	for _, k := range conc {
		maxC = max(maxC, k)
	}
	bd, err := c.openDB(ctx, engine, "place", maxC+2)
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
	seatStore := newSeats(rdb)
	rt := expiry.Runtime{Logger: c.log}
	ip := inproc.New(inproc.Config{})
	defer ip.Close()
	ip.Attach(discard{})
	ps := &placeSetup{seats: seatStore, db: bd.DB, dialect: bd.dialect, rdb: rdb, store: store, senderIP: ip, limit: 4, insSeats: map[int]string{}}
	if ps.svcIP, err = placingService(store, seatStore, ip, rt); err != nil {
		return err
	}
	useMQ := slices.ContainsFunc(variants, func(v string) bool { return strings.HasSuffix(v, "-mq") || v == pOursMQA })
	if useMQ {
		cfg, cleanup, err := c.rmqTopic(ctx, "place")
		if err != nil {
			return fmt.Errorf("rocketmq topic: %w", err)
		}
		defer cleanup()
		cfg.Mode = rocketmq.ModeTimer
		mq, err := rocketmq.NewSender(cfg)
		if err != nil {
			return err
		}
		defer mq.Close()
		ps.senderMQ = mq
		if ps.svcMQ, err = placingService(store, seatStore, mq, rt); err != nil {
			return err
		}
		if has(variants, pOursMQA) {
			counted := senderFunc(func(ctx context.Context, m expiry.Message, d time.Duration) error {
				err := mq.Send(ctx, m, d)
				ps.sentMQA.Add(1)
				return err
			})
			if ps.schedMQA, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: counted, Async: async, Runtime: rt}); err != nil {
				return err
			}
			defer ps.schedMQA.Close(context.Background())
			if ps.svcMQA, err = cancel.New(cancel.Config{Store: store, Seats: seatStore, Scheduler: ps.schedMQA, Runtime: rt}); err != nil {
				return err
			}
		}
		// The first sends wait for the topic's route: warm it up.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := mq.Send(ctx, expiry.Message{OrderNo: "warmup", Hop: 1}, time.Hour)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("rocketmq warm-up send: %w", err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if ps.handSHA, err = rdb.ScriptLoad(ctx, handLockLua).Result(); err != nil {
		return err
	}
	ps.insOrder, ps.insSeats = handSQL(bd.dialect, nSeats)

	tok := token()
	var seq atomic.Int64
	mk := func(tag string) cancel.Placement {
		i := seq.Add(1)
		no := fmt.Sprintf("%s-%s-%d", tok, tag, i)
		p := cancel.Placement{OrderNo: no, UserID: fmt.Sprintf("u%s%d", tok, i), ShowID: fmt.Sprintf("p%s-s%d", tok, i%16), ExpireAt: time.Now().Add(time.Hour).Truncate(time.Millisecond), Limit: ps.limit}
		for s := 0; s < nSeats; s++ {
			p.Seats = append(p.Seats, fmt.Sprintf("%s-%d", no, s))
		}
		return p
	}
	// Warm every variant once (prepared statements, script caches, routes).
	for _, v := range variants {
		for i := 0; i < 3; i++ {
			if err := ps.do(ctx, v, mk(v)); err != nil {
				return fmt.Errorf("warm-up %s: %w", v, err)
			}
		}
	}

	slice := func(k int) int { return max(n, 10*k) }
	roundRate := map[string]float64{}
	type acc struct {
		orders    int
		wall, cpu time.Duration
	}
	res := map[string]*acc{}
	for _, k := range conc {
		for r := 0; r < reps; r++ {
			order := slices.Clone(variants)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, v := range order {
				batch := make([]cancel.Placement, slice(k))
				for i := range batch {
					batch[i] = mk(v)
				}
				cpu0 := selfCPU()
				sent0 := ps.sentMQA.Load()
				wall, failed, err := runWorkers(k, len(batch), func(i int) error {
					if !reqCtx {
						return ps.do(ctx, v, batch[i])
					}
					rctx, done := context.WithCancel(ctx)
					defer done()
					return ps.do(rctx, v, batch[i])
				})
				if err == nil && v == pOursMQA { // until the slice's last send returned
					t0, give := time.Now(), time.Now().Add(time.Minute)
					for ps.sentMQA.Load()-sent0 < int64(len(batch)) {
						if time.Now().After(give) {
							return fmt.Errorf("%s at concurrency %d: %d of %d sends returned after a minute", v, k, ps.sentMQA.Load()-sent0, len(batch))
						}
						time.Sleep(100 * time.Microsecond)
					}
					wall += time.Since(t0)
				}
				cpu := selfCPU() - cpu0
				if err != nil {
					return fmt.Errorf("%s at concurrency %d: %d failed, first: %w", v, k, failed, err)
				}
				roundRate[fmt.Sprintf("%s/%d/%d", v, k, r)] = float64(len(batch)) / wall.Seconds()
				key := fmt.Sprintf("%s/%d", v, k)
				if res[key] == nil {
					res[key] = &acc{}
				}
				res[key].orders += len(batch)
				res[key].wall += wall
				res[key].cpu += cpu
			}
		}
	}
	rate := func(v string, k int) string {
		a := res[fmt.Sprintf("%s/%d", v, k)]
		if a == nil || a.wall == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f", float64(a.orders)/a.wall.Seconds())
	}
	paired := func(a, b string, k int) string {
		if !has(variants, a) || !has(variants, b) {
			return "—"
		}
		var rs []float64
		for r := 0; r < reps; r++ {
			rs = append(rs, roundRate[fmt.Sprintf("%s/%d/%d", a, k, r)]/roundRate[fmt.Sprintf("%s/%d/%d", b, k, r)])
		}
		sort.Float64s(rs)
		return fmt.Sprintf("%.0f %%", 100*rs[len(rs)/2])
	}
	fmt.Printf("### %s (pool %d connections, request contexts: %v), load average before: %s\n\n", engineName(engine), maxC+2, reqCtx, loadAvg())
	head := []string{"conc", "slice"}
	for _, v := range variants {
		head = append(head, v+"/s")
	}
	head = append(head, "**ours-ip / hand-ip**", "**ours-mq / hand-mq**", "**ours-mq / ours-ip**", "**ours-mqa / ours-ip**", "ours-ip / tx", "hand-ip / tx", "store / tx")
	if has(variants, pLock) || has(variants, pRead) {
		head = append(head, "lock / hlock", "read / hlock")
	}
	t := newTable(head...)
	for _, k := range conc {
		row := []any{k, slice(k)}
		for _, v := range variants {
			row = append(row, rate(v, k))
		}
		row = append(row, paired(pOursIP, pHandIP, k), paired(pOursMQ, pHandMQ, k), paired(pOursMQ, pOursIP, k), paired(pOursMQA, pOursIP, k),
			paired(pOursIP, pTx, k), paired(pHandIP, pTx, k), paired(pStore, pTx, k))
		if has(variants, pLock) || has(variants, pRead) {
			row = append(row, paired(pLock, pHLock, k), paired(pRead, pHLock, k))
		}
		t.add(row...)
	}
	t.print(os.Stdout)
	fmt.Printf("\nCPU of the bench process (the library's and the drivers' Go code) per placement, µs:\n\n")
	tc := newTable(append([]string{"conc"}, variants...)...)
	for _, k := range conc {
		row := []any{k}
		for _, v := range variants {
			a := res[fmt.Sprintf("%s/%d", v, k)]
			row = append(row, fmt.Sprintf("%.0f", float64(a.cpu.Microseconds())/float64(a.orders)))
		}
		tc.add(row...)
	}
	tc.print(os.Stdout)

	if rtN > 0 {
		if err := c.placeRoundTrips(ctx, bd, ps, variants, rtN, mk); err != nil {
			return err
		}
	}
	fmt.Println()
	return nil
}

// discard is the in-process sender's consumer: nothing fires during the run.
type discard struct{}

func (discard) Process(context.Context, expiry.Delivery) expiry.Verdict { return expiry.Ack }

// handSQL is the by-hand transaction's statements: the library's columns,
// the claims in one multi-row INSERT.
func handSQL(d sqlstore.Dialect, nSeats int) (string, map[int]string) {
	now := "CAST(ROUND(UNIX_TIMESTAMP(NOW(3))*1000) AS SIGNED)"
	if d == sqlstore.Postgres {
		now = "CAST(EXTRACT(EPOCH FROM clock_timestamp())*1000 AS BIGINT)"
	}
	order := rebindBench(d, "INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms, seats, seat_limit, lock_id) VALUES (?, ?, ?, 0, ?, "+now+", "+now+", ?, ?, ?)")
	seats := map[int]string{}
	for k := 1; k <= max(nSeats, 1); k++ {
		var b strings.Builder
		b.WriteString("INSERT INTO oe_order_seat (show_id, seat_id, order_no, state) VALUES ")
		for i := 0; i < k; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, 1)")
		}
		seats[k] = rebindBench(d, b.String())
	}
	return order, seats
}

// handTx is the by-hand transaction.
func (ps *placeSetup) handTx(ctx context.Context, db *sql.DB, p cancel.Placement) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	sorted := slices.Clone(p.Seats)
	slices.Sort(sorted)
	if _, err := tx.ExecContext(ctx, ps.insOrder, p.OrderNo, p.UserID, p.ShowID, p.ExpireAt.UnixMilli(), strings.Join(sorted, ","), p.Limit, p.LockID); err != nil {
		return err
	}
	args := make([]any, 0, 3*len(p.Seats))
	for _, s := range p.Seats {
		args = append(args, p.ShowID, s, p.OrderNo)
	}
	if _, err := tx.ExecContext(ctx, ps.insSeats[len(p.Seats)], args...); err != nil {
		return err
	}
	return tx.Commit()
}

// handLock is the by-hand lock: one EVALSHA.
func (ps *placeSetup) handLock(ctx context.Context, rdb *redis.Client, p cancel.Placement) error {
	args := make([]any, 0, 3+len(p.Seats))
	args = append(args, p.OrderNo, p.UserID, p.Limit)
	for _, s := range p.Seats {
		args = append(args, s)
	}
	k, err := rdb.EvalSha(ctx, ps.handSHA, []string{"oehand:{" + p.ShowID + "}:seats", "oehand:{" + p.ShowID + "}:limit"}, args...).Int64()
	if err != nil {
		return err
	}
	if k != 1 {
		return fmt.Errorf("hand lock %s: %d", p.OrderNo, k)
	}
	return nil
}

// placingService is a Service that places on store and seats and sends
// each placed order's expiry message through sender once its transaction
// committed.
func placingService(store *sqlstore.Store, seats cancel.SeatStore, sender expiry.DelaySender, rt expiry.Runtime) (*cancel.Service, error) {
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: rt})
	if err != nil {
		return nil, err
	}
	return cancel.New(cancel.Config{Store: store, Seats: seats, Scheduler: sched, Runtime: rt})
}

func (ps *placeSetup) do(ctx context.Context, v string, p cancel.Placement) error {
	return ps.doOn(ctx, v, p, ps.db, ps.rdb, ps.store, ps.svcIP, ps.svcMQ, ps.senderIP, ps.senderMQ)
}

// doOn places p as variant v on the given pools and services (the counting
// pass passes counted ones).
func (ps *placeSetup) doOn(ctx context.Context, v string, p cancel.Placement, db *sql.DB, rdb *redis.Client, store *sqlstore.Store,
	svcIP, svcMQ *cancel.Service, senderIP, senderMQ expiry.DelaySender) error {
	switch v {
	case pLock:
		_, err := ps.seats.Lock(ctx, p.Hold(), p.Limit)
		return err
	case pHLock:
		return ps.handLock(ctx, rdb, p)
	case pRead:
		if _, err := store.Order(ctx, p.OrderNo); !errors.Is(err, expiry.ErrNotFound) {
			return fmt.Errorf("read %s: %v", p.OrderNo, err)
		}
		return nil
	case pTx:
		p.LockID = "1.1"
		return ps.handTx(ctx, db, p)
	case pStore:
		p.LockID = "1.1"
		return store.Insert(db, nil)(ctx, p)
	case pOursIP:
		return svcIP.Place(ctx, p, store.Insert(db, nil))
	case pOursMQ:
		return svcMQ.Place(ctx, p, store.Insert(db, nil))
	case pOursMQA:
		return ps.svcMQA.Place(ctx, p, store.Insert(db, nil))
	case pHandIP, pHandMQ:
		if err := ps.handLock(ctx, rdb, p); err != nil {
			return err
		}
		p.LockID = "1.1"
		if err := ps.handTx(ctx, db, p); err != nil {
			return err
		}
		sender := senderIP
		if v == pHandMQ {
			sender = senderMQ
		}
		// As a host would: a failed send is logged and left to a repair job.
		if err := sender.Send(ctx, expiry.Message{OrderNo: p.OrderNo, Hop: 1}, time.Until(p.ExpireAt)); err != nil {
			return errors.Join(errors.New("send"), err)
		}
		return nil
	}
	return fmt.Errorf("unknown variant %q", v)
}

// placeRoundTrips counts, at concurrency 1, the SQL round trips (a counting
// driver), the Redis round trips and commands (a hook) and the sends per
// placement of each variant.
func (c *common) placeRoundTrips(ctx context.Context, bd *benchDB, ps *placeSetup, variants []string, rtN int, mk func(string) cancel.Placement) error {
	cdb, cnt, err := countingDB(bd)
	if err != nil {
		return err
	}
	defer cdb.Close()
	rc := &rtCounter{}
	crdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, DB: c.redisDB, PoolSize: 4})
	defer crdb.Close()
	crdb.AddHook(rc)
	cstore, err := sqlstore.New(cdb, bd.dialect)
	if err != nil {
		return err
	}
	cseats := newSeats(crdb)
	cip := countingSender{ps.senderIP, rc}
	csvcIP, err := placingService(cstore, cseats, cip, expiry.Runtime{Logger: c.log})
	if err != nil {
		return err
	}
	var cmq expiry.DelaySender
	var csvcMQ *cancel.Service
	if ps.senderMQ != nil {
		cmq = countingSender{ps.senderMQ, rc}
		if csvcMQ, err = placingService(cstore, cseats, cmq, expiry.Runtime{Logger: c.log}); err != nil {
			return err
		}
	}
	fmt.Printf("\nRound trips per placement (%d placements each, concurrency 1; SQL counted by a wrapping database/sql driver, Redis by a go-redis hook: a pipeline is one round trip; sends by a wrapping sender):\n\n", rtN)
	t := newTable("variant", "SQL round trips", "Redis round trips (commands)", "sends", "SQL breakdown (totals)")
	for _, v := range variants {
		if strings.HasSuffix(v, "-mq") && cmq == nil || v == pOursMQA { // ours-mqa: the same round trips as ours-mq, off the path
			continue
		}
		// Warm the counted pools, then count.
		for i := 0; i < 2; i++ {
			if err := ps.doOn(ctx, v, mk(v), cdb, crdb, cstore, csvcIP, csvcMQ, cip, cmq); err != nil {
				return fmt.Errorf("round-trip warm-up %s: %w", v, err)
			}
		}
		cnt.reset()
		rc.redisCmds.Store(0)
		rc.redisRTs.Store(0)
		rc.sends.Store(0)
		for i := 0; i < rtN; i++ {
			if err := ps.doOn(ctx, v, mk(v), cdb, crdb, cstore, csvcIP, csvcMQ, cip, cmq); err != nil {
				return fmt.Errorf("round-trip pass %s: %w", v, err)
			}
		}
		f := func(x int64) string { return fmt.Sprintf("%.1f", float64(x)/float64(rtN)) }
		t.add(v, f(cnt.total()), f(rc.redisRTs.Load())+" ("+f(rc.redisCmds.Load())+")", f(rc.sends.Load()), cnt.String())
	}
	t.print(os.Stdout)
	return nil
}

// senderFunc is a DelaySender from a function.
type senderFunc func(context.Context, expiry.Message, time.Duration) error

// Send calls f.
func (f senderFunc) Send(ctx context.Context, m expiry.Message, d time.Duration) error {
	return f(ctx, m, d)
}
