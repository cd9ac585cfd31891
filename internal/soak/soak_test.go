package soak

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// The size of a run. The test command runs the CI size; a bigger run:
//
//	OE_SOAK_ORDERS=20000 OE_SOAK_SECONDS=300 go -C internal/soak test -run Soak -v -timeout 60m
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oe-soak-bin-")
	if err == nil {
		bin, err = Build(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func TestSoakMariaDB(t *testing.T) {
	db := testenv.MySQL(t)
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	soak(t, soakConfig{label: "mysql", dialect: sqlstore.MySQL, dialectName: "mysql", db: db, dsns: [3]string{dsn, dsn, dsn}})
}

func TestSoakPostgres(t *testing.T) {
	db := testenv.Postgres(t)
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	dsn := os.Getenv(testenv.EnvPostgres)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "search_path=" + schema
	soak(t, soakConfig{label: "postgres", dialect: sqlstore.Postgres, dialectName: "postgres", db: db, dsns: [3]string{dsn, dsn, dsn}})
}

// soakConfig is one soak: the database, each instance's DSN, and the faults.
type soakConfig struct {
	label       string // in the FIGURE lines
	dialect     sqlstore.Dialect
	dialectName string    // soakinstance's -dialect
	db          *sql.DB   // the test's own pool: the migration, the final round, the checks
	dsns        [3]string // instance i1, i2, i3's DSN
	// faults, when set, replaces plan's schedule (instance, broker-b, Redis
	// failover): the cluster soaks (cluster_test.go) kill a database node
	// instead. It gets at, which sleeps until a fraction of the load.
	faults func(ctx context.Context, s *soakRun, at func(float64))
	// backInTime: the database may lose acknowledged commits (an
	// asynchronous failover); violations that concern such an order are
	// reported, not failed, unless they break a rule that holds whatever
	// SQL lost (backInTimeHard).
	backInTime bool
	// orders, seconds: the size unless OE_SOAK_ORDERS, OE_SOAK_SECONDS say
	// (0: 1,500 orders over 45 s).
	orders, seconds int
}

// schedule is when each fault happens, as fractions of the load's duration.
type schedule struct {
	hostile                       float64 // hostile bodies sent straight to the topic
	killInstance, restartInstance float64 // SIGKILL instance i2, start it again
	killBroker, restartBroker     float64 // SIGKILL broker-b, start it again on its store
	cutReplica, killPrimary       float64 // replica stops following; primary SIGKILLed, replica promoted
}

var plan = schedule{hostile: 0.1, killInstance: 0.2, restartInstance: 0.3, killBroker: 0.42, restartBroker: 0.56, cutReplica: 0.75, killPrimary: 0.8}

// order is the load generator's ledger of one order.
type order struct {
	no, user, show string
	seats          []string
	expireMs       int64
	placed         atomic.Int32 // 1 placed (200), 2 refused, 3 unknown (every try failed)
	paidWith       string       // a payment id that answered 200
	cancelOK       bool         // a user cancel answered 200
	mu             sync.Mutex
}

type soakRun struct {
	t         *testing.T
	insts     []*Instance
	rr        atomic.Uint64
	client    *http.Client
	refused   map[string]*atomic.Int64
	marks     map[string]int64 // fault times, unix ms
	mu        sync.Mutex
	hostile   map[string]int
	unknown   atomic.Int64
	instFails atomic.Int64
	replLost  int64 // bytes of replication stream the promoted replica lacks
	bodies    []hostileBody
	nosuch    string // the order number of the valid-looking message for no order
	pg        bool   // the database is PostgreSQL
	dbDown    atomic.Bool
	killAt    atomic.Int64      // unix ms of the database primary's kill (Patroni)
	firstOK   atomic.Int64      // unix ms of the first placement started after it that answered 200
	failed    map[string]int    // calls answered 500 or not at all, by path (and " while the database failed over")
	gaveUp    map[string]int    // calls every instance failed, by path
	lacked    map[string]string // acknowledged by an instance, not in SQL at the end: order -> what
	figures   []string          // the database faults' own figures
}

// hostileBody is one body sent to the topic by a raw producer, and where it
// was stored (the queue and offset the instances' event lines name).
type hostileBody struct {
	what    string
	missing bool // well-formed, for an order that does not exist: handled as missing
	broker  string
	queue   int
	offset  int64
	sendErr error
}

// sendHostile sends bodies no Scheduler would, straight to the topic with a
// raw client-go producer: empty, oversized, another format, an invalid order
// number, a non-canonical hop, and a well-formed message for an order that
// does not exist. Each must be counted by the instance that gets it (a bad
// message, or a missing order) and dropped, changing nothing (I7). Every body
// but the empty one is sent three times: the producer's round robin puts the
// 15 on 15 of the topic's 16 queues, so every instance gets some.
func (s *soakRun) sendHostile(ctx context.Context, namesrv, topic, uniq string) {
	p, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		producer.WithGroupName(topic+"_hostile"), producer.WithRetry(2))
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		s.t.Errorf("hostile producer: %v", err)
		return
	}
	defer func() { _ = p.Shutdown() }()
	s.nosuch = "o-" + uniq + "-nosuch"
	real := fmt.Sprintf("o-%s-%05d", uniq, 1) // an order of the load: the bodies naming it must not touch it
	for _, b := range []struct {
		what    string
		body    []byte
		missing bool
	}{
		{what: "empty"},
		{what: "oversized (64 KiB, naming a real order)", body: append([]byte("oe1 "+real+" 1 "), bytes.Repeat([]byte("x"), 64<<10)...)},
		{what: "another format (JSON, naming a real order)", body: []byte(`{"orderNo":"` + real + `","hop":1}`)},
		{what: "invalid order number", body: []byte("oe1 o-{" + uniq + "}-1 1")},
		{what: "non-canonical hop", body: []byte("oe1 " + real + " 01")},
		{what: "unknown order", body: []byte("oe1 " + s.nosuch + " 1"), missing: true},
	} {
		for copy := range 3 {
			if copy > 0 && b.body == nil {
				break
			}
			h := hostileBody{what: b.what, missing: b.missing}
			res, err := p.SendSync(ctx, primitive.NewMessage(topic, b.body))
			switch {
			case err != nil:
				h.sendErr = err
			case res.Status != primitive.SendOK || res.MessageQueue == nil:
				h.sendErr = fmt.Errorf("send status %v", res.Status)
			default:
				h.broker, h.queue, h.offset = res.MessageQueue.BrokerName, res.MessageQueue.QueueId, res.QueueOffset
			}
			s.bodies = append(s.bodies, h)
		}
	}
	s.mark("hostile_sent")
}

