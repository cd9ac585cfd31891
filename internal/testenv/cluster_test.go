package testenv

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write on the primary reaches the replica, and the replica refuses writes.
func TestRedisPairReplicates(t *testing.T) {
	primary, replica := RedisPair(t)
	ctx := ctxT(t)
	p := redis.NewClient(&redis.Options{Addr: primary})
	defer p.Close()
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	for _, c := range []*redis.Client{p, r} {
		cfg, err := c.ConfigGet(ctx, "*").Result()
		require.NoError(t, err)
		assert.Equal(t, "yes", cfg["appendonly"], "cancel/redisseat asks for persistence")
		assert.Equal(t, "noeviction", cfg["maxmemory-policy"])
	}
	key := "oe:testenv:" + Unique()
	require.NoError(t, p.Set(ctx, key, "v", time.Minute).Err())
	require.Eventually(t, func() bool { return r.Get(ctx, key).Val() == "v" }, 10*time.Second, 10*time.Millisecond,
		"the replica did not receive the primary's write")
	assert.ErrorContains(t, r.Set(ctx, key, "w", time.Minute).Err(), "READONLY")
}

// Every master of the cluster has its replica, in the order of the variables.
func TestRedisClusterHasReplicas(t *testing.T) {
	c := RedisCluster(t)
	replicas := RedisClusterReplicas(t)
	nodes, err := c.ClusterNodes(ctxT(t)).Result()
	require.NoError(t, err)
	masters := splitList(os.Getenv(EnvCluster), ",")
	require.Len(t, replicas, len(masters))
	for i, m := range masters {
		mc := redis.NewClient(&redis.Options{Addr: m})
		id, err := mc.Do(ctxT(t), "CLUSTER", "MYID").Text()
		_ = mc.Close()
		require.NoError(t, err)
		rc := redis.NewClient(&redis.Options{Addr: replicas[i]})
		info, err := rc.Info(ctxT(t), "replication").Result()
		_ = rc.Close()
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(m)
		assert.Contains(t, info, "master_port:"+port, "replica %s follows master %s", replicas[i], m)
		assert.Contains(t, nodes, id)
	}
}

// Both brokers are registered on the one name server, and a topic created on
// both has queues on both.
func TestRocketMQTwoBrokers(t *testing.T) {
	namesrv, brokers := RocketMQBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(splitList(namesrv, ";"))))
	require.NoError(t, err)
	defer adm.Close()
	topic := "oe_t_two_" + Unique()
	for _, b := range brokers {
		require.NoError(t, adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b)))
	}
	defer func() {
		for _, b := range brokers {
			_ = adm.DeleteTopic(context.Background(), admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(b))
		}
	}()
	var names map[string]bool
	require.Eventually(t, func() bool {
		mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
		if err != nil {
			return false
		}
		names = map[string]bool{}
		for _, q := range mqs {
			names[q.BrokerName] = true
		}
		return len(names) == 2
	}, 20*time.Second, 200*time.Millisecond, "the topic's route should name both brokers")
	assert.Equal(t, map[string]bool{"broker-a": true, "broker-b": true}, names)
}

// The new helpers skip without their variables, and fail with OE_REQUIRE_SERVERS=1.
func TestMissingReplicatedServerSkipsOrFails(t *testing.T) {
	helpers := []struct {
		env, unreachable string
		call             func(testing.TB)
	}{
		{EnvRedisPrimary, "127.0.0.1:1", func(tb testing.TB) { RedisPair(tb) }},
		{EnvClusterReplicas, "127.0.0.1:1,127.0.0.1:2", func(tb testing.TB) { RedisClusterReplicas(tb) }},
		{EnvBrokerB, "127.0.0.1:1", func(tb testing.TB) { RocketMQBrokers(tb) }},
		{EnvServices, "/nonexistent/services.sh", func(tb testing.TB) { ServicesScript(tb) }},
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
				t.Setenv(EnvRequire, "1")
				f = runFake(t, h.call)
				assert.True(t, f.failed, "%s=%q with OE_REQUIRE_SERVERS=1 must fail: %s", h.env, value, f.msg)
				assert.Contains(t, f.msg, TestCommand)
			}
		})
	}
}
