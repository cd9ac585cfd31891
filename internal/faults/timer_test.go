package faults_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestTimerRefusedByBroker: a 5.x broker started with timerWheelEnable=false
// refuses timer messages. ModeTimer must say so with ErrTimerRefused (a
// permanent, documented error, not a silent fallback), while ModeLevels on
// the same broker keeps working, so the error is about timers and not about
// the broker being away.
func TestTimerRefusedByBroker(t *testing.T) {
	testenv.RocketMQ(t)
	ctx := context.Background()
	b := &privateBroker{t: t, state: t.TempDir(), ns: fmt.Sprintf("127.0.0.1:%d", nsPort), addr: fmt.Sprintf("127.0.0.1:%d", brokerPort),
		env: []string{"RMQ_TIMER_WHEEL=false"}}
	// Stop registered first: a start that fails half way (the broker dead,
	// its name server up) must not leave a JVM behind for the next test.
	t.Cleanup(func() { b.script(false, "stop") })
	b.script(false, "start")

	topic := "oe_notimer_" + testenv.Unique()
	require.NoError(t, rocketmq.EnsureTopic(ctx, []string{b.ns}, b.addr, topic))
	send := func(mode rocketmq.Mode) error {
		s, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{b.ns}, Topic: topic, Group: topic + "_" + mode.String(), Mode: mode, SendTimeout: 5 * time.Second})
		require.NoError(t, err)
		defer s.Close()
		return s.Send(ctx, expiry.Message{OrderNo: "nt-" + mode.String(), Hop: 1}, 30*time.Second)
	}

	err := send(rocketmq.ModeTimer)
	require.Error(t, err)
	require.True(t, errors.Is(err, rocketmq.ErrTimerRefused), "want ErrTimerRefused, got: %v", err)
	t.Logf("timer mode on a broker without the timer wheel: %v", err)

	require.NoError(t, send(rocketmq.ModeLevels), "the same broker takes delay-level messages")
}
