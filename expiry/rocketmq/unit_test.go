package rocketmq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/expiry/rocketmq"
	"github.com/seatflow/orderexpiry/levels"
)

// client-go leaves goroutines behind after Shutdown (its cache janitor runs
// from import time, stats and remoting goroutines never stop); ours must not.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func4"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func5"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func6"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*pushConsumer).Start.func1.2"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.1"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.2"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.3"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.4"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*remotingClient).receiveResponse"),
		goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*ResponseFuture).waitResponse"),
	)
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]rocketmq.Mode{"levels": rocketmq.ModeLevels, "timer": rocketmq.ModeTimer} {
		got, err := rocketmq.ParseMode(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, s, got.String())
	}
	_, err := rocketmq.ParseMode("fast")
	assert.Error(t, err)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []rocketmq.Config{
		{Topic: "t", Group: "g"},
		{NameServers: []string{"127.0.0.1:1"}, Group: "g"},
		{NameServers: []string{"127.0.0.1:1"}, Topic: "t"},
	} {
		_, err := rocketmq.NewSender(c)
		assert.Error(t, err)
		_, err = rocketmq.NewConsumer(c, nil)
		assert.Error(t, err)
	}
}

// Plan needs no broker: it is the level rule, or the timer delay capped at
// the broker's maximum.
func TestPlan(t *testing.T) {
	s, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{"127.0.0.1:1"}, Topic: "t", Group: "plan", Slack: time.Second})
	require.NoError(t, err)
	defer s.Close()
	level, d := s.Plan(15 * time.Minute)
	assert.Equal(t, 14, level)
	assert.Equal(t, 10*time.Minute, d)
	level, d = s.Plan(5*time.Minute - 50*time.Millisecond)
	assert.Equal(t, levels.Default.For(5*time.Minute), level, "slack lets 4m59.95s take the 5m level")
	assert.Equal(t, 5*time.Minute, d)

	none, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{"127.0.0.1:1"}, Topic: "t", Group: "plan3", Slack: -1})
	require.NoError(t, err)
	defer none.Close()
	_, d = none.Plan(10*time.Second - 5*time.Millisecond)
	assert.Equal(t, 5*time.Second, d, "negative slack: the greedy rule")
	dflt, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{"127.0.0.1:1"}, Topic: "t", Group: "plan4"})
	require.NoError(t, err)
	defer dflt.Close()
	_, d = dflt.Plan(10*time.Second - 5*time.Millisecond)
	assert.Equal(t, 10*time.Second, d, "zero slack means DefaultSlack")

	timer, err := rocketmq.NewSender(rocketmq.Config{NameServers: []string{"127.0.0.1:1"}, Topic: "t", Group: "plan2", Mode: rocketmq.ModeTimer})
	require.NoError(t, err)
	defer timer.Close()
	level, d = timer.Plan(7 * time.Second)
	assert.Equal(t, 0, level)
	assert.Equal(t, 7*time.Second, d)
	_, d = timer.Plan(96 * time.Hour)
	assert.Equal(t, 72*time.Hour, d, "capped at the broker's timerMaxDelaySec; the handler re-arms")
	_, d = timer.Plan(-time.Second)
	assert.Equal(t, time.Duration(0), d)
}
