package canceltest

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runSeatRebuild is the part of RunSeats on the rebuild from SQL's claims:
// Restore, Missing, the rebuild's token, and a data loss during a rebuild.
func runSeatRebuild(t *testing.T, newHarness func(t *testing.T) SeatsHarness) {
	ctx := context.Background()
	newSeats := func(t *testing.T) SeatStore { return newHarness(t).Seats }
	t.Run("Restore", func(t *testing.T) {
		s := newSeats(t)
		token, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "a store never rebuilt counts as lost")
		assert.NotEmpty(t, token)
		show := id("show")
		other := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u9", Seats: []string{"x"}}
		require.NoError(t, lockErr(s.Lock(ctx, other, 0)))
		lockedA := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"a2"}}
		require.NoError(t, lockErr(s.Lock(ctx, lockedA, 0)))
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "a1", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // lost lock
			{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // still there
			{ShowID: show, SeatID: "p1", OrderNo: "paid-1", UserID: "u2", Status: expiry.StatusPaid},           // lost sale
			{ShowID: show, SeatID: "x", OrderNo: "paid-2", UserID: "u3", Status: expiry.StatusPaid},            // held by another order: left alone
			{ShowID: show, SeatID: "c1", OrderNo: "gone-1", UserID: "u4", Status: expiry.StatusCancelled},      // no claim to restore
		}
		n, err := s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		n, err = s.Restore(ctx, claims)
		require.NoError(t, err)
		assert.Zero(t, n, "idempotent")
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, cancel.SeatLocked, st["a1"].Status)
		assert.Equal(t, lockedA.OrderNo, st["a1"].OrderNo)
		assert.Equal(t, "u1", st["a1"].UserID, "a restored lock is its buyer's")
		assert.Equal(t, cancel.SeatSold, st["p1"].Status)
		assert.Equal(t, other.OrderNo, st["x"].OrderNo)
		assert.NotContains(t, st, "c1")
		assert.Equal(t, 2, held(t, s, show, "u1"), "I8: the restored lock counts")
		assert.Equal(t, 1, held(t, s, show, "u2"))
		assert.Equal(t, 0, held(t, s, show, "u3"))
		locks, _ := scanAll(t, s, 100)
		seen := map[string]bool{}
		for _, l := range locks {
			seen[l.SeatID] = true
		}
		assert.True(t, seen["a1"], "a restored lock is seen by the scan")
		// A paid claim turns the order's own lock into a sale; the same
		// order number's lock for another user is left alone.
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u7", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Zero(t, n, "not the lock's user")
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a2", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, 2, held(t, s, show, "u1"), "a sale of a counted lock does not count twice")
		// The order paid after its lock was restored: the restored lock is
		// its own (the buyer's), so the next pass sells it.
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: show, SeatID: "a1", OrderNo: lockedA.OrderNo, UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n, "a restored lock is sold when its order is paid")
		st, err = s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatSold, OrderNo: lockedA.OrderNo, UserID: "u1"}, st["a1"])
		assert.Equal(t, 2, held(t, s, show, "u1"), "I8: the sale of a restored lock does not count twice")
		locks, _ = scanAll(t, s, 100)
		for _, l := range locks {
			assert.NotEqual(t, "a2", l.SeatID, "a sold seat leaves the lock scan")
		}
		paidOnly := id("show")
		n, err = s.Restore(ctx, []cancel.Claim{{ShowID: paidOnly, SeatID: "1", OrderNo: "paid-3", UserID: "u1", Status: expiry.StatusPaid}})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.False(t, listed(t, s, paidOnly), "restoring sales lists no show: the scan has nothing to do there")
		require.NoError(t, s.MarkRestored(ctx, token))
		token2, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.False(t, lost)
		assert.Empty(t, token2)
		_, err = s.Restore(ctx, []cancel.Claim{{ShowID: "a{b}", SeatID: "1", OrderNo: "o", UserID: "u", Status: expiry.StatusPaid}})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})
	// Missing names exactly the claims Restore would change, and changes
	// nothing: the reconciler reads SQL again for them before it restores,
	// so a seat a cancel has just released is never locked again.
	t.Run("Missing", func(t *testing.T) {
		s := newSeats(t)
		show := id("show")
		mine := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{"l1", "l2"}}
		require.NoError(t, lockErr(s.Lock(ctx, mine, 0)))
		sold := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u2", Seats: []string{"s1"}}
		require.NoError(t, lockErr(s.Lock(ctx, sold, 0)))
		_, err := s.Sell(ctx, sold)
		require.NoError(t, err)
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "l1", OrderNo: mine.OrderNo, UserID: "u1", Status: expiry.StatusPending}, // held as claimed
			{ShowID: show, SeatID: "l2", OrderNo: mine.OrderNo, UserID: "u1", Status: expiry.StatusPaid},    // paid, still only locked
			{ShowID: show, SeatID: "s1", OrderNo: sold.OrderNo, UserID: "u2", Status: expiry.StatusPaid},    // sold as claimed
			{ShowID: show, SeatID: "f1", OrderNo: id("o"), UserID: "u3", Status: expiry.StatusPending},      // free: lost
			{ShowID: show, SeatID: "f2", OrderNo: id("o"), UserID: "u3", Status: expiry.StatusPaid},         // free: lost sale
			{ShowID: show, SeatID: "l1", OrderNo: id("o"), UserID: "u4", Status: expiry.StatusPending},      // another order's seat
		}
		before, err := s.Show(ctx, show)
		require.NoError(t, err)
		missing, err := s.Missing(ctx, claims)
		require.NoError(t, err)
		var got []string
		for _, c := range missing {
			got = append(got, c.SeatID+"/"+c.Status.String())
		}
		assert.ElementsMatch(t, []string{"l2/paid", "f1/pending", "f2/paid"}, got)
		after, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Equal(t, before, after, "Missing changes nothing")
		n, err := s.Restore(ctx, missing)
		require.NoError(t, err)
		assert.Equal(t, 3, n, "what Missing names, Restore changes")
		missing, err = s.Missing(ctx, claims)
		require.NoError(t, err)
		assert.Empty(t, missing, "nothing left to restore")
		_, err = s.Missing(ctx, []cancel.Claim{{ShowID: "a{b}", SeatID: "1", OrderNo: "o", UserID: "u", Status: expiry.StatusPaid}})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})
	// A rebuild is named by a token; every caller gets the
	// same one until it is marked restored.
	t.Run("RebuildToken", func(t *testing.T) {
		s := newSeats(t)
		tokens := make([]string, 8)
		var wg sync.WaitGroup
		for i := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				token, lost, err := s.Lost(ctx)
				assert.NoError(t, err)
				assert.True(t, lost)
				tokens[i] = token
			}()
		}
		wg.Wait()
		require.NotEmpty(t, tokens[0])
		for _, tok := range tokens {
			assert.Equal(t, tokens[0], tok, "concurrent callers share one rebuild")
		}
		assert.ErrorIs(t, s.MarkRestored(ctx, "not-the-token"), cancel.ErrRestoreInterrupted)
		assert.ErrorIs(t, s.MarkRestored(ctx, ""), cancel.ErrRestoreInterrupted)
		_, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "a wrong token marks nothing")
		require.NoError(t, s.MarkRestored(ctx, tokens[0]))
		require.NoError(t, s.MarkRestored(ctx, tokens[0]), "the second caller of the same rebuild")
		_, lost, err = s.Lost(ctx)
		require.NoError(t, err)
		assert.False(t, lost)
	})
	// A payment sells seats whose locks the store lost (a Redis restart
	// without persistence, before the rebuild came by): SQL is the truth,
	// the seats are sold. The sold pass, which finds the sales SQL does not
	// back after SQL went back in time, must see that sale too.
	t.Run("ScanSoldFindsASaleAfterALoss", func(t *testing.T) {
		h := newHarness(t)
		s := h.Seats
		if h.Wipe == nil {
			t.Skip("the harness has no Wipe")
		}
		hold := cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: "u1", Seats: []string{"s1", "s2"}}
		require.NoError(t, lockErr(s.Lock(ctx, hold, 0)))
		h.Wipe()
		n, err := s.Sell(ctx, hold)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the free seats are sold to the paid order")
		got := map[string]cancel.SeatSale{}
		for cursor := ""; ; {
			sales, next, err := s.ScanSold(ctx, cursor, 100)
			require.NoError(t, err)
			for _, sale := range sales {
				got[sale.SeatID] = sale
			}
			if next == "" {
				break
			}
			cursor = next
		}
		want := map[string]cancel.SeatSale{}
		for _, seat := range hold.Seats {
			want[seat] = cancel.SeatSale{ShowID: hold.ShowID, SeatID: seat, OrderNo: hold.OrderNo, UserID: hold.UserID}
		}
		assert.Equal(t, want, got, "every sale the store holds is scanned")
	})

	// The store loses its data again while a rebuild is
	// under way. The rebuild must not end by marking a half-empty store as
	// restored: MarkRestored fails and Lost still reports the loss, under a
	// new token.
	t.Run("RebuildInterruptedByDataLoss", func(t *testing.T) {
		h := newHarness(t)
		s := h.Seats
		if h.Wipe == nil {
			t.Skip("the harness has no Wipe")
		}
		show := id("show")
		claims := []cancel.Claim{
			{ShowID: show, SeatID: "s1", OrderNo: "paid-1", UserID: "u1", Status: expiry.StatusPaid},
			{ShowID: show, SeatID: "s2", OrderNo: "paid-2", UserID: "u2", Status: expiry.StatusPaid},
		}
		token, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		require.True(t, lost)
		_, err = s.Restore(ctx, claims[:1]) // the first page of the rebuild
		require.NoError(t, err)
		h.Wipe()                            // the store loses its data again, mid-rebuild
		_, err = s.Restore(ctx, claims[1:]) // the rest of the (now useless) pass
		require.NoError(t, err)
		assert.ErrorIs(t, s.MarkRestored(ctx, token), cancel.ErrRestoreInterrupted)
		token2, lost, err := s.Lost(ctx)
		require.NoError(t, err)
		assert.True(t, lost, "the second loss must not be hidden: seat s1 is free again though sold in SQL")
		assert.NotEqual(t, token, token2, "a new rebuild")
		assert.ErrorIs(t, s.MarkRestored(ctx, token), cancel.ErrRestoreInterrupted, "the old token stays dead")
		_, err = s.Restore(ctx, claims)
		require.NoError(t, err)
		require.NoError(t, s.MarkRestored(ctx, token2))
		st, err := s.Show(ctx, show)
		require.NoError(t, err)
		assert.Len(t, st, 2)
	})
}
