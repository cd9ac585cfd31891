package cancel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// A batch of Timeout calls on PostgreSQL with one order whose cancel the
// database refuses at COMMIT, every time: the host's hook writes an audit
// row whose foreign key is DEFERRABLE INITIALLY DEFERRED and, for that one
// order, points at nothing; COMMIT answers 23503 after rolling back, a
// known outcome (nothing committed). I12: one bad order never holds the
// others back; and a batch changes how the store is asked, never what a
// call answers. Judged: every other call cancels its order (as each would
// alone, and as it did before the batch's error was read as an unknown
// commit), the bad one's call is an error, and its order stays pending.
//
// Seen: commitErr wraps the refusal as expiry.ErrCommitUnknown, so every
// call of the batch answers that error instead of going alone; the Handler
// retries them all, and each redelivery that meets the bad order's in a
// batch fails again.
func TestTimeoutBatchRefusedAtCommitHoldsNobodyBack(t *testing.T) {
	t.Cleanup(cancel.SetLaneStall(time.Hour))
	ctx := context.Background()
	db := testenv.Postgres(t)
	ss, err := sqlstore.New(db, sqlstore.Postgres)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	require.NoError(t, ss.Migrate(ctx))
	svc, err := cancel.New(cancel.Config{Store: ss, Seats: memstore.NewSeats(nil)})
	require.NoError(t, err)
	now, err := ss.Now(ctx)
	require.NoError(t, err)
	u := testenv.Unique()
	ref, audit := "oe_ref"+u, "oe_audit"+u
	_, err = db.ExecContext(ctx, "CREATE TABLE "+ref+" (order_no TEXT PRIMARY KEY)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "CREATE TABLE "+audit+" (order_no TEXT NOT NULL REFERENCES "+ref+" (order_no) DEFERRABLE INITIALLY DEFERRED)")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TABLE "+audit)
		_, _ = db.ExecContext(context.Background(), "DROP TABLE "+ref)
	})
	place := func(no string, good bool) {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "s" + u, Seats: []string{no + "a"}, ExpireAt: now.Add(-time.Minute)}
		require.NoError(t, svc.Place(ctx, p, ss.Insert(db, nil)))
		if good {
			_, err := db.ExecContext(ctx, "INSERT INTO "+ref+" (order_no) VALUES ($1)", no)
			require.NoError(t, err)
		}
	}
	gates := []string{"g0" + u, "g1" + u}
	for _, g := range gates {
		place(g, true)
	}
	bad := "bad" + u
	place(bad, false)
	var good []string
	for i := 0; i < 10; i++ {
		no := fmt.Sprintf("o%02d%s", i, u)
		place(no, true)
		good = append(good, no)
	}
	open := make(chan struct{})
	entered := make(chan struct{}, len(gates))
	ss.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		for _, g := range gates {
			if r.Order.No == g {
				entered <- struct{}{}
				<-open
			}
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+audit+" (order_no) VALUES ($1)", r.Order.No)
		return err
	})
	type answer struct {
		ok  bool
		err error
	}
	var mu sync.Mutex
	answers := map[string]answer{}
	var wg sync.WaitGroup
	call := func(no string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx, done := context.WithTimeout(ctx, 20*time.Second)
			defer done()
			ok, _, err := svc.Timeout(tctx, no)
			mu.Lock()
			answers[no] = answer{ok, err}
			mu.Unlock()
		}()
	}
	// Both lanes held by the gates' lone calls, inside their hooks.
	for _, g := range gates {
		call(g)
	}
	for range gates {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the gates' calls did not reach the store")
		}
	}
	// The rest queue, and the next free lane takes them as one batch.
	call(bad)
	for _, no := range good {
		call(no)
	}
	require.Eventually(t, func() bool { return cancel.QueuedTimeouts(svc) == len(good)+1 }, 10*time.Second, time.Millisecond)
	close(open)
	wg.Wait()

	assert.Error(t, answers[bad].err, "the bad order's cancel never commits")
	o, err := ss.Order(ctx, bad)
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
	held := 0
	for _, no := range good {
		a := answers[no]
		if a.err != nil || !a.ok {
			held++
			t.Logf("order %s: cancelled %v, err %v", no, a.ok, a.err)
		}
		o, err := ss.Order(ctx, no)
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status, "order %s: I12, held back by the bad order's batch", no)
	}
	assert.Zero(t, held, "I12: calls of the bad order's batch-mates answered with its error instead of their own cancel")
}
