package galera_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestHookReadsThenWritesWhileAborted: a host's outbox hook reads (the
// next sequence number) and then writes its row, all through tx, as the
// cancel.Hook doc asks. A payment's transaction on node 1 is in that read
// when a user's cancel of the same order commits through node 2; applying
// it on node 1 aborts the payment's transaction (a brute-force abort)
// while the read runs. The read is slow here (SLEEP) only so that the abort
// lands inside it every time; any read can be where it lands (galera.go).
// The outcome the host relies on ("both commit or neither does"): the order
// ends cancelled, the payment is refunded once and not reported made, and
// the outbox holds one row, the cancel's; no "paid" row for an order that
// was never paid. It passes (10 runs): an abort that lands inside a read
// that is still running is reported to that read (1213); the lost reports
// of TestOutboxHookUnderCertificationConflicts come from a narrower window.
func TestHookReadsThenWritesWhileAborted(t *testing.T) {
	ctx := context.Background()
	_, dbs := cluster(t, nil)
	show := "galr-" + testenv.Unique()
	ws := worlds(t, dbs, show)
	_, err := dbs[0].ExecContext(ctx, "CREATE TABLE outbox (seq INT NOT NULL PRIMARY KEY, order_no VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL)")
	require.NoError(t, err)
	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: show + "-1", UserID: "u1", ShowID: show, Seats: []string{"r1"}, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, ws[0].Place(ctx, p))
	time.Sleep(200 * time.Millisecond) // every node has the order and the table

	var mu sync.Mutex
	var seen []string
	outbox := func(slow bool) cancel.Hook {
		return func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
			q := "SELECT COALESCE(MAX(seq), 0) + 1, 0, @@in_transaction FROM outbox"
			if slow {
				q = "SELECT (SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox), SLEEP(2), @@in_transaction"
			}
			var seq, slept, in int
			if err := queryRow(ctx, tx, q, nil, &seq, &slept, &in); err != nil {
				mu.Lock()
				seen = append(seen, r.Order.Status.String()+": read err "+err.Error())
				mu.Unlock()
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO outbox (seq, order_no, status) VALUES (?, ?, ?)", seq, r.Order.No, r.Order.Status.String())
			mu.Lock()
			seen = append(seen, r.Order.Status.String()+": read in_transaction "+map[int]string{0: "0", 1: "1"}[in]+map[int]string{0: "", 1: ", the read was interrupted"}[slept]+", insert err "+errString(err))
			mu.Unlock()
			return err
		}
	}
	var once sync.Once
	inHook := make(chan struct{})
	slowHook := outbox(true)
	fastHook := outbox(false)
	ws[0].Store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(inHook)
			return slowHook(ctx, tx, r)
		}
		return fastHook(ctx, tx, r)
	})
	ws[1].Store.SetHook(fastHook)

	type answer struct {
		res cancel.Result
		err error
	}
	paid := make(chan answer, 1)
	go func() {
		res, err := ws[0].Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: "u1", PaymentID: "pay-r1"})
		paid <- answer{res, err}
	}()
	<-inHook
	time.Sleep(300 * time.Millisecond) // the hook's read is running
	res, err := ws[1].Service.UserCancel(ctx, p.OrderNo, "u1")
	require.NoError(t, err, "the cancel through node 2 does not wait for node 1's open transaction")
	require.True(t, res.Changed)
	pay := <-paid
	mu.Lock()
	t.Logf("pay: changed %v, status %s, err %v; the hooks: %q", pay.res.Changed, pay.res.Order.Status, pay.err, seen)
	mu.Unlock()

	truth := pools(t, nodeDSNs(t)[:1], dbName(t, dbs[0]), syncWait)[0]
	var status int
	require.NoError(t, truth.QueryRowContext(ctx, "SELECT status FROM oe_order WHERE order_no = ?", p.OrderNo).Scan(&status))
	var rows []string
	rs, err := truth.QueryContext(ctx, "SELECT status FROM outbox WHERE order_no = ? ORDER BY seq", p.OrderNo)
	require.NoError(t, err)
	for rs.Next() {
		var st string
		require.NoError(t, rs.Scan(&st))
		rows = append(rows, st)
	}
	require.NoError(t, rs.Close())
	assert.Equal(t, expiry.StatusCancelled, expiry.Status(status), "the cancel committed first")
	assert.False(t, pay.res.Changed, "the payment's transaction was aborted: not made")
	assert.ErrorIs(t, pay.err, cancel.ErrDiscrepancy, "a payment for a cancelled order")
	assert.Equal(t, []string{"cancelled"}, rows, "the outbox: one row, the cancel's")
	assert.Equal(t, 1, ws[0].Ledger.Refunded["pay-r1"], "refunded once")
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
