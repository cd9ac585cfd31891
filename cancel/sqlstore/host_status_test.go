package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// hostStatusCase is a host schema and the statuses its own code writes
// that the mapping does not name (I19): an order an operator holds, one
// waiting for an offline payment, and the values to read and write them.
type hostStatusCase struct {
	hs                hostSchema
	table, no, status string
	hold, offline     any // the host's own values
	pending           any // the mapping's pending value, as the host writes it and reads it back
	cancelled         any // the mapping's cancelled value, as the host writes it
	libCancel         any // the value the reconciler's cancel writes, as read back
	statusScan        func() any
	readStatus        func(v any) any
	where             string // the host's condition on its rows (a tenant)
}

var hostStatusCases = []hostStatusCase{
	{
		hs: seatflow, table: "order_info", no: "order_no", status: "status",
		hold: int64(7), offline: int64(8), pending: int64(0), cancelled: int64(2), libCancel: int64(2),
		statusScan: func() any { return new(int64) }, readStatus: func(v any) any { return *v.(*int64) },
	},
	{
		// String statuses on a table the server compares case-insensitively
		// (MariaDB's default collation): "new" is not the mapping's "NEW".
		hs: shop, table: "shop_order", no: "order_code", status: "state", where: " AND tenant_id = 7",
		hold: "ON_HOLD", offline: "new", pending: "NEW", cancelled: "CANCELLED", libCancel: "EXPIRED",
		statusScan: func() any { return new(string) }, readStatus: func(v any) any { return *v.(*string) },
	},
}

// rowStatus reads order no's status as the host's row holds it.
func (c hostStatusCase) rowStatus(t *testing.T, db *sql.DB, d sqlstore.Dialect, no string) any {
	v := c.statusScan()
	require.NoError(t, db.QueryRow(bindQ(d, "SELECT "+c.status+" FROM "+c.table+" WHERE "+c.no+" = ?"+c.where), no).Scan(v))
	return c.readStatus(v)
}

// setStatus is the host's own code writing v into order no's row.
func (c hostStatusCase) setStatus(t *testing.T, db *sql.DB, d sqlstore.Dialect, no string, v any) {
	r, err := db.Exec(bindQ(d, "UPDATE "+c.table+" SET "+c.status+" = ? WHERE "+c.no+" = ?"+c.where), v, no)
	require.NoError(t, err)
	n, err := r.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// holder is who holds seat in show by the seat store: "" free, else its
// state and order ("locked:o1", "sold:o1").
func holder(t *testing.T, rs *redisseat.Seats, show, seat string) string {
	st, err := rs.Show(context.Background(), show)
	require.NoError(t, err)
	s, ok := st[seat]
	if !ok {
		return ""
	}
	return s.Status.String() + ":" + s.OrderNo
}

// Statuses the host owns (I19). Real ticketing schemas have statuses the
// mapping does not name: an order an operator holds, a reservation waiting
// for an offline payment. Such an order is not the library's: its expiry
// message is final (acknowledged, never redelivered for ever), the
// reconciler's passes go past it (and count it) instead of failing their
// page on it, it never holds another order back (I12), a user's cancel and
// a payment change nothing on it, a payment for it is refunded once (I9,
// I14), and its seats stay its own: the lock pass does not free them while
// the host holds the order (I2, I15). Once the host moves it back to a
// status of the mapping, the library acts on it again.
// Judged from the host's rows and the seat store.
func TestHostStatusesAreNotTheLibrarys(t *testing.T) {
	for _, c := range hostStatusCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { hostStatuses(t, c, d, db) })
		})
	}
}

