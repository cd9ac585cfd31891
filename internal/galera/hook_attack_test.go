package galera_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestHookUnderCertificationConflicts attacks the transition hook
// (cancel.Hook) where a transaction can fail at COMMIT: on Galera the
// losers of a race through different nodes fail certification (or are
// brute-force aborted while their hook runs) after the hook wrote its row,
// and the store runs the transition again. For every order, raced by a
// payment, its repeat and a timeout through three nodes, each node's store
// with a hook that writes a row through its transaction: exactly one hook
// row, the order's final status; after a reconcile round I14 and I15 hold
// (the judge of TestCertificationConflicts).
func TestHookUnderCertificationConflicts(t *testing.T) {
	ctx := context.Background()
	cfgs := nodeDSNs(t)
	name, dbs := cluster(t, nil)
	show := "galh-" + testenv.Unique()
	ws := worlds(t, dbs, show)
	_, err := dbs[0].ExecContext(ctx, "CREATE TABLE hook_rows (order_no VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, PRIMARY KEY (order_no, status))")
	require.NoError(t, err)
	var logMu sync.Mutex
	hookErrs := map[string]int{}     // error class → count, of the hooks' own statements
	hookLog := map[string][]string{} // order → what each hook call saw and got
	for node, w := range ws {
		w.Store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO hook_rows (order_no, status) VALUES (?, ?)", r.Order.No, r.Order.Status.String())
			logMu.Lock()
			defer logMu.Unlock()
			hookLog[r.Order.No] = append(hookLog[r.Order.No], fmt.Sprintf("node %d %s: %v", node+1, r.Order.Status, err))
			if err != nil {
				hookErrs[classify(err)]++
			}
			return err
		})
	}

	const orders = 60
	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	var placed []cancel.Placement
	for i := range orders {
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", show, i), UserID: fmt.Sprintf("u%d", i%5), ShowID: show,
			Seats: []string{fmt.Sprintf("s%d-a", i)}, ExpireAt: now.Add(-time.Second)}
		require.NoError(t, ws[i%3].Place(ctx, p))
		placed = append(placed, p)
	}
	time.Sleep(200 * time.Millisecond) // every node has applied the placements and the table
	certBefore := statusSum(t, cfgs, "wsrep_local_cert_failures") + statusSum(t, cfgs, "wsrep_local_bf_aborts")

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]bool{}
	changed := map[string]int{}
	var bad []string
	calls := map[string][]string{}
	run := func(p cancel.Placement, what string, f func() (cancel.Result, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := f()
			mu.Lock()
			defer mu.Unlock()
			calls[p.OrderNo] = append(calls[p.OrderNo], fmt.Sprintf("%s: changed %v, %s, err %v", what, res.Changed, res.Order.Status, err))
			if res.Changed {
				changed[p.OrderNo]++
			}
			switch {
			case err == nil, errors.Is(err, cancel.ErrDiscrepancy):
				if what != "timeout" {
					answered["pay-"+p.OrderNo] = true
				}
			default:
				bad = append(bad, fmt.Sprintf("%s: %s: %v", p.OrderNo, what, err))
			}
		}()
	}
	for i, p := range placed {
		pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo}
		a, b, c := i%3, (i+1)%3, (i+2)%3
		run(p, "pay", func() (cancel.Result, error) { return ws[a].Service.Pay(ctx, pay) })
		run(p, "pay again", func() (cancel.Result, error) { return ws[b].Service.Pay(ctx, pay) })
		run(p, "timeout", func() (cancel.Result, error) {
			return ws[c].Service.Cancel(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		})
	}
	close(start)
	wg.Wait()
	conflicts := statusSum(t, cfgs, "wsrep_local_cert_failures") + statusSum(t, cfgs, "wsrep_local_bf_aborts") - certBefore

	truth := pools(t, cfgs[:1], name, syncWait)[0]
	rows := map[string][]string{}
	rs, err := truth.QueryContext(ctx, "SELECT order_no, status FROM hook_rows ORDER BY order_no, status")
	require.NoError(t, err)
	for rs.Next() {
		var no, st string
		require.NoError(t, rs.Scan(&no, &st))
		rows[no] = append(rows[no], st)
	}
	require.NoError(t, rs.Err())
	require.NoError(t, rs.Close())
	for _, p := range placed {
		var status int
		require.NoError(t, truth.QueryRowContext(ctx, "SELECT status FROM oe_order WHERE order_no = ?", p.OrderNo).Scan(&status))
		final := expiry.Status(status)
		if !assert.Equal(t, 1, changed[p.OrderNo], "%s: one call made the transition", p.OrderNo) {
			t.Logf("%s: final %s; calls %q; hook calls %q", p.OrderNo, final, calls[p.OrderNo], hookLog[p.OrderNo])
		}
		assert.Equal(t, []string{final.String()}, rows[p.OrderNo], "%s: one hook row, its final status", p.OrderNo)
	}
	rep := settle(t, ctx, ws[0])
	violations := judge(t, ctx, truth, ws, placed, answered)
	logMu.Lock()
	t.Logf("FIGURE galera hook: %d orders x 3 decisions on 3 nodes: conflicts %d, the hooks' own errors %v, reconcile %+v", orders, conflicts, hookErrs, rep)
	logMu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	for _, v := range violations {
		t.Error(v)
	}
	assert.Greater(t, conflicts, int64(0), "no certification conflict happened: the test proved nothing")
}
