package expiry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
)

func TestShell(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.place(t, "o1", time.Minute)
	shell := expiry.NewShell(w.h)

	// Bad input is acknowledged and counted, and does not stop the next message.
	for _, body := range [][]byte{nil, []byte("garbage"), []byte("oe1 {x} 1"), make([]byte, 1<<20)} {
		assert.Equal(t, expiry.Ack, shell.Process(ctx, expiry.Delivery{Body: body}))
	}
	assert.Equal(t, 4, w.rec.count(expiry.KindBadMessage), "I7: bad input is counted")

	w.clock.Advance(time.Minute)
	assert.Equal(t, expiry.Ack, shell.Process(ctx, expiry.Delivery{Body: []byte("oe1 o1 1"), TraceID: "trace-9"}))
	assert.Equal(t, expiry.StatusCancelled, w.status(t, "o1"))
	var handled []expiry.Event
	for _, e := range w.rec.events {
		if e.Kind == expiry.KindHandled {
			handled = append(handled, e)
		}
	}
	require.Len(t, handled, 1)
	assert.Equal(t, expiry.OutcomeCancelled, handled[0].Outcome)
	assert.Equal(t, 1, handled[0].Hop)

	// A transient failure asks for redelivery.
	w.store.Fail = func(op string) error {
		if op == "CancelPending" {
			return errors.New("database down")
		}
		return nil
	}
	assert.Equal(t, expiry.Retry, shell.Process(ctx, expiry.Delivery{Body: []byte("oe1 o1 1")}))
}

func TestShellRestoresTraceID(t *testing.T) {
	canc := &stubCanceller{err: expiry.ErrNotFound}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: canc, Sender: &recorder{}})
	require.NoError(t, err)
	assert.Equal(t, expiry.Ack, expiry.NewShell(h).Process(context.Background(), expiry.Delivery{Body: []byte("oe1 o1 1"), TraceID: "abc"}))
	assert.Equal(t, "abc", canc.trace)
}
