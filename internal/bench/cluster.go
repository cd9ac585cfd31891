package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Part 7: several instances as OS processes (internal/soak's cmd/soakinstance):
// a 100k backlog drained by the reconcilers of three instances at once beside
// the raw cancel path run by three processes over an equal backlog, and the
// message path's rate with one, two and three instances, with each process's
// CPU.

type proc struct {
	name   string
	cmd    *exec.Cmd
	events string
	cpu    time.Duration // user+system, from the exited process's rusage
}

func buildInstance(dir string) (string, error) {
	bin := filepath.Join(dir, "soakinstance")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/soakinstance")
	cmd.Dir = "../soak"
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build ../soak/cmd/soakinstance (run the bench from internal/bench): %w: %s", err, out)
	}
	return bin, nil
}

func startProc(bin, dir, name string, args ...string) (*proc, error) {
	p := &proc{name: name, events: filepath.Join(dir, name+".events")}
	p.cmd = exec.Command(bin, append([]string{"-id", name, "-events", p.events}, args...)...)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = logf
	return p, p.cmd.Start()
}

// stop sends SIGTERM (unless the process has exited by itself) and records its CPU.
func (p *proc) stop(signal bool) error {
	if signal {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	err := p.cmd.Wait()
	if st := p.cmd.ProcessState; st != nil {
		p.cpu = st.UserTime() + st.SystemTime()
	}
	return err
}

type evLine struct {
	T int64  `json:"t"`
	I string `json:"i"`
	K string `json:"k"`
	O string `json:"o"`
	N int    `json:"n"`
	B string `json:"b"`
	Q int    `json:"q"`
	X int64  `json:"off"`
	M int64  `json:"ms"`
}

func readLines(procs []*proc) ([]evLine, error) {
	var out []evLine
	for _, p := range procs {
		f, err := os.Open(p.events)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l evLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				out = append(out, l)
			}
		}
		_ = f.Close()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out, nil
}

