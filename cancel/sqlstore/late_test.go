package sqlstore

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// TestMigrateAddsLateColumns: Migrate adds oe_order.seats and warned_at_ms to
// an earlier table; an order placed before them cannot be reinstated
// (cancel.ErrNoSeatRecord, so the service refunds), and its warning and
// deadline work as for a new one.
func TestMigrateAddsLateColumns(t *testing.T) {
	ctx := context.Background()
	dialects(t, func(t *testing.T, d Dialect, db *sql.DB) {
		b, err := os.ReadFile("testdata/schema-before-issue9/" + string(d) + ".sql")
		require.NoError(t, err)
		for _, q := range strings.Split(string(b), ";") {
			if strings.TrimSpace(stripComments(q)) != "" {
				_, err := db.ExecContext(ctx, q)
				require.NoError(t, err, q)
			}
		}
		s, err := New(db, d)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		now, err := s.Now(ctx)
		require.NoError(t, err)
		for _, no := range []string{"old-1", "old-2"} {
			_, err = db.ExecContext(ctx, rebind(d, "INSERT INTO oe_order (order_no, user_id, show_id, status, expire_at_ms, created_at_ms, updated_at_ms) VALUES (?, 'alice', 'show-1', 0, ?, 0, 0)"), no, now.Add(time.Minute).UnixMilli())
			require.NoError(t, err)
		}
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Migrate(ctx), "idempotent")
		for _, c := range []string{"seats", "warned_at_ms"} {
			has, err := s.hasColumn(ctx, "oe_order", c)
			require.NoError(t, err)
			assert.True(t, has, c)
		}

		w, err := s.MarkWarned(ctx, "old-2", time.Hour)
		require.NoError(t, err)
		assert.True(t, w.Fired, "an upgraded order is warned")
		_, err = s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "old-1", In: -time.Second})
		assert.ErrorIs(t, err, expiry.ErrInvalidID)
		dl, err := s.SetDeadline(ctx, cancel.DeadlineChange{OrderNo: "old-1", In: 0, Shorten: true})
		require.NoError(t, err)
		require.True(t, dl.Changed)
		res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "old-1", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		require.True(t, res.Changed)
		_, err = s.ReinstateCancelled(ctx, cancel.Payment{OrderNo: "old-1", PaymentID: "pay-1"}, func(context.Context, cancel.Hold, int) (string, error) {
			t.Error("nothing to claim")
			return "", nil
		})
		assert.ErrorIs(t, err, cancel.ErrNoSeatRecord)
		o, err := s.Order(ctx, "old-1")
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusCancelled, o.Status, "nothing committed")
	})
}
