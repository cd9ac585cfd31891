package inproc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/expiry/inproc"
	"github.com/seatflow/orderexpiry/levels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chanConsumer decodes like a transport's consumer and forwards deliveries.
type chanConsumer struct {
	ch      chan expirytest.Delivery
	verdict func(expiry.Message) expiry.Verdict
}

func (c chanConsumer) Process(_ context.Context, d expiry.Delivery) expiry.Verdict {
	m, err := expiry.DecodeMessage(d.Body)
	if err != nil {
		return expiry.Ack
	}
	m.TraceID = d.TraceID
	c.ch <- expirytest.Delivery{Message: m, At: time.Now()}
	if c.verdict != nil {
		return c.verdict(m)
	}
	return expiry.Ack
}

func TestConformance(t *testing.T) {
	expirytest.RunSender(t, func(t *testing.T) expirytest.SenderHarness {
		s := inproc.New(inproc.Config{})
		ch := make(chan expirytest.Delivery, 100)
		s.Attach(chanConsumer{ch: ch})
		t.Cleanup(func() { s.Close() })
		return expirytest.SenderHarness{Sender: s, Received: ch, Delay: 200 * time.Millisecond, Tolerance: 150 * time.Millisecond}
	})
}

func TestLevelsMode(t *testing.T) {
	clock := expirytest.NewFakeClock(time.Unix(0, 0))
	var levelsSeen []int
	sent := expiry.ObserverFunc(func(_ context.Context, e expiry.Event) {
		if e.Kind == expiry.KindSent {
			levelsSeen = append(levelsSeen, e.Level)
		}
	})
	s := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock, Observer: sent}, Levels: levels.Default})
	defer s.Close()
	ch := make(chan expirytest.Delivery, 10)
	s.Attach(chanConsumer{ch: ch})
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "o1", Hop: 1}, 7*time.Second))
	assert.Equal(t, []int{2}, levelsSeen, "7s rounds down to the 5s level")
	clock.Advance(5*time.Second - time.Millisecond)
	assert.Empty(t, ch)
	clock.Advance(time.Millisecond)
	require.Len(t, ch, 1, "delivered at the level's delay: early, for the handler to re-arm")
}

func TestRetryAndHeld(t *testing.T) {
	clock := expirytest.NewFakeClock(time.Unix(0, 0))
	s := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}, RetryDelay: time.Second})
	defer s.Close()
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "o1", Hop: 1}, time.Second))
	clock.Advance(time.Second)
	assert.Equal(t, 1, s.Pending(), "held until a consumer is attached")
	var tries atomic.Int32
	ch := make(chan expirytest.Delivery, 10)
	s.Attach(chanConsumer{ch: ch, verdict: func(expiry.Message) expiry.Verdict {
		if tries.Add(1) < 3 {
			return expiry.Retry
		}
		return expiry.Ack
	}})
	assert.Len(t, ch, 1)
	clock.Advance(2 * time.Second)
	assert.Len(t, ch, 3, "retried until acknowledged")
	assert.Equal(t, 0, s.Pending())
}

func TestClose(t *testing.T) {
	s := inproc.New(inproc.Config{})
	ch := make(chan expirytest.Delivery, 10)
	s.Attach(chanConsumer{ch: ch})
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "o1", Hop: 1}, time.Hour))
	assert.Equal(t, 1, s.Pending())
	require.NoError(t, s.Close())
	assert.Equal(t, 0, s.Pending(), "pending messages are dropped, as documented")
	assert.ErrorIs(t, s.Send(context.Background(), expiry.Message{OrderNo: "o2", Hop: 1}, 0), inproc.ErrClosed)
}

// tracedConsumer is a consumer that also records each delivery's trace
// context.
type tracedConsumer struct {
	chanConsumer
	traces chan expiry.Trace
}

func (c tracedConsumer) Process(ctx context.Context, d expiry.Delivery) expiry.Verdict {
	c.traces <- d.Trace
	return c.chanConsumer.Process(ctx, d)
}

func TestTraceIsCarried(t *testing.T) {
	clock := expirytest.NewFakeClock(time.Unix(0, 0))
	s := inproc.New(inproc.Config{Runtime: expiry.Runtime{Clock: clock}, RetryDelay: time.Second})
	defer s.Close()
	tries := 0
	c := tracedConsumer{chanConsumer: chanConsumer{ch: make(chan expirytest.Delivery, 10), verdict: func(expiry.Message) expiry.Verdict {
		if tries++; tries == 1 {
			return expiry.Retry
		}
		return expiry.Ack
	}}, traces: make(chan expiry.Trace, 10)}
	s.Attach(c)
	tc := expiry.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "o1", Hop: 1, TraceID: "t1", Trace: tc}, time.Second))
	require.NoError(t, s.Send(context.Background(), expiry.Message{OrderNo: "o2", Hop: 1}, time.Second))
	clock.Advance(time.Second)
	clock.Advance(time.Second) // the redelivery of o1
	require.Len(t, c.traces, 3)
	got := map[expiry.Trace]int{}
	for range 3 {
		got[<-c.traces]++
	}
	assert.Equal(t, map[expiry.Trace]int{tc: 2, {}: 1}, got, "the trace context on the delivery and on its redelivery; none on a message sent without")
}
