package asynq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	aq "github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	oeasynq "github.com/seatflow/orderexpiry/expiry/asynq"
)

func TestConfigValidation(t *testing.T) {
	// NewSender checks the Config before it would use the client, which
	// never connects here.
	client := aq.NewClient(aq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, tc := range []struct {
		name string
		cfg  oeasynq.Config
		want string // "" when valid
	}{
		{"zero config gets the defaults", oeasynq.Config{}, ""},
		{"own names", oeasynq.Config{TaskType: "shop:order.expire", Queue: "expiry-1"}, ""},
		{"queue with a space", oeasynq.Config{Queue: "order expiry"}, "Config.Queue"},
		{"queue with a hash tag brace", oeasynq.Config{Queue: "q{1}"}, "Config.Queue"},
		{"blank task type", oeasynq.Config{TaskType: " "}, "Config.TaskType"},
		{"task type too long", oeasynq.Config{TaskType: strings.Repeat("t", oeasynq.MaxNameLen+1)}, "Config.TaskType"},
		{"negative send timeout", oeasynq.Config{SendTimeout: -time.Second}, "Config.SendTimeout is negative"},
		{"negative forward interval", oeasynq.Config{ForwardInterval: -1}, "Config.ForwardInterval is negative"},
		{"task timeout under asynq's second", oeasynq.Config{TaskTimeout: 500 * time.Millisecond}, "Config.TaskTimeout"},
		{"max retry delay below retry delay", oeasynq.Config{RetryDelay: time.Minute, MaxRetryDelay: time.Second}, "Config.MaxRetryDelay"},
		{"negative max retry", oeasynq.Config{MaxRetry: -1}, "Config.MaxRetry is negative"},
		{"negative concurrency", oeasynq.Config{Concurrency: -2}, "Config.Concurrency is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := oeasynq.NewSender(client, tc.cfg)
			c, cerr := oeasynq.NewConsumer(aq.RedisClientOpt{Addr: "127.0.0.1:1"}, tc.cfg, nopProcessor{})
			if cerr == nil {
				// Never started, it still holds a Redis client to close.
				assert.NoError(t, c.Close(context.Background()))
			}
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, cerr)
				assert.NotNil(t, s)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			require.Error(t, cerr)
			assert.Contains(t, cerr.Error(), tc.want)
		})
	}
}

func TestNilDependencies(t *testing.T) {
	_, err := oeasynq.NewSender(nil, oeasynq.Config{})
	assert.ErrorContains(t, err, "nil *asynq.Client")
	_, err = oeasynq.NewConsumer(nil, oeasynq.Config{}, nopProcessor{})
	assert.ErrorContains(t, err, "nil asynq.RedisConnOpt")
	_, err = oeasynq.NewConsumer(aq.RedisClientOpt{Addr: "127.0.0.1:1"}, oeasynq.Config{}, nil)
	assert.ErrorContains(t, err, "nil Processor")
}

// A Consumer whose Redis does not answer fails to start with an error that
// says so, and leaves nothing running.
func TestStartWithoutRedis(t *testing.T) {
	_, err := oeasynq.StartConsumer(aq.RedisClientOpt{Addr: "127.0.0.1:1"}, oeasynq.Config{SendTimeout: time.Second}, nopProcessor{})
	assert.ErrorContains(t, err, "Redis does not answer")
}

func TestSendHonoursContextBeforeRedis(t *testing.T) {
	client := aq.NewClient(aq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer client.Close()
	s, err := oeasynq.NewSender(client, oeasynq.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, s.Send(ctx, expiry.Message{OrderNo: "A1", Hop: 1}, time.Second), context.Canceled)
	assert.ErrorIs(t, s.Send(context.Background(), expiry.Message{OrderNo: "A1", Hop: 0}, time.Second), expiry.ErrBadMessage)
}

func TestDueAt(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		now   time.Time
		delay time.Duration
		want  time.Time
	}{
		{base, 0, base},
		{base, -time.Second, base},
		{base.Add(300 * time.Millisecond), 0, base.Add(300 * time.Millisecond)},
		{base, 2 * time.Second, base.Add(2 * time.Second)},
		{base, 2*time.Second + time.Nanosecond, base.Add(3 * time.Second)},
		{base.Add(300 * time.Millisecond), 2 * time.Second, base.Add(3 * time.Second)},
		{base.Add(999 * time.Millisecond), time.Millisecond, base.Add(time.Second)},
	} {
		got := oeasynq.DueAt(tc.now, tc.delay)
		assert.Equal(t, tc.want, got, "DueAt(%v, %v)", tc.now, tc.delay)
		assert.False(t, got.Before(tc.now.Add(tc.delay)), "never before the delay")
	}
}

type nopProcessor struct{}

func (nopProcessor) Process(context.Context, expiry.Delivery) expiry.Verdict { return expiry.Ack }