func hostStatuses(t *testing.T, c hostStatusCase, d sqlstore.Dialect, db *sql.DB) {
	ctx := context.Background()
	s := hostStore(t, db, d, c.hs)
	rs := redisSeats(t, s)
	ev := &events{}
	book := &refundBook{}
	svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook(s.Scope()), Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	show, u := "ev"+testenv.Unique(), testenv.Unique()
	due, later := now.Add(-2*time.Second), now.Add(time.Hour)
	place := func(no, user, seat string, at time.Time) cancel.Placement {
		p := cancel.Placement{OrderNo: no + u, UserID: user, ShowID: show, Seats: []string{seat}, ExpireAt: at}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
		return p
	}
	// The seats sort c1 < d1 < h1 < k1 < l1: the held orders' claims come
	// before the lost lock's in the claims pass's page.
	crashed := place("C", "u3", "c1", later) // cancelled by a decider that died before its release
	dueOK := place("D", "u5", "d1", due)     // an ordinary due order
	held := place("H", "u1", "h1", due)      // due by its deadline, but the operator holds it
	offline := place("K", "u2", "k1", later) // waits for an offline payment; an online one arrives
	lost := place("L", "u4", "l1", later)    // pending; the seat store lost its lock
	c.setStatus(t, db, d, held.OrderNo, c.hold)
	c.setStatus(t, db, d, offline.OrderNo, c.offline)
	res, err := s.CancelPending(ctx, cancel.Request{OrderNo: crashed.OrderNo, Reason: cancel.ReasonUser, UserID: crashed.UserID})
	require.NoError(t, err)
	require.True(t, res.Changed)
	st, err := rs.Show(ctx, show)
	require.NoError(t, err)
	n, err := rs.Release(ctx, cancel.Hold{ShowID: show, OrderNo: lost.OrderNo, UserID: lost.UserID, Seats: lost.Seats, LockID: st["l1"].LockID})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the seat store lost the lock of L")
	untilDue(t, s, due)

	// Its expiry message and its warning are final: acknowledged, not
	// redelivered, not re-armed.
	sent := &countingSender{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: sent, Runtime: quiet})
	require.NoError(t, err)
	for _, no := range []string{held.OrderNo, offline.OrderNo} {
		out, err := h.Handle(ctx, expiry.Message{OrderNo: no})
		assert.NoError(t, err, "%s: the expiry message of an order in the host's status must not come back for ever", no)
		assert.Equal(t, expiry.OutcomeFinal, out, "%s", no)
		out, err = h.Handle(ctx, expiry.Message{OrderNo: no, Warning: true, Lead: time.Minute})
		assert.NoError(t, err, "%s: its warning neither", no)
		assert.Equal(t, expiry.OutcomeFinal, out, "%s", no)
	}
	assert.Zero(t, sent.count(), "nothing re-armed")

	// Every read answers; none fails beside it.
	for _, no := range []string{held.OrderNo, offline.OrderNo} {
		o, err := s.Order(ctx, no)
		if assert.NoError(t, err, "%s is readable", no) {
			assert.Equal(t, expiry.StatusHost, o.Status, "%s is none of the library's states", no)
		}
	}
	sts, err := s.Statuses(ctx, []string{held.OrderNo, crashed.OrderNo, dueOK.OrderNo, offline.OrderNo})
	assert.NoError(t, err, "one order in the host's status must not fail the page")
	assert.Len(t, sts, 4)
	assert.Equal(t, expiry.StatusHost, sts[held.OrderNo].Status)
	assert.Equal(t, expiry.StatusCancelled, sts[crashed.OrderNo].Status)
	_, _, err = s.Claims(ctx, "", 100)
	assert.NoError(t, err, "nor a page of claims")

	// A user's cancel changes nothing, and says so.
	ures, err := svc.UserCancel(ctx, held.OrderNo, held.UserID)
	assert.NoError(t, err)
	assert.False(t, ures.Changed, "a user's cancel of an order the host holds changes nothing")
	assert.Equal(t, expiry.StatusHost, ures.Order.Status, "and says why")

	// A payment for it cannot be taken (the host owns the order): it is a
	// discrepancy, recorded and refunded once however often the provider
	// repeats it, and nothing of the order changes.
	for i := 0; i < 3; i++ {
		_, err := svc.Pay(ctx, cancel.Payment{OrderNo: offline.OrderNo, PaymentID: "pay-k" + u})
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I9: a payment for an order in the host's status is a discrepancy, never lost")
	}
	assert.Equal(t, 1, book.count(s.Scope(), "pay-k"+u), "I9, I14: refunded once")
	assert.NotEmpty(t, ev.of(expiry.KindDiscrepancy, "paid_after_host", offline.OrderNo), "the host is told why")

	// A reconcile round goes past them, and does everything else.
	const settle = 100 * time.Millisecond
	time.Sleep(2 * settle)
	r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Settle: settle, Batch: 100, Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
	require.NoError(t, err)
	for round := 1; round <= 2; round++ {
		rep, err := r.Round(ctx)
		assert.NoError(t, err, "round %d: the passes go past the orders in the host's statuses", round)
		assert.GreaterOrEqual(t, rep.HostStatus, 2, "round %d counts them", round)
		t.Logf("round %d: %+v", round, rep)
	}
	assert.Equal(t, c.libCancel, c.rowStatus(t, db, d, dueOK.OrderNo), "I3, I12: the ordinary due order is expired beside them")
	assert.Empty(t, holder(t, rs, show, "d1"), "I2: its seat is free")
	assert.Empty(t, holder(t, rs, show, "c1"), "I12: the lock pass frees the crashed cancel's seat beside them")
	assert.Equal(t, "locked:"+lost.OrderNo, holder(t, rs, show, "l1"), "I12: the claims pass restores L's lost lock past their claims")
	for _, p := range []cancel.Placement{held, offline} {
		assert.Equal(t, "locked:"+p.OrderNo, holder(t, rs, show, p.Seats[0]), "%s: the host's order keeps its seat (neither freed nor sold)", p.OrderNo)
		assert.NotEmpty(t, ev.of(expiry.KindSkipped, "host_status", p.OrderNo), "%s: the lock pass counts the order it went past", p.OrderNo)
	}
	assert.Equal(t, c.hold, c.rowStatus(t, db, d, held.OrderNo), "the host's row says what the host wrote")
	assert.Equal(t, c.offline, c.rowStatus(t, db, d, offline.OrderNo), "the host's row says what the host wrote")
	n, _, err = s.Overdue(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "an order in the host's status is not overdue, whatever its deadline")

	// The host gives the held order back to the library, cancelled: the
	// lock pass then frees its seat; the other stays as it is.
	c.setStatus(t, db, d, held.OrderNo, c.cancelled)
	_, err = r.Round(ctx)
	assert.NoError(t, err)
	assert.Empty(t, holder(t, rs, show, "h1"), "cancelled by the host, its seat is freed")
	assert.Equal(t, "locked:"+offline.OrderNo, holder(t, rs, show, "k1"))

	// The host makes the other pending again: the refunded payment, repeated,
	// stays refunded (its fate never flips, I14); a new one pays the order.
	c.setStatus(t, db, d, offline.OrderNo, c.pending)
	_, err = svc.Pay(ctx, cancel.Payment{OrderNo: offline.OrderNo, PaymentID: "pay-k" + u})
	assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I14: a refunded payment is never honoured later")
	assert.Equal(t, 1, book.count(s.Scope(), "pay-k"+u), "I9: nor refunded twice")
	assert.Equal(t, c.pending, c.rowStatus(t, db, d, offline.OrderNo))
	res, err = svc.Pay(ctx, cancel.Payment{OrderNo: offline.OrderNo, PaymentID: "pay-k2" + u})
	require.NoError(t, err)
	assert.True(t, res.Changed, "back in the library's hands, the order is paid")
	assert.Equal(t, "sold:"+offline.OrderNo, holder(t, rs, show, "k1"), "I15: its seat is sold to it")
}
