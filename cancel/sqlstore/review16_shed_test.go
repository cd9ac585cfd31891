package sqlstore_test

// Review of 5b820b7 (MariaDB's batch sheds the orders that changed between
// its pick and its lock and tries again, with no bound). Judged by
// outcomes against expiry/doc.go: I1, I2, I5, I12 and liveness.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestReview16ShedEveryOrder (I1, liveness): every listed order changes
// between the batch's pick and its lock (a one-order batch whose buyer
// pays it in that instant, and a two-order batch both paid). The batch
// sheds them all; it must then end with nothing cancelled and no error,
// not fail or panic on an empty list.
func TestReview16ShedEveryOrder(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-orders", n), func(t *testing.T) {
			ctx := context.Background()
			db, sc := pickStepMySQL(t)
			s := hostStore(t, db, sqlstore.MySQL, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			var nos []string
			for i := 0; i < n; i++ {
				no := fmt.Sprintf("r16all-%d", i)
				nos = append(nos, no)
				p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
			}
			var changeErr error
			locks := r6EveryLock(sc, func(k int) {
				if k == 1 {
					_, changeErr = db.ExecContext(ctx, "UPDATE order_info SET status = 1, pay_no = 'P' WHERE order_no LIKE 'r16all-%'")
				}
			})
			var res []cancel.Result
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("CancelDue panicked after shedding every order: %v", p)
					}
				}()
				res, err = s.CancelDue(ctx, nos, cancel.ReasonTimeout)
			}()
			require.NoError(t, changeErr)
			t.Logf("locking reads %d: %v, %v", *locks, res, err)
			assert.NoError(t, err)
			assert.Empty(t, res)
			for _, no := range nos {
				assert.Equal(t, 1, r6status(t, db, no), "I1: %s stays paid", no)
				assert.Equal(t, 1, r6seats(t, db, no), "%s keeps its seat", no)
			}
		})
	}
}

// TestReview16ShedOneByOneUntilNoneLeft (I1, liveness): a batch of three
// due orders; before each of its locking reads the buyer of one more pays
// (a before the first, b before the second, c before the third). Each
// attempt sheds one; the third leaves the list empty. The batch must end
// with nothing cancelled, no error, the three paid.
func TestReview16ShedOneByOneUntilNoneLeft(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, seatflow)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	nos := []string{"r16a", "r16b", "r16c"}
	for i, no := range nos {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, s.Insert(db, nil)(ctx, p))
	}
	var changeErr error
	locks := r6EveryLock(sc, func(k int) {
		if k <= len(nos) {
			if _, err := db.ExecContext(ctx, "UPDATE order_info SET status = 1, pay_no = ? WHERE order_no = ?", "P"+nos[k-1], nos[k-1]); err != nil {
				changeErr = err
			}
		}
	})
	var res []cancel.Result
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("CancelDue panicked: %v", p)
			}
		}()
		res, err = s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	}()
	require.NoError(t, changeErr)
	t.Logf("locking reads %d: %v, %v", *locks, res, err)
	assert.NoError(t, err)
	assert.Empty(t, res)
	for _, no := range nos {
		assert.Equal(t, 1, r6status(t, db, no), "I1: %s stays paid", no)
	}
}

// TestReview16ShedThenDueAgain (I2, I5, liveness): an order extended
// between pick and lock, then shortened (due again) before the batch's
// next attempt. The batch sheds it (it may leave it to the next round);
// it must not report it, and the next batch cancels it once with its
// seats. The other listed orders are cancelled once.
func TestReview16ShedThenDueAgain(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, seatflow)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	nos := []string{"fa", "fb", "fc"}
	for i, no := range nos {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, s.Insert(db, nil)(ctx, p))
	}
	var changeErr [2]error
	locks := r6EveryLock(sc, func(k int) {
		switch k {
		case 1:
			_, changeErr[0] = db.ExecContext(ctx, "UPDATE order_info SET expire_time = UTC_TIMESTAMP() + INTERVAL 1 HOUR WHERE order_no = 'fb'")
		case 2:
			_, changeErr[1] = db.ExecContext(ctx, "UPDATE order_info SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 MINUTE WHERE order_no = 'fb'")
		}
	})
	var mu sync.Mutex
	hooks := map[string]int{}
	s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		mu.Lock()
		hooks[r.Order.No]++
		mu.Unlock()
		return nil
	})
	res, err := s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	require.NoError(t, err)
	require.NoError(t, changeErr[0])
	require.NoError(t, changeErr[1])
	got := map[string]int{}
	for _, r := range res {
		got[r.Order.No]++
	}
	t.Logf("locking reads %d: %v; hooks %v", *locks, got, hooks)
	assert.Equal(t, map[string]int{"fa": 1, "fc": 1}, got)
	assert.Equal(t, map[string]int{"fa": 1, "fc": 1}, hooks, "I5: a hook per reported order")
	assert.Equal(t, 1, r6seats(t, db, "fb"), "fb keeps its seat: not cancelled")
	again, err := s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	require.NoError(t, err)
	require.Len(t, again, 1)
	assert.Equal(t, "fb", again[0].Order.No)
	assert.Equal(t, []string{"s1"}, again[0].Seats, "I2: its seats reported with its cancel")
	assert.Equal(t, 2, r6status(t, db, "fb"))
	assert.Equal(t, 0, r6seats(t, db, "fb"))
}

