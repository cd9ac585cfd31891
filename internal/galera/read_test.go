package galera_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestReadAfterWriteOnAnotherNode places and pays orders through node 1 and
// reads each right after, through node 2, as another instance's handler,
// reconciler or placing check does: the order's row (Order: the handler's
// lookup, Place's "exists already" check) and its state (Statuses: the
// reconciler's lock pass, with the settle age). Galera replicates
// synchronously but applies asynchronously: a commit on node 1 returns once
// certified, and node 2 may not have applied it yet. With wsrep_sync_wait=1
// every read waits for that first, and must never be stale; without it the
// test counts the stale reads it saw (a figure, not a failure: how many
// depends on load).
func TestReadAfterWriteOnAnotherNode(t *testing.T) {
	ctx := context.Background()
	cfgs := nodeDSNs(t)
	name, plain := cluster(t, nil)
	synced := pools(t, cfgs, name, syncWait)
	show := "galr-" + testenv.Unique()
	ws := worlds(t, plain, show)
	syncStore, err := sqlstore.New(synced[1], sqlstore.MySQL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syncStore.Close() })

	type reader struct {
		name  string
		store *sqlstore.Store
		stale map[string]int
	}
	readers := []*reader{{name: "default", store: ws[1].Store, stale: map[string]int{}}, {name: "wsrep_sync_wait=1", store: syncStore, stale: map[string]int{}}}
	const perReader = 150
	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	n := 0
	for _, r := range readers {
		for i := 0; i < perReader; i++ {
			n++
			p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", show, n), UserID: "u1", ShowID: show,
				Seats: []string{fmt.Sprintf("s%d", n)}, ExpireAt: now.Add(time.Hour)}
			require.NoError(t, ws[0].Place(ctx, p))
			// Another instance's handler or placing check, right after the commit.
			if _, err := r.store.Order(ctx, p.OrderNo); errors.Is(err, expiry.ErrNotFound) {
				r.stale["placed order not found"]++
			} else {
				require.NoError(t, err)
			}
			res, err := ws[0].Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo})
			require.NoError(t, err)
			require.True(t, res.Changed)
			// Another instance's reconciler, right after the payment.
			st, err := r.store.Statuses(ctx, []string{p.OrderNo})
			require.NoError(t, err)
			if s, ok := st[p.OrderNo]; !ok || s.Status != expiry.StatusPaid {
				r.stale[fmt.Sprintf("paid order read as %v", s.Status)]++
			}
			// And the handler's lookup of it.
			if o, err := r.store.Order(ctx, p.OrderNo); err != nil || o.Status != expiry.StatusPaid {
				r.stale["paid order's lookup not paid"]++
			}
		}
	}

	// The raw effect, without the library: an UPDATE committed on node 1,
	// then a SELECT of the row on node 2.
	_, err = plain[0].ExecContext(ctx, "CREATE TABLE raw_counter (id INT PRIMARY KEY, v INT NOT NULL)")
	require.NoError(t, err)
	_, err = plain[0].ExecContext(ctx, "INSERT INTO raw_counter VALUES (1, 0)")
	require.NoError(t, err)
	// The row itself must be on node 2 before the reads without the
	// setting begin: a read there may otherwise find no row at all.
	var v0 int
	require.NoError(t, synced[1].QueryRowContext(ctx, "SELECT v FROM raw_counter WHERE id = 1").Scan(&v0))
	raw := map[string]int{}
	const rawN = 500
	for i, db := range []struct {
		name string
		q    func(context.Context, string, ...any) (int, error)
	}{
		{"default", func(ctx context.Context, q string, a ...any) (int, error) {
			var v int
			return v, plain[1].QueryRowContext(ctx, q, a...).Scan(&v)
		}},
		{"wsrep_sync_wait=1", func(ctx context.Context, q string, a ...any) (int, error) {
			var v int
			return v, synced[1].QueryRowContext(ctx, q, a...).Scan(&v)
		}},
	} {
		for j := 1; j <= rawN; j++ {
			want := i*rawN + j
			_, err := plain[0].ExecContext(ctx, "UPDATE raw_counter SET v = ? WHERE id = 1", want)
			require.NoError(t, err)
			got, err := db.q(ctx, "SELECT v FROM raw_counter WHERE id = 1")
			require.NoError(t, err)
			if got != want {
				raw[db.name]++
			}
		}
	}

	for _, r := range readers {
		t.Logf("FIGURE galera reads after another node's commit (%s): %d orders placed and paid on node 1, read at once on node 2: stale %v; raw UPDATE then SELECT: %d of %d stale",
			r.name, perReader, r.stale, raw[r.name], rawN)
	}
	assert.Empty(t, readers[1].stale, "with wsrep_sync_wait=1 a read on another node must see the commit")
	assert.Zero(t, raw["wsrep_sync_wait=1"], "with wsrep_sync_wait=1 a read on another node must see the commit")
}
