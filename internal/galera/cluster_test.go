package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// EnvGalera lists one go-sql-driver DSN per node, comma-separated
// (`bash internal/testenv/services.sh env` prints it).
const EnvGalera = "OE_GALERA_DSNS"

// syncWait is the session setting the library needs on Galera: every read
// (SELECT, and the reads a transaction starts with) first waits until this
// node has applied everything the cluster committed before it. It is set per
// connection by go-sql-driver from the DSN's parameters.
var syncWait = map[string]string{"wsrep_sync_wait": "1"}

// nodeDSNs returns the cluster's DSNs, or skips (fails, when servers are
// required) unless there are three and each node answers, Synced in a
// cluster of 3.
func nodeDSNs(t *testing.T) []*mysql.Config {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if testenv.Required() {
			t.Fatalf("the Galera cluster is required (OE_REQUIRE_SERVERS=1 or CI=true) but %s: run the tests with %s", msg, testenv.TestCommand)
		}
		t.Skipf("skipping: the Galera cluster is not configured (set %s, or run %s): %s", EnvGalera, testenv.TestCommand, msg)
	}
	raw := os.Getenv(EnvGalera)
	if strings.TrimSpace(raw) == "" {
		unavailable("%s is not set", EnvGalera)
	}
	var cfgs []*mysql.Config
	for _, d := range strings.Split(raw, ",") {
		cfg, err := mysql.ParseDSN(strings.TrimSpace(d))
		require.NoError(t, err, "%s: %q", EnvGalera, d)
		if cfg.Timeout == 0 {
			cfg.Timeout = 3 * time.Second
		}
		cfgs = append(cfgs, cfg)
	}
	if len(cfgs) != 3 {
		unavailable("%s lists %d nodes, the tests need 3", EnvGalera, len(cfgs))
	}
	for _, cfg := range cfgs {
		if size, state, err := wsrepState(cfg); err != nil || size != 3 || state != "Synced" {
			unavailable("node %s: cluster size %d, state %q, err %v", cfg.Addr, size, state, err)
		}
	}
	return cfgs
}

// wsrepState reads a node's cluster size and local state.
func wsrepState(cfg *mysql.Config) (int, string, error) {
	c := cfg.Clone()
	c.DBName = ""
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return 0, "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := map[string]string{}
	rows, err := db.QueryContext(ctx, "SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_local_state_comment')")
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return 0, "", err
		}
		st[k] = v
	}
	size, _ := strconv.Atoi(st["wsrep_cluster_size"])
	return size, st["wsrep_local_state_comment"], rows.Err()
}

// statusSum sums a numeric global status variable over the nodes that answer.
func statusSum(t *testing.T, cfgs []*mysql.Config, name string) int64 {
	t.Helper()
	var sum int64
	for _, cfg := range cfgs {
		c := cfg.Clone()
		c.DBName = ""
		db, err := sql.Open("mysql", c.FormatDSN())
		require.NoError(t, err)
		var k string
		var v int64
		err = db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v)
		_ = db.Close()
		if err == nil {
			sum += v
		}
	}
	return sum
}

// cluster creates a fresh database (dropped at cleanup) and returns one
// pool per node on it, each with the session variables params.
func cluster(t *testing.T, params map[string]string) (string, []*sql.DB) {
	t.Helper()
	cfgs := nodeDSNs(t)
	name := "oe_t_" + testenv.Unique()
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
	return name, pools(t, cfgs, name, params)
}

// pools opens one pool per node on database name.
func pools(t *testing.T, cfgs []*mysql.Config, name string, params map[string]string) []*sql.DB {
	t.Helper()
	var dbs []*sql.DB
	for _, cfg := range cfgs {
		c := cfg.Clone()
		c.DBName = name
		c.Params = map[string]string{}
		for k, v := range params {
			c.Params[k] = v
		}
		db, err := sql.Open("mysql", c.FormatDSN())
		require.NoError(t, err)
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		db.SetConnMaxIdleTime(30 * time.Second)
		t.Cleanup(func() { _ = db.Close() })
		// CREATE DATABASE is replicated in total order; another node may
		// apply it a moment later.
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := db.Ping()
			if err == nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "node %s: database %s: %v", cfg.Addr, name, err)
			time.Sleep(50 * time.Millisecond)
		}
		dbs = append(dbs, db)
	}
	return dbs
}

