package expiry_test

import (
	"context"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// BenchmarkShellProcess: what a transport calls per delivered body (decode,
// trace id, timing, Handler, verdict), on the in-memory stores.
func BenchmarkShellProcess(b *testing.B) {
	ctx := context.Background()
	b.Run("cancel", func(b *testing.B) {
		e := newBenchEnv(b)
		nos := e.place(b, "c", b.N, time.Now().Add(-time.Minute))
		bodies := make([][]byte, len(nos))
		for i, no := range nos {
			bodies[i], _ = expiry.EncodeMessage(expiry.Message{OrderNo: no, Hop: 1})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if e.shell.Process(ctx, expiry.Delivery{Body: bodies[i], TraceID: "trace-1"}) != expiry.Ack {
				b.Fatal("retry")
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		e := newBenchEnv(b)
		no := e.place(b, "d", 1, time.Now().Add(-time.Minute))[0]
		body, _ := expiry.EncodeMessage(expiry.Message{OrderNo: no, Hop: 1})
		e.shell.Process(ctx, expiry.Delivery{Body: body})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if e.shell.Process(ctx, expiry.Delivery{Body: body, TraceID: "trace-1"}) != expiry.Ack {
				b.Fatal("retry")
			}
		}
	})
	b.Run("bad-message", func(b *testing.B) {
		e := newBenchEnv(b)
		body := []byte("oe1 a{b} 1")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			e.shell.Process(ctx, expiry.Delivery{Body: body})
		}
	})
}
