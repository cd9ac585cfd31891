package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" database/sql driver
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// common holds the flags every part shares.
type common struct {
	mysqlDSN, pgDSN string
	redisAddr       string
	redisDB         int
	namesrv, broker string
	seed            int64
	cpuprofile      string
	verbose, keep   bool
	log             *slog.Logger
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.mysqlDSN, "mysql", envOr("OE_MYSQL_DSN", "oe:oe@tcp(127.0.0.1:13306)/oe"), "MariaDB/MySQL DSN (go-sql-driver); the bench creates and drops databases oe_bench_*")
	fs.StringVar(&c.pgDSN, "pg", envOr("OE_PG_DSN", "postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable"), "PostgreSQL URL (pgx); the bench creates and drops schemas oe_bench_*")
	fs.StringVar(&c.redisAddr, "redis", envOr("OE_REDIS_ADDR", "127.0.0.1:16379"), "Redis address")
	fs.IntVar(&c.redisDB, "redis-db", 10, "first of the Redis logical databases the bench uses (it uses this one and the next 3; each must be empty or the bench's own)")
	fs.StringVar(&c.namesrv, "namesrv", envOr("OE_ROCKETMQ_NAMESRV", "127.0.0.1:19876"), "RocketMQ name server")
	fs.StringVar(&c.broker, "broker", envOr("OE_ROCKETMQ_BROKER", "127.0.0.1:20911"), "RocketMQ broker address (to create topics)")
	fs.Int64Var(&c.seed, "seed", 1, "random seed (simulation and workloads)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of this process to `file`")
	fs.BoolVar(&c.verbose, "v", false, "debug logs on stderr")
	fs.BoolVar(&c.keep, "keep", false, "keep the databases, schemas and Redis keys afterwards")
	fs.StringVar(&loadMode, "load", "fast", "bulk load with `fast` (LOAD DATA LOCAL INFILE / COPY) or insert (multi-row INSERTs)")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// engines
const (
	engMySQL = "mysql"
	engPG    = "postgres"
)

func parseEngines(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		switch e = strings.TrimSpace(e); e {
		case "mariadb", "mysql":
			out = append(out, engMySQL)
		case "pg", "postgres", "postgresql":
			out = append(out, engPG)
		case "":
		default:
			return nil, fmt.Errorf("unknown database %q (mysql or postgres)", e)
		}
	}
	return out, nil
}

func engineName(e string) string {
	if e == engMySQL {
		return "MariaDB"
	}
	return "PostgreSQL"
}

// benchDB is a database (MariaDB) or schema (PostgreSQL) of the bench's own.
type benchDB struct {
	*sql.DB
	engine  string
	dialect sqlstore.Dialect
	name    string
	dsn     string // the DSN that reaches it (for extra pools)
	drop    func()
}

// openDB creates (after dropping a leftover) database or schema oe_bench_<name>
// and returns a pool of maxConns connections on it.
func (c *common) openDB(ctx context.Context, engine, name string, maxConns int) (*benchDB, error) {
	full := "oe_bench_" + name
	switch engine {
	case engMySQL:
		cfg, err := mysql.ParseDSN(c.mysqlDSN)
		if err != nil {
			return nil, err
		}
		cfg.Timeout = 5 * time.Second
		admin := cfg.Clone()
		admin.DBName = ""
		adb, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			return nil, err
		}
		adb.SetMaxOpenConns(1)
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := adb.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+full+"`"); err != nil {
				c.log.Warn("drop database", "name", full, "err", err)
			}
		}
		drop()
		if _, err := adb.ExecContext(ctx, "CREATE DATABASE `"+full+"` CHARACTER SET utf8mb4"); err != nil {
			adb.Close()
			return nil, fmt.Errorf("create database %s: %w", full, err)
		}
		cfg.DBName = full
		dsn := cfg.FormatDSN()
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, err
		}
		pool(db, maxConns)
		return &benchDB{DB: db, engine: engine, dialect: sqlstore.MySQL, name: full, dsn: dsn, drop: func() {
			db.Close()
			if !c.keep {
				drop()
			}
			adb.Close()
		}}, db.PingContext(ctx)
	case engPG:
		adb, err := sql.Open("pgx", c.pgDSN)
		if err != nil {
			return nil, err
		}
		adb.SetMaxOpenConns(1)
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := adb.ExecContext(ctx, `DROP SCHEMA IF EXISTS "`+full+`" CASCADE`); err != nil {
				c.log.Warn("drop schema", "name", full, "err", err)
			}
		}
		drop()
		if _, err := adb.ExecContext(ctx, `CREATE SCHEMA "`+full+`"`); err != nil {
			adb.Close()
			return nil, fmt.Errorf("create schema %s: %w", full, err)
		}
		u, err := url.Parse(c.pgDSN)
		if err != nil {
			return nil, err
		}
		q := u.Query()
		q.Set("search_path", full)
		u.RawQuery = q.Encode()
		dsn := u.String()
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, err
		}
		pool(db, maxConns)
		return &benchDB{DB: db, engine: engine, dialect: sqlstore.Postgres, name: full, dsn: dsn, drop: func() {
			db.Close()
			if !c.keep {
				drop()
			}
			adb.Close()
		}}, db.PingContext(ctx)
	}
	return nil, fmt.Errorf("unknown engine %q", engine)
}

func pool(db *sql.DB, n int) {
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(time.Minute)
}

const redisMarker = "oebench:owner"