func runCluster(c *common, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	dbs := fs.String("db", "mysql,postgres", "databases")
	n := fs.Int("n", 100_000, "backlog: pending orders past expire_at in each of the two copies")
	tpN := fs.Int("tp-n", 20_000, "throughput: expired orders whose messages the instances consume, per run")
	counts := fs.String("instances", "1,2,3", "throughput: instance counts")
	brokerB := fs.String("broker-b", envOr("OE_ROCKETMQ_BROKER_B", "127.0.0.1:20921"), "second broker (the topic gets queues on both)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	engines, err := parseEngines(*dbs)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "oe-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := buildInstance(dir)
	if err != nil {
		return err
	}
	var ks []int
	for _, s := range strings.Split(*counts, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			return fmt.Errorf("-instances %q", *counts)
		}
		ks = append(ks, k)
	}
	fmt.Printf("Instances are OS processes of `internal/soak/cmd/soakinstance` (the library wired as a host wires it), each with its own pools (32 SQL connections, 64 Redis), sharing the databases, Redis and the brokers; CPU per process from its rusage at exit, the servers' from /proc.\n\n")
	backlog := newTable("database", "backlog", "3 instances' reconcilers: drain time", "**orders/s**", "raw cancel path, 3 processes: time", "**orders/s**", "**reconcilers / raw**",
		"CPU per instance (reconciler)", "cancelled once / twice+ / never", "orders whose seats two instances freed", "orders with a seat freed twice", "seats freed")
	tp := newTable("database", "instances", "orders", "first→last cancel", "**expired orders/s**", "duplicate deliveries", "CPU per instance", "instance CPU per order", "MariaDB/PostgreSQL CPU", "Redis CPU", "brokers CPU", "busiest process")
	var failed []string
	for _, e := range engines {
		if err := c.clusterBacklog(e, bin, dir, *n, backlog, &failed); err != nil {
			return fmt.Errorf("%s backlog: %w", engineName(e), err)
		}
		for _, k := range ks {
			if err := c.clusterThroughput(e, bin, dir, k, *tpN, *brokerB, tp); err != nil {
				return fmt.Errorf("%s throughput with %d: %w", engineName(e), k, err)
			}
		}
	}
	fmt.Printf("\n### Backlog drained by three instances\n\n")
	backlog.print(os.Stdout)
	fmt.Printf("\n### Message path with 1, 2, 3 instances\n\n")
	tp.print(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("checks failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

func (c *common) instanceArgs(bd *benchDB, redisIdx int) []string {
	d := "mysql"
	if bd.engine == engPG {
		d = "postgres"
	}
	return []string{"-dialect", d, "-dsn", bd.dsn, "-redis", c.redisAddr, "-redis-db", strconv.Itoa(c.redisDB + redisIdx), "-ns", benchNS}
}

// loadCopy loads n expired pending orders (2 seats each, locked in Redis) into a fresh database.
func (c *common) loadCopy(ctx context.Context, engine, name string, redisIdx, n int) (*benchDB, func(), error) {
	bd, err := c.openDB(ctx, engine, name, 8)
	if err != nil {
		return nil, nil, err
	}
	rdb, rclose, err := c.redisClient(ctx, redisIdx, 16)
	if err != nil {
		bd.drop()
		return nil, nil, err
	}
	cleanup := func() { rclose(); bd.drop() }
	store, err := sqlstore.New(bd.DB, bd.dialect)
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		err = bulkLoad(ctx, bd, n, backlogRows(n, 30*time.Minute, time.Now()))
	}
	if err == nil {
		_, err = restoreClaims(ctx, store, newSeats(rdb))
	}
	if err == nil {
		err = analyze(ctx, bd)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return bd, func() { _ = rdb.FlushDB(context.Background()).Err(); cleanup() }, nil
}

func (c *common) clusterBacklog(engine, bin, dir string, n int, t *table, failed *[]string) error {
	ctx := context.Background()
	rec, recClose, err := c.loadCopy(ctx, engine, "cluster_rec", 0, n)
	if err != nil {
		return err
	}
	defer recClose()
	raw, rawClose, err := c.loadCopy(ctx, engine, "cluster_raw", 1, n)
	if err != nil {
		return err
	}
	defer rawClose()
	store, err := sqlstore.New(rec.DB, rec.dialect)
	if err != nil {
		return err
	}
	// Raw: three processes, each cancelling a third through Service.Cancel.
	t0 := time.Now()
	var raws []*proc
	for k := range 3 {
		p, err := startProc(bin, dir, fmt.Sprintf("%s-raw%d", engine, k), append(c.instanceArgs(raw, 1), "-raw-n", strconv.Itoa(n), "-raw-part", strconv.Itoa(k),
			"-raw-parts", "3", "-workers", strconv.Itoa(reconcile.WorkersDefault), "-consumer=false")...)
		if err != nil {
			return err
		}
		raws = append(raws, p)
	}
	for _, p := range raws {
		if err := p.stop(false); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	rawTime := time.Since(t0)
	// Reconcilers: three instances, no broker, reconcile.Run with the default Config.
	t1 := time.Now()
	var insts []*proc
	for k := range 3 {
		p, err := startProc(bin, dir, fmt.Sprintf("%s-rec%d", engine, k), append(c.instanceArgs(rec, 0), "-consumer=false", "-reconcile", "5m")...)
		if err != nil {
			return err
		}
		insts = append(insts, p)
	}
	for {
		nos, _, err := store.Expired(ctx, "", 1)
		if err != nil {
			return err
		}
		if len(nos) == 0 {
			break
		}
		if time.Since(t1) > 10*time.Minute {
			return errors.New("backlog not drained after 10 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	var cpus []string
	for _, p := range insts {
		_ = p.stop(true)
		cpus = append(cpus, fmt.Sprintf("%.1fs", p.cpu.Seconds()))
	}
	lines, err := readLines(insts)
	if err != nil {
		return err
	}
	cancelled := map[string]int{}
	releasers := map[string]map[string]bool{}
	freedPer := map[string]int{}
	freed := 0
	var first, last int64
	for _, l := range lines {
		switch l.K {
		case "start":
			if first == 0 {
				first = l.T
			}
		case "cancelled":
			cancelled[l.O]++
			last = l.T
		case "release":
			if releasers[l.O] == nil {
				releasers[l.O] = map[string]bool{}
			}
			releasers[l.O][l.I] = true
			freed += l.N
			freedPer[l.O] += l.N
		}
	}
	once, twice, never, two, over := 0, 0, 0, 0, 0
	gen := backlogRows(n, 30*time.Minute, time.Now())
	for i := range n {
		switch cancelled[gen(i).no] {
		case 0:
			never++
		case 1:
			once++
		default:
			twice++
		}
		if len(releasers[gen(i).no]) > 1 {
			two++ // one instance's cancel and another's lock pass each freed some of its seats (reconcile.Config.Settle prevents it)
		}
		if freedPer[gen(i).no] > 2 {
			over++ // a seat freed twice
		}
	}
	var rows int
	if err := rec.QueryRowContext(ctx, placeholders(rec, "SELECT COUNT(*) FROM oe_order WHERE status = ? AND cancel_reason = ?"),
		int(expiry.StatusCancelled), string(cancel.ReasonReconcile)).Scan(&rows); err != nil {
		return err
	}
	drain := time.Duration(last-first) * time.Millisecond
	if once != n || twice != 0 || two != 0 || over != 0 || freed != 2*n || rows != n {
		*failed = append(*failed, fmt.Sprintf("%s: once %d/%d, twice %d, orders whose seats two instances freed %d, orders with a seat freed twice %d, seats freed %d/%d, rows %d",
			engineName(engine), once, n, twice, two, over, freed, 2*n, rows))
	}
	dr, rr := float64(n)/drain.Seconds(), float64(n)/rawTime.Seconds()
	t.add(engineName(engine), n, drain.Round(100*time.Millisecond), fmt.Sprintf("%.0f", dr), rawTime.Round(100*time.Millisecond), fmt.Sprintf("%.0f", rr),
		fmt.Sprintf("%.0f %%", 100*dr/rr), strings.Join(cpus, ", "), fmt.Sprintf("%d / %d / %d", once, twice, never), two, over, fmt.Sprintf("%d / %d", freed, 2*n))
	return nil
}

// placeholders rewrites ? into $n for PostgreSQL.
func placeholders(bd *benchDB, q string) string {
	if bd.engine != engPG {
		return q
	}
	var b strings.Builder
	k := 0
	for _, r := range q {
		if r == '?' {
			k++
			fmt.Fprintf(&b, "$%d", k)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (c *common) clusterThroughput(engine, bin, dir string, k, n int, brokerB string, t *table) error {
	ctx := context.Background()
	bd, done, err := c.loadCopy(ctx, engine, fmt.Sprintf("cluster_tp%d", k), 2, n)
	if err != nil {
		return err
	}
	defer done()
	topic := fmt.Sprintf("oe_bench_cl_%d_%d", k, time.Now().UnixNano()%1e9)
	for _, b := range []string{c.broker, brokerB} {
		if err := rocketmq.EnsureTopic(ctx, []string{c.namesrv}, b, topic); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // the route reaches the name server
	sender, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{c.namesrv}, Topic: topic, Group: topic + "_p", Mode: rocketmq.ModeTimer, Runtime: expiry.Runtime{Logger: c.log}})
	if err != nil {
		return err
	}
	gen := backlogRows(n, 30*time.Minute, time.Now())
	if _, fails, err := runWorkers(32, n, func(i int) error {
		return sender.Send(ctx, expiry.Message{OrderNo: gen(i).no, Hop: 1}, 0)
	}); err != nil {
		_ = sender.Close()
		return fmt.Errorf("send: %d failed: %w", fails, err)
	}
	_ = sender.Close()
	servers := map[string]string{"Redis": c.redisAddr, "RocketMQ broker": c.broker}
	if engine == engPG {
		servers["PostgreSQL"] = hostPort(c.pgDSN)
	} else {
		servers["MariaDB"] = hostPort(c.mysqlDSN)
	}
	meter := c.newCPUMeter(servers)
	bPid, _ := pidByPort(portOf(brokerB))
	b0, _ := procCPU(bPid)
	s0 := meter.sample()
	store, err := sqlstore.New(bd.DB, bd.dialect)
	if err != nil {
		return err
	}
	var insts []*proc
	for i := range k {
		p, err := startProc(bin, dir, fmt.Sprintf("%s-tp%d-%d", engine, k, i), append(c.instanceArgs(bd, 2), "-namesrv", c.namesrv, "-topic", topic,
			"-group", topic+"_c", "-reconcile", "0")...)
		if err != nil {
			return err
		}
		insts = append(insts, p)
	}
	t0 := time.Now()
	for {
		nos, _, err := store.Expired(ctx, "", 1)
		if err != nil {
			return err
		}
		if len(nos) == 0 {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			return errors.New("messages not consumed after 10 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	s1 := meter.sample()
	b1, _ := procCPU(bPid)
	var cpus []string
	var instCPU time.Duration
	busiest, busiestCPU := "", time.Duration(0)
	for _, p := range insts {
		_ = p.stop(true)
		cpus = append(cpus, fmt.Sprintf("%.1fs", p.cpu.Seconds()))
		instCPU += p.cpu
		if p.cpu > busiestCPU {
			busiest, busiestCPU = "instance "+p.name, p.cpu
		}
	}
	lines, err := readLines(insts)
	if err != nil {
		return err
	}
	var first, last int64
	seen := map[string]int{}
	dups := 0
	for _, l := range lines {
		switch l.K {
		case "cancelled":
			if first == 0 {
				first = l.T
			}
			last = l.T
		case "handled":
			key := fmt.Sprintf("%s/%d/%d", l.B, l.Q, l.X)
			seen[key]++
			if seen[key] > 1 {
				dups++
			}
		}
	}
	d := sub(s1, s0)
	cpuOf := func(name string) time.Duration {
		for i, nm := range meter.names {
			if nm == name {
				return d[i]
			}
		}
		return 0
	}
	dbName := "MariaDB"
	if engine == engPG {
		dbName = "PostgreSQL"
	}
	for _, nm := range []string{dbName, "Redis", "RocketMQ broker"} {
		if v := cpuOf(nm); v > busiestCPU {
			busiest, busiestCPU = nm, v
		}
	}
	span := time.Duration(last-first) * time.Millisecond
	t.add(engineName(engine), k, n, span.Round(100*time.Millisecond), fmt.Sprintf("%.0f", float64(n)/span.Seconds()), dups, strings.Join(cpus, ", "),
		fmt.Sprintf("%.0f µs", float64(instCPU.Microseconds())/float64(n)), fmt.Sprintf("%.1fs", cpuOf(dbName).Seconds()), fmt.Sprintf("%.1fs", cpuOf("Redis").Seconds()),
		fmt.Sprintf("%.1fs", (cpuOf("RocketMQ broker")+b1-b0).Seconds()), fmt.Sprintf("%s (%.1fs of %.1fs wall)", busiest, busiestCPU.Seconds(), span.Seconds()))
	return nil
}

// hostPort is the host:port of a DSN (go-sql-driver's tcp(...) or a URL).
func hostPort(dsn string) string {
	if i := strings.Index(dsn, "tcp("); i >= 0 {
		rest := dsn[i+4:]
		if j := strings.IndexByte(rest, ')'); j >= 0 {
			return rest[:j]
		}
	}
	if i := strings.Index(dsn, "@"); i >= 0 {
		rest := dsn[i+1:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			return rest[:j]
		}
		return rest
	}
	return ""
}