// worlds wires the library once per node: same show, so the same Redis
// namespace (the seat store is shared, as between real instances).
func worlds(t *testing.T, dbs []*sql.DB, show string) []*e2e.World {
	t.Helper()
	rdb := testenv.Redis(t)
	var ws []*e2e.World
	for _, db := range dbs { // one after the other: Migrate's DDL is replicated in total order
		ws = append(ws, e2e.NewWorld(t, db, sqlstore.MySQL, rdb, show))
	}
	return ws
}

// reconciler is a reconciler over w with a short grace and settle, so a
// test's repairs happen within seconds.
func reconciler(t *testing.T, w *e2e.World) *reconcile.Reconciler {
	t.Helper()
	r, err := reconcile.New(reconcile.Config{Orders: w.Store, Seats: w.Seats, Service: w.Service, Batch: 100,
		Grace: 2 * time.Second, Settle: 500 * time.Millisecond})
	require.NoError(t, err)
	return r
}

// judge reads the outcome through db and judges it with fresh Books
// (settled): I14, I15 and I17 from outcomes alone. It also checks I1's half
// that outcomes show: no order is still pending.
func judge(t *testing.T, ctx context.Context, db *sql.DB, ws []*e2e.World, placed []cancel.Placement, answered map[string]bool) []string {
	t.Helper()
	users := map[string]bool{}
	var nos, us []string
	for _, p := range placed {
		nos = append(nos, p.OrderNo)
		if !users[p.UserID] {
			users[p.UserID] = true
			us = append(us, p.UserID)
		}
	}
	o, err := e2e.ReadOutcome(ctx, db, false, ws[0].Seats, []string{ws[0].ShowID}, us, nos)
	require.NoError(t, err)
	o.Refunds = map[string]int{}
	for _, w := range ws {
		for id, n := range w.Ledger.Refunded {
			o.Refunds[id] += n
		}
	}
	o.Answered = answered
	var b e2e.Books
	bad := b.Observe(o, true)
	for _, no := range nos {
		if ord, ok := o.Orders[no]; ok && ord.Status == expiry.StatusPending {
			bad = append(bad, fmt.Sprintf("I3: %s still pending after settle", no))
		}
	}
	return bad
}

// settle runs reconcile rounds through w until nothing is left to do.
func settle(t *testing.T, ctx context.Context, w *e2e.World) reconcile.Report {
	t.Helper()
	r := reconciler(t, w)
	var total reconcile.Report
	time.Sleep(600 * time.Millisecond) // past Settle
	for i := 0; i < 10; i++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		total.Expired += rep.Expired
		total.Released += rep.Released
		total.Sold += rep.Sold
		total.Restored += rep.Restored
		total.Refunds += rep.Refunds
		if rep.Expired+rep.Released+rep.Sold+rep.Restored+rep.Refunds+rep.Settling == 0 && !rep.More && rep.Complete {
			break
		}
		time.Sleep(600 * time.Millisecond)
	}
	return total
}

// classify names an error's class for the figures.
func classify(err error) string {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, expiry.ErrCommitUnknown):
		return "commit unknown"
	case errors.Is(err, cancel.ErrDiscrepancy):
		return "discrepancy"
	case errors.As(err, &me):
		return fmt.Sprintf("mysql %d", me.Number)
	case errors.Is(err, mysql.ErrInvalidConn), strings.Contains(err.Error(), "bad connection"),
		strings.Contains(err.Error(), "connection refused"), strings.Contains(err.Error(), "broken pipe"),
		strings.Contains(err.Error(), "connection reset"), strings.Contains(err.Error(), "EOF"):
		return "connection"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other: " + err.Error()
}
