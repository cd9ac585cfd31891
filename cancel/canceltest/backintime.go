package canceltest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// runBackInTime runs the cases of the seat store's records for when SQL
// goes back in time (cancel's backintime.go).
func runBackInTime(t *testing.T, newSeats func(t *testing.T) SeatStore) {
	ctx := context.Background()

	t.Run("ScanSold", func(t *testing.T) {
		s := newSeats(t)
		sc := s
		want := map[[2]string]cancel.SeatSale{}
		for _, show := range []string{id("sa"), id("sb")} {
			for i := 0; i < 5; i++ {
				h := cancel.Hold{ShowID: show, OrderNo: id("o"), UserID: "u1", Seats: []string{id("p"), id("p")}}
				require.NoError(t, lockErr(s.Lock(ctx, h, 0)))
				if i%2 == 1 {
					continue // left locked: not a sale
				}
				n, err := s.Sell(ctx, h)
				require.NoError(t, err)
				require.Equal(t, 2, n)
				for _, seat := range h.Seats {
					want[[2]string{show, seat}] = cancel.SeatSale{ShowID: show, SeatID: seat, OrderNo: h.OrderNo, UserID: h.UserID}
				}
			}
		}
		// A sale of a seat whose lock was lost (a Redis restart) is found
		// too.
		lost := cancel.Hold{ShowID: id("sc"), OrderNo: id("o"), UserID: "u2", Seats: []string{"1"}}
		require.NoError(t, lockErr(s.Lock(ctx, cancel.Hold{ShowID: lost.ShowID, OrderNo: id("o"), UserID: "u3", Seats: []string{"2"}}, 0)))
		n, err := s.Sell(ctx, lost)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		want[[2]string{lost.ShowID, "1"}] = cancel.SeatSale{ShowID: lost.ShowID, SeatID: "1", OrderNo: lost.OrderNo, UserID: lost.UserID}
		for _, count := range []int{1, 3, 1000} {
			got := map[[2]string]cancel.SeatSale{}
			cursor, calls := "", 0
			for {
				sales, next, err := sc.ScanSold(ctx, cursor, count)
				require.NoError(t, err)
				for _, sale := range sales {
					got[[2]string{sale.ShowID, sale.SeatID}] = sale
				}
				calls++
				if next == "" {
					break
				}
				require.Less(t, calls, 1000, "the pass ends")
				cursor = next
			}
			assert.Equal(t, want, got, "count %d: every sale, no lock", count)
		}
	})

	t.Run("SeatStates", func(t *testing.T) {
		s := newSeats(t)
		r := s
		a := cancel.Hold{ShowID: id("show"), OrderNo: id("o"), UserID: "u1", Seats: []string{"1"}}
		b := cancel.Hold{ShowID: a.ShowID, OrderNo: id("o"), UserID: "u2", Seats: []string{"2"}}
		require.NoError(t, lockErr(s.Lock(ctx, a, 0)))
		require.NoError(t, lockErr(s.Lock(ctx, b, 0)))
		_, err := s.Sell(ctx, b)
		require.NoError(t, err)
		got, err := r.SeatStates(ctx, a.ShowID, []string{"1", "2", "3"})
		require.NoError(t, err)
		require.Len(t, got, 2, "a free seat is absent")
		assert.Equal(t, cancel.SeatLocked, got["1"].Status)
		assert.Equal(t, a.OrderNo, got["1"].OrderNo)
		assert.NotEmpty(t, got["1"].LockID)
		assert.Equal(t, cancel.SeatState{Status: cancel.SeatSold, OrderNo: b.OrderNo, UserID: "u2"}, got["2"])
		_, err = r.SeatStates(ctx, "a}{b", []string{"1"})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		_, err = r.SeatStates(ctx, a.ShowID, []string{"1|x"})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
	})

	t.Run("RefundRecord", func(t *testing.T) {
		s := newSeats(t)
		l := s
		pid := id("pay")
		other := strings.ToUpper(pid) // I10: a case variant is another id
		refunded, err := l.Refunded(ctx, pid)
		require.NoError(t, err)
		assert.False(t, refunded)
		require.NoError(t, l.MarkRefunded(ctx, pid, "o1"))
		require.NoError(t, l.MarkRefunded(ctx, pid, "o2"), "idempotent")
		refunded, err = l.Refunded(ctx, pid)
		require.NoError(t, err)
		assert.True(t, refunded)
		refunded, err = l.Refunded(ctx, other)
		require.NoError(t, err)
		assert.False(t, refunded, "ids match exactly")
		for _, bad := range []string{"", "a}{b", "p|1", "p\x00"} {
			_, err = l.Refunded(ctx, bad)
			assert.ErrorIs(t, err, expiry.ErrInvalidID, "%q", bad)
			assert.ErrorIs(t, l.MarkRefunded(ctx, bad, "o1"), expiry.ErrInvalidID, "%q", bad)
		}
	})
}
