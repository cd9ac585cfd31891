package storm

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/internal/testenv"
)

// RedisBinary is the redis-server the storm starts privately.
const RedisBinary = "/usr/bin/redis-server"

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("storm: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RedisProc is a redis-server process of the test's own, which the storm may
// stop (SIGTERM, SIGKILL) and start again on the same port. The shared
// servers are never touched.
//
// Persistence: the process runs with --appendonly yes --appendfsync always
// (and --save ""), so a restart, even after SIGKILL, keeps every write Redis
// acknowledged. That is a deliberate choice. Without persistence a restart
// loses every seat hash, the shows index and the purchase-limit counters:
// sold seats of paid orders would come back free (I2: a sold seat must stay
// sold) and the counters would restart at zero while the users still hold
// seats in pending and paid orders (I8). The library cannot repair that: the
// reconciler fixes locks that exist in Redis and pending orders
// in SQL, but nothing rebuilds Redis state from SQL. A Redis that
// holds seat state must therefore be run with persistence (or replicas), and
// the storm tests the library under that deployment. (StartRedis with
// persist false runs it without, to see exactly that.)
type RedisProc struct {
	t       testing.TB
	dir     string
	port    int
	persist bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts a private redis-server on a free port, stopped (SIGKILL)
// at cleanup; persist chooses the append-only file (fsync always) or no
// persistence at all. Without the binary the test is skipped, or fails when
// servers are required (testenv.Required).
func StartRedis(t testing.TB, persist bool) *RedisProc {
	t.Helper()
	if _, err := os.Stat(RedisBinary); err != nil {
		if testenv.Required() {
			t.Fatalf("storm: %s is required: %v", RedisBinary, err)
		}
		t.Skipf("storm: %s not available: %v", RedisBinary, err)
	}
	r := &RedisProc{t: t, dir: t.TempDir(), port: FreePort(t), persist: persist}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(syscall.SIGKILL) })
	return r
}

// Addr returns host:port of the server.
func (r *RedisProc) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Start starts the server (again) and waits until it answers PING.
func (r *RedisProc) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	aof := []string{"--appendonly", "yes", "--appendfsync", "always", "--aof-load-truncated", "yes"}
	if !r.persist {
		aof = []string{"--appendonly", "no"}
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ { // the port may still be held for a moment
		cmd := exec.Command(RedisBinary, append([]string{
			"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--dir", r.dir, "--daemonize", "no", "--save", ""}, aof...)...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("storm: start redis: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		if last = waitPong(r.Addr(), done, 10*time.Second); last == nil {
			r.cmd, r.done = cmd, done
			return nil
		}
		_ = cmd.Process.Kill()
		<-done
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("storm: redis on %s did not come up: %w (see %s)", r.Addr(), last, filepath.Join(r.dir, "redis.out"))
}

// Stop sends sig to the server and waits for it to exit (SIGKILL after 10s).
func (r *RedisProc) Stop(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd, r.done = nil, nil
	return nil
}

// Running reports whether the server process is running.
func (r *RedisProc) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}

// waitPong polls addr with a raw PING until it answers +PONG (not -LOADING).
func waitPong(addr string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited")
		default:
		}
		if last = ping(addr); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return last
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