func (s *soakRun) mark(name string) {
	s.mu.Lock()
	s.marks[name] = time.Now().UnixMilli()
	s.mu.Unlock()
	s.t.Logf("%s %s", time.Now().Format("15:04:05.000"), name)
}

func (s *soakRun) count(what string) {
	s.mu.Lock()
	s.hostile[what]++
	s.mu.Unlock()
}

// call posts body to path on the next live instance, trying the others when
// one does not answer (it was killed): the load balancer's retry.
func (s *soakRun) call(path string, body any) int {
	st, _ := s.callTries(path, body)
	return st
}

// callTries is call, and whether a try failed before the answer: a try
// that failed (an instance killed, a 500) may have committed all the same,
// so a placement's 409 after one is its own earlier try's order.
func (s *soakRun) callTries(path string, body any) (int, bool) {
	b, _ := json.Marshal(body)
	t0 := time.Now().UnixMilli()
	failed := false
	for range len(s.insts) {
		in := s.insts[s.rr.Add(1)%uint64(len(s.insts))]
		addr := in.Addr()
		if addr == "" {
			continue
		}
		resp, err := s.client.Post("http://"+addr+path, "application/json", bytes.NewReader(b))
		if err != nil {
			s.instFails.Add(1)
			s.fail(path)
			failed = true
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusInternalServerError {
			s.instFails.Add(1)
			s.fail(path)
			failed = true
			continue // Redis or the database failing over: another try, as a client would
		}
		if k := s.killAt.Load(); k != 0 && t0 > k && path == "/place" && resp.StatusCode == http.StatusOK {
			s.firstOK.CompareAndSwap(0, time.Now().UnixMilli())
		}
		return resp.StatusCode, failed
	}
	s.mu.Lock()
	s.gaveUp[path]++
	s.mu.Unlock()
	return 0, failed
}

// fail counts one failed call to path.
func (s *soakRun) fail(path string) {
	s.mu.Lock()
	s.failed[path]++
	if s.dbDown.Load() {
		s.failed[path+" while the database failed over"]++
	}
	s.mu.Unlock()
}

func soak(t *testing.T, sc soakConfig) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancelAll()
	db, dialect, dialectName := sc.db, sc.dialect, sc.label
	namesrv, brokers := testenv.RocketMQBrokers(t)
	primary, replica := testenv.RedisPair(t)
	svcs := testenv.ServicesScript(t)
	nOrders := envInt("OE_SOAK_ORDERS", cmp.Or(sc.orders, 1500))
	loadFor := time.Duration(envInt("OE_SOAK_SECONDS", cmp.Or(sc.seconds, 45))) * time.Second
	const reconcileEvery = 5 * time.Second

	// The environment is put back whatever happens: broker-b running, the
	// replica following the primary again.
	if sc.faults == nil {
		t.Cleanup(func() {
			for _, name := range []string{"broker-b", "redis-pair"} {
				if err := svcs.StartOne(context.Background(), name); err != nil {
					t.Errorf("restoring %s: %v", name, err)
				}
			}
		})
	}

	store, err := sqlstore.New(db, dialect)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	uniq := testenv.Unique()
	ns := "oe-soak-" + uniq
	topic, group := "oe_soak_"+uniq, "oe_soak_"+uniq
	for _, b := range brokers { // the topic's queues on both brokers
		require.NoError(t, rocketmq.EnsureTopic(ctx, []string{namesrv}, b, topic))
	}
	proxy, err := NewProxy(primary)
	require.NoError(t, err)
	defer proxy.Close()

	dir := t.TempDir()
	if keep := os.Getenv("OE_SOAK_KEEP"); keep != "" { // keep the event files and logs
		dir = filepath.Join(keep, dialectName+"-"+uniq)
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	s := &soakRun{t: t, client: &http.Client{Timeout: 10 * time.Second}, marks: map[string]int64{}, hostile: map[string]int{},
		pg: dialect == sqlstore.Postgres, failed: map[string]int{}, gaveUp: map[string]int{}, lacked: map[string]string{}}
	for i := 1; i <= 3; i++ {
		s.insts = append(s.insts, NewInstance(fmt.Sprintf("i%d", i), bin, dir, "-dialect", sc.dialectName, "-dsn", sc.dsns[i-1],
			"-redis", proxy.Addr(), "-ns", ns, "-namesrv", namesrv, "-topic", topic, "-group", group,
			"-reconcile", reconcileEvery.String()))
	}
	for _, in := range s.insts {
		require.NoError(t, in.Start(60*time.Second))
		defer in.Signal(syscall.SIGKILL, 5*time.Second)
	}
	time.Sleep(3 * time.Second) // the group's first rebalance
	s.mark("load")

	// The load: nOrders over loadFor, each due 3-8 s after it is placed.
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	var gen sync.Mutex
	shows := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"}
	nextSeat := map[string]int{}
	orders := make([]*order, nOrders)
	var wg sync.WaitGroup
	start := time.Now()
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		if sc.faults == nil {
			s.runFaults(ctx, svcs, proxy, primary, replica, namesrv, topic, uniq, start, loadFor)
			return
		}
		at := func(f float64) { time.Sleep(time.Until(start.Add(time.Duration(f * float64(loadFor))))) }
		at(plan.hostile)
		s.sendHostile(ctx, namesrv, topic, uniq)
		sc.faults(ctx, s, at)
	}()
	for i := range orders {
		at := start.Add(time.Duration(i) * loadFor / time.Duration(nOrders))
		time.Sleep(time.Until(at))
		gen.Lock()
		show := shows[rng.IntN(len(shows))]
		// Seats are reused: a seat freed by a cancel is placed again, and some
		// are still held (the placement is then refused: seat unavailable).
		k := nextSeat[show]
		nextSeat[show] = k + 2
		seat := func(j int) string { return fmt.Sprintf("R%d", (j%150)+1) }
		u := rng.IntN(60)
		user := fmt.Sprintf("u%d", u)
		if rng.IntN(4) == 0 {
			user = fmt.Sprintf("U%d", u) // a case variant is another user (I10)
		}
		o := &order{no: fmt.Sprintf("o-%s-%05d", uniq, i), user: user, show: show, seats: []string{seat(k), seat(k + 1)},
			expireMs: time.Now().Add(3*time.Second + time.Duration(rng.IntN(5000))*time.Millisecond).UnixMilli()}
		r := rng.Float64()
		payAt := time.Duration(rng.IntN(int(time.Until(time.UnixMilli(o.expireMs)) + time.Second)))
		dup := rng.IntN(100)
		gen.Unlock()
		orders[i] = o
		wg.Go(func() { s.life(o, r, payAt, dup) })
	}
	wg.Wait()
	<-faults
	s.mark("load_end")
	// The pool may hold connections to a database node that was killed:
	// closing the idle ones makes the next statements dial a live one.
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)

	// Every order is due; wait until SQL holds none pending (the reconcilers
	// take what the messages did not), then stop the instances and run one
	// reconcile round here.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var pending int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_order WHERE status = 0").Scan(&pending); err == nil && pending == 0 {
			break
		} else if err != nil {
			t.Logf("counting pending orders: %v", err)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(reconcileEvery + time.Second) // one more round on every instance: the lock and claims passes after the last cancels
	for _, in := range s.insts {
		in.Signal(syscall.SIGTERM, 20*time.Second)
	}
	s.mark("stopped")
	redisNow := replica // the promoted replica is the Redis now
	if sc.faults != nil {
		redisNow = primary // no Redis failover
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisNow})
	defer rdb.Close()
	seats, err := redisseat.New(rdb, ns)
	require.NoError(t, err)
	// The final round's refund hook calls are refund lines like the
	// instances'. Its lease is short, so that a discrepancy whose hook an
	// instance never ran or never recorded (killed between the record and
	// the hook, or stopped before its settle) is retried now, not two
	// minutes after the run (DiscrepancyLeaseDefault); the round waits one
	// lease after the instances stopped, so no claim of theirs still holds.
	// Not shorter: the Service gives a hook and its settle half the lease,
	// and a millisecond's lease left a settle 0.5 ms, which a loaded
	// machine's MariaDB missed (the refund made, its record left unsettled).
	const finalLease = 3 * time.Second
	time.Sleep(finalLease + 100*time.Millisecond)
	var (
		finalMu      sync.Mutex
		finalRefunds []Line
	)
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, DiscrepancyLease: finalLease,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			finalMu.Lock()
			defer finalMu.Unlock()
			finalRefunds = append(finalRefunds, Line{T: time.Now().UnixMilli(), I: "final", K: "refund", O: d.OrderNo, Pay: d.PaymentID})
			return nil
		}})
	require.NoError(t, err)
	// Every instance is stopped, so no placement is in flight: the final
	// round need not wait out Grace (a minute) before it releases the lock
	// of a placement whose commit was unknown and that never committed (a
	// database failing over under the load gives those).
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Grace: time.Second})
	require.NoError(t, err)
	final, err := rec.Round(ctx)
	require.NoError(t, err)
	t.Logf("final reconcile round: %+v", final)

	var files []string
	for _, in := range s.insts {
		files = append(files, in.events)
	}
	lines, torn, err := ReadEvents(files...)
	require.NoError(t, err)
	lines = append(lines, finalRefunds...)
	violations := s.check(ctx, t, db, seats, orders, lines, torn, final, dialectName, reconcileEvery)
	var backInTime []string
	for _, v := range violations {
		if sc.backInTime && !backInTimeHard(v) && namesLacked(v, s.lacked) {
			backInTime = append(backInTime, v)
			t.Logf("back in time (reported, not failed): %s", v)
			continue
		}
		t.Error(v)
	}
	if sc.faults != nil && !sc.backInTime && len(s.lacked) > 0 {
		t.Errorf("the database lost %d acknowledged commits: %v", len(s.lacked), s.lacked)
	}
	for _, f := range s.figures {
		t.Logf("FIGURE soak %s: %s", dialectName, f)
	}
	if sc.faults != nil {
		t.Logf("FIGURE soak %s: calls failed (an instance answered 500 or not at all; the load balancer then tries the next): %v; calls every instance failed: %v; acknowledged commits the database lacked at the end: %d %v",
			dialectName, s.failed, s.gaveUp, len(s.lacked), s.lacked)
	}
	if sc.backInTime {
		lost, kinds := map[string]int{}, map[string]int{}
		for _, what := range s.lacked {
			lost[what]++
		}
		for _, v := range backInTime {
			kinds[strings.TrimSuffix(strings.Fields(v)[0], ":")]++
		}
		t.Logf("FIGURE soak %s: SQL went back in time: the promoted replica lacked %d acknowledged commits %v; what the checks saw of it, by invariant: %v",
			dialectName, len(s.lacked), lost, kinds)
	}
	t.Logf("FIGURE soak %s: violations %d (+%d on orders SQL lost, reported)", dialectName, len(violations)-len(backInTime), len(backInTime))
}

