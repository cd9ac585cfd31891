package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The replicated servers that services.sh starts beside the others.
const (
	EnvRedisPrimary    = "OE_REDIS_PRIMARY"          // host:port of a Redis primary (AOF, noeviction)
	EnvRedisReplica    = "OE_REDIS_REPLICA"          // host:port of its replica (REPLICAOF the primary)
	EnvClusterReplicas = "OE_REDIS_CLUSTER_REPLICAS" // host:port,... one replica per OE_REDIS_CLUSTER master, in order
	EnvBroker          = "OE_ROCKETMQ_BROKER"        // host:port of broker-a
	EnvBrokerB         = "OE_ROCKETMQ_BROKER_B"      // host:port of broker-b, on the same name server
	EnvServices        = "OE_SERVICES_SH"            // path of services.sh, for tests that kill and restart a server
)

// dialAll reports the first address of addrs that does not accept a TCP connection.
func dialAll(addrs []string) error {
	for _, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, pingTimeout)
		if err != nil {
			return fmt.Errorf("%s does not answer: %w", a, err)
		}
		_ = conn.Close()
	}
	return nil
}

// RedisPair returns the addresses of the Redis primary and of its replica from
// OE_REDIS_PRIMARY and OE_REDIS_REPLICA. It skips (or fails, when Required)
// unless both answer, the primary is a master and the replica follows it with
// its link up.
func RedisPair(t testing.TB) (primary, replica string) {
	t.Helper()
	primary, replica = os.Getenv(EnvRedisPrimary), os.Getenv(EnvRedisReplica)
	if primary == "" || replica == "" {
		unavailable(t, "Redis primary and replica", EnvRedisPrimary, EnvRedisPrimary+" or "+EnvRedisReplica+" is not set")
	}
	if err := dialAll([]string{primary, replica}); err != nil {
		unavailable(t, "Redis primary and replica", EnvRedisPrimary, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := Following(ctx, primary, replica); err != nil {
		unavailable(t, "Redis primary and replica", EnvRedisPrimary, "they do not answer as a primary and its replica: "+err.Error())
	}
	return primary, replica
}

// Following reports nil when the server at primary is a master and the one at
// replica replicates it with its link up.
func Following(ctx context.Context, primary, replica string) error {
	p := redis.NewClient(&redis.Options{Addr: primary, DialTimeout: pingTimeout})
	defer p.Close()
	r := redis.NewClient(&redis.Options{Addr: replica, DialTimeout: pingTimeout})
	defer r.Close()
	pi, err := p.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("primary %s: %w", primary, err)
	}
	if !strings.Contains(pi, "role:master") {
		return fmt.Errorf("primary %s is not a master", primary)
	}
	ri, err := r.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("replica %s: %w", replica, err)
	}
	_, port, _ := net.SplitHostPort(primary)
	if !strings.Contains(ri, "role:slave") || !strings.Contains(ri, "master_port:"+port+"\r") || !strings.Contains(ri, "master_link_status:up") {
		return fmt.Errorf("replica %s does not follow %s with its link up", replica, primary)
	}
	return nil
}

// RedisClusterReplicas returns the replica addresses from
// OE_REDIS_CLUSTER_REPLICAS, one per master of OE_REDIS_CLUSTER in order,
// after checking that each answers as a replica with its link up. It skips (or
// fails, when Required) otherwise.
func RedisClusterReplicas(t testing.TB) []string {
	t.Helper()
	addrs := splitList(os.Getenv(EnvClusterReplicas), ",")
	if len(addrs) == 0 {
		unavailable(t, "Redis Cluster replicas", EnvClusterReplicas, EnvClusterReplicas+" is not set")
	}
	if err := dialAll(addrs); err != nil {
		unavailable(t, "Redis Cluster replicas", EnvClusterReplicas, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: pingTimeout})
		info, err := c.Info(ctx, "replication").Result()
		_ = c.Close()
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			unavailable(t, "Redis Cluster replicas", EnvClusterReplicas, fmt.Sprintf("%s does not answer as a replica with its link up: %v", a, err))
		}
	}
	return addrs
}

// RocketMQBrokers returns the name server address and both brokers' addresses
// (broker-a, broker-b) from OE_ROCKETMQ_NAMESRV, OE_ROCKETMQ_BROKER and
// OE_ROCKETMQ_BROKER_B. It skips (or fails, when Required) unless all answer.
func RocketMQBrokers(t testing.TB) (namesrv string, brokers []string) {
	t.Helper()
	namesrv = RocketMQ(t)
	brokers = []string{os.Getenv(EnvBroker), os.Getenv(EnvBrokerB)}
	if brokers[0] == "" || brokers[1] == "" {
		unavailable(t, "two RocketMQ brokers", EnvBrokerB, EnvBroker+" or "+EnvBrokerB+" is not set")
	}
	if err := dialAll(brokers); err != nil {
		unavailable(t, "two RocketMQ brokers", EnvBrokerB, err.Error())
	}
	return namesrv, brokers
}

// Services is what a fault test needs to kill a server and bring it back:
// services.sh's `pid NAME` and `start-one NAME` (redis-primary, redis-replica,
// redis-pair, broker-a, broker-b).
type Services struct{ script string }

// ServicesScript returns the services.sh named by OE_SERVICES_SH; it skips
// (or fails, when Required) when the variable is not set.
func ServicesScript(t testing.TB) Services {
	t.Helper()
	s := os.Getenv(EnvServices)
	if s == "" {
		unavailable(t, "services.sh", EnvServices, EnvServices+" is not set")
	}
	if _, err := os.Stat(s); err != nil {
		unavailable(t, "services.sh", EnvServices, err.Error())
	}
	return Services{script: s}
}

// Pid returns the pid of server name.
func (s Services) Pid(name string) (int, error) {
	out, err := exec.Command("bash", s.script, "pid", name).Output()
	if err != nil {
		return 0, fmt.Errorf("services.sh pid %s: %w", name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// StartOne starts server name again on the data it has and waits until it
// answers (services.sh start-one), within timeout.
func (s Services) StartOne(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", s.script, "start-one", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("services.sh start-one %s: %w: %s", name, err, out)
	}
	return nil
}

func splitList(s, sep string) []string {
	var out []string
	for _, a := range strings.Split(s, sep) {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
