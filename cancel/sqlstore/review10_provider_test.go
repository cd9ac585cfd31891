package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

type r10Open struct{ closes int }

func (p *r10Open) QueryPayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
}
func (p *r10Open) ClosePayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	p.closes++
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// TestReview10HostRowWithoutSideRowIsCappedAtOnce (I18): on a host schema
// with a deadline column, an order the host inserted itself (no side row:
// its placement unknown to the library) whose buyer is on the provider's
// page (QueryPayment: open) was treated as past its maximum hold at the
// first ask: setDeadlineMapped's cap was 0, the move refused, and the
// timeout closed the paying buyer's session and cancelled the order a
// second after its deadline, with MaxHold an hour. Now the host's
// created-at column, when the mapping names one, is its placement: it
// waits. Without one the placement is unknown and the order is cancelled
// at once, as documented (cancel/README.md).
func TestReview10HostRowWithoutSideRowIsCappedAtOnce(t *testing.T) {
	withCreated := seatflow
	withCreated.name = "seatflow-created"
	withCreated.mapping.Orders.CreatedAt = sqlstore.Time{Column: "create_time", Type: sqlstore.DateTimeUTC}
	withCreated.ddl = func(d sqlstore.Dialect) []string { // SQLite's, as this test runs there
		return append(seatflow.ddl(d), "ALTER TABLE order_info ADD COLUMN create_time TEXT NULL")
	}
	for _, tc := range []struct {
		hs    hostSchema
		waits bool
	}{{withCreated, true}, {seatflow, false}} {
		t.Run(tc.hs.name, func(t *testing.T) {
			ctx := context.Background()
			db := openSQLite(t)
			s := hostStore(t, db, sqlstore.SQLite, tc.hs)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			seats := memstore.NewSeats(time.Now).Scoped(s.Scope())
			prov := &r10Open{}
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, Runtime: quiet, Provider: prov, MaxHold: time.Hour, ProviderRetry: 30 * time.Second})
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "H1", UserID: "u1", ShowID: "sh", Seats: []string{"a1"}, ExpireAt: now.Add(-time.Second)}
			require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
			// The host's own insert: no side row.
			_, err = db.ExecContext(ctx, "DELETE FROM oe_order_side WHERE order_no = ?", "H1")
			require.NoError(t, err)

			cancelled, o, err := svc.Timeout(ctx, "H1")
			require.NoError(t, err)
			if !tc.waits {
				assert.True(t, cancelled, "no created-at column: the placement is unknown, the wait has no bound: cancelled")
				return
			}
			assert.False(t, cancelled, "the buyer is paying (open), an hour of MaxHold: it waits")
			assert.Equal(t, expiry.StatusPending, o.Status)
			assert.Greater(t, o.Remaining(), time.Duration(0))
			assert.Zero(t, prov.closes, "a paying buyer's session is not closed a second after the deadline")
		})
	}
}
