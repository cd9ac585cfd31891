package soak

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// The cluster soaks are the soak on the orders database replicated: each
// instance writing through another node of the MariaDB Galera Cluster
// (TestSoakGalera), or all of them reaching the Patroni primary through a
// multi-host DSN (TestSoakPatroni's sync and async), while a database node
// is SIGKILLed under the load. The test command runs them at CI size, the
// two clusters side by side after the other soaks (they share no server
// those kill); the figures in README.md are of the full size:
//
//	OE_SOAK_CLUSTERS=full go -C internal/soak test -race -count=1 -run 'TestSoakGalera|TestSoakPatroni' -v .
const envClusters = "OE_SOAK_CLUSTERS"

// clusterSize is a cluster soak's orders and seconds of load: 600 over 30 s
// with OE_SOAK_CLUSTERS=full, else the CI size, 240 over 12 s. The database
// node is killed at 30 % of the load, and Galera's started again at 50 %
// (it rejoins by IST).
func clusterSize() (orders, seconds int) {
	if os.Getenv(envClusters) == "full" {
		return 600, 30
	}
	return 240, 12
}

const (
	clusterKill   = 0.3
	galeraRestart = 0.5
)

// need returns the environment variable name, or skips (fails, when servers
// are required) without it.
func need(t *testing.T, name string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		if testenv.Required() {
			t.Fatalf("%s is required (OE_REQUIRE_SERVERS=1 or CI=true): run the tests with %s", name, testenv.TestCommand)
		}
		t.Skipf("skipping: %s is not set (run %s)", name, testenv.TestCommand)
	}
	return v
}

// galeraSynced reads a node's cluster size and local state.
func galeraSynced(cfg *mysql.Config) (int, string, error) {
	c := cfg.Clone()
	c.DBName, c.Params = "", nil
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return 0, "", err
	}
	defer db.Close()
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	var k, size, state string
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_cluster_size'").Scan(&k, &size); err != nil {
		return 0, "", err
	}
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_local_state_comment'").Scan(&k, &state); err != nil {
		return 0, "", err
	}
	n, _ := strconv.Atoi(size)
	return n, state, nil
}