// redisClient returns a client on logical database redisDB+idx, which must be
// empty or carry the bench's marker (a leftover of an earlier run, flushed).
// cleanup flushes it (it is the bench's own) unless -keep.
func (c *common) redisClient(ctx context.Context, idx, poolSize int) (*redis.Client, func(), error) {
	db := c.redisDB + idx
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, DB: db, PoolSize: poolSize, DialTimeout: 5 * time.Second})
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("redis %s db %d: %w", c.redisAddr, db, err)
	}
	if n > 0 {
		if rdb.Exists(ctx, redisMarker).Val() == 0 {
			rdb.Close()
			return nil, nil, fmt.Errorf("redis db %d holds %d keys that are not the bench's; choose another -redis-db", db, n)
		}
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			return nil, nil, err
		}
	}
	if err := rdb.Set(ctx, redisMarker, "internal/bench", 0).Err(); err != nil {
		return nil, nil, err
	}
	return rdb, func() {
		if !c.keep {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rdb.Exists(ctx, redisMarker).Val() == 1 {
				_ = rdb.FlushDB(ctx).Err()
			}
		}
		rdb.Close()
	}, nil
}

// ---- machine and CPU accounting ----

func (c *common) printMachine(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Fprintf(w, "# orderexpiry bench, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	t := newTable("machine", "value")
	t.add("cores (nproc)", runtime.NumCPU())
	t.add("memory", memTotal())
	t.add("Go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	t.add("MariaDB", c.serverVersion(ctx, engMySQL))
	t.add("PostgreSQL", c.serverVersion(ctx, engPG))
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, DialTimeout: 2 * time.Second})
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		t.add("Redis", infoField(info, "redis_version"))
	} else {
		t.add("Redis", "unreachable: "+err.Error())
	}
	rdb.Close()
	if brokerUp(c.namesrv, c.broker) {
		t.add("RocketMQ", "name server "+c.namesrv+", broker "+c.broker+" answer")
	} else {
		t.add("RocketMQ", "name server "+c.namesrv+" / broker "+c.broker+": not reachable")
	}
	t.add("load average at start", loadAvg())
	t.print(w)
}

func (c *common) serverVersion(ctx context.Context, engine string) string {
	var db *sql.DB
	var err error
	var q string
	switch engine {
	case engMySQL:
		db, err = sql.Open("mysql", c.mysqlDSN)
		q = "SELECT CONCAT(VERSION(), ', innodb_flush_log_at_trx_commit=', @@innodb_flush_log_at_trx_commit)"
	default:
		db, err = sql.Open("pgx", c.pgDSN)
		q = "SELECT split_part(version(), ' on ', 1) || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit')"
	}
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return "unreachable: " + err.Error()
	}
	return v
}

func infoField(info, key string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+":"); ok {
			return v
		}
	}
	return "?"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func brokerUp(namesrv, broker string) bool {
	for _, a := range []string{namesrv, broker} {
		conn, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			return false
		}
		conn.Close()
	}
	return true
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var clkTck = 100.0 // USER_HZ on Linux

// procCPU is the user+system CPU time of process pid (all its threads) and
// of its children: those still running, and those it has waited for
// (cutime, cstime). PostgreSQL serves each connection from a child process
// of the postmaster, so the postmaster alone shows almost nothing.
func procCPU(pid int) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	total := statTicks(f, 11, 12, 13, 14)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		child, err := strconv.Atoi(strings.Split(path, "/")[2])
		if err != nil || child == pid {
			continue
		}
		cf, err := procStat(child)
		if err != nil || cf[1] != strconv.Itoa(pid) {
			continue
		}
		total += statTicks(cf, 11, 12, 13, 14)
	}
	return time.Duration(total / clkTck * float64(time.Second)), nil
}

// procStat is the fields of /proc/<pid>/stat after the command name (the
// state first, then the parent's pid, ...).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return nil, errors.New("bad stat")
	}
	return f, nil
}

// statTicks sums the clock-tick fields at the given indexes of procStat.
func statTicks(f []string, idx ...int) float64 {
	sum := 0.0
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum
}

// pidByPort finds the process listening on TCP port (loopback or any), by
// matching the socket inode of /proc/net/tcp{,6} against /proc/*/fd.
func pidByPort(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // LISTEN
				continue
			}
			_, p, ok := strings.Cut(fs[1], ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(p, 16, 32)
			if err == nil && int(n) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		l, err := os.Readlink(fd)
		if err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process found for port %d", port)
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// cpuMeter samples the CPU time of this process and of named server processes.
type cpuMeter struct {
	names []string
	pids  []int
}

func (c *common) newCPUMeter(servers map[string]string) *cpuMeter {
	m := &cpuMeter{names: []string{"bench process"}, pids: []int{0}}
	for _, name := range []string{"Redis", "MariaDB", "PostgreSQL", "RocketMQ broker", "RocketMQ name server"} {
		addr, ok := servers[name]
		if !ok {
			continue
		}
		pid, err := pidByPort(portOf(addr))
		if err != nil {
			c.log.Warn("cpu meter: cannot find server process", "server", name, "err", err)
			continue
		}
		m.names = append(m.names, name)
		m.pids = append(m.pids, pid)
	}
	return m
}

func (m *cpuMeter) sample() []time.Duration {
	out := make([]time.Duration, len(m.pids))
	for i, pid := range m.pids {
		if pid == 0 {
			out[i] = selfCPU()
			continue
		}
		out[i], _ = procCPU(pid)
	}
	return out
}

func sub(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}
