package expirytest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
)

// Delivery is a message as a sender's consumer received it.
type Delivery struct {
	Message expiry.Message
	At      time.Time
}

// SenderHarness is one sender under test, with what its consumer receives.
type SenderHarness struct {
	Sender expiry.DelaySender
	// Received yields every delivered message (decoded by the transport's
	// consumer through expiry.DecodeMessage, trace id restored).
	Received <-chan Delivery
	// Delay is a delay the transport honours exactly enough to test with
	// (for a level-based transport, one of its levels); Tolerance how late a
	// delivery may arrive after it.
	Delay, Tolerance time.Duration
}

// RunSender runs the DelaySender suite. It runs in real time: keep
// h.Delay short.
func RunSender(t *testing.T, newHarness func(t *testing.T) SenderHarness) {
	ctx := context.Background()
	recv := func(t *testing.T, h SenderHarness, want int) map[string]Delivery {
		got := map[string]Delivery{}
		deadline := time.After(h.Delay + h.Tolerance + 30*time.Second)
		for len(got) < want {
			select {
			case d := <-h.Received:
				got[d.Message.OrderNo] = d
			case <-deadline:
				t.Fatalf("received %d of %d messages", len(got), want)
			}
		}
		return got
	}

	t.Run("DeliversAfterDelay", func(t *testing.T) {
		h := newHarness(t)
		m := expiry.Message{OrderNo: fmt.Sprintf("d-%d", time.Now().UnixNano()), Hop: 3, TraceID: "trace-1"}
		start := time.Now()
		require.NoError(t, h.Sender.Send(ctx, m, h.Delay))
		d := recv(t, h, 1)[m.OrderNo]
		assert.Equal(t, m, d.Message, "order, hop and trace id survive the trip")
		late := d.At.Sub(start) - h.Delay
		assert.GreaterOrEqual(t, late, -h.Tolerance, "not (much) early")
		assert.LessOrEqual(t, late, h.Tolerance, "not late beyond tolerance")
	})

	t.Run("Concurrent", func(t *testing.T) {
		h := newHarness(t)
		const n = 50
		var wg sync.WaitGroup
		prefix := fmt.Sprintf("c%d-", time.Now().UnixNano())
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, h.Sender.Send(ctx, expiry.Message{OrderNo: fmt.Sprintf("%s%d", prefix, i), Hop: 1}, h.Delay))
			}()
		}
		wg.Wait()
		got := recv(t, h, n)
		for i := 0; i < n; i++ {
			assert.Contains(t, got, fmt.Sprintf("%s%d", prefix, i))
		}
	})

	t.Run("RejectsBadMessage", func(t *testing.T) {
		h := newHarness(t)
		for _, m := range []expiry.Message{{OrderNo: "", Hop: 1}, {OrderNo: "a{b}", Hop: 1}, {OrderNo: "ok", Hop: 0}} {
			assert.Error(t, h.Sender.Send(ctx, m, h.Delay), "%+v", m)
		}
	})

	t.Run("HonoursContext", func(t *testing.T) {
		h := newHarness(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.Error(t, h.Sender.Send(cctx, expiry.Message{OrderNo: "ctx-1", Hop: 1}, h.Delay))
	})
}
