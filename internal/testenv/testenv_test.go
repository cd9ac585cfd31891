package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func queryString(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRowContext(ctxT(t), query, args...).Scan(&s), query)
	return s
}

func queryInt(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(ctxT(t), query, args...).Scan(&n), query)
	return n
}

func TestMySQLGivesFreshIsolatedDatabases(t *testing.T) {
	a := MySQL(t)
	b := MySQL(t)
	ctx := ctxT(t)

	nameA := queryString(t, a, "SELECT DATABASE()")
	nameB := queryString(t, b, "SELECT DATABASE()")
	assert.True(t, strings.HasPrefix(nameA, "oe_t_"), nameA)
	assert.True(t, strings.HasPrefix(nameB, "oe_t_"), nameB)
	assert.NotEqual(t, nameA, nameB)
	assert.Equal(t, "utf8mb4", queryString(t, a, "SELECT @@character_set_database"))
	assert.Zero(t, queryInt(t, a, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"),
		"a fresh database has no tables")

	_, err := a.ExecContext(ctx, "CREATE TABLE items (id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL)")
	require.NoError(t, err)
	_, err = a.ExecContext(ctx, "INSERT INTO items (id, v) VALUES (?, ?)", 1, "one")
	require.NoError(t, err)
	assert.Equal(t, "one", queryString(t, a, "SELECT v FROM items WHERE id = ?", 1))

	assert.Zero(t, queryInt(t, b, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'items'"))
	_, err = b.ExecContext(ctx, "SELECT v FROM items")
	var myErr *mysql.MySQLError
	require.ErrorAs(t, err, &myErr, "the other database must not see the table")
	assert.Equal(t, uint16(1146), myErr.Number, "ER_NO_SUCH_TABLE: %v", err)

	// Pool limits are set.
	assert.Equal(t, maxOpenConns, a.Stats().MaxOpenConnections)
}

func TestMySQLDropsDatabaseAtCleanup(t *testing.T) {
	other := MySQL(t) // without a server: skips here, not inside "inner"
	var name string
	t.Run("inner", func(t *testing.T) {
		db := MySQL(t)
		name = queryString(t, db, "SELECT DATABASE()")
		_, err := db.ExecContext(ctxT(t), "CREATE TABLE leftover (id INT PRIMARY KEY)")
		require.NoError(t, err)
	})
	require.NotEmpty(t, name)
	assert.Zero(t, queryInt(t, other, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name),
		"database %s must be dropped when its test ends", name)
}

func TestPostgresGivesFreshIsolatedSchemas(t *testing.T) {
	a := Postgres(t)
	b := Postgres(t)
	ctx := ctxT(t)

	schemaA := queryString(t, a, "SELECT current_schema()")
	schemaB := queryString(t, b, "SELECT current_schema()")
	assert.True(t, strings.HasPrefix(schemaA, "oe_t_"), schemaA)
	assert.True(t, strings.HasPrefix(schemaB, "oe_t_"), schemaB)
	assert.NotEqual(t, schemaA, schemaB)
	assert.Zero(t, queryInt(t, a, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"),
		"a fresh schema has no tables")

	// Unqualified names land in the test's schema.
	_, err := a.ExecContext(ctx, "CREATE TABLE items (id BIGINT PRIMARY KEY, v TEXT NOT NULL)")
	require.NoError(t, err)
	_, err = a.ExecContext(ctx, "INSERT INTO items (id, v) VALUES ($1, $2)", 1, "one")
	require.NoError(t, err)
	assert.Equal(t, "one", queryString(t, a, "SELECT v FROM items WHERE id = $1", 1))
	assert.Equal(t, 1, queryInt(t, a, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'items'", schemaA))
	assert.Zero(t, queryInt(t, a, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'items'"))

	// Every pooled connection uses the schema, not just the first one.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		conns[i], err = a.Conn(ctx)
		require.NoError(t, err)
	}
	for _, c := range conns {
		var s string
		require.NoError(t, c.QueryRowContext(ctx, "SELECT current_schema()").Scan(&s))
		assert.Equal(t, schemaA, s)
		require.NoError(t, c.Close())
	}

	_, err = b.ExecContext(ctx, "SELECT v FROM items")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the other schema must not see the table")
	assert.Equal(t, "42P01", pgErr.Code, "undefined_table: %v", err)
}

func TestPostgresDropsSchemaAtCleanup(t *testing.T) {
	other := Postgres(t) // without a server: skips here, not inside "inner"
	var name string
	t.Run("inner", func(t *testing.T) {
		db := Postgres(t)
		name = queryString(t, db, "SELECT current_schema()")
		_, err := db.ExecContext(ctxT(t), "CREATE TABLE leftover (id INT PRIMARY KEY)")
		require.NoError(t, err)
	})
	require.NotEmpty(t, name)
	assert.Zero(t, queryInt(t, other, "SELECT COUNT(*) FROM pg_namespace WHERE nspname = $1", name),
		"schema %s must be dropped when its test ends", name)
}

// TestRedisClusterSpreadsKeys: the cluster the test command starts has more
// than one master, and keys of different hash tags land on different ones,
// so a test that passes on it has really crossed nodes.
func TestRedisClusterSpreadsKeys(t *testing.T) {
	client := RedisCluster(t)
	ctx := ctxT(t)
	var mu sync.Mutex // ForEachMaster calls back concurrently
	masters := map[string]bool{}
	require.NoError(t, client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		masters[m.Options().Addr] = true
		mu.Unlock()
		return nil
	}))
	require.GreaterOrEqual(t, len(masters), 2, "a cluster of one master proves nothing")
	nodes := map[string]bool{}
	for i := 0; i < 32; i++ {
		key := fmt.Sprintf("oe:testenv:{t%d}:%s", i, Unique())
		require.NoError(t, client.Set(ctx, key, "v", time.Minute).Err())
		master, err := client.MasterForKey(ctx, key)
		require.NoError(t, err)
		nodes[master.Options().Addr] = true
		require.NoError(t, client.Del(ctx, key).Err())
	}
	assert.GreaterOrEqual(t, len(nodes), 2, "32 hash tags all on one node")
}

func TestRedisRoundTrip(t *testing.T) {
	client := Redis(t)
	ctx := ctxT(t)
	key := "oe:testenv:" + Unique()

	require.NoError(t, client.Set(ctx, key, "v1", time.Minute).Err())
	got, err := client.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v1", got)
	ttl, err := client.TTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))

	require.NoError(t, client.Del(ctx, key).Err())
	_, err = client.Get(ctx, key).Result()
	assert.ErrorIs(t, err, redis.Nil)
}

func TestRocketMQNameServerAnswers(t *testing.T) {
	namesrv := RocketMQ(t)
	require.NotEmpty(t, namesrv)
	for _, addr := range strings.Split(namesrv, ";") {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, conn.Close())
	}
}

func TestUnique(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		u := Unique()
		require.Len(t, u, 10)
		for _, r := range u {
			require.True(t, (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'), "unexpected %q in %q", r, u)
		}
		require.False(t, seen[u], "duplicate %q", u)
		seen[u] = true
	}
}

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		require, ci string
		want        bool
	}{
		{"", "", false},
		{"0", "false", false},
		{"1", "", true},
		{"", "true", true},
		{"1", "true", true},
	} {
		t.Setenv(EnvRequire, tc.require)
		t.Setenv("CI", tc.ci)
		assert.Equal(t, tc.want, Required(), "OE_REQUIRE_SERVERS=%q CI=%q", tc.require, tc.ci)
	}
}

func TestWithSearchPath(t *testing.T) {
	for _, dsn := range []string{
		"postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable",
		"postgresql://oe:oe@127.0.0.1:15432/oe",
		"host=127.0.0.1 port=15432 user=oe password=oe dbname=oe sslmode=disable",
	} {
		got, err := withSearchPath(dsn, "oe_t_0123456789abcdef")
		require.NoError(t, err, dsn)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err, got)
		assert.Equal(t, "oe_t_0123456789abcdef", cfg.RuntimeParams["search_path"], got)
		assert.Equal(t, "oe", cfg.User, got)
		assert.Equal(t, "oe", cfg.Database, got)
		assert.Equal(t, uint16(15432), cfg.Port, got)
	}
}

