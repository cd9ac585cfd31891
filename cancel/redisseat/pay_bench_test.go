package redisseat_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// BenchmarkPay measures cancel.Service.Pay (the SQL compare-and-set and the
// sale of the seats in Redis) with the seat store as wired (ledger: the
// refund record is read first, cancel.SeatStore.Refunded, one more Redis round
// trip per payment) against the same store with that record hidden
// (noledger), on MariaDB and on PostgreSQL. The two alternate payment by
// payment over orders placed before the timer starts, so that a drift of
// the machine's load weighs on both alike; ledger-% is the first's time as
// a share of the second's. The results and the command are in README.md.
func BenchmarkPay(b *testing.B) {
	for _, db := range []struct {
		name string
		d    sqlstore.Dialect
		open func(testing.TB) *sql.DB
	}{{"mariadb", sqlstore.MySQL, testenv.MySQL}, {"postgres", sqlstore.Postgres, testenv.Postgres}} {
		b.Run(db.name, func(b *testing.B) {
			ctx := context.Background()
			sqldb := db.open(b)
			store, err := sqlstore.New(sqldb, db.d)
			require.NoError(b, err)
			b.Cleanup(func() { store.Close() })
			require.NoError(b, store.Migrate(ctx))
			seats, err := redisseat.New(testenv.Redis(b), "oe-paybench-"+testenv.Unique())
			require.NoError(b, err)
			ledger, err := cancel.New(cancel.Config{Store: store, Seats: seats})
			require.NoError(b, err)
			hidden, err := cancel.New(cancel.Config{Store: store, Seats: struct{ cancel.SeatStore }{seats}})
			require.NoError(b, err)
			svcs := [2]*cancel.Service{ledger, hidden}
			prefix := testenv.Unique()
			nos := make([]string, b.N)
			for i := range nos {
				nos[i] = fmt.Sprintf("p%s-%d", prefix, i)
				p := cancel.Placement{OrderNo: nos[i], UserID: "u1", ShowID: "show-" + prefix, Seats: []string{"s" + nos[i]}, ExpireAt: time.Now().Add(time.Hour)}
				require.NoError(b, ledger.Place(ctx, p, store.Insert(sqldb, nil)))
			}
			var spent [2]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				res, err := svcs[i%2].Pay(ctx, cancel.Payment{OrderNo: nos[i], PaymentID: "pay-" + nos[i]})
				spent[i%2] += time.Since(start)
				if err != nil || !res.Changed {
					b.Fatalf("pay %s: changed %v, %v", nos[i], res.Changed, err)
				}
			}
			b.StopTimer()
			ledgerNs := float64(spent[0].Nanoseconds()) / float64((b.N+1)/2)
			hiddenNs := float64(spent[1].Nanoseconds()) / float64(max(b.N/2, 1))
			b.ReportMetric(ledgerNs, "ledger-ns/pay")
			b.ReportMetric(hiddenNs, "noledger-ns/pay")
			b.ReportMetric(100*ledgerNs/hiddenNs, "ledger-%")
		})
	}
}
