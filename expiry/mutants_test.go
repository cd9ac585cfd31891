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

// EncodeMessage's refusal names the bad value and the range it must be in:
// a host's log of a refused send is all it has to find the bug upstream.
func TestEncodeMessageRefusalNamesValueAndRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    expiry.Message
		want string
	}{
		{"hop 0", expiry.Message{OrderNo: "o1", Hop: 0}, "orderexpiry: bad message: hop 0 outside 1..1048576"},
		{"hop past MaxHop", expiry.Message{OrderNo: "o1", Hop: expiry.MaxHop + 1}, "orderexpiry: bad message: hop 1048577 outside 1..1048576"},
		{"warning lead past MaxWarnLead", expiry.Message{OrderNo: "o1", Hop: 1, Warning: true, Lead: expiry.MaxWarnLead + time.Millisecond},
			"orderexpiry: bad message: warning lead 24h0m0.001s is not whole milliseconds in 1ms..24h0m0s"},
		{"warning lead below a millisecond", expiry.Message{OrderNo: "o1", Hop: 1, Warning: true, Lead: time.Microsecond},
			"orderexpiry: bad message: warning lead 1µs is not whole milliseconds in 1ms..24h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := expiry.EncodeMessage(tc.m)
			require.ErrorIs(t, err, expiry.ErrBadMessage)
			assert.EqualError(t, err, tc.want)
		})
	}
}

// A warning the broker refused is counted as a lost warning (Reason
// "warning") and the expiry message still goes; a warning it accepted is
// counted as nothing: an operator alerting on KindSendFailed sees only real
// losses.
func TestScheduleCountsOnlyLostWarnings(t *testing.T) {
	brokerDown := errors.New("broker refused the warning")
	for _, tc := range []struct {
		name       string
		warningErr error
		wantFailed []expiry.Event
	}{
		{"warning accepted", nil, nil},
		{"warning refused", brokerDown, []expiry.Event{{Kind: expiry.KindSendFailed, OrderNo: "o1", Reason: "warning", Hop: 1, Delay: 13 * time.Minute, Err: brokerDown}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := expirytest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			rec := &recorder{}
			snd := senderFunc(func(ctx context.Context, m expiry.Message, d time.Duration) error {
				if m.Warning && tc.warningErr != nil {
					return tc.warningErr
				}
				return rec.Send(ctx, m, d)
			})
			s, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: snd, WarnBefore: 2 * time.Minute, Runtime: expiry.Runtime{Clock: clock, Observer: rec}})
			require.NoError(t, err)
			require.True(t, s.Schedule(context.Background(), "o1", clock.Now().Add(15*time.Minute)), "the expiry message is sent either way")
			var failed []expiry.Event
			for _, e := range rec.events {
				if e.Kind == expiry.KindSendFailed {
					failed = append(failed, e)
				}
			}
			assert.Equal(t, tc.wantFailed, failed)
			require.NotEmpty(t, rec.sent)
			assert.Equal(t, sent{expiry.Message{OrderNo: "o1", Hop: 1}, 15 * time.Minute}, rec.sent[len(rec.sent)-1])
		})
	}
}
