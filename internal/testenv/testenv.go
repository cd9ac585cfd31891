// Package testenv is the test-only environment of orderexpiry: it hands each test a real,
// isolated MariaDB/MySQL database, PostgreSQL schema, Redis client or RocketMQ name server
// address, taken from the OE_* environment variables that services.sh prints.
//
// Only _test.go files import it; hosts must not import it.
//
// The project's test command starts the servers, exports the variables and sets
// OE_REQUIRE_SERVERS=1:
//
//	bash internal/testenv/test.sh
//
// Without it (a plain go test), a test whose server is not configured or does not answer is
// skipped; with OE_REQUIRE_SERVERS=1 or CI=true it fails instead.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
)

// Environment variables read by this package; `bash internal/testenv/services.sh env` prints them.
const (
	EnvMySQL    = "OE_MYSQL_DSN"        // go-sql-driver DSN naming any database, e.g. oe:oe@tcp(127.0.0.1:13306)/oe
	EnvPostgres = "OE_PG_DSN"           // pgx DSN (URL or key=value), e.g. postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable
	EnvRedis    = "OE_REDIS_ADDR"       // host:port
	EnvCluster  = "OE_REDIS_CLUSTER"    // host:port[,host:port...] of a Redis Cluster's nodes
	EnvRocketMQ = "OE_ROCKETMQ_NAMESRV" // host:port[;host:port...]
	EnvRequire  = "OE_REQUIRE_SERVERS"  // "1": missing servers fail tests instead of skipping them
)

// TestCommand is the project's test command: it starts the servers and sets the variables.
const TestCommand = "bash internal/testenv/test.sh"

const (
	pingTimeout       = 5 * time.Second
	cleanupTimeout    = 30 * time.Second
	cleanupLockWaitS  = 20 // seconds DROP DATABASE/SCHEMA may wait for locks at cleanup
	maxOpenConns      = 16
	connMaxIdleTime   = 30 * time.Second
	uniqueAlphabet    = "abcdefghijklmnopqrstuvwxyz0123456789"
	uniqueLen         = 10
	isolatedPrefix    = "oe_t_"
	isolatedRandBytes = 8
)

// Required reports whether missing servers must fail tests instead of skipping them: true when OE_REQUIRE_SERVERS=1 or CI=true.
func Required() bool {
	return os.Getenv(EnvRequire) == "1" || os.Getenv("CI") == "true"
}

// unavailable skips the test, or fails it when Required.
func unavailable(t testing.TB, server, envVar, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required (%s=1 or CI=true) but %s: set %s, or run the tests with: %s",
			server, EnvRequire, reason, envVar, TestCommand)
	}
	t.Skipf("skipping: %s not configured (set %s, or run %s): %s", server, envVar, TestCommand, reason)
}

// MySQL returns a *sql.DB (driver "mysql", go-sql-driver) connected to a FRESH, empty database created for this test (name oe_t_<random hex>), dropped in t.Cleanup. Reads OE_MYSQL_DSN (DSN naming any database; you rewrite DBName via mysql.ParseDSN/FormatDSN). Sets sensible pool limits.
//
// The DSN's other parameters (parseTime, loc, ...) are kept as given. The database uses
// utf8mb4. The pool allows 16 open connections.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	dsn := os.Getenv(EnvMySQL)
	if dsn == "" {
		unavailable(t, "MySQL/MariaDB", EnvMySQL, EnvMySQL+" is not set")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("testenv: %s is not a valid go-sql-driver DSN: %v", EnvMySQL, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = pingTimeout
	}

	adminCfg := cfg.Clone()
	adminCfg.DBName = ""
	admin, err := sql.Open("mysql", adminCfg.FormatDSN())
	if err != nil {
		t.Fatalf("testenv: open MySQL: %v", err)
	}
	admin.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		unavailable(t, "MySQL/MariaDB", EnvMySQL, fmt.Sprintf("%s does not answer: %v", cfg.Addr, err))
	}

	name := isolatedName()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
		_ = admin.Close()
		t.Fatalf("testenv: create MySQL database %s: %v", name, err)
	}

	testCfg := cfg.Clone()
	testCfg.DBName = name
	db, err := sql.Open("mysql", testCfg.FormatDSN())
	if err != nil {
		dropMySQL(t, admin, name)
		_ = admin.Close()
		t.Fatalf("testenv: open MySQL database %s: %v", name, err)
	}
	setPool(db)
	t.Cleanup(func() {
		_ = db.Close()
		dropMySQL(t, admin, name)
		_ = admin.Close()
	})
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("testenv: connect to MySQL database %s: %v", name, err)
	}
	return db
}

func dropMySQL(t testing.TB, admin *sql.DB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Errorf("testenv: drop MySQL database %s: %v", name, err)
		return
	}
	defer conn.Close()
	// A connection the test leaked inside a transaction would make DROP wait for its metadata
	// lock for a year (the default); fail after a bounded wait instead.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", cleanupLockWaitS)); err != nil {
		t.Errorf("testenv: drop MySQL database %s: %v", name, err)
		return
	}
	if _, err := conn.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		t.Errorf("testenv: drop MySQL database %s (is a connection or transaction still open?): %v", name, err)
	}
}

