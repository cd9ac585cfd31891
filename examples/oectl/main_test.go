package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// world is a service's state on the test command's servers, as oectl
// finds it: an order due long ago whose message was lost, one still live,
// and one cancelled in SQL whose seats Redis still holds.
type world struct {
	flags []string // oectl's flags naming these servers
	store *sqlstore.Store
	seats *redisseat.Seats
	// coarse: deadlines are kept to the second, rounded up (a DATETIME
	// column), so an order placed an hour ahead may already be at its
	// maximum hold.
	coarse bool
}

// servers is how a world reaches its seat Redis: the client the service
// uses and oectl's flags for the same server (nil: the test command's
// single Redis).
type servers struct {
	rdb        redis.UniversalClient
	redisFlags []string
}

func newWorld(t *testing.T, db *sql.DB, d sqlstore.Dialect, dbFlag string) world {
	return newMappedWorld(t, db, d, dbFlag, false, servers{})
}

// seatflowMappingJSON is SeatFlow's own tables (order_info, order_seat) as
// an operator writes the service's mapping for oectl -mapping.
const seatflowMappingJSON = `{
  "Orders": {
    "Table": "order_info", "OrderNo": "order_no", "UserID": "user_id", "ShowID": "show_id", "Status": "status",
    "Statuses": {"Pending": 0, "Paid": [1], "Cancelled": [2]},
    "Deadline": {"Column": "expire_time", "Type": "datetime_utc"},
    "UpdatedAt": {"Column": "update_time", "Type": "datetime_utc"},
    "CancelReason": "cancel_reason", "PaymentID": "pay_no"
  },
  "Claims": {"Table": "order_seat", "ShowID": "show_id", "SeatID": "seat_id", "OrderNo": "order_no"}
}`

// seatflowDDL creates SeatFlow's tables in d.
func seatflowDDL(d sqlstore.Dialect) []string {
	pk, dt := "id BIGSERIAL PRIMARY KEY", "TIMESTAMP"
	if d == sqlstore.MySQL {
		pk, dt = "id BIGINT AUTO_INCREMENT PRIMARY KEY", "DATETIME"
	}
	return []string{
		`CREATE TABLE order_info (` + pk + `, order_no VARCHAR(64) NOT NULL, user_id VARCHAR(64) NOT NULL,
			show_id VARCHAR(64) NOT NULL, status SMALLINT NOT NULL DEFAULT 0, expire_time ` + dt + ` NOT NULL,
			pay_no VARCHAR(64) NULL, cancel_reason VARCHAR(32) NULL, update_time ` + dt + ` NULL)`,
		"CREATE UNIQUE INDEX uk_order_no ON order_info (order_no)",
		"CREATE INDEX idx_status_expire ON order_info (status, expire_time, order_no)",
		"CREATE TABLE order_seat (show_id VARCHAR(64) NOT NULL, seat_id VARCHAR(64) NOT NULL, order_no VARCHAR(64) NOT NULL, PRIMARY KEY (show_id, seat_id))",
		"CREATE INDEX idx_seat_order ON order_seat (order_no)",
	}
}

// newMappedWorld is newWorld on the library's schema, or with mapped on
// SeatFlow's own tables through a mapping file, with its seats in the
// Redis srv names.
func newMappedWorld(t *testing.T, db *sql.DB, d sqlstore.Dialect, dbFlag string, mapped bool, srv servers) world {
	ctx := context.Background()
	flags := []string{dbFlag}
	var m sqlstore.Mapping
	if mapped {
		for _, q := range seatflowDDL(d) {
			_, err := db.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		file := filepath.Join(t.TempDir(), "mapping.json")
		require.NoError(t, os.WriteFile(file, []byte(seatflowMappingJSON), 0o600))
		var err error
		m, err = loadMapping(file)
		require.NoError(t, err)
		flags = append(flags, "-mapping", file)
	}
	store, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ns := "oectl" + testenv.Unique()
	if srv.rdb == nil {
		srv = servers{rdb: testenv.Redis(t), redisFlags: []string{"-redis", os.Getenv(testenv.EnvRedis)}}
	}
	root, err := redisseat.New(srv.rdb, ns)
	require.NoError(t, err)
	seats := root.Scoped(store.Scope())
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	place := func(no string, expireAt time.Time, seatIDs ...string) {
		p := cancel.Placement{OrderNo: no, UserID: "alice", ShowID: "s1", Seats: seatIDs, ExpireAt: expireAt}
		require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := store.Place(ctx, tx, p); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			return tx.Commit()
		}))
	}
	place("due-1", now.Add(-time.Hour), "A1", "A2")
	place("live-1", now.Add(time.Hour), "B1")
	place("gone-1", now.Add(time.Hour), "C1", "C2")
	// Cancelled in SQL only, as after a crash between the two boundaries,
	// a minute ago: past the reconciler's settle time.
	res, err := store.CancelPending(ctx, cancel.Request{OrderNo: "gone-1", Reason: cancel.ReasonUser})
	require.NoError(t, err)
	require.True(t, res.Changed)
	age := "UPDATE oe_order SET updated_at_ms = updated_at_ms - 60000 WHERE order_no = 'gone-1'"
	if mapped {
		age = "UPDATE order_info SET update_time = update_time - INTERVAL '60' SECOND WHERE order_no = 'gone-1'"
		if d == sqlstore.Postgres {
			age = "UPDATE order_info SET update_time = update_time - INTERVAL '60 seconds' WHERE order_no = 'gone-1'"
		}
	}
	_, err = db.ExecContext(ctx, age)
	require.NoError(t, err)
	flags = append(append(flags, srv.redisFlags...), "-namespace", ns)
	return world{flags: flags, store: store, seats: seats, coarse: mapped}
}

