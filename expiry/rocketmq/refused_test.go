package rocketmq

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTimerRefused: only the broker's "timer wheel disabled" answer is the
// permanent refusal; its timer flow control (also SYSTEM_ERROR-ish, also
// mentioning timers) is transient and must stay an ordinary send error.
// The real broker's answer is checked in internal/faults.
func TestTimerRefused(t *testing.T) {
	for _, tc := range []struct {
		err  string
		want bool
	}{
		{"CODE: 1, DESC: accurate timer message is not enabled, timerWheelEnable is false", true},
		{"timerWheelEnable is false", true},
		{"CODE: 1, DESC: timer message is under flow control, max num limit is 64", false},
		{"CODE: 13, DESC: timer message illegal", false},
		{"dial tcp 127.0.0.1:10911: connect: connection refused", false},
		{"context deadline exceeded", false},
	} {
		assert.Equal(t, tc.want, timerRefused(errors.New(tc.err)), tc.err)
	}
}
