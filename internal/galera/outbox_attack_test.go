package galera_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestOutboxHookUnderCertificationConflicts races, for every order, a
// payment, its repeat and a timeout through three nodes (the race of
// TestCertificationConflicts), each node's store with the hook a host
// writes for an outbox: it reads first (has this order a row of this
// status already?) and then writes its row, every statement through tx,
// as cancel.Hook asks. The timeout is either one cancel per order or the
// batch cancel (Service.ExpireDue over ten orders at a time). The outcome
// the host relies on: exactly one call changes each order, the outbox
// holds exactly one row for it, of its final status; every call answers
// (a lost race is not an error); after a reconcile round I14 and I15 hold.
//
// Seen (batch: 4 of 15 runs, one order each; one cancel: 0 of 15): an
// order paid by one payment whose outbox also holds a "cancelled" row (the
// batch's hook, in a batch that did not cancel it), or two "paid" rows. The
// hook's read lost the report of a brute-force abort, its INSERT then
// committed on its own, and the store, which finds the hook's savepoint
// gone afterwards, tried the transition again: the outbox keeps the row of
// the attempt that never happened. Also seen: the batch answering a raw
// 1213 for its ten orders after its four attempts (see
// TestWriteOnlyHookUnderBatchConflicts), and once in 30 runs (one cancel)
// a timeout answering "Scan error on column index 2 … converting NULL to
// int64" for an order a payment through another node had paid: MariaDB's
// cancel (DELETE … RETURNING the order's columns in scalar subqueries)
// returned NULL for the order's own row, in a transaction an abort had
// ended, and the error was reported instead of the lost race.
func TestOutboxHookUnderCertificationConflicts(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "one cancel", true: "batch"}[batch], func(t *testing.T) { outboxRace(t, batch, true) })
	}
}

// TestWriteOnlyHookUnderBatchConflicts is the batch race of
// TestOutboxHookUnderCertificationConflicts with a hook that only writes
// (no read before its row): the same outcome is expected.
//
// Seen: no outbox row wrong in 15 runs (so the rows of the test above come
// from the hook's read); in 3 of 15 runs a batch of ten orders, each
// decided by a payment through another node, answered Error 1213 after its
// four attempts. That is ExpireDue's contract (a slice that failed changed
// nothing, and the caller tries its orders one by one, as the reconciler
// does): the test does the same, and the outcome must hold all the same.
func TestWriteOnlyHookUnderBatchConflicts(t *testing.T) { outboxRace(t, true, false) }