// Postgres: same with driver "pgx" (import _ "github.com/jackc/pgx/v5/stdlib"), a FRESH schema oe_t_<hex> created and dropped (CASCADE) at cleanup; the returned DB's connections use that schema via search_path in the DSN (so unqualified table names land there).
//
// The search_path holds only that schema (built-ins in pg_catalog stay visible), so nothing a
// test does can reach another test's tables by accident. The pool allows 16 open connections.
func Postgres(t testing.TB) *sql.DB {
	t.Helper()
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		unavailable(t, "PostgreSQL", EnvPostgres, EnvPostgres+" is not set")
	}
	pgCfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testenv: %s is not a valid pgx DSN: %v", EnvPostgres, err)
	}
	addr := net.JoinHostPort(pgCfg.Host, fmt.Sprint(pgCfg.Port))

	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("testenv: open PostgreSQL: %v", err)
	}
	admin.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		unavailable(t, "PostgreSQL", EnvPostgres, fmt.Sprintf("%s does not answer: %v", addr, err))
	}

	name := isolatedName()
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA "`+name+`"`); err != nil {
		_ = admin.Close()
		t.Fatalf("testenv: create PostgreSQL schema %s: %v", name, err)
	}

	testDSN, err := withSearchPath(dsn, name)
	if err != nil {
		dropPostgres(t, admin, name)
		_ = admin.Close()
		t.Fatalf("testenv: %s: %v", EnvPostgres, err)
	}
	db, err := sql.Open("pgx", testDSN)
	if err != nil {
		dropPostgres(t, admin, name)
		_ = admin.Close()
		t.Fatalf("testenv: open PostgreSQL schema %s: %v", name, err)
	}
	setPool(db)
	t.Cleanup(func() {
		_ = db.Close()
		dropPostgres(t, admin, name)
		_ = admin.Close()
	})
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("testenv: connect to PostgreSQL schema %s: %v", name, err)
	}
	return db
}

// withSearchPath returns dsn with the run-time parameter search_path set to schema, for both
// DSN forms pgx accepts (URL and key=value).
func withSearchPath(dsn, schema string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Key=value form: a later key overrides an earlier one.
	return strings.TrimSpace(dsn) + " search_path=" + schema, nil
}

func dropPostgres(t testing.TB, admin *sql.DB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Errorf("testenv: drop PostgreSQL schema %s: %v", name, err)
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET lock_timeout = '%ds'", cleanupLockWaitS)); err != nil {
		t.Errorf("testenv: drop PostgreSQL schema %s: %v", name, err)
		return
	}
	if _, err := conn.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
		t.Errorf("testenv: drop PostgreSQL schema %s (is a connection or transaction still open?): %v", name, err)
	}
}

// Redis returns a go-redis *redis.Client for OE_REDIS_ADDR, closed at cleanup (no FLUSH: tests use unique keys).
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(EnvRedis)
	if addr == "" {
		unavailable(t, "Redis", EnvRedis, EnvRedis+" is not set")
	}
	// A plain dial first: go-redis would retry (and log) a refused connection for seconds.
	conn, err := net.DialTimeout("tcp", addr, pingTimeout)
	if err != nil {
		unavailable(t, "Redis", EnvRedis, fmt.Sprintf("%s does not answer: %v", addr, err))
	}
	_ = conn.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: pingTimeout})
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		unavailable(t, "Redis", EnvRedis, fmt.Sprintf("%s does not answer: %v", addr, err))
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// RedisCluster returns a go-redis *redis.ClusterClient for the nodes in
// OE_REDIS_CLUSTER, closed at cleanup (no FLUSH: tests use unique keys). It
// skips (or fails, when Required) unless every listed node answers and the
// cluster reports itself ok.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for _, a := range strings.Split(os.Getenv(EnvCluster), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		unavailable(t, "Redis Cluster", EnvCluster, EnvCluster+" is not set")
	}
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, pingTimeout)
		if err != nil {
			unavailable(t, "Redis Cluster", EnvCluster, fmt.Sprintf("node %s does not answer: %v", addr, err))
		}
		_ = conn.Close()
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: pingTimeout})
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		_ = client.Close()
		unavailable(t, "Redis Cluster", EnvCluster, fmt.Sprintf("%v does not answer as a healthy cluster: %v %q", addrs, err, info))
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// RocketMQ returns the name server address from OE_ROCKETMQ_NAMESRV.
//
// The value is returned as given (one or more host:port separated by ';'); the test is skipped
// (or fails, when Required) unless every listed name server accepts a TCP connection.
func RocketMQ(t testing.TB) string {
	t.Helper()
	namesrv := os.Getenv(EnvRocketMQ)
	if strings.TrimSpace(namesrv) == "" {
		unavailable(t, "RocketMQ", EnvRocketMQ, EnvRocketMQ+" is not set")
	}
	for _, addr := range strings.Split(namesrv, ";") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		conn, err := net.DialTimeout("tcp", addr, pingTimeout)
		if err != nil {
			unavailable(t, "RocketMQ", EnvRocketMQ, fmt.Sprintf("name server %s does not answer: %v", addr, err))
		}
		_ = conn.Close()
	}
	return namesrv
}

// Unique returns a short random identifier ([a-z0-9], 10 chars) for test-scoped names.
func Unique() string {
	const n = len(uniqueAlphabet)
	const limit = 256 - 256%n // reject bytes >= limit so every character is equally likely
	out := make([]byte, 0, uniqueLen)
	buf := make([]byte, 2*uniqueLen)
	for len(out) < uniqueLen {
		_, _ = rand.Read(buf) // crypto/rand.Read never fails (it panics on a broken system)
		for _, b := range buf {
			if int(b) < limit && len(out) < uniqueLen {
				out = append(out, uniqueAlphabet[int(b)%n])
			}
		}
	}
	return string(out)
}

// isolatedName returns oe_t_ followed by 16 random hex digits.
func isolatedName() string {
	b := make([]byte, isolatedRandBytes)
	_, _ = rand.Read(b)
	return isolatedPrefix + hex.EncodeToString(b)
}

func setPool(db *sql.DB) {
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	db.SetConnMaxIdleTime(connMaxIdleTime)
}
