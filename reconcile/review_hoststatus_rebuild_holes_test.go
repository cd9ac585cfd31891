package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Holes an outside review of 40ac3e1 (I19) found in the reconciler, as
// tests of the test command.

// The seat store loses its data while an order is in a status the host
// owns (an operator's hold on a buyer's two seats, purchase limit 2). I19
// says the host's order holds its seats "as a pending one does", and I8
// counts them in the purchase-limit counter; the rebuild from SQL restores
// a pending order's lock and counter. After the rebuild the held order's
// seats must still be counted for its buyer, so that the buyer cannot take
// two more seats past the limit (I17), and a control pending order beside
// it is restored as usual.
func TestReviewHoleHostStatusRebuildForgetsItsSeats(t *testing.T) {
	for _, loss := range []string{"wipe", "show"} {
		t.Run(loss, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			require.NoError(t, e.placeLimited(t, "held", "buyer", 2, time.Hour, "h1", "h2"))
			require.NoError(t, e.placeLimited(t, "ctrl", "other", 2, time.Hour, "c1", "c2"))
			orders := hostStatuses{Store: e.store, host: map[string]bool{"held": true}}
			r, err := reconcile.New(reconcile.Config{Orders: orders, Seats: e.seats, Service: e.svc, Grace: time.Minute})
			require.NoError(t, err)
			held, err := e.seats.Held(ctx, "s", "buyer")
			require.NoError(t, err)
			require.Equal(t, 2, held, "before the loss the counter holds the host's order's seats")

			if loss == "wipe" {
				e.seats.Wipe()
			} else {
				e.seats.WipeShow("s")
			}
			e.advance(time.Minute)
			rep, err := r.Round(ctx)
			require.NoError(t, err)
			t.Logf("round after the loss: %+v", rep)
			if loss == "wipe" {
				require.True(t, rep.Rebuilt)
			}
			ctrl, err := e.seats.Held(ctx, "s", "other")
			require.NoError(t, err)
			require.Equal(t, 2, ctrl, "control: the pending order is restored and counted")

			held, err = e.seats.Held(ctx, "s", "buyer")
			require.NoError(t, err)
			assert.Equal(t, 2, held, "I8: the counter equals the user's seats in pending, paid and host-status orders; after the rebuild it does not count the host's order")
			err = e.placeLimited(t, "more", "buyer", 2, time.Hour, "m1", "m2")
			assert.ErrorIs(t, err, cancel.ErrLimitExceeded, "I17: the buyer holds 2 seats (the host's order) with limit 2; two more must be refused")
			show, err := e.seats.Show(ctx, "s")
			require.NoError(t, err)
			t.Logf("seat store after: %v", show)
		})
	}
}