// backInTimeHard reports the violations that no lost commit excuses: a sold
// seat freed or sold again, a payment both honoured and refunded, or a
// decided payment's fate flipped.
func backInTimeHard(v string) bool {
	for _, s := range []string{"and was refunded", "fate flipped", "later sold to", "was sold to", "seats of paid order", "paid two orders"} {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}

// namesLacked reports whether violation v names an order (or its payment)
// that SQL lost.
func namesLacked(v string, lacked map[string]string) bool {
	for no := range lacked {
		if strings.Contains(v, no) {
			return true
		}
	}
	return false
}

// life runs one order: placed (a share placed twice, or with a seat listed
// twice), then paid, cancelled by its user, or left to expire.
func (s *soakRun) life(o *order, r float64, payAt time.Duration, dup int) {
	body := map[string]any{"No": o.no, "User": o.user, "Show": o.show, "Seats": o.seats, "ExpireMs": o.expireMs}
	if dup < 3 { // a seat listed twice: refused before any lock
		bad := map[string]any{"No": o.no, "User": o.user, "Show": o.show, "Seats": []string{o.seats[0], o.seats[0]}, "ExpireMs": o.expireMs}
		if st := s.call("/place", bad); st == http.StatusBadRequest {
			s.count("seat listed twice, refused")
		} else {
			s.count(fmt.Sprintf("seat listed twice, answered %d", st))
		}
	}
	st, failedBefore := s.callTries("/place", body)
	switch {
	case st == http.StatusOK:
		o.placed.Store(1)
		if failedBefore {
			s.count("placed after a failed try")
		}
	case st == 0, failedBefore:
		// No answer, or a refusal after a try that failed (an instance
		// killed after its commit, a commit whose answer was lost in a
		// Redis failover): the order may be this placement's own, from
		// the earlier try, whatever the retry was told ("exists", or its
		// seats taken by that try's lock; CI run 31 saw the latter).
		// Unknown: the checks ask SQL.
		o.placed.Store(3)
		s.unknown.Add(1)
		if st != 0 {
			s.count(fmt.Sprintf("placement answered %d after a failed try", st))
		}
		return
	default:
		o.placed.Store(2)
		s.count(fmt.Sprintf("placement refused %d", st))
		return
	}
	if dup < 8 { // a double submit: the same order number again
		if st := s.call("/place", body); st == http.StatusConflict {
			s.count("order number placed again, refused")
		} else {
			s.count(fmt.Sprintf("order number placed again, answered %d", st))
		}
	}
	switch {
	case r < 0.25: // paid, some of them around or after the deadline
		time.Sleep(payAt)
		pay := "p-" + o.no
		st := s.call("/pay", map[string]string{"No": o.no, "Payment": pay})
		if st == http.StatusOK {
			o.mu.Lock()
			o.paidWith = pay
			o.mu.Unlock()
		}
		if r < 0.08 { // the provider repeats its callback
			s.call("/pay", map[string]string{"No": o.no, "Payment": pay})
			s.count("callback repeated")
		}
		if r < 0.03 { // a second payment for the same order
			s.call("/pay", map[string]string{"No": o.no, "Payment": pay + "-2"})
			s.count("second payment")
		}
	case r < 0.35: // the user cancels
		time.Sleep(payAt / 2)
		if r < 0.27 { // another user's cancel is refused as not found
			if st := s.call("/cancel", map[string]string{"No": o.no, "User": o.user + "x"}); st == http.StatusNotFound {
				s.count("wrong-user cancel, refused")
			}
		}
		if s.call("/cancel", map[string]string{"No": o.no, "User": o.user}) == http.StatusOK {
			o.mu.Lock()
			o.cancelOK = true
			o.mu.Unlock()
		}
	}
}

// runFaults runs the schedule against the load that started at start.
func (s *soakRun) runFaults(ctx context.Context, svcs testenv.Services, proxy *Proxy, primaryAddr, replica, namesrv, topic, uniq string, start time.Time, loadFor time.Duration) {
	t := s.t
	at := func(f float64) { time.Sleep(time.Until(start.Add(time.Duration(f * float64(loadFor))))) }
	at(plan.hostile)
	s.sendHostile(ctx, namesrv, topic, uniq)
	at(plan.killInstance)
	victim := s.insts[1]
	s.mark("instance_kill")
	victim.Signal(syscall.SIGKILL, 5*time.Second)
	at(plan.restartInstance)
	if err := victim.Start(60 * time.Second); err != nil {
		t.Errorf("restart %s: %v", victim.ID, err)
	}
	s.mark("instance_restart")

	at(plan.killBroker)
	if pid, err := svcs.Pid("broker-b"); err != nil {
		t.Errorf("broker-b: %v", err)
	} else {
		s.mark("broker_kill")
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	at(plan.restartBroker)
	s.mark("broker_restart_begin")
	if err := svcs.StartOne(ctx, "broker-b"); err != nil {
		t.Errorf("restart broker-b: %v", err)
	}
	s.mark("broker_restart")

	at(plan.cutReplica)
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	// The replica stops receiving the primary's stream (it is pointed at an
	// address nobody serves, as a partition would do) and keeps its data:
	// from now on it lacks the primary's writes.
	if err := r.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Errorf("cut the replica: %v", err)
	}
	s.mark("redis_cut")
	cutAt := replOffset(ctx, r)
	at(plan.killPrimary)
	p := redis.NewClient(&redis.Options{Addr: primaryAddr})
	s.replLost = replOffset(ctx, p) - cutAt
	_ = p.Close()
	if pid, err := svcs.Pid("redis-primary"); err != nil {
		t.Errorf("redis-primary: %v", err)
	} else {
		s.mark("redis_kill")
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := r.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Errorf("promote the replica: %v", err)
	}
	proxy.Switch(replica) // the instances reach the promoted replica from now on
	s.mark("redis_promoted")
}

// percentile of sorted xs.
func pct(xs []int64, p float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

type sqlOrder struct {
	status           int
	expire, updated  int64
	reason, payment  string
	user, show, name string
	lockID           string // the seat lock the order holds (lock_id)
}

func (s *soakRun) check(ctx context.Context, t *testing.T, db *sql.DB, seats *redisseat.Seats, orders []*order,
	lines []Line, torn int, final reconcile.Report, dialect string, every time.Duration) []string {
	var bad []string
	rows, err := db.QueryContext(ctx, "SELECT order_no, user_id, show_id, status, expire_at_ms, updated_at_ms, COALESCE(cancel_reason, ''), COALESCE(payment_id, ''), COALESCE(lock_id, '') FROM oe_order")
	require.NoError(t, err)
	inSQL := map[string]*sqlOrder{}
	for rows.Next() {
		o := &sqlOrder{}
		require.NoError(t, rows.Scan(&o.name, &o.user, &o.show, &o.status, &o.expire, &o.updated, &o.reason, &o.payment, &o.lockID))
		inSQL[o.name] = o
	}
	require.NoError(t, rows.Err())
	_ = rows.Close()

	lost0 := s.marks["redis_cut"] - 1000 // writes from here to the promotion may be missing on the replica
	lost1 := s.marks["redis_promoted"]
	released := map[string]int{}
	releasedLost := map[string]int{}
	// releasedLive counts the releases of the lock the order holds in SQL
	// (or of a lock whose id the release did not name): a placement's try
	// that locked, failed before its commit (a deadlock, a 500) and released
	// its own lock, before another try placed the order under a new lock,
	// freed no seat of the order.
	releasedLive := map[string]int{}
	locked := map[string]int{} // seats locked per order: by its placement, and again by a reinstatement's claim
	// Seats locked again from SQL per order whose placement's lock went to
	// the Redis primary inside the lost window: that lock was lost with the
	// primary, and the seat store's rebuilds after the promotion lock its
	// seats again from SQL (no lock event). A rebuild that read the order
	// pending before its cancel and wrote after the cancel's release locks
	// them once more, and the lock pass frees that lock (CI runs 31 and 32:
	// two releases of the same lock id, 5 s apart).
	relockedLost := map[string]int{}
	cancelEvents := map[string]int{}
	handled := map[string]int{}
	perInst := map[string]int{}
	type qk struct {
		b string
		q int
	}
	lastOwner := map[qk]string{}
	handovers := 0
	offsets := map[string]int{}
	redeliveries, badMsgs, sendFailed, relFailed, sellFailed, missing := 0, 0, 0, 0, 0, 0
	repaired := map[string]int{}
	refunds := map[string]int{}
	brokerBAfter, brokerBAfterFinal := 0, 0
	cancelledBy := map[string]string{}
	ownerAfter := map[qk]string{}
	handoversAfterRestart, dupsAfterRestart := 0, 0
	var lastDupAfterRestart int64
	repairedAfterPromotion := map[string]int{}
	diverged := map[string]int{} // expiry.KindDiverged events by reason: SQL went back in time
	firstCancel := map[string]int64{}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].T < lines[j].T })
	for _, l := range lines {
		switch l.K {
		case "lock":
			locked[l.O] += l.N
			if l.T >= lost0 && l.T <= lost1 {
				relockedLost[l.O] += l.N
			}
		case "release":
			if l.T >= lost0 && l.T <= lost1 {
				releasedLost[l.O] += l.N
			} else {
				released[l.O] += l.N
				if so := inSQL[l.O]; so == nil || l.Extra == "" || so.lockID == "" || l.Extra == so.lockID {
					releasedLive[l.O] += l.N
				}
			}
		case "cancelled":
			cancelEvents[l.O]++
			if cancelEvents[l.O] == 1 {
				firstCancel[l.O] = l.T
			}
		case "handled":
			handled[l.O]++
			perInst[l.I]++
			k := qk{l.B, l.Q}
			if prev, ok := lastOwner[k]; ok && prev != l.I {
				handovers++
			}
			lastOwner[k] = l.I
			key := fmt.Sprintf("%s/%s/%d/%d", l.Tp, l.B, l.Q, l.Off)
			offsets[key]++
			if offsets[key] > 1 || l.RC > 0 {
				redeliveries++
			}
			if l.Out == "cancelled" {
				cancelledBy[l.O] = l.B
			}
			if l.T >= s.marks["broker_restart"] {
				if prev, ok := ownerAfter[k]; ok && prev != l.I {
					handoversAfterRestart++
				}
				ownerAfter[k] = l.I
				if offsets[key] > 1 {
					dupsAfterRestart++
					lastDupAfterRestart = l.T
				}
			}
			if l.Out == "missing" && l.O != s.nosuch {
				missing++
				bad = append(bad, fmt.Sprintf("I6: a message for order %s, which SQL does not hold", l.O))
			}
			if l.B == "broker-b" && l.T >= s.marks["broker_restart_begin"] && l.T < s.marks["broker_restart"]+30000 {
				brokerBAfter++
				if l.Out == "final" {
					brokerBAfterFinal++
				}
			}
		case "bad_message":
			badMsgs++
		case "send_failed":
			sendFailed++
		case "release_failed":
			relFailed++
		case "sell_failed":
			sellFailed++
		case "repaired":
			repaired[l.R] += max(l.N, 1)
			if l.T >= s.marks["redis_promoted"] {
				repairedAfterPromotion[l.R] += max(l.N, 1)
			}
		case "refund":
			refunds[l.Pay]++
		case "diverged":
			diverged[l.R]++
		}
	}

	bad = append(bad, s.checkHostile(lines, inSQL, dialect)...)

	// Phases by deadline.
	phaseOf := func(ms int64) string {
		if s.marks["db_kill"] != 0 { // a cluster soak: the database node's fault only
			switch {
			case ms < s.marks["db_kill"]:
				return "steady"
			case ms < s.marks["db_back"]+5000:
				return "database failover"
			default:
				return "after"
			}
		}
		switch {
		case ms < s.marks["instance_kill"]:
			return "steady"
		case ms < s.marks["instance_restart"]+5000:
			return "instance SIGKILLed"
		case ms < s.marks["broker_kill"]:
			return "between faults"
		case ms < s.marks["broker_restart"]+5000:
			return "broker-b down"
		case ms < s.marks["redis_cut"]:
			return "between faults "
		case ms < s.marks["redis_promoted"]+5000:
			return "Redis failover"
		default:
			return "after"
		}
	}
	late := map[string][]int64{}
	byReason := map[string]int{}
	placed, refused, unknown, unknownCommitted, paid, cancelled := 0, 0, 0, 0, 0, 0
	brokerDownDue, brokerDownByRec := 0, 0
	brokerDownByMsg := map[string]int{}
	heldWant := map[[2]string]int{}
	lostSales := map[[2]string][]string{} // orders whose payment SQL lost, their seats still sold
	lostSeats := map[[2]string]int{}
	users := map[[2]string]bool{}
	for _, o := range orders {
		so, ok := inSQL[o.no]
		users[[2]string{o.show, o.user}] = true
		switch o.placed.Load() {
		case 1:
			placed++
			if !ok {
				s.lacked[o.no] = "placement"
				if o.paidWith != "" { // its payment lost with it: the seats stay sold to an order SQL does not have
					lostSales[[2]string{o.show, o.user}] = append(lostSales[[2]string{o.show, o.user}], o.no)
					lostSeats[[2]string{o.show, o.user}] += len(o.seats)
				}
				bad = append(bad, fmt.Sprintf("I1: order %s was placed (200) but is not in SQL", o.no))
				continue
			}
		case 2:
			refused++
			if ok && so.name == o.no && released[o.no]+releasedLost[o.no] > 0 {
				bad = append(bad, fmt.Sprintf("I2: refused placement %s had seats released", o.no))
			}
			continue
		default:
			unknown++ // every try failed: the order may or may not exist
			if !ok {
				continue
			}
			unknownCommitted++
		}
		switch so.status {
		case 0:
			bad = append(bad, fmt.Sprintf("I3: order %s still pending at the end (due %d ms ago)", o.no, time.Now().UnixMilli()-so.expire))
		case 1:
			paid++
			heldWant[[2]string{o.show, o.user}] += len(o.seats)
			if o.cancelOK {
				s.lacked[o.no] = "cancel"
				bad = append(bad, fmt.Sprintf("I1: order %s is paid but its user's cancel answered 200", o.no))
			}
			if o.paidWith != "" && so.payment != o.paidWith {
				bad = append(bad, fmt.Sprintf("I1: order %s paid by %q, but %q answered 200", o.no, so.payment, o.paidWith))
			}
			if n := releasedLive[o.no]; n > 0 {
				bad = append(bad, fmt.Sprintf("I2: %d seats of paid order %s (lock %s) released; its events:\n%s", n, o.no, so.lockID, timeline(lines, o.no)))
			}
			if cancelEvents[o.no] > 0 {
				bad = append(bad, fmt.Sprintf("I1: paid order %s was also reported cancelled", o.no))
			}
		case 2:
			cancelled++
			byReason[so.reason]++
			if o.paidWith != "" {
				s.lacked[o.no] = "payment"
				lostSales[[2]string{o.show, o.user}] = append(lostSales[[2]string{o.show, o.user}], o.no)
				lostSeats[[2]string{o.show, o.user}] += len(o.seats)
				bad = append(bad, fmt.Sprintf("I1: order %s is cancelled but payment %s answered 200", o.no, o.paidWith))
			}
			// Each lock's seats are released at most once: a reinstatement
			// that locked the seats again and then failed gives them back a
			// second time (its own lock).
			if n := released[o.no]; n > max(len(o.seats), locked[o.no])+relockedLost[o.no] {
				bad = append(bad, fmt.Sprintf("I2: order %s had %d seats released outside the Redis failover's lost window, it has %d, locked %d times over (%d of them in the lost window); its events:\n%s", o.no, n, len(o.seats), locked[o.no], relockedLost[o.no], timeline(lines, o.no)))
			}
			if cancelEvents[o.no] > 1 {
				// Cancelled twice: the first cancel's commit is gone, when
				// it fell between the WAL senders' stop and the promotion
				// (TestSoakPatroni/async): SQL went back in time.
				if f := s.marks["senders_frozen"]; f != 0 && firstCancel[o.no] >= f-1000 && firstCancel[o.no] <= s.marks["db_promoted"] {
					s.lacked[o.no] = "cancel"
				}
				bad = append(bad, fmt.Sprintf("I5: order %s reported cancelled %d times", o.no, cancelEvents[o.no]))
			}
			if so.reason != string(cancel.ReasonUser) {
				if so.updated < so.expire {
					bad = append(bad, fmt.Sprintf("I4: order %s cancelled (%s) %d ms before its expiry by the database's clock", o.no, so.reason, so.expire-so.updated))
				}
				l := so.updated - so.expire
				ph := phaseOf(so.expire)
				late[ph] = append(late[ph], l)
				late["all"] = append(late["all"], l)
				// I3's bound: the reconcile interval plus 30 s for the round
				// itself on a loaded 2-core machine (stated, not a speed claim).
				if l > every.Milliseconds()+30000 {
					bad = append(bad, fmt.Sprintf("I3: order %s cancelled %d ms after its expiry", o.no, l))
				}
				if so.expire >= s.marks["broker_kill"] && so.expire < s.marks["broker_restart"] {
					brokerDownDue++
					if so.reason == string(cancel.ReasonTimeout) {
						brokerDownByMsg[cancelledBy[o.no]]++
					} else {
						brokerDownByRec++
					}
				}
			}
		}
	}
	// I2 and I8 from Redis: no lock left, every sale is a paid order's, every
	// counter equals the seats of the user's paid (and pending: none) orders.
	shows := map[string]bool{}
	for _, o := range orders {
		shows[o.show] = true
	}
	for show := range shows {
		st, err := seats.Show(ctx, show)
		require.NoError(t, err)
		for seat, ss := range st {
			so := inSQL[ss.OrderNo]
			switch {
			case ss.Status == cancel.SeatLocked:
				bad = append(bad, fmt.Sprintf("I2: seat %s/%s still locked by %s after the final round", show, seat, ss.OrderNo))
			case so == nil || so.status != 1:
				bad = append(bad, fmt.Sprintf("I2: seat %s/%s sold to %s, which is not paid", show, seat, ss.OrderNo))
			}
		}
	}
	for k := range users {
		n, err := seats.Held(ctx, k[0], k[1])
		require.NoError(t, err)
		switch {
		case n == heldWant[k]+lostSeats[k] && lostSeats[k] > 0:
			// The seats stay sold to an order whose payment SQL lost
			// (never freed: the sold pass reports them), so they count.
			bad = append(bad, fmt.Sprintf("I8: user %s in %s: counter %d, holds %d seats in paid orders and %d sold to %v, whose payment SQL lost", k[1], k[0], n, heldWant[k], lostSeats[k], lostSales[k]))
		case n != heldWant[k] || n < 0:
			bad = append(bad, fmt.Sprintf("I8: user %s in %s: counter %d, holds %d seats in paid orders", k[1], k[0], n, heldWant[k]))
		}
	}
	// I9: every discrepancy settled, its hook called.
	var unsettled int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM oe_payment_discrepancy WHERE settled_at_ms IS NULL").Scan(&unsettled))
	if unsettled > 0 {
		bad = append(bad, fmt.Sprintf("I9: %d discrepancies not settled", unsettled))
	}
	drows, err := db.QueryContext(ctx, "SELECT payment_id, order_no FROM oe_payment_discrepancy WHERE status <> 0") // 0: honoured by a late payment
	require.NoError(t, err)
	discrepancies, refundedTwice := 0, 0
	for drows.Next() {
		var p, no string
		require.NoError(t, drows.Scan(&p, &no))
		discrepancies++
		switch {
		case refunds[p] == 0:
			bad = append(bad, fmt.Sprintf("I9: discrepancy %s never reached the refund hook, not even in the final round; its order's events:\n%s", p, timeline(lines, no)))
		case refunds[p] > 1:
			refundedTwice++ // an instance killed between the hook and its settle: the provider's key dedupes
		}
	}
	_ = drows.Close()

	// The outcome ledgers (I14 payments, I15 seats, I17 limits), judged from
	// SQL, Redis and the refund hook's lines alone.
	var nos []string
	userList := map[string]bool{}
	answered := map[string]bool{}
	for _, o := range orders {
		nos = append(nos, o.no)
		userList[o.user] = true
		if o.paidWith != "" {
			answered[o.paidWith] = true
		}
	}
	outcome, err := e2e.ReadOutcome(ctx, db, s.pg, seats, slices.Sorted(mapsKeys(shows)), slices.Sorted(mapsKeys(userList)), nos)
	require.NoError(t, err)
	outcome.Refunds, outcome.Answered = map[string]int{}, answered
	for p, n := range refunds {
		outcome.Refunds[p] = min(n, 1) // a hook run again after a kill is one refund at the provider (keyed by id)
	}
	books := &e2e.Books{Limit: 6} // soakinstance -limit's default
	ledger := books.Observe(outcome, true)
	bad = append(bad, ledger...)
	t.Logf("FIGURE soak %s: outcome ledgers: %d orders, %d payments answered, %d refunded, %d violations", dialect, len(outcome.Orders), len(answered), len(outcome.Refunds), len(ledger))

	// Figures.
	t.Logf("FIGURE soak %s: %d orders generated: %d placed, %d refused, %d unknown (every instance tried failed; %d of them committed all the same); %d paid, %d cancelled (%v)",
		dialect, len(orders), placed, refused, unknown, unknownCommitted, paid, cancelled, byReason)
	t.Logf("FIGURE soak %s: hostile-but-legal: %v", dialect, s.hostile)
	insts := slices.Sorted(mapsKeys(perInst))
	var per []string
	for _, i := range insts {
		per = append(per, fmt.Sprintf("%s %d", i, perInst[i]))
	}
	t.Logf("FIGURE soak %s: messages handled per instance: %s; queue handovers between instances (rebalances seen) %d; redeliveries %d; torn event lines %d",
		dialect, strings.Join(per, ", "), handovers, redeliveries, torn)
	relAll, relLive := 0, 0
	for no, n := range released {
		relAll += n
		relLive += releasedLive[no]
	}
	t.Logf("FIGURE soak %s: seats released outside the lost window %d, of them naming the lock SQL keeps for the order (or no lock) %d", dialect, relAll, relLive)
	if relAll > 0 && relLive == 0 {
		bad = append(bad, "soak: no release named the lock SQL keeps for its order: the lock ids of the events and of SQL do not match")
	}
	noMsg := 0
	for no, so := range inSQL {
		if so.status == 2 && so.reason == string(cancel.ReasonReconcile) && handled[no] == 0 {
			noMsg++
		}
	}
	if s.marks["db_kill"] == 0 { // the default schedule's faults
		t.Logf("FIGURE soak %s: messages lost vs reconciler: %d sends failed, %d orders cancelled by the reconciler (%d of them never got a message at all); %d releases and %d sales failed, repaired %v; %d discrepancies, %d refunded twice (instance killed between hook and settle)",
			dialect, sendFailed, byReason[string(cancel.ReasonReconcile)], noMsg, relFailed, sellFailed, repaired, discrepancies, refundedTwice)
		t.Logf("FIGURE soak %s: broker-b down %.1f s (SIGKILL to a send succeeding again): %d orders due meanwhile: cancelled by their message from broker-a %d, from broker-b after its restart %d, by the reconciler %d; broker-b delivered %d stored messages in the 30 s after its restart, %d of them finding the order already decided",
			dialect, float64(s.marks["broker_restart"]-s.marks["broker_kill"])/1000, brokerDownDue, brokerDownByMsg["broker-a"], brokerDownByMsg["broker-b"], brokerDownByRec, brokerBAfter, brokerBAfterFinal)
		t.Logf("FIGURE soak %s: after broker-b's restart: %d queue handovers and %d duplicate deliveries (two instances consuming one queue), the last %.1f s after the restart",
			dialect, handoversAfterRestart, dupsAfterRestart, float64(max(lastDupAfterRestart-s.marks["broker_restart"], 0))/1000)
		t.Logf("FIGURE soak %s: Redis failover: replica cut %.1f s before the primary was killed, %d bytes of the primary's replication stream never reached it; seats released in that window (lost with the primary) %d; after the promotion the reconcilers repaired %v (restored: locks and sales put back from SQL; released: locks of decided orders), final round %+v",
			dialect, float64(s.marks["redis_kill"]-s.marks["redis_cut"])/1000, s.replLost, sumMap(releasedLost), repairedAfterPromotion, final)
	}
	if s.marks["db_kill"] != 0 {
		t.Logf("FIGURE soak %s: messages lost vs reconciler: %d sends failed, %d orders cancelled by the reconciler (%d of them never got a message at all); %d releases and %d sales failed; repaired by the reconcilers %v; final round %+v; %d discrepancies; diverged events (SQL back in time) %v",
			dialect, sendFailed, byReason[string(cancel.ReasonReconcile)], noMsg, relFailed, sellFailed, repaired, final, discrepancies, diverged)
	} else if len(diverged) > 0 {
		t.Logf("FIGURE soak %s: diverged events %v", dialect, diverged)
	}
	for _, ph := range []string{"steady", "instance SIGKILLed", "between faults", "broker-b down", "between faults ", "Redis failover", "database failover", "after", "all"} {
		xs := late[ph]
		slices.Sort(xs)
		if len(xs) == 0 {
			continue
		}
		t.Logf("FIGURE soak %s: lateness %-18s n=%4d p50 %5d ms  p99 %5d ms  max %5d ms", dialect, ph, len(xs), pct(xs, .5), pct(xs, .99), xs[len(xs)-1])
	}
	if badMsgs > 0 || missing > 0 {
		t.Logf("FIGURE soak %s: bad messages %d, messages for unknown orders %d", dialect, badMsgs, missing)
	}
	return bad
}

