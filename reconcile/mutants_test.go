package reconcile_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/reconcile"
)

// repair is a KindRepaired event as an operator counts it.
type repair struct {
	no, reason string
	seats      int
}

func repairs(rec *expirytest.Recorder) []repair {
	var out []repair
	for _, e := range rec.Of(expiry.KindRepaired) {
		out = append(out, repair{e.OrderNo, e.Reason, e.Seats})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].no != out[j].no {
			return out[i].no < out[j].no
		}
		return out[i].reason < out[j].reason
	})
	return out
}

func (e *env) observed(t *testing.T, seats cancel.SeatStore) (*reconcile.Reconciler, *expirytest.Recorder) {
	rec := &expirytest.Recorder{}
	r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: seats, Service: e.svc, Grace: time.Minute,
		Runtime: expiry.Runtime{Observer: rec}})
	require.NoError(t, err)
	return r, rec
}

// loseLock drops order no's seat lock from the seat store, as a Redis that
// lost the keys would.
func (e *env) loseLock(t *testing.T, no string) {
	show, err := e.seats.Show(context.Background(), "s")
	require.NoError(t, err)
	n, err := e.seats.Release(context.Background(), cancel.Hold{ShowID: "s", OrderNo: no, UserID: "u1",
		Seats: []string{no + "a", no + "b"}, LockID: show[no+"a"].LockID})
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// The lock pass's repairs are counted per order with what was done and how
// many seats: an operator tells a crashed canceller's release from a lost
// sale and from a ghost lock by the event's Reason.
func TestLockPassRepairEventsNameTheActionAndSeats(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env)
		want  []repair
	}{
		{"cancelled, its release lost", func(t *testing.T, e *env) { e.cancelledInSQLOnly(t, "c1") },
			[]repair{{"c1", "released", 2}}},
		{"paid, its sale lost", func(t *testing.T, e *env) {
			e.place(t, "p1", time.Hour)
			_, err := e.store.PayPending(ctx, cancel.Payment{OrderNo: "p1", UserID: "u1", PaymentID: "pay-p1"})
			require.NoError(t, err)
		}, []repair{{"p1", "sold", 2}}},
		{"locked, never placed", func(t *testing.T, e *env) {
			_, err := e.seats.Lock(ctx, cancel.Hold{ShowID: "s", OrderNo: "g1", UserID: "u2", Seats: []string{"g"}}, 0)
			require.NoError(t, err)
		}, []repair{{"g1", "released", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(t, e)
			r, rec := e.observed(t, e.seats)
			e.advance(time.Hour) // past Settle and Grace
			_, err := r.Round(ctx)
			require.NoError(t, err)
			assert.Equal(t, tc.want, repairs(rec))
		})
	}
}

// A seat store failing under the lock pass's release or sale is the round's
// error: Run logs it and a host that calls Round alerts on it; the seats
// are repaired by a later round.
func TestLockPassFailureIsTheRoundsError(t *testing.T) {
	ctx := context.Background()
	down := errors.New("redis down")
	for _, tc := range []struct {
		name, op string
		setup    func(t *testing.T, e *env)
	}{
		{"release of a cancelled order", "Release", func(t *testing.T, e *env) { e.cancelledInSQLOnly(t, "o1") }},
		{"sale of a paid order", "Sell", func(t *testing.T, e *env) {
			e.place(t, "o1", time.Hour)
			_, err := e.store.PayPending(ctx, cancel.Payment{OrderNo: "o1", UserID: "u1", PaymentID: "pay-o1"})
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(t, e)
			r, _ := e.observed(t, e.seats)
			e.advance(time.Hour)
			e.seats.Fail = func(op string) error {
				if op == tc.op {
					return down
				}
				return nil
			}
			rep, err := r.Round(ctx)
			require.Error(t, err)
			assert.ErrorIs(t, err, down)
			assert.Contains(t, err.Error(), "o1", "the error names the order")
			assert.Zero(t, rep.Released+rep.Sold)

			e.seats.Fail = nil
			_, err = r.Round(ctx)
			require.NoError(t, err)
		})
	}
}

// Orders the expired pass cancels are counted with their seats, whether
// their batch succeeded or they went one by one after it failed.
func TestExpiredPassRepairEventsCountTheSeats(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		batchFail error
	}{
		{"batch", nil},
		{"one by one after a failed batch", errors.New("deadlock")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.place(t, "o1", time.Minute)
			e.place(t, "o2", time.Minute)
			e.store.Fail = func(op string) error {
				if op == "CancelDue" {
					return tc.batchFail
				}
				return nil
			}
			r, rec := e.observed(t, e.seats)
			e.advance(2 * time.Minute)
			rep, err := r.Round(ctx)
			require.NoError(t, err)
			assert.Equal(t, 2, rep.Expired)
			assert.Equal(t, []repair{{"o1", "expired", 2}, {"o2", "expired", 2}}, repairs(rec))
		})
	}
}

// payOnRestore is a seat store whose first Restore comes after a payment
// committed in SQL (its payer's sale found no lock, the store had lost it):
// the claims pass read the order pending, then restores its lock.
type payOnRestore struct {
	*memstore.Seats
	pay  func()
	once sync.Once
}

func (p *payOnRestore) Restore(ctx context.Context, claims []cancel.Claim) (int, error) {
	p.once.Do(p.pay)
	return p.Seats.Restore(ctx, claims)
}

// The claims pass restores a lost lock for its order and counts it as
// "restored"; a payment that committed between its read and the restore
// has the restored lock sold in the same round (paid is final), never left
// locked for the buyer's seats to look unsold.
func TestClaimsPassRestoresAndRechecksAPaymentInBetween(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		paid    bool
		want    []repair
		holding cancel.SeatStatus
	}{
		{"pending", false, []repair{{"", "restored", 2}}, cancel.SeatLocked},
		{"paid in between", true, []repair{{"", "restored", 2}, {"o1", "sold", 2}}, cancel.SeatSold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.place(t, "o1", time.Hour)
			e.loseLock(t, "o1")
			seats := &payOnRestore{Seats: e.seats, pay: func() {
				if tc.paid {
					_, err := e.store.PayPending(ctx, cancel.Payment{OrderNo: "o1", UserID: "u1", PaymentID: "pay-o1"})
					assert.NoError(t, err)
				}
			}}
			r, rec := e.observed(t, seats)
			rep, err := r.Round(ctx)
			require.NoError(t, err)
			assert.Equal(t, 2, rep.Restored)
			assert.Equal(t, tc.want, repairs(rec))
			show, err := e.seats.Show(ctx, "s")
			require.NoError(t, err)
			for _, seat := range []string{"o1a", "o1b"} {
				assert.Equal(t, tc.holding, show[seat].Status, seat)
				assert.Equal(t, "o1", show[seat].OrderNo, seat)
			}
		})
	}
}
