//go:build reviewholes

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

// One due order whose transition hook waits on a lock (the host's hook
// returns the order's coupon: UPDATE coupon … while an admin's transaction
// holds that coupon row) meets thirty other due orders in one page of the
// expired pass. The hook is the host's and may be slow; I12 says one stuck
// order never holds the others back. The per-order path (before batches)
// cancelled the others in parallel with it; in a batch they share its
// transaction. Outcomes judged: every other order is cancelled in that
// round, and soon (well within one OrderTimeout of the round's start).
//
// Seen: on PostgreSQL the others are cancelled only after the batch's
// OrderTimeout and then the stuck order's own one-by-one OrderTimeout
// (it is the oldest, tried first): 2 x OrderTimeout late, and again every
// time its backoff runs out. On MariaDB the abandoned batch transaction
// keeps its row locks on all of them until innodb_lock_wait_timeout (the
// server keeps a statement its client gave up on running), so the
// one-by-one retries of the others time out too: none is cancelled, all
// are skipped and backed off.
func TestReviewHoleBatchStuckHookHoldsItsBatchBack(t *testing.T) {
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
				if at.Sub(began) > orderTimeout/2 {
					late++
				}
			}
			t.Logf("others: %d not cancelled in the round, %d cancelled more than %v after its start (worst %v)", missing, late, orderTimeout/2, worst)
			assert.Zero(t, missing, "I12: the stuck order's batch-mates are cancelled in the same round")
			assert.Zero(t, late, "I12: and not held back by the stuck order's OrderTimeout")
			assert.Equal(t, expiry.StatusPending, e.status(t, stuck.OrderNo))
			require.NoError(t, admin.Rollback())
		})
	}
}
