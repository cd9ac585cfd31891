package sqlstore_test

import (
	"context"
	"slices"
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

// TestExpiredOrderNumberWithTrailingBlank: a host's own code wrote an order
// number ending in a blank into its VARCHAR column ("X1 ", an id the
// library refuses: expiry.ValidateID). Read back trimmed it named another
// order ("X1", which no row holds byte for byte, I10): the expired pass
// counted a lost race for it in every round and never said why. The row is
// the host's to repair: every round reports it unreadable by its number as
// the column holds it, counts no race, and leaves it as it is, while the
// due order beside it expires.
func TestExpiredOrderNumberWithTrailingBlank(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openDB(t, d)
			s := hostStore(t, db, d, seatflow)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			u := testenv.Unique()
			blank := cancel.Placement{OrderNo: "TB" + u, UserID: "u1", ShowID: "tbs" + u, Seats: []string{"a1"}, ExpireAt: now.Add(-time.Minute)}
			plain := cancel.Placement{OrderNo: "TP" + u, UserID: "u1", ShowID: "tbs" + u, Seats: []string{"a2"}, ExpireAt: now.Add(-time.Minute)}
			for _, p := range []cancel.Placement{blank, plain} {
				require.NoError(t, s.Insert(db, nil)(ctx, p))
			}
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
			for round := 1; round <= 2; round++ {
				rep, err := r.Round(ctx)
				require.NoError(t, err)
				assert.Zero(t, rep.LostRaces, "round %d: nobody decided %q: %+v", round, blank.OrderNo+" ", rep)
				assert.Equal(t, 2, rep.Unreadable, "round %d: the expired pass and the claims pass each report it: %+v", round, rep)
			}
			var named []string
			for _, ev := range rec.Of(expiry.KindSkipped) {
				if ev.Reason == "unreadable" {
					named = append(named, ev.OrderNo)
				}
			}
			assert.Equal(t, slices.Repeat([]string{blank.OrderNo + " "}, 4), named, "reported by the number the column holds, twice every round")
			o, err := s.Order(ctx, plain.OrderNo)
			require.NoError(t, err)
			assert.Equal(t, expiry.StatusCancelled, o.Status, "the due order beside it expired")
			var n int
			require.NoError(t, db.QueryRowContext(ctx, bindQ(d, "SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 0"), blank.OrderNo+" ").Scan(&n))
			assert.Equal(t, 1, n, "the host's row is left as it is")
		})
	}
}