// fakeTB records how a helper gave up; Skipf and Fatalf end the goroutine like the real ones.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

func runFake(t *testing.T, helper func(testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(f)
	}()
	<-done
	return f
}

func TestMissingServerSkipsOrFails(t *testing.T) {
	helpers := []struct {
		env, unreachable string
		call             func(testing.TB)
	}{
		{EnvMySQL, "oe:oe@tcp(127.0.0.1:1)/oe", func(tb testing.TB) { MySQL(tb) }},
		{EnvPostgres, "postgres://oe:oe@127.0.0.1:1/oe?sslmode=disable", func(tb testing.TB) { Postgres(tb) }},
		{EnvRedis, "127.0.0.1:1", func(tb testing.TB) { Redis(tb) }},
		{EnvCluster, "127.0.0.1:1,127.0.0.1:2", func(tb testing.TB) { RedisCluster(tb) }},
		{EnvRocketMQ, "127.0.0.1:1", func(tb testing.TB) { RocketMQ(tb) }},
	}
	for _, h := range helpers {
		t.Run(h.env, func(t *testing.T) {
			for _, value := range []string{"", h.unreachable} {
				t.Setenv(h.env, value)

				t.Setenv(EnvRequire, "")
				t.Setenv("CI", "")
				f := runFake(t, h.call)
				assert.True(t, f.skipped, "%s=%q without OE_REQUIRE_SERVERS must skip: %s", h.env, value, f.msg)
				assert.False(t, f.failed, f.msg)
				assert.Contains(t, f.msg, h.env)
				assert.Contains(t, f.msg, "bash internal/testenv/test.sh")
				if value == "" {
					assert.Contains(t, f.msg, "not configured")
				} else {
					assert.Contains(t, f.msg, "does not answer")
				}

				t.Setenv(EnvRequire, "1")
				f = runFake(t, h.call)
				assert.True(t, f.failed, "%s=%q with OE_REQUIRE_SERVERS=1 must fail: %s", h.env, value, f.msg)
				assert.False(t, f.skipped, f.msg)
				assert.Contains(t, f.msg, h.env)
				assert.Contains(t, f.msg, "bash internal/testenv/test.sh")
			}
		})
	}
}

func TestBadDSNFails(t *testing.T) {
	t.Setenv(EnvRequire, "")
	t.Setenv("CI", "")
	t.Setenv(EnvMySQL, "not a dsn")
	f := runFake(t, func(tb testing.TB) { MySQL(tb) })
	assert.True(t, f.failed, "a malformed DSN is a mistake, not a missing server: %s", f.msg)
	assert.Contains(t, f.msg, EnvMySQL)

	t.Setenv(EnvPostgres, "postgres://%zz")
	f = runFake(t, func(tb testing.TB) { Postgres(tb) })
	assert.True(t, f.failed, "a malformed DSN is a mistake, not a missing server: %s", f.msg)
	assert.Contains(t, f.msg, EnvPostgres)
}
