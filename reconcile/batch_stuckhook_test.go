package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// stamps records when each order's cancel was observed.
type stamps struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (s *stamps) Observe(_ context.Context, e expiry.Event) {
	if e.Kind != expiry.KindCancelled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.at[e.OrderNo] = time.Now()
}

func (s *stamps) of(no string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[no]
	return t, ok
}

// One due order whose hook waits on a lock (the host's hook returns the
// order's coupon: UPDATE coupon … while an admin's transaction holds that
// coupon row) meets thirty other due orders in one page of the expired
// pass. The hook is the host's and may be slow; I12 says one stuck order
// never holds the others back. In a batch they share its transaction, so
// they wait for it once, up to OrderTimeout; then the batch's orders are
// tried alone, side by side, and the stuck one backs off. Judged: every
// other order is cancelled in that round, within OrderTimeout and a half
// of its start.
//
// Found by the review: on MariaDB the abandoned batch transaction kept its
// row locks on all of them until innodb_lock_wait_timeout (50 s; the
// server keeps running a statement its client gave up on), so none was
// cancelled; and the one-by-one retries ran the stuck order first, so
// PostgreSQL's were two OrderTimeouts late. Now the server's lock wait of
// a transaction with a hook is bounded by its context, and the retries run
// Workers at once.
func TestBatchStuckHookDelaysItsBatchOnce(t *testing.T) {
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
			var others []cancel.Placement
			for i := 0; i < 30; i++ {
				others = append(others, e.place(t, fmt.Sprintf("o%02d%s", i, testenv.Unique()), "u1", show, e.now.Add(-time.Minute), fmt.Sprintf("s%02d", i)))
			}
			// The admin's transaction holds the coupon row.
			admin, err := e.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = admin.Rollback() })
			_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
			require.NoError(t, err)
			e.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
				if r.Order.No != stuck.OrderNo {
					return nil
				}
				_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
				return err
			})
			st := &stamps{}
			svc, err := cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Observer: st}})
			require.NoError(t, err)
			const orderTimeout = time.Second
			r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: svc, Batch: 100, OrderTimeout: orderTimeout})
			require.NoError(t, err)
			began := time.Now()
			rep, err := r.Round(ctx)
			require.NoError(t, err)
			t.Logf("round took %v: %+v", time.Since(began), rep)
			late, missing := 0, 0
			var worst time.Duration
			for _, p := range others {
				at, ok := st.of(p.OrderNo)
				if !ok {
					missing++
					continue
				}
				if at.Sub(began) > worst {
					worst = at.Sub(began)
				}
				if at.Sub(began) > orderTimeout+orderTimeout/2 {
					late++
				}
			}
			t.Logf("others: %d not cancelled in the round, %d cancelled more than %v after its start (worst %v)", missing, late, orderTimeout+orderTimeout/2, worst)
			assert.Zero(t, missing, "I12: the stuck order's batch-mates are cancelled in the same round")
			assert.Zero(t, late, "I12: held back by the stuck order once, for one OrderTimeout at most")
			assert.Equal(t, expiry.StatusPending, e.status(t, stuck.OrderNo))
			require.NoError(t, admin.Rollback())
		})
	}
}