// galeraWhole waits (up to timeout) until every node is Synced in a cluster
// of 3, and says how it is otherwise.
func galeraWhole(cfgs []*mysql.Config, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, cfg := range cfgs {
			if n, st, err := galeraSynced(cfg); err != nil || n != 3 || st != "Synced" {
				bad = append(bad, fmt.Sprintf("%s: size %d, %q, %v", cfg.Addr, n, st, err))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(strings.Join(bad, "; "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestSoakGalera is the soak with instance iN writing through Galera node N
// (wsrep_sync_wait=1 on every connection, as internal/galera/README.md says
// a host needs), node 3's mariadbd SIGKILLed at 30 % of the load and started
// again at 50 % (it rejoins by IST; the test waits until all three nodes are
// Synced in a cluster of 3). While node 3 is down, instance i3 answers 500
// and the load balancer tries the next instance; its messages are retried
// and the other instances' reconcilers take what is due. Violations must be
// 0; the cleanup starts node 3 again if the test stopped before.
func TestSoakGalera(t *testing.T) {
	t.Parallel() // beside TestSoakPatroni, after the other soaks
	orders, seconds := clusterSize()
	raw, sh := need(t, "OE_GALERA_DSNS"), need(t, "OE_GALERA_SH")
	var cfgs []*mysql.Config
	for _, d := range strings.Split(raw, ",") {
		cfg, err := mysql.ParseDSN(strings.TrimSpace(d))
		require.NoError(t, err)
		cfg.Timeout = 3 * time.Second
		cfgs = append(cfgs, cfg)
	}
	require.Len(t, cfgs, 3, "OE_GALERA_DSNS")
	require.NoError(t, galeraWhole(cfgs, 60*time.Second), "the Galera cluster before the soak")

	name := "oe_soak_" + testenv.Unique()
	admin := cfgs[0].Clone()
	admin.DBName = ""
	adb, err := sql.Open("mysql", admin.FormatDSN())
	require.NoError(t, err)
	_, err = adb.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := adb.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		_ = adb.Close()
	})
	var restarted atomic.Bool
	restarted.Store(true)
	t.Cleanup(func() { // runs before the drop: the cluster whole again, pass or fail
		if !restarted.Load() {
			if out, err := exec.Command("bash", sh, "start-node", "3").CombinedOutput(); err != nil {
				t.Errorf("start node 3 again: %v\n%s", err, out)
			}
		}
		if err := galeraWhole(cfgs, 120*time.Second); err != nil {
			t.Errorf("the Galera cluster after the soak: %v", err)
		}
	})

	var dsns [3]string
	for i, cfg := range cfgs {
		c := cfg.Clone()
		c.DBName = name
		c.Params = map[string]string{"wsrep_sync_wait": "1"}
		dsns[i] = c.FormatDSN()
	}
	db, err := sql.Open("mysql", dsns[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := db.Ping(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("database %s on node 1: %v", name, err)
		}
	}
	// The schema exists on every node before the instances start (DDL is
	// replicated in total order).
	store, err := sqlstore.New(db, sqlstore.MySQL)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	for i := 1; i < 3; i++ {
		n, err := sql.Open("mysql", dsns[i])
		require.NoError(t, err)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var c int
			if err := n.QueryRow("SELECT COUNT(*) FROM oe_order").Scan(&c); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("node %d has no oe_order: %v", i+1, err)
			}
		}
		_ = n.Close()
	}

	faults := func(ctx context.Context, s *soakRun, at func(float64)) {
		at(clusterKill)
		out, err := exec.Command("bash", sh, "pid", "3").Output()
		pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || perr != nil {
			t.Errorf("pid of Galera node 3: %v %v", err, perr)
			return
		}
		restarted.Store(false)
		s.dbDown.Store(true)
		s.mark("db_kill")
		tKill := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Errorf("SIGKILL node 3: %v", err)
		}
		at(galeraRestart)
		s.mark("db_restart")
		tStart := time.Now()
		out, err = exec.Command("bash", sh, "start-node", "3").CombinedOutput()
		startTook := time.Since(tStart)
		if err != nil {
			t.Errorf("start node 3 again: %v\n%s", err, out)
			return
		}
		restarted.Store(true)
		werr := galeraWhole(cfgs, 60*time.Second)
		s.mark("db_back")
		s.dbDown.Store(false)
		if werr != nil {
			t.Errorf("the cluster after node 3's restart: %v", werr)
		}
		s.figures = append(s.figures, fmt.Sprintf("Galera node 3 (instance i3's) SIGKILLed, down %.1f s, start-node took %.1f s (IST), every node Synced in a cluster of 3 again %.1f s after the kill",
			tStart.Sub(tKill).Seconds(), startTook.Seconds(), time.Since(tKill).Seconds()))
	}
	soak(t, soakConfig{label: "galera", dialect: sqlstore.MySQL, dialectName: "mysql", db: db, dsns: dsns, faults: faults,
		orders: orders, seconds: seconds})
}

// patroni is the Patroni cluster as the environment describes it.
type patroni struct {
	dsn  string
	rest []string
	sh   string
}

var restClient = &http.Client{Timeout: 2 * time.Second}

type patroniMember struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
}

