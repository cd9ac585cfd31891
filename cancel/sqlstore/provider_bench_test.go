package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// latencyProvider answers "not paid" after a fixed latency: a provider
// whose buyers never started paying, as fast or as slow as a real one.
type latencyProvider time.Duration

func (l latencyProvider) QueryPayment(ctx context.Context, _ expiry.Order) (cancel.PaymentAnswer, error) {
	if l > 0 {
		t := time.NewTimer(time.Duration(l))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return cancel.PaymentAnswer{}, ctx.Err()
		}
	}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// ClosePayment closes at once: no session was opened.
func (latencyProvider) ClosePayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// BenchmarkTimeoutProvider is the expiry path (Service.Timeout of a due
// order, one at a time, as one consumer goroutine runs it) without a
// provider, with one that answers at once, and with one that answers in
// 5 ms, on MariaDB and PostgreSQL with Redis seats. ns/op is the rate;
// p50-ms and p99-ms are each call's time, which is the lateness the query
// adds to a cancel. The command and the figures are in cancel/README.md.
func BenchmarkTimeoutProvider(b *testing.B) {
	for _, db := range []struct {
		name string
		d    sqlstore.Dialect
		open func(testing.TB) *sql.DB
	}{{"MariaDB", sqlstore.MySQL, testenv.MySQL}, {"Postgres", sqlstore.Postgres, testenv.Postgres}} {
		for _, p := range []struct {
			name string
			prov cancel.PaymentProvider
		}{{"off", nil}, {"instant", latencyProvider(0)}, {"5ms", latencyProvider(5 * time.Millisecond)}} {
			b.Run(db.name+"/"+p.name, func(b *testing.B) {
				ctx := context.Background()
				sdb := db.open(b)
				s, err := sqlstore.New(sdb, db.d)
				require.NoError(b, err)
				b.Cleanup(func() { s.Close() })
				require.NoError(b, s.Migrate(ctx))
				seats, err := redisseat.New(testenv.Redis(b), "oe-bp-"+testenv.Unique())
				require.NoError(b, err)
				svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, Provider: p.prov,
					Runtime: expiry.Runtime{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
				require.NoError(b, err)
				now, err := s.Now(ctx)
				require.NoError(b, err)
				u, show := testenv.Unique(), "show-"+testenv.Unique()
				nos := make([]string, b.N)
				for i := range nos {
					nos[i] = fmt.Sprintf("bp%s-%d", u, i)
					pl := cancel.Placement{OrderNo: nos[i], UserID: "u", ShowID: show, Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-time.Second)}
					require.NoError(b, svc.Place(ctx, pl, s.Insert(sdb, nil)))
				}
				took := make([]time.Duration, b.N)
				b.ResetTimer()
				for i, no := range nos {
					t0 := time.Now()
					cancelled, _, err := svc.Timeout(ctx, no)
					took[i] = time.Since(t0)
					if err != nil || !cancelled {
						b.Fatalf("timeout of %s: cancelled %v, %v", no, cancelled, err)
					}
				}
				b.StopTimer()
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}
