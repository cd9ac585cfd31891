package canceltest

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runBatch is the part of RunStore for CancelDue: outcomes only, read back
// through the store.
func runBatch(t *testing.T, setup func(t *testing.T) (StoreHarness, time.Time), place func(t *testing.T, h StoreHarness, user string, expireAt time.Time, seats ...string) cancel.Placement) {
	ctx := context.Background()
	batcher := func(t *testing.T, h StoreHarness) cancel.OrderStore { return h.Store }
	claimed := func(t *testing.T, h StoreHarness) map[string]string {
		out := map[string]string{}
		cursor := ""
		for i := 0; ; i++ {
			page, next, err := h.Store.Claims(ctx, cursor, 100)
			require.NoError(t, err)
			for _, c := range page {
				out[c.SeatID] = c.OrderNo
			}
			if next == "" {
				return out
			}
			require.Less(t, i, 100)
			cursor = next
		}
	}
	status := func(t *testing.T, h StoreHarness, no string) expiry.Status {
		o, err := h.Store.Order(ctx, no)
		require.NoError(t, err)
		return o.Status
	}

	// Only pending and due orders change; each comes back once, with its
	// seats and its lock id; the others are untouched.
	t.Run("BatchCancelsDueOnly", func(t *testing.T) {
		h, now := setup(t)
		b := batcher(t, h)
		due1 := place(t, h, "u1", now.Add(-2*time.Second), id("s"), id("s"))
		due2 := place(t, h, "u2", now.Add(-2*time.Second), id("s"))
		later := place(t, h, "u3", now.Add(time.Hour), id("s"))
		paid := place(t, h, "u4", now.Add(-2*time.Second), id("s"))
		gone := place(t, h, "u5", now.Add(-2*time.Second), id("s"))
		_, err := h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: gone.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)

		res, err := b.CancelDue(ctx, []string{later.OrderNo, due1.OrderNo, paid.OrderNo, "missing-" + id("o"), gone.OrderNo, due2.OrderNo, due1.OrderNo}, cancel.ReasonReconcile)
		require.NoError(t, err)
		got := map[string]cancel.Result{}
		for _, r := range res {
			assert.True(t, r.Changed)
			assert.Equal(t, expiry.StatusCancelled, r.Order.Status)
			_, twice := got[r.Order.No]
			assert.False(t, twice, "I5: %s changed twice", r.Order.No)
			got[r.Order.No] = r
		}
		require.ElementsMatch(t, []string{due1.OrderNo, due2.OrderNo}, keys(got), "exactly the pending and due orders")
		for _, p := range []cancel.Placement{due1, due2} {
			r := got[p.OrderNo]
			want := append([]string(nil), p.Seats...)
			sort.Strings(want)
			seats := append([]string(nil), r.Seats...)
			sort.Strings(seats)
			assert.Equal(t, want, seats, "the seats of %s", p.OrderNo)
			assert.Equal(t, p.UserID, r.Order.UserID)
			assert.Equal(t, p.ShowID, r.Order.ShowID)
			assert.Equal(t, expiry.StatusCancelled, status(t, h, p.OrderNo))
		}
		assert.Equal(t, expiry.StatusPending, status(t, h, later.OrderNo), "I4: not due by the store's clock")
		assert.Equal(t, expiry.StatusPaid, status(t, h, paid.OrderNo), "I1")
		assert.Equal(t, expiry.StatusCancelled, status(t, h, gone.OrderNo))
		if !h.NoClaims {
			c := claimed(t, h)
			for _, p := range []cancel.Placement{due1, due2} {
				for _, seat := range p.Seats {
					assert.NotContains(t, c, seat, "a cancelled order's claim is freed")
				}
			}
			assert.Equal(t, later.OrderNo, c[later.Seats[0]], "a pending order keeps its claim")
			assert.Equal(t, paid.OrderNo, c[paid.Seats[0]], "a paid order keeps its claim")
		}
		again, err := b.CancelDue(ctx, []string{due1.OrderNo, due2.OrderNo}, cancel.ReasonReconcile)
		require.NoError(t, err)
		assert.Empty(t, again, "I5: a second batch changes nothing")

		_, err = b.CancelDue(ctx, make([]string, cancel.MaxBatch+1), cancel.ReasonReconcile)
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "the batch is bounded")
		_, err = b.CancelDue(ctx, []string{due1.OrderNo, "bad|id"}, cancel.ReasonReconcile)
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	// A batch racing single payments of its orders: every order ends paid
	// (its payment won, its claims kept) or cancelled by the batch (its
	// claims freed), never both and never neither (I1, I2).
	t.Run("BatchRacesPay", func(t *testing.T) {
		h, now := setup(t)
		b := batcher(t, h)
		const orders = 12
		ps := make([]cancel.Placement, orders)
		nos := make([]string, orders)
		for i := range ps {
			ps[i] = place(t, h, "u1", now.Add(-2*time.Second), id("s"))
			nos[i] = ps[i].OrderNo
		}
		var wg sync.WaitGroup
		paidBy := make([]bool, orders)
		payErrs := make([]error, orders)
		var batch []cancel.Result
		var batchErr error
		start := make(chan struct{})
		for i := range ps {
			if i%2 == 1 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := h.Store.PayPending(ctx, pay(nos[i], "u1"))
				paidBy[i], payErrs[i] = r.Changed, err
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Two halves, so the batch meets payments before and after it.
			for _, half := range [][]string{nos[orders/2:], nos[:orders/2]} {
				r, err := b.CancelDue(ctx, half, cancel.ReasonReconcile)
				batch = append(batch, r...)
				if err != nil {
					batchErr = err
				}
			}
		}()
		close(start)
		wg.Wait()
		require.NoError(t, batchErr)
		cancelled := map[string]bool{}
		for _, r := range batch {
			cancelled[r.Order.No] = true
		}
		var c map[string]string
		if !h.NoClaims {
			c = claimed(t, h)
		}
		for i, p := range ps {
			require.NoError(t, payErrs[i])
			st := status(t, h, p.OrderNo)
			assert.NotEqual(t, paidBy[i], cancelled[p.OrderNo], "I1: %s paid=%v and cancelled by the batch=%v", p.OrderNo, paidBy[i], cancelled[p.OrderNo])
			if paidBy[i] {
				assert.Equal(t, expiry.StatusPaid, st)
				if c != nil {
					assert.Equal(t, p.OrderNo, c[p.Seats[0]], "I2: a paid order's seat is never freed")
				}
			} else {
				assert.Equal(t, expiry.StatusCancelled, st)
				if c != nil {
					assert.NotContains(t, c, p.Seats[0])
				}
			}
		}
	})
}

