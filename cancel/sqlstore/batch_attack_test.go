package sqlstore_test

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
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Attacks on the batch cancels (Service.ExpireDue over sqlstore's CancelDue
// and redisseat's ReleaseAll), judged by outcomes only: who paid, which
// orders are cancelled, who holds which seat in Redis (DESIGN.md's
// invariants I1, I2, I4, I10, I15, I16).

// attackSeats is a redisseat store whose releases can be held at a gate
// (a release that runs late: a slow round trip, a paused host) and whose
// sales can be made to fail (Redis unreachable for that one call).
type attackSeats struct {
	*redisseat.Seats
	mu       sync.Mutex
	gate     chan struct{} // non-nil: Release and ReleaseAll wait for it
	entered  chan struct{} // closed when a release reached the gate
	failSell bool
}

func (a *attackSeats) wait() {
	a.mu.Lock()
	gate, entered := a.gate, a.entered
	a.mu.Unlock()
	if gate == nil {
		return
	}
	select {
	case <-entered:
	default:
		close(entered)
	}
	<-gate
}

func (a *attackSeats) Release(ctx context.Context, h cancel.Hold) (int, error) {
	a.wait()
	return a.Seats.Release(ctx, h)
}

func (a *attackSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	a.wait()
	return a.Seats.ReleaseAll(ctx, holds)
}

func (a *attackSeats) Sell(ctx context.Context, h cancel.Hold) (int, error) {
	a.mu.Lock()
	fail := a.failSell
	a.mu.Unlock()
	if fail {
		return 0, errors.New("attack: the seat store did not answer the sale")
	}
	return a.Seats.Sell(ctx, h)
}

// redisSeats is a redisseat store in a fresh namespace, scoped as s.
func redisSeats(t *testing.T, s *sqlstore.Store) *redisseat.Seats {
	seats, err := redisseat.New(testenv.Redis(t), "atk"+testenv.Unique())
	require.NoError(t, err)
	return seats.Scoped(s.Scope())
}

// untilDue waits until the database's clock is past deadline by more than
// the schema's resolution.
func untilDue(t *testing.T, s *sqlstore.Store, deadline time.Time) {
	ctx := context.Background()
	for i := 0; ; i++ {
		now, err := s.Now(ctx)
		require.NoError(t, err)
		if now.After(deadline.Add(1100 * time.Millisecond)) {
			return
		}
		require.Less(t, i, 100, "the database's clock does not move")
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBatchReleaseLateNeverFreesANewerLock: a cancel's seat release that
// runs late must act only on the lock the cancelled order held (I15, the
// doc of Service.Cancel), never on the newer lock a late payment took for
// the same order number.
//
// The story, on a host's tables with a claims table (shop): order X is due;
// the expiry cancels it, and its release is slow (held at a gate). Meanwhile
// the reconciler frees X's lock (a cancelled order's lock), the buyer's late
// payment reinstates X (AcceptLatePayments: a new lock, then paid), and its
// sale to Redis fails (left to the reconciler: the seats stay locked by the
// new lock). Then the slow release runs.
//
// Expected (and what the one-by-one path, Cancel, does): the slow release
// frees nothing; X is paid and its seats are still X's in Redis, so nobody
// else can lock them. Seen with the batch path (ExpireDue → CancelDue): the
// Result carries no LockID on a host's table with claims (the batch reads
// the lock id from oe_order.lock_id only, NULL for a host's table), so the
// release names "any lock of X" and frees the paid order's seats; another
// buyer then locks them (a seat sold twice: I2, I15).
func TestBatchReleaseLateNeverFreesANewerLock(t *testing.T) {
	for _, d := range allDialects {
		for _, path := range []string{"batch", "one"} {
			t.Run(string(d)+"/"+path, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				s := hostStore(t, db, d, shop)
				rs := redisSeats(t, s)
				slow := &attackSeats{Seats: rs, gate: make(chan struct{}), entered: make(chan struct{})}
				late := &attackSeats{Seats: rs, failSell: true}
				expirer, err := cancel.New(cancel.Config{Store: s, Seats: slow})
				require.NoError(t, err)
				refunds := &bfRefunds{}
				buyer, err := cancel.New(cancel.Config{Store: s, Seats: late, AcceptLatePayments: true, Discrepancies: s, OnDiscrepancy: refunds.hook})
				require.NoError(t, err)

				now, err := s.Now(ctx)
				require.NoError(t, err)
				show := "ev" + testenv.Unique()
				p := cancel.Placement{OrderNo: "X" + testenv.Unique(), UserID: "u1", ShowID: show, Seats: []string{"a1", "a2"}, ExpireAt: now}
				bfPlace(t, db, s, buyer, p)
				st, err := rs.Show(ctx, show)
				require.NoError(t, err)
				first := st["a1"].LockID
				require.NotEmpty(t, first)
				untilDue(t, s, p.ExpireAt)

				done := make(chan error, 1)
				go func() {
					var err error
					if path == "batch" {
						var res []cancel.Result
						res, err = expirer.ExpireDue(ctx, []string{p.OrderNo}, cancel.ReasonTimeout)
						if err == nil && len(res) != 1 {
							err = fmt.Errorf("the expiry cancelled %d orders, want 1", len(res))
						}
					} else {
						var res cancel.Result
						res, err = expirer.Cancel(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
						if err == nil && !res.Changed {
							err = errors.New("the expiry did not cancel X")
						}
					}
					done <- err
				}()
				select {
				case <-slow.entered:
				case err := <-done:
					t.Fatalf("the expiry returned before its release: %v", err)
				case <-time.After(20 * time.Second):
					t.Fatal("the expiry never reached its release")
				}
				// The cancel committed; its release is held. The reconciler's
				// lock pass frees the lock of the cancelled order, by its id.
				n, err := rs.Release(ctx, cancel.Hold{ShowID: show, OrderNo: p.OrderNo, UserID: "u1", Seats: p.Seats, LockID: first})
				require.NoError(t, err)
				require.Equal(t, 2, n)
				// The late payment reinstates X under a new lock; its sale to
				// Redis fails and is left to the reconciler.
				res, err := buyer.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, PaymentID: "P" + testenv.Unique()})
				require.NoError(t, err)
				require.True(t, res.Changed, "the late payment reinstated X")
				o, err := s.Order(ctx, p.OrderNo)
				require.NoError(t, err)
				require.Equal(t, expiry.StatusPaid, o.Status)
				st, err = rs.Show(ctx, show)
				require.NoError(t, err)
				require.Equal(t, p.OrderNo, st["a1"].OrderNo, "X holds its seats again")
				require.NotEqual(t, first, st["a1"].LockID, "under a new lock")

				close(slow.gate) // the slow release runs now
				require.NoError(t, <-done)

				st, err = rs.Show(ctx, show)
				require.NoError(t, err)
				for _, seat := range p.Seats {
					assert.Equal(t, p.OrderNo, st[seat].OrderNo, "I15: seat %s of the paid order X was freed by a release that named an older lock", seat)
				}
				_, err = rs.Lock(ctx, cancel.Hold{ShowID: show, OrderNo: "Y" + testenv.Unique(), UserID: "u2", Seats: []string{"a1"}}, 0)
				assert.ErrorIs(t, err, cancel.ErrSeatUnavailable, "I2: another buyer locks a seat of the paid order X")
			})
		}
	}
}
