package expiry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The hot path's cost without I/O: the Handler and cancel.Service on the
// in-memory stores of cancel/memstore. What is measured is the library's
// own work plus the fake stores' map and mutex; run with -benchmem.
//
//	go test -run '^$' -bench . -benchmem ./expiry/

type benchSender struct{}

func (benchSender) Send(context.Context, expiry.Message, time.Duration) error { return nil }

type benchEnv struct {
	store *memstore.Store
	seats *memstore.Seats
	h     *expiry.Handler
	shell *expiry.Shell
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	e := &benchEnv{store: memstore.NewStore(nil), seats: memstore.NewSeats(nil)}
	// Logs are formatted as in production (text, Info level: Debug is off)
	// but thrown away.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Logger: log}})
	if err != nil {
		b.Fatal(err)
	}
	e.h, err = expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Sender: benchSender{}, Runtime: expiry.Runtime{Logger: log}})
	if err != nil {
		b.Fatal(err)
	}
	e.shell = expiry.NewShell(e.h)
	return e
}

// place puts n pending orders (2 locked seats each) due at expireAt.
func (e *benchEnv) place(b *testing.B, prefix string, n int, expireAt time.Time) []string {
	b.Helper()
	ctx := context.Background()
	nos := make([]string, n)
	for i := range nos {
		no := fmt.Sprintf("%s-%d", prefix, i)
		p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "show1", Seats: []string{no + "-a", no + "-b"}, ExpireAt: expireAt}
		if _, err := e.seats.Lock(ctx, p.Hold(), 0); err != nil {
			b.Fatal(err)
		}
		if err := e.store.Place(ctx, p); err != nil {
			b.Fatal(err)
		}
		nos[i] = no
	}
	return nos
}

// BenchmarkHandlerHandle: a due order is cancelled (lookup, CAS, seat
// release); a duplicate delivery of a cancelled order (lookup only); an
// early arrival re-armed (lookup, send).
func BenchmarkHandlerHandle(b *testing.B) {
	ctx := context.Background()
	b.Run("cancel", func(b *testing.B) {
		e := newBenchEnv(b)
		nos := e.place(b, "c", b.N, time.Now().Add(-time.Minute))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if out, err := e.h.Handle(ctx, expiry.Message{OrderNo: nos[i], Hop: 1}); out != expiry.OutcomeCancelled || err != nil {
				b.Fatal(out, err)
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		e := newBenchEnv(b)
		no := e.place(b, "d", 1, time.Now().Add(-time.Minute))[0]
		if _, err := e.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if out, _ := e.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1}); out != expiry.OutcomeFinal {
				b.Fatal(out)
			}
		}
	})
	b.Run("rearm", func(b *testing.B) {
		e := newBenchEnv(b)
		no := e.place(b, "r", 1, time.Now().Add(time.Hour))[0]
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if out, _ := e.h.Handle(ctx, expiry.Message{OrderNo: no, Hop: 1}); out != expiry.OutcomeRearmed {
				b.Fatal(out)
			}
		}
	})
}