// oectl runs the command line and returns what it printed.
func (w world) oectl(t *testing.T, args ...string) (string, error) {
	var out, progress bytes.Buffer
	err := run(context.Background(), append(append([]string{}, w.flags...), args...), &out, &progress)
	t.Logf("$ oectl %s\n%s%s(err: %v)", strings.Join(args, " "), progress.String(), out.String(), err)
	return out.String(), err
}

// spaced matches a table row whatever the column padding.
func spaced(t *testing.T, out string, cells ...string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*` + strings.Join(quoteAll(cells), `\s+`) + `\s*$`)
	assert.Regexp(t, re, out)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

func runOperatorSession(t *testing.T, w world) {
	ctx := context.Background()

	out, err := w.oectl(t, "order", "live-1")
	require.NoError(t, err)
	spaced(t, out, "status", "pending")
	// A DATETIME deadline is rounded up to the second: 59m59.9s or 1h0m0.2s.
	assert.Regexp(t, `deadline\s+\S+ \S+ UTC\s+due in (59m|1h0m)`, out)
	assert.Regexp(t, `(?m)^\s+B1\s+locked\s+alice\s+\d{4}-`, out)
	assert.Contains(t, out, "user alice holds 5 seat(s) of show s1")
	assert.NotContains(t, out, "!")

	out, err = w.oectl(t, "order", "gone-1")
	require.NoError(t, err)
	spaced(t, out, "status", "cancelled")
	assert.Regexp(t, `(?m)^\s+C1\s+locked\s+alice`, out)
	assert.Contains(t, out, "! cancelled in SQL but seats still locked in Redis")

	out, err = w.oectl(t, "overdue")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^due-1\s+alice\s+s1\s+\S+ \S+ UTC\s+(59m|1h0m)`, out)
	assert.NotContains(t, out, "live-1")
	assert.Regexp(t, `^1 pending order\(s\) past their deadline, the oldest by (59m|1h0m)[0-9.]*s \(the database's clock\)`, out)

	out, err = w.oectl(t, "reconcile", "-dry-run")
	require.NoError(t, err)
	assert.Contains(t, out, "would do (dry run, nothing changed)")
	spaced(t, out, "expired orders cancelled", "1")
	spaced(t, out, "seats released", "2") // gone-1's two seats; due-1's are its cancel's
	o, err := w.store.Order(ctx, "due-1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status, "a dry run changes nothing")
	show, err := w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Len(t, show, 5, "a dry run releases nothing")

	out, err = w.oectl(t, "reconcile")
	require.NoError(t, err)
	assert.Contains(t, out, "rebuilt from SQL's claims", "a namespace never rebuilt counts as lost")
	spaced(t, out, "expired orders cancelled", "1")
	spaced(t, out, "seats released", "2")
	o, err = w.store.Order(ctx, "due-1")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusCancelled, o.Status)
	show, err = w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Len(t, show, 1, "only live-1's seat is left")

	out, err = w.oectl(t, "overdue")
	require.NoError(t, err)
	assert.Equal(t, "no pending order is past its deadline\n", out)
	out, err = w.oectl(t, "order", "gone-1")
	require.NoError(t, err)
	assert.Contains(t, out, "no seat locked or sold for this order")
	assert.NotContains(t, out, "!")

	_, err = w.oectl(t, "order", "nope")
	assert.ErrorContains(t, err, "order nope: not in SQL")

	// An operator grants live-1 two hours: the maximum hold (an hour from
	// placement, cancel.MaxHoldDefault) stops it there. Again (changes
	// nothing: "at least"), then expires it.
	out, err = w.oectl(t, "extend", "live-1", "2h")
	require.NoError(t, err)
	if w.coarse && strings.Contains(out, "not changed") {
		assert.Regexp(t, `order live-1: not changed, its deadline \S+ \S+ UTC is already later`, out, "the rounded-up deadline is past the maximum hold")
	} else {
		assert.Regexp(t, `order live-1: deadline moved from \S+ \S+ UTC to \S+ \S+ UTC \(due in (59m\S+|1h0m0s)\)`, out)
	}
	out, err = w.oectl(t, "extend", "live-1", "90m")
	require.NoError(t, err)
	assert.Contains(t, out, "not changed, its deadline")
	out, err = w.oectl(t, "extend", "due-1", "1h")
	require.NoError(t, err)
	assert.Contains(t, out, "order due-1: not changed, it is cancelled")
	out, err = w.oectl(t, "expire", "live-1")
	require.NoError(t, err)
	assert.Equal(t, "order live-1: cancelled now (reason expired); 1 of 1 seat(s) released in Redis\n", out)
	out, err = w.oectl(t, "expire", "live-1")
	require.NoError(t, err)
	assert.Equal(t, "order live-1: not changed, it is cancelled\n", out)
	show, err = w.seats.Show(ctx, "s1")
	require.NoError(t, err)
	assert.Empty(t, show)
}