// galeraStep opens a fresh database on the Galera cluster: a stepped pool
// on node 1 and a plain one on node 2.
func galeraStep(t *testing.T) (*sql.DB, *pickStepConnector, *sql.DB) {
	dsns := strings.Split(os.Getenv("OE_GALERA_DSNS"), ",")
	if len(dsns) < 2 {
		t.Skip("OE_GALERA_DSNS not set")
	}
	cfg1, err := mysql.ParseDSN(strings.TrimSpace(dsns[0]))
	require.NoError(t, err)
	cfg2, err := mysql.ParseDSN(strings.TrimSpace(dsns[1]))
	require.NoError(t, err)
	name := "oe_r16_" + testenv.Unique()
	admin := cfg1.Clone()
	admin.DBName = ""
	adb, err := sql.Open("mysql", admin.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { adb.Close() })
	_, err = adb.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = adb.Exec("DROP DATABASE `" + name + "`") })
	cfg1.DBName, cfg2.DBName = name, name
	conn, err := mysql.NewConnector(cfg1)
	require.NoError(t, err)
	sc := &pickStepConnector{base: conn}
	db := sql.OpenDB(sc)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	db2, err := sql.Open("mysql", cfg2.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db2.Close() })
	return db, sc, db2
}

// TestReview16GaleraPaidOnAnotherNode (I1, I2, liveness): on Galera, the
// batch runs on node 1 and the buyers pay on node 2 between its pick and
// its lock. "part": one of three paid, the other two cancelled once and
// the paid one kept; "all": both listed orders paid, nothing cancelled,
// no error.
func TestReview16GaleraPaidOnAnotherNode(t *testing.T) {
	for _, all := range []bool{false, true} {
		t.Run(map[bool]string{false: "part", true: "all"}[all], func(t *testing.T) {
			ctx := context.Background()
			db, sc, db2 := galeraStep(t)
			s := hostStore(t, db, sqlstore.MySQL, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			nos := []string{"ga", "gb", "gc"}
			pay := "UPDATE order_info SET status = 1, pay_no = 'P' WHERE order_no = 'gb'"
			if all {
				nos = []string{"ga", "gb"}
				pay = "UPDATE order_info SET status = 1, pay_no = 'P' WHERE order_no IN ('ga', 'gb')"
			}
			for i, no := range nos {
				p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
			}
			// node 2 sees the orders before it pays them
			require.Eventually(t, func() bool {
				var n int
				_ = db2.QueryRow("SELECT COUNT(*) FROM order_info").Scan(&n)
				return n == len(nos)
			}, 3*time.Second, 20*time.Millisecond)
			var payErr error
			locks := r6EveryLock(sc, func(k int) {
				if k == 1 {
					_, payErr = db2.ExecContext(ctx, pay)
				}
			})
			var res []cancel.Result
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("CancelDue panicked: %v", p)
					}
				}()
				res, err = s.CancelDue(ctx, nos, cancel.ReasonTimeout)
			}()
			require.NoError(t, payErr)
			got := map[string]int{}
			for _, r := range res {
				got[r.Order.No]++
			}
			t.Logf("locking reads %d: %v, %v", *locks, got, err)
			assert.NoError(t, err)
			want := map[string]int{"ga": 1, "gc": 1}
			if all {
				want = map[string]int{}
			}
			assert.Equal(t, want, got)
			assert.Equal(t, 1, r6status(t, db, "gb"), "I1: gb stays paid")
			assert.Equal(t, 1, r6seats(t, db, "gb"))
		})
	}
}

// TestReview16WaveAttempts (liveness): a batch of 64 due orders; before
// each locking read one more of them is paid, 63 in all. The batch sheds
// one per attempt and must end, cancelling the last, within a few
// seconds. Logged: attempts and time.
func TestReview16WaveAttempts(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, seatflow)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	const n = 64
	var nos []string
	for i := 0; i < n; i++ {
		no := fmt.Sprintf("wv%03d", i)
		nos = append(nos, no)
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{"s" + no}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, s.Insert(db, nil)(ctx, p))
	}
	var changeErr error
	locks := r6EveryLock(sc, func(k int) {
		if k < n {
			if _, err := db.ExecContext(ctx, "UPDATE order_info SET status = 1 WHERE order_no = ?", nos[k-1]); err != nil {
				changeErr = err
			}
		}
	})
	began := time.Now()
	res, err := s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	took := time.Since(began)
	require.NoError(t, changeErr)
	t.Logf("locking reads %d in %v", *locks, took)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, nos[n-1], res[0].Order.No)
	assert.Equal(t, n, *locks)
	assert.Less(t, took, 5*time.Second)
}
