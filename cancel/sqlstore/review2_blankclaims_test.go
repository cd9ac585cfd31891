package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// TestReview2ClaimsPassOrderNumberWithTrailingBlank: b6a7c53 made the
// expired scan read an order number as its column holds it, so a host's
// "X1 " is reported unreadable every round. The claims pass still trims
// (readClaims: unpad of the order number): on MySQL it restores the seat
// as locked by "X1", a number no row holds byte for byte (I10); on SQLite
// and PostgreSQL the claim is passed over silently, neither restored nor
// reported, so SQL (a pending order's claim) and the seat store (a free
// seat) disagree after settle with nothing said (I15). Judged: each round
// either reports the claim unreadable, or the seat store holds the seat
// for the number the row holds.
func TestReview2ClaimsPassOrderNumberWithTrailingBlank(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			u := testenv.Unique()
			blank := cancel.Placement{OrderNo: "TB" + u, UserID: "u1", ShowID: "tbs" + u, Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)}
			require.NoError(t, s.Insert(db, nil)(ctx, blank))
			_, err = db.ExecContext(ctx, bindQ(d, "UPDATE order_info SET order_no = ? WHERE order_no = ?"), blank.OrderNo+" ", blank.OrderNo)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, bindQ(d, "UPDATE order_seat SET order_no = ? WHERE order_no = ?"), blank.OrderNo+" ", blank.OrderNo)
			require.NoError(t, err)
			seats := miniSeats(t, s)
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			rec := &expirytest.Recorder{}
			r, err := reconcile.New(reconcile.Config{Orders: s, Seats: seats, Service: svc, Grace: time.Millisecond, Settle: time.Millisecond,
				Runtime: expiry.Runtime{Observer: rec}})
			require.NoError(t, err)
			for round := 1; round <= 3; round++ {
				rep, err := r.Round(ctx)
				require.NoError(t, err)
				held, _ := seats.Show(ctx, blank.ShowID)
				t.Logf("round %d: %+v held %+v", round, rep, held)
				if rep.Unreadable == 0 {
					assert.Equal(t, blank.OrderNo+" ", held["a1"].OrderNo, "round %d: the claim of %q neither reported unreadable nor restored as its own", round, blank.OrderNo+" ")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
