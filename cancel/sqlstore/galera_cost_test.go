package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// EnvBenchGalera, set to 1, runs TestGaleraProofCost on the first node of
// OE_GALERA_DSNS; unset, it is skipped, so the normal test run stays fast.
const EnvBenchGalera = "OE_BENCH_GALERA"

// TestGaleraProofCost times what the transaction's proof (galera.go) costs
// on a Galera node: payments and cancels, one at a time on one connection,
// with the proof and with it switched off (the store told it is not on
// Galera), in alternating rounds on the same node and table. It logs FIGURE
// lines: the median call of each and their ratio.
func TestGaleraProofCost(t *testing.T) {
	if os.Getenv(EnvBenchGalera) != "1" {
		t.Skipf("set %s=1 (and OE_GALERA_DSNS) to time the Galera proof", EnvBenchGalera)
	}
	raw := strings.Split(os.Getenv("OE_GALERA_DSNS"), ",")[0]
	cfg, err := mysql.ParseDSN(strings.TrimSpace(raw))
	require.NoError(t, err)
	ctx := context.Background()
	name := "oe_cost_" + testenv.Unique()
	admin := cfg.Clone()
	admin.DBName = ""
	adb, err := sql.Open("mysql", admin.FormatDSN())
	require.NoError(t, err)
	defer adb.Close()
	_, err = adb.Exec("CREATE DATABASE `" + name + "`")
	require.NoError(t, err)
	defer adb.Exec("DROP DATABASE `" + name + "`") //nolint:errcheck // best effort
	c := cfg.Clone()
	c.DBName = name
	db, err := sql.Open("mysql", c.FormatDSN())
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1) // one call at a time: the round trips, not the contention

	s := migrated(t, db, MySQL)
	require.NoError(t, s.inTx(ctx, nil, func(*sql.Tx) error { return nil }))
	require.EqualValues(t, 1, s.galera.Load(), "the node is a Galera node")
	const rounds, perRound = 6, 100
	now, err := s.Now(ctx)
	require.NoError(t, err)
	times := map[string][]time.Duration{}
	for r := 0; r < rounds; r++ {
		for _, proof := range []bool{r%2 == 0, r%2 != 0} { // alternate which goes first
			mode := map[bool]string{true: "proof", false: "none"}[proof]
			s.galera.Store(map[bool]int32{true: 1, false: 2}[proof])
			for i := 0; i < perRound; i++ {
				no := fmt.Sprintf("c%d-%s-%d", r, mode, i)
				p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "show", Seats: []string{no + "-a", no + "-b"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, s.Place(ctx, db, p))
				t0 := time.Now()
				var err error
				if i%2 == 0 {
					_, err = s.PayPending(ctx, cancel.Payment{OrderNo: no, UserID: "u1", PaymentID: "p-" + no})
					times["pay "+mode] = append(times["pay "+mode], time.Since(t0))
				} else {
					_, err = s.CancelPending(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonUser, UserID: "u1"})
					times["cancel "+mode] = append(times["cancel "+mode], time.Since(t0))
				}
				require.NoError(t, err)
			}
		}
	}
	med := func(k string) time.Duration {
		d := slices.Clone(times[k])
		slices.Sort(d)
		return d[len(d)/2]
	}
	for _, op := range []string{"pay", "cancel"} {
		with, without := med(op+" proof"), med(op+" none")
		t.Logf("FIGURE galera-proof op=%s calls=%d each median_us proof=%d none=%d ratio=%.2f",
			op, len(times[op+" proof"]), with.Microseconds(), without.Microseconds(), float64(with)/float64(without))
	}
}
