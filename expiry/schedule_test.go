package expiry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// Schedule is what cancel.Service.Place calls once the order committed
// (the commit discipline itself, I6, is tested there and in cancel/sqlstore).
func TestSchedule(t *testing.T) {
	ctx := context.Background()
	clock := expirytest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	t.Run("sends the first message for the time left", func(t *testing.T) {
		rec := &recorder{}
		s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
		require.NoError(t, err)
		assert.True(t, s.Schedule(ctx, "o1", clock.Now().Add(15*time.Minute)))
		require.Len(t, rec.sent, 1)
		assert.Equal(t, expiry.Message{OrderNo: "o1", Hop: 1}, rec.sent[0].m)
		assert.Equal(t, 15*time.Minute, rec.sent[0].delay)
	})

	t.Run("send failure is counted, not returned", func(t *testing.T) {
		rec := &recorder{err: errors.New("broker down")}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
		assert.False(t, s.Schedule(ctx, "o1", clock.Now().Add(time.Minute)))
		assert.Equal(t, 1, rec.count(expiry.KindSendFailed))
	})

	t.Run("invalid order number is counted, not sent", func(t *testing.T) {
		rec := &recorder{}
		s, _ := expiry.NewScheduler(expiry.SchedulerConfig{Sender: rec, Runtime: expiry.Runtime{Observer: rec}})
		assert.False(t, s.Schedule(ctx, "bad id", time.Now()))
		assert.Empty(t, rec.sent)
		assert.Equal(t, 1, rec.count(expiry.KindSendFailed))
	})
}

func TestSchedulerConfig(t *testing.T) {
	_, err := expiry.NewScheduler(expiry.SchedulerConfig{})
	assert.ErrorContains(t, err, "Sender")
	_, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: &recorder{}, SendTimeout: -time.Second})
	assert.ErrorContains(t, err, "SendTimeout", "nonsense is an error naming the field, not a silent default")
}
