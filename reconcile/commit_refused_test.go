package reconcile_test

import (
	"context"
	"fmt"
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

// One due order whose cancel the database refuses at COMMIT, every time:
// the host's hook writes an audit row whose foreign key is DEFERRABLE
// INITIALLY DEFERRED (checked at COMMIT) and, for this one order, points at
// nothing. PostgreSQL answers the COMMIT with 23503 after rolling the
// transaction back: a known outcome, nothing committed (the same refusal
// sqlstore's Insert already calls refusedCommit). It meets thirty other due
// orders in one page of the expired pass. I12: one bad order never holds
// the others back; I3: none of them stays pending past a reconcile
// interval. Judged: the thirty are cancelled within two rounds, the bad one
// stays pending (its cancel never commits), and their seats are free.
//
// Seen: commitErr wraps every COMMIT error that is not retryable as
// expiry.ErrCommitUnknown, a deferred constraint's 23503 too, so the
// expired pass counts the whole batch Skipped, without backoff and without
// the one-by-one retry, and meets the same batch in every round: none of
// the thirty is ever cancelled.
func TestBatchRefusedAtCommitHoldsNobodyBack(t *testing.T) {
	ctx := context.Background()
	e := newAtkEnv(t, sqlstore.Postgres, testenv.Redis(t))
	ref, audit := "oe_ref"+testenv.Unique(), "oe_audit"+testenv.Unique()
	_, err := e.db.ExecContext(ctx, "CREATE TABLE "+ref+" (order_no TEXT PRIMARY KEY)")
	require.NoError(t, err)
	_, err = e.db.ExecContext(ctx, "CREATE TABLE "+audit+" (order_no TEXT NOT NULL REFERENCES "+ref+" (order_no) DEFERRABLE INITIALLY DEFERRED)")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = e.db.ExecContext(context.Background(), "DROP TABLE "+audit)
		_, _ = e.db.ExecContext(context.Background(), "DROP TABLE "+ref)
	})
	show := "ev" + testenv.Unique()
	bad := e.place(t, "bad"+testenv.Unique(), "u0", show, e.now.Add(-2*time.Minute), "s-bad")
	var others []cancel.Placement
	for i := 0; i < 30; i++ {
		p := e.place(t, fmt.Sprintf("o%02d%s", i, testenv.Unique()), "u1", show, e.now.Add(-time.Minute), fmt.Sprintf("s%02d", i))
		others = append(others, p)
		_, err := e.db.ExecContext(ctx, "INSERT INTO "+ref+" (order_no) VALUES ($1)", p.OrderNo)
		require.NoError(t, err)
	}
	e.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+audit+" (order_no) VALUES ($1)", r.Order.No)
		return err
	})

	// The store's own answer for the bad order alone: refused, known.
	_, err = e.store.CancelPending(ctx, cancel.Request{OrderNo: bad.OrderNo, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
	require.Error(t, err)
	assert.NotErrorIs(t, err, expiry.ErrCommitUnknown, "PostgreSQL refused the COMMIT (23503) and rolled back: nothing is unknown")
	require.Equal(t, expiry.StatusPending, e.status(t, bad.OrderNo))

	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Batch: 100, OrderTimeout: 5 * time.Second})
	require.NoError(t, err)
	for round := 0; round < 2; round++ {
		rep, err := r.Round(ctx)
		require.NoError(t, err)
		t.Logf("round %d: %+v", round, rep)
	}
	pending := 0
	for _, p := range others {
		if e.status(t, p.OrderNo) == expiry.StatusPending {
			pending++
		}
	}
	assert.Zero(t, pending, "I12/I3: the bad order's batch-mates are cancelled, not skipped round after round")
	assert.Equal(t, expiry.StatusPending, e.status(t, bad.OrderNo), "its cancel never commits")
	st, err := e.seats.Show(ctx, show)
	require.NoError(t, err)
	held := 0
	for _, s := range st {
		if s.OrderNo != bad.OrderNo {
			held++
		}
	}
	assert.Zero(t, held, "seats of the batch-mates still locked")
}
