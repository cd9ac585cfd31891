package expiry_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
)

const validParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// traceRecorder is a Tracer that records what the library asked of it. Each
// send gets a trace context naming its hop, so a test can follow the chain.
type traceRecorder struct {
	mu      sync.Mutex
	sends   []expiry.Message // the message as StartSend saw it
	sendErr []error
	handles []expiry.Message
	ended   []expiry.Outcome
	ctxKey  any
}

type spanKey struct{}

func (r *traceRecorder) StartSend(ctx context.Context, m expiry.Message, _ time.Duration) (context.Context, expiry.Trace, func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends = append(r.sends, m)
	i := len(r.sends) - 1
	r.sendErr = append(r.sendErr, nil)
	tc := expiry.Trace{Parent: validParent, State: "hop=" + strings.Repeat("x", m.Hop)}
	return context.WithValue(ctx, spanKey{}, "send"), tc, func(err error) {
		r.mu.Lock()
		r.sendErr[i] = err
		r.mu.Unlock()
	}
}

func (r *traceRecorder) StartHandle(ctx context.Context, m expiry.Message) (context.Context, func(expiry.Outcome, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handles = append(r.handles, m)
	return context.WithValue(ctx, spanKey{}, "handle"), func(o expiry.Outcome, _ error) {
		r.mu.Lock()
		r.ended = append(r.ended, o)
		r.mu.Unlock()
	}
}

// The hostile cases of a carried trace context: the transport hands the
// Shell whatever was in the message's properties.
func TestTraceClean(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   expiry.Trace
		want expiry.Trace
	}{
		{"none", expiry.Trace{}, expiry.Trace{}},
		{"valid", expiry.Trace{Parent: validParent, State: "a=1,b=2"}, expiry.Trace{Parent: validParent, State: "a=1,b=2"}},
		// The bounds are inclusive: a propagator's tracestate truncated to
		// exactly 512 bytes, and a traceparent of exactly the bound, are
		// carried whole.
		{"parent at the bound is kept", expiry.Trace{Parent: strings.Repeat("0", expiry.MaxTraceParentLen), State: "a=1"}, expiry.Trace{Parent: strings.Repeat("0", expiry.MaxTraceParentLen), State: "a=1"}},
		{"state at the bound is kept", expiry.Trace{Parent: validParent, State: strings.Repeat("a", expiry.MaxTraceStateLen)}, expiry.Trace{Parent: validParent, State: strings.Repeat("a", expiry.MaxTraceStateLen)}},
		{"oversized parent drops both", expiry.Trace{Parent: strings.Repeat("0", expiry.MaxTraceParentLen+1), State: "a=1"}, expiry.Trace{}},
		{"oversized state drops the state", expiry.Trace{Parent: validParent, State: strings.Repeat("a", expiry.MaxTraceStateLen+1)}, expiry.Trace{Parent: validParent}},
		{"control bytes in the parent", expiry.Trace{Parent: validParent[:10] + "\x01" + validParent[11:]}, expiry.Trace{}},
		{"newline in the state", expiry.Trace{Parent: validParent, State: "a=1\nb=2"}, expiry.Trace{Parent: validParent}},
		{"non-ASCII", expiry.Trace{Parent: validParent, State: "a=ü"}, expiry.Trace{Parent: validParent}},
		{"a state without a parent means nothing", expiry.Trace{State: "a=1"}, expiry.Trace{}},
		// Malformed but bounded and printable: the Tracer's parser decides
		// (a new root), the library only bounds what it carries.
		{"malformed but printable passes", expiry.Trace{Parent: "not-a-traceparent"}, expiry.Trace{Parent: "not-a-traceparent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.in.Clean())
		})
	}
}

func TestShellHandsTheTraceToTheTracer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		in   expiry.Trace
		want expiry.Trace
	}{
		{"carried", expiry.Trace{Parent: validParent, State: "k=v"}, expiry.Trace{Parent: validParent, State: "k=v"}},
		{"missing", expiry.Trace{}, expiry.Trace{}},
		{"malformed", expiry.Trace{Parent: "00-zz"}, expiry.Trace{Parent: "00-zz"}},
		{"oversized", expiry.Trace{Parent: strings.Repeat("f", 1<<16), State: strings.Repeat("s", 1<<16)}, expiry.Trace{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.place(t, "o1", time.Minute)
			tr := &traceRecorder{}
			h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.rec, Runtime: expiry.Runtime{Observer: w.rec, Tracer: tr}})
			require.NoError(t, err)
			shell := expiry.NewShell(h)
			w.clock.Advance(time.Minute)
			assert.Equal(t, expiry.Ack, shell.Process(ctx, expiry.Delivery{Body: []byte("oe1 o1 1"), TraceID: "t1", Trace: tc.in}), "never dropped for its trace context")
			assert.Equal(t, expiry.StatusCancelled, w.status(t, "o1"), "handled whatever its trace context")
			require.Len(t, tr.handles, 1)
			assert.Equal(t, tc.want, tr.handles[0].Trace)
			assert.Equal(t, "t1", tr.handles[0].TraceID)
			assert.Equal(t, []expiry.Outcome{expiry.OutcomeCancelled}, tr.ended, "the handling span ends with the outcome")
		})
	}
}