// checkHostile checks I7 for the bodies sendHostile sent: each was counted
// where it was stored (a bad message; the unknown order's as handled, missing)
// on its first delivery, not handed back for a retry, a later message of the
// same queue was handled (nothing blocked behind it), and the unknown order
// is not in SQL.
// timeline is every event line of order no, one per line, for a
// violation's message: what the instances did with it, in time order.
func timeline(lines []Line, no string) string {
	var b strings.Builder
	for _, l := range lines {
		if l.O == no {
			fmt.Fprintf(&b, "  %+v\n", l)
		}
	}
	return b.String()
}

func (s *soakRun) checkHostile(lines []Line, inSQL map[string]*sqlOrder, dialect string) []string {
	var bad, figures []string
	if len(s.bodies) == 0 {
		return []string{"I7: no hostile body was sent"}
	}
	byInstance := map[string]int{}
	for _, h := range s.bodies {
		if h.sendErr != nil {
			if h.what == "empty" { // the broker refuses an empty body itself
				msg := h.sendErr.Error()
				figures = append(figures, fmt.Sprintf("%s: refused at send (%s)", h.what, msg[:min(len(msg), 60)]))
				continue
			}
			bad = append(bad, fmt.Sprintf("I7: hostile body %q could not be sent: %v", h.what, h.sendErr))
			continue
		}
		var counted []string
		later := false
		for _, l := range lines {
			// A message handed back for a retry (an instance whose
			// database node was down) comes from the group's retry topic,
			// whose queue numbers and offsets are its own.
			if l.B != h.broker || l.Q != h.queue || strings.HasPrefix(l.Tp, "%RETRY%") {
				continue
			}
			if l.Off > h.offset && l.K == "handled" {
				later = true
			}
			if l.Off != h.offset || (l.K != "bad_message" && l.K != "handled") {
				continue
			}
			switch {
			case h.missing && (l.K != "handled" || l.Out != "missing"):
				bad = append(bad, fmt.Sprintf("I7: the message for unknown order %s was %s %s by %s", s.nosuch, l.K, l.Out, l.I))
			case !h.missing && l.K != "bad_message":
				bad = append(bad, fmt.Sprintf("I7: hostile body %q was %s (%s) by %s, not dropped as bad", h.what, l.K, l.Out, l.I))
			case l.RC > 0:
				bad = append(bad, fmt.Sprintf("I7: hostile body %q came back for a retry (%d) at %s", h.what, l.RC, l.I))
			}
			counted = append(counted, l.I)
			byInstance[l.I]++
		}
		if len(counted) == 0 {
			bad = append(bad, fmt.Sprintf("I7: hostile body %q (%s queue %d offset %d) was never counted by an instance", h.what, h.broker, h.queue, h.offset))
		}
		if !later {
			bad = append(bad, fmt.Sprintf("I7: no message after hostile body %q on %s queue %d was handled", h.what, h.broker, h.queue))
		}
		kind := "bad message"
		if h.missing {
			kind = "missing order"
		}
		figures = append(figures, fmt.Sprintf("%s: %s queue %d, counted as a %s by %v", h.what, h.broker, h.queue, kind, counted))
	}
	for _, in := range s.insts {
		if byInstance[in.ID] == 0 {
			bad = append(bad, fmt.Sprintf("I7: instance %s counted none of the hostile bodies (%v)", in.ID, byInstance))
		}
	}
	figures = append(figures, fmt.Sprintf("counted per instance %v", byInstance))
	if _, ok := inSQL[s.nosuch]; ok {
		bad = append(bad, fmt.Sprintf("I7: the message for unknown order %s created it", s.nosuch))
	}
	s.t.Logf("FIGURE soak %s: hostile bodies sent to the topic: %s", dialect, strings.Join(figures, "; "))
	return bad
}

func mapsKeys[M ~map[K]V, K comparable, V any](m M) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// replOffset is the server's master_repl_offset (a replica's: what it has of
// its primary's stream).
func replOffset(ctx context.Context, c *redis.Client) int64 {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
