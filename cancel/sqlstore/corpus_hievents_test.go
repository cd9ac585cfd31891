package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/corpus"
)

// TestHiEventsNullSessionReservationIsPayable: hi.events' orders.session_id
// (the corpus entry's user column) is nullable, and the store reads a NULL
// user as "" (readForTransition: a legacy row of a host's table). A
// RESERVED order whose session_id is NULL, inserted as hi.events inserts
// its orders, is pending and due, is listed by Expired and cancelled by
// CancelDue on both dialects; a payment for it should pay it on both too.
// MariaDB pays it. PostgreSQL's one-statement payment (the cas CTE, then
// decide's INSERT of CAST(cas.u AS VARCHAR(64)) into
// oe_payment_discrepancy.user_id, NOT NULL) fails with a not-null
// violation, every time: not a sentinel, so the Service treats it as
// transient and the provider's callback is neither taken nor refunded,
// however often it repeats. With a hook (a transaction instead of the
// CTE, the decision row written from the Go value "") PostgreSQL pays it.
//
// Found while mapping hi.events (internal/corpus, entry hievents); left
// failing for the library's owner: a test of the corpus entry, not a fix.
func TestHiEventsNullSessionReservationIsPayable(t *testing.T) {
	var e corpus.Entry
	for _, x := range corpus.Entries {
		if x.Name == "hievents" {
			e = x
		}
	}
	require.Equal(t, "hievents", e.Name)
	for _, d := range corpus.Dialects {
		for _, hook := range []bool{false, true} {
			name := string(d) + "/plain"
			if hook {
				name = string(d) + "/hook"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				ddl, err := e.FullDDL(d)
				require.NoError(t, err)
				applyDDL(t, db, ddl)
				s, err := sqlstore.New(db, d, e.Final(d))
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				require.NoError(t, s.Check(ctx))
				if hook {
					s.SetHook(func(context.Context, cancel.Querier, cancel.Result) error { return nil })
				}
				now := "UTC_TIMESTAMP()"
				if d == sqlstore.Postgres {
					now = "(now() AT TIME ZONE 'UTC')"
				}
				// As hi.events' OrderManagementService writes a reservation,
				// without a session.
				_, err = db.ExecContext(ctx, "INSERT INTO orders (short_id, event_id, currency, status, reserved_until, session_id, public_id, created_at) VALUES ('oNOSESSION0001', 7, 'EUR', 'RESERVED', "+now+", NULL, 'NOSESS1', "+now+")")
				require.NoError(t, err)

				o, err := s.Order(ctx, "NOSESS1")
				require.NoError(t, err)
				require.Equal(t, expiry.StatusPending, o.Status)
				require.Equal(t, "", o.UserID, "a NULL session reads as no user")

				r, err := s.PayPending(ctx, cancel.Payment{OrderNo: "NOSESS1", PaymentID: "pi_nosession"})
				if assert.NoError(t, err, "a pending order without a session cannot be paid") {
					assert.True(t, r.Changed)
				}
				var status string
				require.NoError(t, db.QueryRowContext(ctx, "SELECT status FROM orders WHERE public_id = 'NOSESS1'").Scan(&status))
				assert.Equal(t, "COMPLETED", status)
			})
		}
	}
}
