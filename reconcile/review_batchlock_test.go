package reconcile_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Kept open behind a build tag until the batch's MariaDB lock was split in
// a plain pick and a lock by number (batchPick, batchLock): it failed on
// main (the not-due order, held through the status index) and worse on
// 14c7135 (the paid one too), which locked the listed rows alone.
//
// TestReviewBatchLockHoldsOrdersItDoesNotCancel (review of 14c7135, I12):
// a batch lists a due order whose hook is stuck (waits on a coupon row an
// admin holds) with two orders it will not cancel: one the buyer paid
// since the reconciler listed it, one extended since (pending, not due).
// The batch keeps neither, so it must hold neither: a repeated payment
// callback of the paid one and the buyer's payment of the extended one
// answer at once, while the stuck hook holds its own batch. Judged by
// rows: the extended order is paid, within a second.
func TestReviewBatchLockHoldsOrdersItDoesNotCancel(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			e := newAtkEnv(t, d, testenv.Redis(t))
			_, err := e.db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
			require.NoError(t, err)
			_, err = e.db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
			require.NoError(t, err)
			show := "ev" + testenv.Unique()
			stuck := e.place(t, "stuck"+testenv.Unique(), "u0", show, e.now.Add(-2*time.Minute), "s-stuck")
			paid := e.place(t, "paid"+testenv.Unique(), "u1", show, e.now.Add(time.Hour), "s-paid")
			later := e.place(t, "later"+testenv.Unique(), "u2", show, e.now.Add(time.Hour), "s-later")
			payPaid := cancel.Payment{OrderNo: paid.OrderNo, UserID: paid.UserID, PaymentID: "pay-" + testenv.Unique()}
			_, err = e.svc.Pay(ctx, payPaid)
			require.NoError(t, err)

			admin, err := e.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = admin.Rollback() })
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
			bctx, cancelBatch := context.WithTimeout(ctx, 6*time.Second)
			defer cancelBatch()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.store.CancelDue(bctx, []string{stuck.OrderNo, paid.OrderNo, later.OrderNo}, cancel.ReasonTimeout)
				t.Logf("batch: %v", err)
			}()
			select {
			case <-hookIn:
			case <-time.After(5 * time.Second):
				t.Fatal("the batch never reached the stuck hook")
			}
			time.Sleep(200 * time.Millisecond)

			pctx, cancelPay := context.WithTimeout(ctx, time.Second)
			began := time.Now()
			_, errRepeat := e.svc.Pay(pctx, payPaid)
			t.Logf("repeated callback of the paid order: %v after %v", errRepeat, time.Since(began))
			cancelPay()
			assert.NoError(t, errRepeat, "I12/I14: a repeated callback of an order the batch does not cancel waits on another order's stuck hook")

			pctx, cancelPay = context.WithTimeout(ctx, time.Second)
			began = time.Now()
			_, errPay := e.svc.Pay(pctx, cancel.Payment{OrderNo: later.OrderNo, UserID: later.UserID, PaymentID: "pay-" + testenv.Unique()})
			t.Logf("payment of the extended order: %v after %v", errPay, time.Since(began))
			cancelPay()
			assert.NoError(t, errPay, "I12: the buyer's payment of a pending order not due waits on another order's stuck hook")

			require.NoError(t, admin.Rollback())
			wg.Wait()
			assert.Equal(t, expiry.StatusPaid, e.status(t, paid.OrderNo))
			assert.Equal(t, expiry.StatusPaid, e.status(t, later.OrderNo), "I12: the order not due is paid by its buyer, not held back")
		})
	}
}