func keys(m map[string]cancel.Result) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// runBatchSeats is the part of RunSeats for ReleaseAll: each hold of the call is released as Release
// releases it alone, guarded by its own order number and lock id.
func runBatchSeats(t *testing.T, newSeats func(t *testing.T) SeatStore) {
	ctx := context.Background()
	t.Run("ReleaseAll", func(t *testing.T) {
		s := newSeats(t)
		br := s
		show := id("show")
		a := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"a1", "a2"}}
		b := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"b1"}}
		c := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u2", Seats: []string{"c1"}}
		sold := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u3", Seats: []string{"d1"}}
		for _, h := range []*cancel.Hold{&a, &b, &c, &sold} {
			lockID, err := s.Lock(ctx, *h, 0)
			require.NoError(t, err)
			h.LockID = lockID
		}
		_, err := s.Sell(ctx, sold)
		require.NoError(t, err)
		stale := b
		stale.LockID = "1.1" // a lock b no longer holds: nothing of b is freed
		other := c
		other.OrderNo = id("o") // another order's name on c's seat: not freed
		ns, err := br.ReleaseAll(ctx, []cancel.Hold{a, stale, other, sold})
		require.NoError(t, err)
		assert.Equal(t, []int{2, 0, 0, 0}, ns)
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.NotContains(t, st, "a1")
		assert.NotContains(t, st, "a2")
		assert.Equal(t, b.OrderNo, st["b1"].OrderNo, "I15: a release acts only on the lock it names")
		assert.Equal(t, c.OrderNo, st["c1"].OrderNo, "I2: never another order's seat")
		assert.Equal(t, cancel.SeatSold, st["d1"].Status, "I2: a sold seat is never released")
		n, err := s.Held(ctx, show, "u1")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "I8: the counter went down by the seats freed")
		ns, err = br.ReleaseAll(ctx, []cancel.Hold{b, c, a})
		require.NoError(t, err)
		assert.Equal(t, []int{1, 1, 0}, ns, "I5: a second release frees nothing")
		for _, u := range []string{"u1", "u2"} {
			n, err := s.Held(ctx, show, u)
			require.NoError(t, err)
			assert.Zero(t, n, "I8")
		}
		// Holds of several shows in one call: each show's as Release would.
		x := cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: "u1", Seats: []string{"x1", "x2"}}
		y := cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: "u2", Seats: []string{"y1"}}
		for _, h := range []*cancel.Hold{&x, &y} {
			lockID, err := s.Lock(ctx, *h, 0)
			require.NoError(t, err)
			h.LockID = lockID
		}
		ns, err = br.ReleaseAll(ctx, []cancel.Hold{x, a, y})
		require.NoError(t, err)
		assert.Equal(t, []int{2, 0, 1}, ns)
		for _, h := range []cancel.Hold{x, y} {
			st, err := s.Show(ctx, h.ShowID)
			require.NoError(t, err)
			assert.Empty(t, st, "show %s released", h.ShowID)
			n, err := s.Held(ctx, h.ShowID, h.UserID)
			require.NoError(t, err)
			assert.Zero(t, n, "I8")
		}
	})
}