func TestOperatorSessionMariaDB(t *testing.T) {
	db := testenv.MySQL(t)
	runOperatorSession(t, newWorld(t, db, sqlstore.MySQL, mariaDBFlag(t, db)))
}

func TestOperatorSessionPostgres(t *testing.T) {
	db := testenv.Postgres(t)
	runOperatorSession(t, newWorld(t, db, sqlstore.Postgres, postgresFlag(t, db)))
}

// mariaDBFlag is oectl's -mysql flag for the test's database db.
func mariaDBFlag(t *testing.T, db *sql.DB) string {
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	return "-mysql=" + cfg.FormatDSN()
}

// postgresFlag is oectl's -postgres flag for the test's schema of db.
func postgresFlag(t *testing.T, db *sql.DB) string {
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	u, err := url.Parse(os.Getenv(testenv.EnvPostgres))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return "-postgres=" + u.String()
}

// The same session on a service's own tables, through -mapping.
func TestOperatorSessionMappedMariaDB(t *testing.T) {
	db := testenv.MySQL(t)
	runOperatorSession(t, newMappedWorld(t, db, sqlstore.MySQL, mariaDBFlag(t, db), true, servers{}))
}

func TestOperatorSessionMappedPostgres(t *testing.T) {
	db := testenv.Postgres(t)
	runOperatorSession(t, newMappedWorld(t, db, sqlstore.Postgres, postgresFlag(t, db), true, servers{}))
}

// The seats in a Redis Cluster: -redis lists its nodes.
func TestOperatorSessionRedisCluster(t *testing.T) {
	db := testenv.MySQL(t)
	rdb := testenv.RedisCluster(t)
	srv := servers{rdb: rdb, redisFlags: []string{"-redis", os.Getenv(testenv.EnvCluster)}}
	runOperatorSession(t, newMappedWorld(t, db, sqlstore.MySQL, mariaDBFlag(t, db), true, srv))
}

// The seats on a master Sentinel monitors: -redis names the Sentinel,
// -redis-master the master. The test starts a Sentinel of its own,
// watching the test command's replicated pair.
func TestOperatorSessionRedisSentinel(t *testing.T) {
	primary := os.Getenv("OE_REDIS_PRIMARY")
	bin, err := exec.LookPath("redis-server")
	if primary == "" || err != nil {
		if testenv.Required() {
			t.Fatalf("a Sentinel needs redis-server and OE_REDIS_PRIMARY (%v)", err)
		}
		t.Skip("no redis-server or OE_REDIS_PRIMARY")
	}
	host, port, err := net.SplitHostPort(primary)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sentinel := l.Addr().String()
	require.NoError(t, l.Close())
	_, sport, err := net.SplitHostPort(sentinel)
	require.NoError(t, err)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte("port "+sport+"\nbind 127.0.0.1\ndir "+dir+
		"\nsentinel monitor oectl "+host+" "+port+" 1\nsentinel down-after-milliseconds oectl 60000\n"), 0o600))
	cmd := exec.Command(bin, conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the Sentinel this test started, by its own handle
		_ = cmd.Wait()
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	t.Cleanup(func() { _ = sc.Close() })
	require.Eventually(t, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), "oectl").Result()
		return err == nil && len(addr) == 2
	}, 10*time.Second, 50*time.Millisecond, "the Sentinel knows the master")
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	t.Cleanup(func() { _ = rdb.Close() })
	db := testenv.Postgres(t)
	srv := servers{rdb: rdb, redisFlags: []string{"-redis", sentinel, "-redis-master", "oectl"}}
	runOperatorSession(t, newMappedWorld(t, db, sqlstore.Postgres, postgresFlag(t, db), true, srv))
}

