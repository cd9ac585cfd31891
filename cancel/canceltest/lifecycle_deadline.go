package canceltest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runDeadlines is the part of RunStore on deadline control
// (cancel.DeadlineStore): extend, the cap, shorten, and an extension racing
// the timeout.
func runDeadlines(t *testing.T, setup setupFunc, place placeFunc) {
	ctx := context.Background()
	t.Run("Extend", func(t *testing.T) {
		h, now := setup(t)
		d := deadlines(t, h)
		p := place(t, h, "u1", now.Add(time.Hour))
		res, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, UserID: "u1", In: 2 * time.Hour})
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.WithinDuration(t, p.ExpireAt, res.Previous, max(h.Resolution, time.Millisecond))
		assert.WithinDuration(t, res.Order.ReadAt.Add(2*time.Hour), res.Order.ExpireAt, time.Second, "now+2h by the store's clock")
		assert.Equal(t, expiry.StatusPending, res.Order.Status)
		o, err := h.Store.Order(ctx, p.OrderNo)
		require.NoError(t, err)
		assert.Equal(t, res.Order.ExpireAt, o.ExpireAt, "stored")
		for i := 0; i < 3; i++ { // repeated: never earlier
			again, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: 2 * time.Hour})
			require.NoError(t, err)
			o2, err := h.Store.Order(ctx, p.OrderNo)
			require.NoError(t, err)
			assert.False(t, o2.ExpireAt.Before(o.ExpireAt), "an extension never moves a deadline earlier")
			if again.Changed {
				assert.Equal(t, o2.ExpireAt, again.Order.ExpireAt)
			}
			o = o2
		}
		shorter, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: time.Minute})
		require.NoError(t, err)
		assert.False(t, shorter.Changed, "at least a minute from now: it is")
		assert.Equal(t, o.ExpireAt, shorter.Order.ExpireAt)

		_, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, UserID: "U1", In: 3 * time.Hour})
		assert.ErrorIs(t, err, cancel.ErrNotOwner)
		_, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "nope", In: time.Hour})
		assert.ErrorIs(t, err, expiry.ErrNotFound)

		due := place(t, h, "u1", now.Add(-time.Second))
		res, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: due.OrderNo, In: time.Hour})
		require.NoError(t, err)
		assert.False(t, res.Changed, "an order already due is the timeout's")
		assert.LessOrEqual(t, res.Order.Remaining(), time.Duration(0))
		paid := place(t, h, "u1", now.Add(time.Hour))
		_, err = h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)
		res, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: paid.OrderNo, In: 2 * time.Hour})
		require.NoError(t, err)
		assert.False(t, res.Changed)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
	})

	// An extension with a maximum hold stops at the placement plus it, by
	// the store's clock, however often it is asked for (I17).
	t.Run("ExtendCapped", func(t *testing.T) {
		h, now := setup(t)
		d := deadlines(t, h)
		p := place(t, h, "u1", now.Add(10*time.Minute))
		placed, err := h.Now(ctx)
		require.NoError(t, err)
		const hold = 30 * time.Minute
		res, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: 2 * time.Hour, MaxHold: hold})
		require.NoError(t, err)
		require.True(t, res.Changed, "later than 10 minutes: extended, up to the cap")
		// The placement is the store's clock at the insert, between now
		// (read before it, as the column keeps it: whole seconds on some
		// hosts' tables) and placed (read after it).
		earliest := now.Truncate(max(h.Resolution, h.WriteResolution, time.Millisecond)).Add(hold)
		assert.False(t, res.Order.ExpireAt.Before(earliest), "the placement plus the maximum hold: %v is before %v", res.Order.ExpireAt, earliest)
		assert.False(t, res.Order.ExpireAt.After(placed.Add(hold)), "I17: never past the maximum hold")
		for i := 0; i < 3; i++ {
			again, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: 3 * time.Hour, MaxHold: hold})
			require.NoError(t, err)
			assert.False(t, again.Changed, "at the cap: nothing to extend")
			assert.Equal(t, res.Order.ExpireAt, again.Order.ExpireAt)
		}
		shorter, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: time.Minute, Shorten: true, MaxHold: hold})
		require.NoError(t, err)
		assert.True(t, shorter.Changed, "the cap never stops a shortening")
	})

	// Due: the timeout waiting for the payment provider moves a due
	// order's deadline later (cancel.Config.Provider), pending only, never
	// past the maximum hold, never a shortening.
	t.Run("ExtendDue", func(t *testing.T) {
		h, now := setup(t)
		d := deadlines(t, h)
		due := place(t, h, "u1", now.Add(-time.Second))
		const hold = 30 * time.Minute
		res, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: due.OrderNo, In: time.Minute, MaxHold: hold, Due: true})
		require.NoError(t, err)
		require.True(t, res.Changed, "a due order waits for its provider")
		assert.Greater(t, res.Order.Remaining(), time.Duration(0), "not due any more")
		assert.WithinDuration(t, res.Order.ReadAt.Add(time.Minute), res.Order.ExpireAt, time.Second, "now+1m by the store's clock")
		c, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: due.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.False(t, c.Changed, "the timeout's due guard follows the moved deadline")
		again, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: due.OrderNo, In: time.Second, MaxHold: hold, Due: true})
		require.NoError(t, err)
		assert.False(t, again.Changed, "never earlier")

		// At the cap: a due order placed longer ago than the maximum hold
		// stays due, so the timeout's cancel goes on.
		old := place(t, h, "u1", now.Add(-time.Second))
		placed, err := h.Now(ctx) // old's placement is not later
		require.NoError(t, err)
		capped, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: old.OrderNo, In: time.Hour, MaxHold: time.Millisecond, Due: true})
		require.NoError(t, err)
		assert.False(t, capped.Order.ExpireAt.After(placed.Add(time.Millisecond)), "I17: never past the placement plus the maximum hold")
		require.Eventually(t, func() bool { // the store's clock passes the cap
			n, err := h.Now(ctx)
			return err == nil && n.After(capped.Order.ExpireAt)
		}, 5*time.Second, 5*time.Millisecond)
		c, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: old.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.True(t, c.Changed, "due at its cap: the timeout cancels it")

		paid := place(t, h, "u1", now.Add(-time.Second))
		_, err = h.Store.PayPending(ctx, pay(paid.OrderNo, ""))
		require.NoError(t, err)
		res, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: paid.OrderNo, In: time.Hour, MaxHold: hold, Due: true})
		require.NoError(t, err)
		assert.False(t, res.Changed, "pending only")
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		_, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: due.OrderNo, In: time.Hour, Shorten: true, Due: true})
		assert.ErrorIs(t, err, expiry.ErrInvalidID, "Due is for an extension")
	})

	t.Run("Shorten", func(t *testing.T) {
		h, now := setup(t)
		d := deadlines(t, h)
		p := place(t, h, "u1", now.Add(time.Hour))
		res, err := d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: 2 * time.Hour, Shorten: true})
		require.NoError(t, err)
		assert.False(t, res.Changed, "shortening never moves a deadline later")
		res, err = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: 0, Shorten: true})
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.LessOrEqual(t, res.Order.Remaining(), time.Duration(0), "due now by the store's clock")
		c, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.True(t, c.Changed, "the due guard follows the stored deadline")
	})

	// Hostile but legal: the buyer's extension racing the timeout at the
	// deadline. Whoever decides first, the other changes nothing.
	t.Run("ExtendRacingCancel", func(t *testing.T) {
		h, now := setup(t)
		d := deadlines(t, h)
		for round := 0; round < 8; round++ {
			at, err := h.Now(ctx)
			require.NoError(t, err)
			p := place(t, h, "u1", at.Add(time.Duration(round%4)*5*time.Millisecond))
			var ext cancel.DeadlineResult
			var can cancel.Result
			var eerr, cerr error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				ext, eerr = d.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: p.OrderNo, In: time.Hour})
			}()
			go func() {
				defer wg.Done()
				can, cerr = h.Store.CancelPending(ctx, cancel.Request{OrderNo: p.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
			}()
			wg.Wait()
			require.NoError(t, eerr)
			require.NoError(t, cerr)
			assert.False(t, ext.Changed && can.Changed, "I1/I4: an extended order is not cancelled at its old deadline")
			o, err := h.Store.Order(ctx, p.OrderNo)
			require.NoError(t, err)
			switch {
			case can.Changed:
				assert.Equal(t, expiry.StatusCancelled, o.Status)
			case ext.Changed:
				assert.Equal(t, expiry.StatusPending, o.Status)
				assert.Greater(t, o.Remaining(), 50*time.Minute)
			}
		}
		_ = now
	})
}
