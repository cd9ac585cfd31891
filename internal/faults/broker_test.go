package faults_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// privateBroker is a name server and broker of this test's own, on ports no
// other test uses, so it can be stopped and killed freely.
type privateBroker struct {
	t     *testing.T
	state string
	ns    string
	addr  string
	env   []string // extra settings for rocketmq.sh (RMQ_TIMER_WHEEL=false)
}

// The private broker's ports (it also listens on brokerPort-2 and +1) lie
// below the kernel's ephemeral range (32768-60999 here): a port in that range
// can be taken at any moment by the local end of an outgoing connection, and
// the broker then dies with "Address already in use" (seen in a CI run).
const nsPort, brokerPort = 29876, 30911

func (b *privateBroker) script(keepStore bool, verb string) {
	root, err := filepath.Abs("../..")
	require.NoError(b.t, err)
	cmd := exec.Command("bash", filepath.Join(root, "internal/testenv/rocketmq.sh"), verb)
	cmd.Env = append(os.Environ(), "OE_STATE_DIR="+b.state, "RMQ_NAMESRV_PORT="+strconv.Itoa(nsPort), "RMQ_BROKER_PORT="+strconv.Itoa(brokerPort))
	cmd.Env = append(cmd.Env, b.env...)
	if keepStore {
		cmd.Env = append(cmd.Env, "RMQ_KEEP_STORE=1")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(b.t, err, "rocketmq.sh %s: %s", verb, out)
}

// kill SIGKILLs the broker JVM: no shutdown hook, no flush.
func (b *privateBroker) kill() {
	raw, err := os.ReadFile(filepath.Join(b.state, "rocketmq", "broker.pid"))
	require.NoError(b.t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(b.t, err)
	require.NoError(b.t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(b.t, func() bool { return syscall.Kill(pid, 0) != nil || isZombie(pid) }, 10*time.Second, 100*time.Millisecond)
}

func isZombie(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(st), ") Z ")
}

// TestBrokerFaults: the broker is stopped while orders commit (they are
// placed anyway; the reconciler cancels them), then killed with delayed
// messages in flight and restarted on the same store. Every order must end
// cancelled exactly once, by its message or by the reconciler, with its
// seats released once (I1, I2, I3, I5, I8).
func TestBrokerFaults(t *testing.T) {
	testenv.RocketMQ(t) // the test command has the jars and a JVM; fail or skip like every server test
	ctx := context.Background()
	b := &privateBroker{t: t, state: t.TempDir(), ns: fmt.Sprintf("127.0.0.1:%d", nsPort), addr: fmt.Sprintf("127.0.0.1:%d", brokerPort)}
	// Stop registered first: a start that fails half way (the broker dead,
	// its name server up) must not leave a JVM behind for the next test.
	t.Cleanup(func() { b.script(false, "stop") })
	b.script(false, "start")

	w := e2e.NewWorld(t, testenv.MySQL(t), sqlstore.MySQL, testenv.Redis(t), "bf-"+testenv.Unique())
	topic := "oe_fault_" + testenv.Unique()
	require.NoError(t, rocketmq.EnsureTopic(ctx, []string{b.ns}, b.addr, topic))
	cfg := rocketmq.Config{NameServers: []string{b.ns}, Topic: topic, Group: topic + "_p", Mode: rocketmq.ModeTimer, SendTimeout: time.Second}
	sender, err := rocketmq.NewSender(cfg)
	require.NoError(t, err)
	defer sender.Close()
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.Service, Sender: sender, Runtime: expiry.Runtime{Observer: w.Ledger}})
	require.NoError(t, err)
	cfg.Group = topic + "_c"
	sctx, cancelStart := context.WithTimeout(ctx, 60*time.Second)
	defer cancelStart()
	consumer, err := rocketmq.StartConsumer(sctx, cfg, expiry.NewShell(h))
	require.NoError(t, err)
	defer consumer.Close(context.Background())
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sender, Runtime: expiry.Runtime{Observer: w.Ledger}, SendTimeout: 2 * time.Second})
	require.NoError(t, err)
	svc := w.Scheduling(t, sched)

	var placed []cancel.Placement
	place := func(i int, ttl time.Duration) {
		now, err := w.Store.Now(ctx)
		require.NoError(t, err)
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", w.ShowID, i), UserID: fmt.Sprintf("u%d", i%3), ShowID: w.ShowID, Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(ttl)}
		require.NoError(t, svc.Place(ctx, p, w.Store.Insert(w.DB, nil)), "the order is placed whatever the broker does")
		placed = append(placed, p)
	}

	// 1. Broker (and name server) stopped while orders commit.
	b.script(false, "stop")
	for i := 0; i < 8; i++ {
		place(i, 3*time.Second)
	}
	sendFailures := w.Ledger.Kind(expiry.KindSendFailed)
	assert.Equal(t, 8, sendFailures, "every send failed, and was counted, not returned")

	// 2. Back on the same store; orders with delayed messages in flight,
	// then the broker is SIGKILLed and restarted on the same store.
	b.script(true, "start")
	require.Eventually(t, func() bool {
		return sender.Send(ctx, expiry.Message{OrderNo: "probe", Hop: 1}, time.Hour) == nil
	}, 60*time.Second, 500*time.Millisecond, "the sender reconnects after the restart")
	for i := 8; i < 20; i++ {
		place(i, 8*time.Second)
	}
	require.Equal(t, sendFailures, w.Ledger.Kind(expiry.KindSendFailed), "these sends went through")
	b.kill()
	b.script(true, "start")
	// After the restart the message path must work again by itself: the
	// sender and the consumer reconnect; these orders are cancelled by
	// their own messages.
	require.Eventually(t, func() bool {
		return sender.Send(ctx, expiry.Message{OrderNo: "probe", Hop: 1}, time.Hour) == nil
	}, 60*time.Second, 500*time.Millisecond, "the sender reconnects after the kill")
	after := len(placed)
	for i := 20; i < 23; i++ {
		place(i, 5*time.Second)
	}
	// No reconciler runs yet: these must be cancelled by their own
	// messages once the consumer has found the restarted broker (client-go
	// rebalances every 20 s).
	require.Eventually(t, func() bool {
		st, err := w.Store.Statuses(ctx, nos(placed[after:]))
		if err != nil {
			return false
		}
		for _, s := range st {
			if s.Status == expiry.StatusPending {
				return false
			}
		}
		return true
	}, 60*time.Second, 250*time.Millisecond, "orders placed after the restart are cancelled by their messages")

	// 3. A reconciler host runs every two seconds until every order is decided.
	rec := w.Reconciler(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := rec.Round(ctx)
		require.NoError(t, err)
		st, err := w.Store.Statuses(ctx, nos(placed))
		require.NoError(t, err)
		pending := 0
		for _, s := range st {
			if s.Status == expiry.StatusPending {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d orders still pending", pending)
		time.Sleep(2 * time.Second)
	}
	time.Sleep(3 * time.Second) // late messages, then one more round
	_, err = rec.Round(ctx)
	require.NoError(t, err)
	bad, err := w.Check(ctx, placed, true)
	require.NoError(t, err)
	assert.Empty(t, bad)
	byMessage, byReconcile := 0, 0
	for _, p := range placed {
		var reason string
		require.NoError(t, w.DB.QueryRow("SELECT cancel_reason FROM oe_order WHERE order_no = ?", p.OrderNo).Scan(&reason))
		switch cancel.Reason(reason) {
		case cancel.ReasonTimeout:
			byMessage++
		case cancel.ReasonReconcile:
			byReconcile++
		}
	}
	assert.Equal(t, len(placed), byMessage+byReconcile, "every order cancelled, once")
	assert.GreaterOrEqual(t, byReconcile, 8, "the orders placed while the broker was down")
	for _, p := range placed[after:] {
		var reason string
		require.NoError(t, w.DB.QueryRow("SELECT cancel_reason FROM oe_order WHERE order_no = ?", p.OrderNo).Scan(&reason))
		assert.Equal(t, string(cancel.ReasonTimeout), reason, "%s: the message path works after the restart", p.OrderNo)
	}
	t.Logf("FIGURE broker faults: orders=%d send_failures=%d broker_stops=1 broker_kills=1 restarts=2 cancelled_by_message=%d cancelled_by_reconcile=%d violations=%d",
		len(placed), sendFailures, byMessage, byReconcile, len(bad))
}

func nos(ps []cancel.Placement) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.OrderNo
	}
	return out
}