// A mapping file as an operator writes it: Go's field names, integers,
// durations and time type names, null for IS NULL in a Where and for
// HostWrites in a Fill; a misspelt field or a
// fraction is refused.
func TestMappingFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		f := filepath.Join(dir, testenv.Unique()+".json")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		return f
	}
	m, err := loadMapping(write(`{"Orders": {"Table": "oms_order", "OrderNo": "order_sn", "UserID": "member_id", "NumericUserID": true,
		"ShowID": "show_id", "Status": "status",
		"Statuses": {"Pending": 0, "Paid": [1, 2], "Cancelled": [4], "CancelledBy": {"timeout": 4}},
		"CreatedAt": {"Column": "create_time", "Type": "datetime_utc"},
		"WindowFrom": {"Table": "oms_order_setting", "Column": "normal_order_overtime", "Unit": "1m", "Where": [{"Column": "id", "Value": 1}]},
		"Where": [{"Column": "delete_status", "Value": 0}, {"Column": "deleted_at", "Value": null}],
		"Fill": [{"Column": "receiver_name", "Value": ""}, {"Column": "total", "Value": 0}, {"Column": "testmode", "Value": false}, {"Column": "note", "Value": null}]}}`))
	require.NoError(t, err)
	assert.Equal(t, sqlstore.Mapping{Orders: sqlstore.Orders{
		Table: "oms_order", OrderNo: "order_sn", UserID: "member_id", NumericUserID: true, ShowID: "show_id", Status: "status",
		Statuses:   sqlstore.Statuses{Pending: int64(0), Paid: []any{int64(1), int64(2)}, Cancelled: []any{int64(4)}, CancelledBy: map[cancel.Reason]any{cancel.ReasonTimeout: int64(4)}},
		CreatedAt:  sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC},
		WindowFrom: &sqlstore.WindowSetting{Table: "oms_order_setting", Column: "normal_order_overtime", Unit: time.Minute, Where: []sqlstore.Condition{{Column: "id", Value: int64(1)}}},
		Where:      []sqlstore.Condition{{Column: "delete_status", Value: int64(0)}, {Column: "deleted_at", Value: sqlstore.IsNull}},
		Fill: []sqlstore.Condition{{Column: "receiver_name", Value: ""}, {Column: "total", Value: int64(0)}, {Column: "testmode", Value: false},
			{Column: "note", Value: sqlstore.HostWrites}},
	}}, m)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "m.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	s, err := sqlstore.New(db, sqlstore.SQLite, m)
	require.NoError(t, err, "New accepts what the file says")
	require.NoError(t, s.Close())
	_, err = loadMapping(write(`{"Orders": {"Tabel": "x"}}`))
	assert.ErrorContains(t, err, `unknown field "Tabel"`)
	_, err = loadMapping(write(`{"Orders": {"Statuses": {"Pending": 0.5}}}`))
	assert.ErrorContains(t, err, "value 0.5: not an integer")
	_, err = loadMapping(write(`{"Orders": {"Window": "soon"}}`))
	assert.ErrorContains(t, err, "Window")
}

func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"order"}, "order takes one order number"},
		{[]string{"overdue", "-n", "0"}, "N at least 1"},
		{[]string{"reconcile", "now"}, "reconcile [-dry-run]"},
		{[]string{"extend", "A1"}, "an order number and a duration"},
		{[]string{"extend", "A1", "-5m"}, "not a positive duration"},
		{[]string{"expire"}, "one order number"},
		{[]string{"overdue"}, "exactly one of -mysql, -postgres, -sqlite"},
		{[]string{"-mysql", "x", "-sqlite", "y", "overdue"}, "exactly one of"},
		{[]string{"-bogus"}, "flag provided but not defined"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, &out, &out)
		assert.ErrorIs(t, err, errUsage, "%q", tc.args)
		assert.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
	var out bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, &out, &out), flag.ErrHelp)
	assert.Contains(t, out.String(), "reconcile [-dry-run]")
}
