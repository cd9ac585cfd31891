package patroni_test

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
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// The variables `bash internal/testenv/services.sh env` prints for the cluster.
const (
	EnvDSN  = "OE_PATRONI_DSN"  // multi-host pgx DSN, target_session_attrs=read-write
	EnvREST = "OE_PATRONI_REST" // the nodes' REST API addresses, comma-separated, node order
	EnvSH   = "OE_PATRONI_SH"   // patroni.sh, to read pids and restart a node
)

// env is the cluster as the environment describes it.
type env struct {
	dsn  string
	rest []string
	sh   string
}

// clusterEnv returns the cluster's settings, or skips (fails, when servers
// are required) unless they are set and the cluster is healthy: one leader,
// two replicas.
func clusterEnv(t *testing.T) env {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if testenv.Required() {
			t.Fatalf("the Patroni cluster is required (OE_REQUIRE_SERVERS=1 or CI=true) but %s: run the tests with %s", msg, testenv.TestCommand)
		}
		t.Skipf("skipping: the Patroni cluster is not configured (set %s, or run %s): %s", EnvDSN, testenv.TestCommand, msg)
	}
	e := env{dsn: os.Getenv(EnvDSN), sh: os.Getenv(EnvSH)}
	for _, r := range strings.Split(os.Getenv(EnvREST), ",") {
		if r = strings.TrimSpace(r); r != "" {
			e.rest = append(e.rest, r)
		}
	}
	switch {
	case strings.TrimSpace(e.dsn) == "":
		unavailable("%s is not set", EnvDSN)
	case len(e.rest) != 3:
		unavailable("%s lists %d nodes, the tests need 3", EnvREST, len(e.rest))
	case e.sh == "":
		unavailable("%s is not set", EnvSH)
	}
	// A node a test killed is brought back by its cleanup; wait for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := e.members()
		if err == nil && healthy(m) {
			return e
		}
		if time.Now().After(deadline) {
			unavailable("the cluster is not one leader and two replicas: %+v, %v", m, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// member is one entry of Patroni's GET /cluster.
type member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"`
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// members reads GET /cluster from the first node that answers.
func (e env) members() ([]member, error) {
	var errs []error
	for _, r := range e.rest {
		resp, err := httpClient.Get("http://" + r + "/cluster")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var c struct {
			Members []member `json:"members"`
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

func healthy(ms []member) bool {
	leaders, replicas := 0, 0
	for _, m := range ms {
		switch {
		case m.Role == "leader" && m.State == "running":
			leaders++
		case (m.Role == "replica" || m.Role == "sync_standby") && (m.State == "running" || m.State == "streaming"):
			replicas++
		}
	}
	return leaders == 1 && replicas == 2
}

// leader returns the leader's node number (1-3), 0 when none leads.
func (e env) leader() int {
	for i, r := range e.rest {
		resp, err := httpClient.Get("http://" + r + "/primary")
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

// setSync switches Patroni's synchronous_mode (PATCH /config through the
// leader) and waits until the cluster shows it: a sync_standby when on, none
// when off.
func (e env) setSync(t *testing.T, on bool) {
	t.Helper()
	l := e.leader()
	require.NotZero(t, l, "no leader")
	body, _ := json.Marshal(map[string]any{"synchronous_mode": on})
	req, err := http.NewRequest(http.MethodPatch, "http://"+e.rest[l-1]+"/config", bytes.NewReader(body))
	require.NoError(t, err)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "PATCH /config")
	deadline := time.Now().Add(20 * time.Second)
	for {
		ms, err := e.members()
		if err == nil && healthy(ms) {
			sync := 0
			for _, m := range ms {
				if m.Role == "sync_standby" {
					sync++
				}
			}
			if (sync == 1) == on {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "synchronous_mode %v not in effect after 20s: %+v %v", on, ms, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// startNode runs patroni.sh start-node n (the node rejoins as a replica).
func (e env) startNode(n int) ([]byte, error) {
	return exec.Command("bash", e.sh, "start-node", fmt.Sprint(n)).CombinedOutput()
}

// schemaDSN returns dsn with a search_path of schema only (pgx sends
// unknown URL parameters as run-time parameters).
func schemaDSN(t *testing.T, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// database creates a fresh schema on the cluster (dropped at cleanup) and
// returns n pools on it, one per simulated instance, each reaching the
// primary through the multi-host DSN.
func (e env) database(t *testing.T, n int) []*sql.DB {
	t.Helper()
	schema := "oe_t_" + testenv.Unique()
	admin, err := sql.Open("pgx", e.dsn)
	require.NoError(t, err)
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	_, err = admin.ExecContext(ctx, "CREATE SCHEMA "+schema)
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
	var dbs []*sql.DB
	for i := 0; i < n; i++ {
		db, err := sql.Open("pgx", schemaDSN(t, e.dsn, schema))
		require.NoError(t, err)
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
		t.Cleanup(func() { _ = db.Close() })
		dbs = append(dbs, db)
	}
	return dbs
}

// worlds wires the library once per pool, same show (so the same Redis
// namespace, shared as between real instances).
func worlds(t *testing.T, dbs []*sql.DB, show string) []*e2e.World {
	t.Helper()
	rdb := testenv.Redis(t)
	var ws []*e2e.World
	for _, db := range dbs {
		ws = append(ws, e2e.NewWorld(t, db, sqlstore.Postgres, rdb, show))
	}
	return ws
}

// reconciler is a reconciler over w with a short grace and settle, so a
// test's repairs happen within seconds; its events go to w's Ledger.
func reconciler(t *testing.T, w *e2e.World) *reconcile.Reconciler {
	t.Helper()
	r, err := reconcile.New(reconcile.Config{Orders: w.Store, Seats: w.Seats, Service: w.Service, Batch: 100,
		Grace: 2 * time.Second, Settle: 500 * time.Millisecond, Runtime: expiry.Runtime{Observer: w.Ledger}})
	require.NoError(t, err)
	return r
}

// settle runs reconcile rounds through w until nothing is left to do and
// returns what they did in total.
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

// judge reads the outcome through db and judges it with fresh Books
// (settled): I14, I15 and I17 from outcomes alone, and no order left
// pending (I3).
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
	o, err := e2e.ReadOutcome(ctx, db, true, ws[0].Seats, []string{ws[0].ShowID}, us, nos)
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

// classify names an error's class for the figures.
func classify(err error) string {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, expiry.ErrCommitUnknown):
		return "commit unknown"
	case errors.Is(err, cancel.ErrDiscrepancy):
		return "discrepancy"
	case errors.As(err, &pe):
		return "pg " + pe.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	s := err.Error()
	for _, c := range []string{"failed to connect", "connection refused", "conn closed", "bad connection",
		"unexpected EOF", "EOF", "broken pipe", "connection reset", "read-write"} {
		if strings.Contains(s, c) {
			return "connection"
		}
	}
	return "other: " + s
}