func (p patroni) members() ([]patroniMember, error) {
	var errs []error
	for _, r := range p.rest {
		resp, err := restClient.Get("http://" + r + "/cluster")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var c struct {
			Members []patroniMember `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&c)
		_ = resp.Body.Close()
		if err == nil {
			return c.Members, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// whole waits until the cluster is one running leader and two replicas
// (with a sync_standby among them when sync), within timeout.
func (p patroni) whole(sync bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ms, err := p.members()
		leaders, replicas, standbys := 0, 0, 0
		for _, m := range ms {
			switch {
			case m.Role == "leader" && m.State == "running":
				leaders++
			case (m.Role == "replica" || m.Role == "sync_standby") && (m.State == "running" || m.State == "streaming"):
				replicas++
				if m.Role == "sync_standby" {
					standbys++
				}
			}
		}
		if err == nil && leaders == 1 && replicas == 2 && (standbys > 0) == sync {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not one leader and two replicas (synchronous %v): %+v %v", sync, ms, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// leader is the leader's node number (1-3), 0 when none leads.
func (p patroni) leader() int {
	for i, r := range p.rest {
		resp, err := restClient.Get("http://" + r + "/primary")
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return i + 1
		}
	}
	return 0
}

// syncMode reads synchronous_mode from the dynamic configuration.
func (p patroni) syncMode() (bool, error) {
	resp, err := restClient.Get("http://" + p.rest[max(p.leader(), 1)-1] + "/config")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var c struct {
		Sync bool `json:"synchronous_mode"`
	}
	return c.Sync, json.NewDecoder(resp.Body).Decode(&c)
}

// setSync switches synchronous_mode (PATCH /config) and waits until the
// cluster shows it.
func (p patroni) setSync(on bool) error {
	l := p.leader()
	if l == 0 {
		return errors.New("no leader")
	}
	body, _ := json.Marshal(map[string]any{"synchronous_mode": on})
	req, err := http.NewRequest(http.MethodPatch, "http://"+p.rest[l-1]+"/config", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := restClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PATCH /config: %s", resp.Status)
	}
	return p.whole(on, 30*time.Second)
}

// TestSoakPatroni is the soak with the instances on the Patroni cluster in
// synchronous mode: a multi-host DSN with target_session_attrs=read-write
// (internal/patroni/README.md), the primary's Patroni, postmaster and
// backends SIGKILLed at 30 % of the load, a replica promoted by Patroni, the
// instances following it (their pools' next connections land on the new
// primary), the old primary rejoining as a replica. A commit returns once
// the synchronous standby has it, and only that standby is promoted: no
// acknowledged commit may be lost, violations 0.
//
// Both modes run in TestSoakPatroni, one after the other (one cluster),
// beside TestSoakGalera.
func TestSoakPatroni(t *testing.T) {
	t.Parallel()
	t.Run("sync", func(t *testing.T) { patroniSoak(t, true) })
	t.Run("async", func(t *testing.T) { patroniSoak(t, false) })
}

// patroniSoak is TestSoakPatroni in one mode. Asynchronous (async,
// Patroni's default): the promoted replica may lack the primary's last
// commits. On loopback the replicas keep up within milliseconds, so the
// primary's WAL senders are stopped (SIGSTOP) for the last second before
// the kill: the promoted replica lacks that second of commits, as over a
// lagging network. What SQL lost is counted (acknowledged placements, payments, cancels missing),
// the back-in-time handling's reports are counted (the reconcilers' sold
// pass and Pay's cancel.Diverged* events, by reason), and the violations
// that concern an order SQL lost are reported, not failed, except the rules
// that hold whatever SQL lost: a sold seat is never freed, a payment never
// both honoured and refunded.
func patroniSoak(t *testing.T, sync bool) {
	orders, seconds := clusterSize()
	p := patroni{dsn: need(t, "OE_PATRONI_DSN"), sh: need(t, "OE_PATRONI_SH")}
	for _, r := range strings.Split(need(t, "OE_PATRONI_REST"), ",") {
		p.rest = append(p.rest, strings.TrimSpace(r))
	}
	require.Len(t, p.rest, 3, "OE_PATRONI_REST")
	was, err := p.syncMode()
	require.NoError(t, err)
	require.NoError(t, p.whole(was, 60*time.Second), "the Patroni cluster before the soak")
	var victim atomic.Int32 // a node killed and not started again yet
	t.Cleanup(func() {      // the cluster whole again, in the mode it had, pass or fail
		if n := victim.Load(); n != 0 {
			if out, err := exec.Command("bash", p.sh, "start-node", fmt.Sprint(n)).CombinedOutput(); err != nil {
				t.Errorf("start node %d again: %v\n%s", n, err, out)
			}
		}
		if err := p.whole(sync, 60*time.Second); err != nil {
			t.Errorf("the Patroni cluster after the soak: %v", err)
		}
		if err := p.setSync(was); err != nil {
			t.Errorf("synchronous_mode back to %v: %v", was, err)
		}
	})
	require.NoError(t, p.setSync(sync))

	schema := "oe_soak_" + testenv.Unique()
	admin, err := sql.Open("pgx", p.dsn)
	require.NoError(t, err)
	_, err = admin.Exec("CREATE SCHEMA " + schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		for { // the first statements after a failover may meet a dead connection
			_, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			if err == nil || ctx.Err() != nil {
				if err != nil {
					t.Errorf("drop schema %s: %v", schema, err)
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		_ = admin.Close()
	})
	u, err := url.Parse(p.dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { _ = db.Close() })

	mode := map[bool]string{true: "synchronous", false: "asynchronous"}[sync]
	faults := func(ctx context.Context, s *soakRun, at func(float64)) {
		at(clusterKill)
		v := p.leader()
		out, err := exec.Command("bash", p.sh, "pids", fmt.Sprint(v)).Output()
		f := strings.Fields(string(out))
		if v == 0 || err != nil || len(f) != 2 {
			t.Errorf("the leader (%d) and its pids: %q %v", v, out, err)
			return
		}
		pp, _ := strconv.Atoi(f[0])
		pm, _ := strconv.Atoi(f[1])
		var frozen []int
		if !sync {
			// On loopback the replicas keep up within milliseconds, so a
			// failover loses nothing; a real network's lag is made here:
			// the primary's WAL senders are stopped for a second before
			// the kill (a stopped receiver would not do: the kernel
			// buffers what is sent to it), so the promoted replica lacks
			// the primary's last second of commits.
			frozen = walSenders(pm)
			for _, w := range frozen {
				_ = syscall.Kill(w, syscall.SIGSTOP)
			}
			s.mark("senders_frozen")
			time.Sleep(time.Second)
		}
		victim.Store(int32(v))
		s.dbDown.Store(true)
		s.mark("db_kill")
		tKill := time.Now()
		s.killAt.Store(tKill.UnixMilli())
		killPostgres(pp, pm) // the stopped WAL senders with it
		var promoted time.Duration
		for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if l := p.leader(); l != 0 && l != v {
				promoted = time.Since(tKill)
				s.mark("db_promoted")
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("no replica promoted 40 s after the primary was killed")
				return
			}
		}
		newLeader := p.leader()
		tStart := time.Now()
		out, err = exec.Command("bash", p.sh, "start-node", fmt.Sprint(v)).CombinedOutput()
		if err != nil {
			t.Errorf("start node %d again: %v\n%s", v, err, out)
			return
		}
		victim.Store(0)
		werr := p.whole(sync, 60*time.Second)
		s.mark("db_back")
		s.dbDown.Store(false)
		if werr != nil {
			t.Errorf("the cluster after node %d's restart: %v", v, werr)
		}
		first := "none"
		if ms := s.firstOK.Load(); ms != 0 {
			first = fmt.Sprintf("%.1f s", float64(ms-tKill.UnixMilli())/1000)
		}
		if len(frozen) > 0 {
			s.figures = append(s.figures, fmt.Sprintf("Patroni %s: the primary's WAL senders (%d) stopped 1 s before the kill", mode, len(frozen)))
		}
		s.figures = append(s.figures, fmt.Sprintf("Patroni %s: the leader (node %d) SIGKILLed, node %d promoted %.1f s after, the first placement started after the kill answered 200 %s after it; node %d rejoined as a replica %.1f s after its start-node, the cluster whole again %.1f s after the kill",
			mode, v, newLeader, promoted.Seconds(), first, v, time.Since(tStart).Seconds(), time.Since(tKill).Seconds()))
	}
	soak(t, soakConfig{label: "patroni-" + mode, dialect: sqlstore.Postgres, dialectName: "postgres", db: db,
		dsns: [3]string{dsn, dsn, dsn}, faults: faults, backInTime: !sync, orders: orders, seconds: seconds})
}

// walSenders lists the postmaster's WAL sender processes.
func walSenders(postmaster int) []int {
	var out []int
	for _, c := range childrenOf(postmaster) {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); strings.Contains(string(cmd), "walsender") {
			out = append(out, c)
		}
	}
	return out
}

// childrenOf lists pid's children (/proc/PID/task/*/children).
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// killPostgres SIGKILLs a node's Patroni, then its postmaster and every
// child of it (the backends would otherwise serve their open connections a
// while); stopped first, the postmaster forks no backend between the
// listing of its children and the kill.
func killPostgres(patroniPid, postmasterPid int) {
	_ = syscall.Kill(patroniPid, syscall.SIGKILL)
	_ = syscall.Kill(postmasterPid, syscall.SIGSTOP)
	children := childrenOf(postmasterPid)
	_ = syscall.Kill(postmasterPid, syscall.SIGKILL)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
}