func TestShellProcessIsUntraced(t *testing.T) {
	w := newWorld(t)
	w.place(t, "o1", time.Minute)
	tr := &traceRecorder{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.rec, Runtime: expiry.Runtime{Tracer: tr}})
	require.NoError(t, err)
	assert.Equal(t, expiry.Ack, expiry.NewShell(h).Process(context.Background(), expiry.Delivery{Body: []byte("oe1 o1 1")}))
	require.Len(t, tr.handles, 1, "a delivery without a trace context is handled in a new trace")
	assert.Equal(t, expiry.Trace{}, tr.handles[0].Trace)
}

// A re-armed chain of three hops: each message carries the trace context the
// Tracer gave for its send, and the send starts from the handling's context.
func TestRearmChainCarriesTrace(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.place(t, "o1", 45*time.Second)
	tr := &traceRecorder{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: w.svc, Sender: w.rec, Runtime: expiry.Runtime{Observer: w.rec, Tracer: tr}})
	require.NoError(t, err)
	shell := expiry.NewShell(h)
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: w.rec, Runtime: expiry.Runtime{Clock: w.clock, Tracer: tr}})
	require.NoError(t, err)
	require.True(t, sched.Schedule(ctx, "o1", w.clock.Now().Add(45*time.Second)))
	for hop, step := range []time.Duration{30 * time.Second, 10 * time.Second, 5 * time.Second} {
		w.clock.Advance(step)
		last := w.rec.sent[len(w.rec.sent)-1].m
		require.Equal(t, hop+1, last.Hop)
		require.Equal(t, expiry.Trace{Parent: validParent, State: "hop=" + strings.Repeat("x", hop+1)}, last.Trace, "hop %d carries its send's trace context", hop+1)
		assert.Equal(t, expiry.Ack, shell.Process(ctx, expiry.Delivery{Body: encode(t, last), Trace: last.Trace}))
	}
	assert.Equal(t, expiry.StatusCancelled, w.status(t, "o1"))
	assert.Len(t, tr.sends, 3, "the first send and two re-arms")
	assert.Len(t, tr.handles, 3)
	for i := 1; i < 3; i++ {
		assert.Equal(t, tr.handles[i-1].Trace, tr.sends[i].Trace, "a re-arm's send sees the trace of the message it re-arms")
	}
	assert.Equal(t, []expiry.Outcome{expiry.OutcomeRearmed, expiry.OutcomeRearmed, expiry.OutcomeCancelled}, tr.ended)
	assert.Equal(t, []error{nil, nil, nil}, tr.sendErr)
}

func TestSendFailureEndsTheSendSpan(t *testing.T) {
	w := newWorld(t)
	w.rec.err = assert.AnError
	tr := &traceRecorder{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: w.rec, Runtime: expiry.Runtime{Clock: w.clock, Tracer: tr}})
	require.NoError(t, err)
	assert.False(t, sched.Schedule(context.Background(), "o1", w.clock.Now().Add(time.Minute)))
	require.Len(t, tr.sendErr, 1)
	assert.ErrorIs(t, tr.sendErr[0], assert.AnError)
}

// Without a Tracer the library carries a message's trace context on
// unchanged, so a re-arm on an instance without tracing keeps the trace.
func TestNopTracerPassesTheTraceOn(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.place(t, "o1", time.Minute)
	shell := expiry.NewShell(w.h)
	in := expiry.Trace{Parent: validParent, State: "k=v"}
	assert.Equal(t, expiry.Ack, shell.Process(ctx, expiry.Delivery{Body: []byte("oe1 o1 1"), Trace: in}))
	require.Len(t, w.rec.sent, 1)
	assert.Equal(t, in, w.rec.sent[0].m.Trace)

	sctx, tc, end := expiry.NopTracer.StartSend(ctx, expiry.Message{OrderNo: "o1", Hop: 1, Trace: in}, time.Second)
	end(nil)
	assert.Equal(t, ctx, sctx)
	assert.Equal(t, in, tc)
}

// encode is EncodeMessage for a message the test knows to be valid.
func encode(t *testing.T, m expiry.Message) []byte {
	t.Helper()
	body, err := expiry.EncodeMessage(m)
	require.NoError(t, err)
	return body
}
