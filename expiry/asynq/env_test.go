package asynq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	aq "github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they start (asynq's
// servers and clients, the Consumer's waits) outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The servers' variables, as internal/testenv/services.sh env prints them.
// This module cannot use internal/testenv without taking its SQL drivers into
// its go.mod, so the few lines it needs are repeated here, with the same
// rule: skip when a server is missing, fail when OE_REQUIRE_SERVERS=1 or
// CI=true (internal/testenv.Required).
const (
	envRedis   = "OE_REDIS_ADDR"
	envCluster = "OE_REDIS_CLUSTER"
	envRequire = "OE_REQUIRE_SERVERS"
	testCmd    = "bash internal/testenv/test.sh"
)

func required() bool { return os.Getenv(envRequire) == "1" || os.Getenv("CI") == "true" }

func unavailable(t testing.TB, server, envVar, reason string) {
	t.Helper()
	if required() {
		t.Fatalf("%s is required (%s=1 or CI=true) but %s: set %s, or run the tests with: %s", server, envRequire, reason, envVar, testCmd)
	}
	t.Skipf("skipping: %s not configured (set %s, or run %s): %s", server, envVar, testCmd, reason)
}

// redisOpt returns the connection option of the test Redis (OE_REDIS_ADDR).
func redisOpt(t testing.TB) aq.RedisConnOpt {
	t.Helper()
	addr := os.Getenv(envRedis)
	if addr == "" {
		unavailable(t, "Redis", envRedis, envRedis+" is not set")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis", envRedis, addr+" does not answer: "+err.Error())
	}
	return aq.RedisClientOpt{Addr: addr}
}

// clusterOpt returns the connection option of the test Redis Cluster
// (OE_REDIS_CLUSTER, its nodes' addresses separated by commas).
func clusterOpt(t testing.TB) aq.RedisConnOpt {
	t.Helper()
	var addrs []string
	for _, a := range strings.Split(os.Getenv(envCluster), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		unavailable(t, "Redis Cluster", envCluster, envCluster+" is not set")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if info, err := c.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(info, "cluster_state:ok") {
		unavailable(t, "Redis Cluster", envCluster, strings.Join(addrs, ",")+" does not answer as a healthy cluster")
	}
	return aq.RedisClusterClientOpt{Addrs: addrs}
}

// backends are the servers every integration test runs on.
var backends = []struct {
	name string
	opt  func(testing.TB) aq.RedisConnOpt
}{
	{"redis", redisOpt},
	{"cluster", clusterOpt},
}

// queue returns a fresh queue name for one test and deletes the queue (with
// whatever is left in it, such as archived poison) at cleanup.
func queue(t testing.TB, opt aq.RedisConnOpt) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	q := "oe_t_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		in := aq.NewInspector(opt)
		defer in.Close()
		if err := in.DeleteQueue(q, true); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Logf("delete queue %s: %v", q, err)
		}
	})
	return q
}