func outboxRace(t *testing.T, batch, readFirst bool) {
	ctx := context.Background()
	cfgs := nodeDSNs(t)
	name, dbs := cluster(t, nil)
	show := "galo-" + testenv.Unique()
	ws := worlds(t, dbs, show)
	_, err := dbs[0].ExecContext(ctx, "CREATE TABLE outbox (id INT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, KEY (order_no))")
	require.NoError(t, err)
	for _, w := range ws {
		w.Store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			if !readFirst {
				_, err := tx.ExecContext(ctx, "INSERT INTO outbox (order_no, status) VALUES (?, ?)", r.Order.No, r.Order.Status.String())
				return err
			}
			var n int
			if err := queryRow(ctx, tx, "SELECT COUNT(*) FROM outbox WHERE order_no = ? AND status = ?", []any{r.Order.No, r.Order.Status.String()}, &n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO outbox (order_no, status) VALUES (?, ?)", r.Order.No, r.Order.Status.String())
			return err
		})
	}

	const orders = 90
	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	var placed []cancel.Placement
	for i := range orders {
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", show, i), UserID: fmt.Sprintf("u%d", i%5), ShowID: show,
			Seats: []string{fmt.Sprintf("s%d-a", i), fmt.Sprintf("s%d-b", i)}, ExpireAt: now.Add(-time.Second)}
		// Through one node: placements of one user through different
		// nodes, one right after the other, may fail certification
		// (seen once here), which is not what this test is about.
		require.NoError(t, ws[0].Place(ctx, p))
		placed = append(placed, p)
	}
	time.Sleep(200 * time.Millisecond) // every node has applied the placements and the table
	conflictsBefore := statusSum(t, cfgs, "wsrep_local_cert_failures") + statusSum(t, cfgs, "wsrep_local_bf_aborts")

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]bool{}
	changed := map[string]int{}
	calls := map[string][]string{}
	var bad []string
	note := func(no, what string, res cancel.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls[no] = append(calls[no], fmt.Sprintf("%s: changed %v, %s, err %v", what, res.Changed, res.Order.Status, err))
		if res.Changed {
			changed[no]++
		}
		switch {
		case err == nil, errors.Is(err, cancel.ErrDiscrepancy):
			if what != "timeout" {
				answered["pay-"+no] = true
			}
		default:
			bad = append(bad, fmt.Sprintf("%s: %s: %v", no, what, err))
		}
	}
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f()
		}()
	}
	for i, p := range placed {
		pay := cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo}
		a, b, c := i%3, (i+1)%3, (i+2)%3
		run(func() { res, err := ws[a].Service.Pay(ctx, pay); note(p.OrderNo, "pay", res, err) })
		run(func() { res, err := ws[b].Service.Pay(ctx, pay); note(p.OrderNo, "pay again", res, err) })
		if !batch {
			run(func() {
				res, err := ws[c].Service.Cancel(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				note(p.OrderNo, "timeout", res, err)
			})
		}
	}
	if batch {
		for j := 0; j < orders; j += 10 {
			var nos []string
			for _, p := range placed[j : j+10] {
				nos = append(nos, p.OrderNo)
			}
			node := (j / 10) % 3
			run(func() {
				res, err := ws[node].Service.ExpireDue(ctx, nos, cancel.ReasonTimeout)
				byNo := map[string]cancel.Result{}
				for _, r := range res {
					byNo[r.Order.No] = r
				}
				for _, no := range nos {
					if r, ok := byNo[no]; ok || err == nil {
						note(no, "timeout", r, nil)
						continue
					}
					// A slice that failed changed nothing (ExpireDue's
					// doc): its orders are tried one by one, as a host
					// (the reconciler) does, and judged by what they did.
					r, cerr := ws[node].Service.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
					note(no, "timeout after a failed batch ("+err.Error()+")", r, cerr)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	conflicts := statusSum(t, cfgs, "wsrep_local_cert_failures") + statusSum(t, cfgs, "wsrep_local_bf_aborts") - conflictsBefore

	truth := pools(t, cfgs[:1], name, syncWait)[0]
	rows := map[string][]string{}
	rs, err := truth.QueryContext(ctx, "SELECT order_no, status FROM outbox ORDER BY id")
	require.NoError(t, err)
	for rs.Next() {
		var no, st string
		require.NoError(t, rs.Scan(&no, &st))
		rows[no] = append(rows[no], st)
	}
	require.NoError(t, rs.Err())
	require.NoError(t, rs.Close())
	wrong := 0
	for _, p := range placed {
		var status int
		require.NoError(t, truth.QueryRowContext(ctx, "SELECT status FROM oe_order WHERE order_no = ?", p.OrderNo).Scan(&status))
		final := expiry.Status(status)
		ok := assert.Equal(t, 1, changed[p.OrderNo], "%s: one call made the transition", p.OrderNo)
		ok = assert.Equal(t, []string{final.String()}, rows[p.OrderNo], "%s: the outbox holds one row, of the final status", p.OrderNo) && ok
		if !ok {
			wrong++
			t.Logf("%s: final %s; calls %q", p.OrderNo, final, calls[p.OrderNo])
		}
	}
	rep := settle(t, ctx, ws[0])
	violations := judge(t, ctx, truth, ws, placed, answered)
	sort.Strings(bad)
	t.Logf("FIGURE galera outbox hook (%s): %d orders x 3 decisions on 3 nodes: conflicts %d, orders judged wrong %d, calls failed %d, reconcile %+v, violations %d",
		t.Name(), orders, conflicts, wrong, len(bad), rep, len(violations))
	for _, b := range bad {
		t.Error(b)
	}
	for _, v := range violations {
		t.Error(v)
	}
	assert.Greater(t, conflicts, int64(0), "no certification conflict happened: the test proved nothing")
}
