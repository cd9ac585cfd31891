package reconcile_test

// Review of 81b2c33 (MariaDB's batch rolls back and picks again when an
// order changed between its pick and its lock). Judged by outcomes against
// expiry/doc.go: whether an order the batch does not cancel waits on the
// batch (I12, I14), what the batch reports (I2), how many attempts a batch
// takes under a payment wave (liveness).

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// r6locks lists InnoDB's lock waits (MariaDB's information_schema): who
// waits, on which index record, held by whom, running what.
func r6locks(db *sql.DB) string {
	var b strings.Builder
	rows, err := db.Query(`SELECT r.trx_id, LEFT(r.trx_query, 200), l.lock_index, l.lock_data, w.blocking_trx_id, LEFT(COALESCE(bt.trx_query, '(idle in transaction)'), 120)
		FROM information_schema.INNODB_LOCK_WAITS w
		JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
		JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id
		JOIN information_schema.INNODB_TRX bt ON bt.trx_id = w.blocking_trx_id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	for rows.Next() {
		var v [6]sql.NullString
		_ = rows.Scan(&v[0], &v[1], &v[2], &v[3], &v[4], &v[5])
		fmt.Fprintf(&b, "\n  trx %s [%s] waits on %s (%s) held by trx %s [%s]", v[0].String, v[1].String, v[2].String, v[3].String, v[4].String, v[5].String)
	}
	return b.String()
}

// timed runs f under a deadline of d and, when it is still running after
// d/2, captures the lock waits.
func r6timed(db *sql.DB, d time.Duration, f func(ctx context.Context) error) (time.Duration, error, string) {
	ctx, cancelF := context.WithTimeout(context.Background(), d)
	defer cancelF()
	fin := make(chan struct{})
	waits := make(chan string, 1)
	go func() {
		select {
		case <-time.After(d / 2):
			waits <- r6locks(db)
		case <-fin:
			waits <- ""
		}
	}()
	began := time.Now()
	err := f(ctx)
	took := time.Since(began)
	close(fin)
	return took, err, <-waits
}

// TestReview6PaymentWaitsOnAStuckBatch (I12, I14), no repick involved:
// a batch of one due order ("stuck") whose hook waits on a row an admin
// holds; meanwhile the provider repeats the callback of "paid", an order
// paid before the batch began (not listed, never locked, never cancelled
// by it). The repeat must answer at once. Run on six fresh databases:
// MariaDB picks the payment's compare-and-set plan (WHERE order_no = ? AND
// status = 0 AND user_id = ?) by its statistics, and when the table holds
// few pending rows it range-scans oe_order_status_expire for status 0 and
// waits on the stuck order's entry, which the batch's compare-and-set
// locked (seen: 3 runs of 6; the lock wait is logged). This is also why
// 81b2c33's own TestReview5PaidBetweenPickAndLockHeldForTheBatch fails
// about one run in three at HEAD: its repeated callback waits on
// (0, deadline, 'stuck…') in oe_order_status_expire, not on the paid
// order's row, which the host's update reaches at once.
func TestReview6PaymentWaitsOnAStuckBatch(t *testing.T) {
	ctx := context.Background()
	var held []string
	const runs = 6
	for run := 0; run < runs; run++ {
		e, _ := newStepEnv(t)
		_, err := e.db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
		require.NoError(t, err)
		_, err = e.db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
		require.NoError(t, err)
		show := "ev" + testenv.Unique()
		stuck := e.place(t, "stuck"+testenv.Unique(), "u0", show, e.now.Add(-2*time.Minute), "s-stuck")
		paid := e.place(t, "paid"+testenv.Unique(), "u2", show, e.now.Add(time.Hour), "s-paid")
		payPaid := cancel.Payment{OrderNo: paid.OrderNo, UserID: paid.UserID, PaymentID: "pay-" + testenv.Unique()}
		_, err = e.svc.Pay(ctx, payPaid)
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond) // InnoDB's purge of the paid order's old status entry

		admin, err := e.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
		require.NoError(t, err)
		hookIn := make(chan struct{}, 1)
		e.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if r.Order.No != stuck.OrderNo {
				return nil
			}
			hookIn <- struct{}{}
			_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
			return err
		})
		bctx, cancelBatch := context.WithTimeout(ctx, 8*time.Second)
		var wg sync.WaitGroup
		var batch []cancel.Result
		var batchErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch, batchErr = e.store.CancelDue(bctx, []string{stuck.OrderNo}, cancel.ReasonTimeout)
		}()
		select {
		case <-hookIn:
		case <-time.After(6 * time.Second):
			t.Fatal("the batch never reached the stuck hook")
		}
		time.Sleep(100 * time.Millisecond)

		took, errRepeat, waits := r6timed(e.db, time.Second, func(ctx context.Context) error {
			_, err := e.svc.Pay(ctx, payPaid)
			return err
		})
		t.Logf("run %d: the repeated callback of an order paid before the batch: %v after %v%s", run, errRepeat, took.Round(time.Millisecond), waits)
		if errRepeat != nil {
			held = append(held, fmt.Sprintf("run %d: repeated callback of %s: %v", run, paid.OrderNo, errRepeat))
		}

		require.NoError(t, admin.Rollback())
		wg.Wait()
		cancelBatch()
		require.NoError(t, batchErr)
		require.Len(t, batch, 1)
		assert.Equal(t, expiry.StatusCancelled, e.status(t, stuck.OrderNo))
		assert.Equal(t, expiry.StatusPaid, e.status(t, paid.OrderNo))
	}
	assert.Empty(t, held, "I12/I14: a payment of an order no batch lists waits on another order's stuck hook (%d runs)", runs)
}

// r6CountLocks counts the batch's locking reads (every attempt makes one,
// and a deadlock's retry one more).
func r6CountLocks(sc *stepConnector) *atomic.Int32 {
	var n atomic.Int32
	var arm func()
	arm = func() {
		sc.arm(isBatchLock, func() {
			n.Add(1)
			arm()
		})
	}
	arm()
	return &n
}
