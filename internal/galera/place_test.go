package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// sends records every message a Scheduler sends.
type sends struct {
	mu  sync.Mutex
	nos []string
}

func (s *sends) Send(_ context.Context, m expiry.Message, _ time.Duration) error {
	s.mu.Lock()
	s.nos = append(s.nos, m.OrderNo)
	s.mu.Unlock()
	return nil
}

func (s *sends) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nos...)
}

// TestPlacementConflictAtCommit places one order number twice at once
// through two nodes (a double submit reaching two instances), each with seats
// of its own: placement A's transaction on node 1 has inserted its rows and
// waits before its COMMIT; placement B commits the same number through node 2
// meanwhile. Node 1 applies B's writeset, which conflicts with A's open
// transaction, so Galera aborts A (a brute-force abort), and A's COMMIT
// answers 1213. The server answered: A was rolled back, its outcome is known.
// So it must not be reported as an unknown commit (which keeps A's seats
// locked until the reconciler's grace and may schedule a message for the
// number): A fails with a clear error, A's seats are free again, nothing is
// sent for A, and B is untouched.
func TestPlacementConflictAtCommit(t *testing.T) {
	ctx := context.Background()
	_, dbs := cluster(t, syncWait)
	show := "galp-" + testenv.Unique()
	ws := worlds(t, dbs, show)
	sent := &sends{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent})
	require.NoError(t, err)
	svcA := ws[0].Scheduling(t, sched)

	now, err := ws[0].Store.Now(ctx)
	require.NoError(t, err)
	no := show + "-1"
	pA := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: show, Seats: []string{"A1", "A2"}, ExpireAt: now.Add(time.Minute)}
	pB := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: show, Seats: []string{"B1", "B2"}, ExpireAt: now.Add(time.Minute)}

	inside, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(ctx context.Context, _ *sql.Tx, _ cancel.Placement) error {
		once.Do(func() { close(inside) })
		select { // A's rows are in; its COMMIT waits for B's
		case <-proceed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	errA := make(chan error, 1)
	go func() { errA <- svcA.Place(ctx, pA, ws[0].Store.Insert(ws[0].DB, hold)) }()
	select {
	case <-inside:
	case err := <-errA:
		t.Fatalf("placement A ended before its commit: %v", err)
	}
	require.NoError(t, ws[1].Place(ctx, pB), "placement B through node 2")
	// Node 1 has applied B (a read there with wsrep_sync_wait waits for it):
	// A is aborted by then.
	var owner string
	require.NoError(t, dbs[0].QueryRowContext(ctx, "SELECT seat_id FROM oe_order_seat WHERE order_no = ? ORDER BY seat_id LIMIT 1", no).Scan(&owner))
	require.Equal(t, "B1", owner, "node 1 holds B's claims")
	close(proceed)
	err = <-errA

	var me *mysql.MySQLError
	require.Error(t, err, "placement A committed, although B's conflicting commit came first")
	require.True(t, errors.As(err, &me) && me.Number == 1213, "the test expects a certification conflict (1213) at A's COMMIT, got: %v", err)
	t.Logf("placement A: %v", err)
	require.False(t, errors.Is(err, expiry.ErrCommitUnknown), "a COMMIT answered with 1213 was rolled back, its outcome is known: not an unknown commit: %v", err)

	st, err := ws[0].Seats.Show(ctx, show)
	require.NoError(t, err)
	for _, seat := range pA.Seats {
		if s, ok := st[seat]; ok {
			t.Errorf("seat %s of the rolled-back placement A is still held: %+v", seat, s)
		}
	}
	for _, seat := range pB.Seats {
		require.Equal(t, cancel.SeatLocked, st[seat].Status, "seat %s of placement B", seat)
		require.Equal(t, no, st[seat].OrderNo, "seat %s of placement B", seat)
	}
	require.Empty(t, sent.list(), "a message was sent by the rolled-back placement A")
	o, err := ws[0].Store.Order(ctx, no)
	require.NoError(t, err)
	require.Equal(t, expiry.StatusPending, o.Status, fmt.Sprintf("order %s (B's)", no))
}
