package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// nullDeadlineCase is a host schema whose deadline (or creation) column
// allows NULL, and how the host writes its own rows there.
type nullDeadlineCase struct {
	hs hostSchema
	hostStatusCase
	col string // the nullable deadline or creation column
	// insert is the host inserting a pending order of its own with no
	// deadline (no, user, show); claim its claim of a seat (show, seat,
	// no), "" without a claims table.
	insert, claim string
	pending, paid any // as read back
	userCancel    any // the value a user's cancel writes, as read back
}

var nullDeadlineCases = []nullDeadlineCase{
	{
		hs: edited(seatflow, "expire_time   DATETIME        NOT NULL", "expire_time   DATETIME        NULL",
			"expire_time   TIMESTAMP        NOT NULL", "expire_time   TIMESTAMP        NULL", "expire_time   TEXT        NOT NULL", "expire_time   TEXT        NULL"),
		hostStatusCase: hostStatusCases[0], col: "expire_time",
		insert:  "INSERT INTO order_info (order_no, user_id, show_id, status, expire_time) VALUES (?, ?, ?, 0, NULL)",
		claim:   "INSERT INTO order_seat (show_id, seat_id, order_no) VALUES (?, ?, ?)",
		pending: int64(0), paid: int64(1), userCancel: int64(2),
	},
	{
		hs:             edited(shop, "due_at       BIGINT      NOT NULL", "due_at       BIGINT      NULL"),
		hostStatusCase: hostStatusCases[1], col: "due_at",
		insert:  "INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at) VALUES (7, ?, ?, ?, 'NEW', NULL)",
		claim:   "INSERT INTO shop_ticket (tenant_id, event_id, seat_code, order_code, status) VALUES (7, ?, ?, ?, 'HELD')",
		pending: "NEW", paid: "PAID", userCancel: "CANCELLED",
	},
	{
		// No deadline column: the creation time plus a fixed window.
		hs: edited(window, "created_ms   BIGINT      NOT NULL", "created_ms   BIGINT      NULL"),
		hostStatusCase: hostStatusCase{table: "orders", no: "number", status: "status", where: " AND deleted = 0", libCancel: int64(32),
			statusScan: func() any { return new(int64) }, readStatus: func(v any) any { return *v.(*int64) }},
		col:     "created_ms",
		insert:  "INSERT INTO orders (number, customer, show_code, status, created_ms) VALUES (?, ?, ?, 10, NULL)",
		claim:   "INSERT INTO order_seats (show_code, seat, number) VALUES (?, ?, ?)",
		pending: int64(10), paid: int64(20), userCancel: int64(30),
	},
	{
		// The creation time plus a window kept in a settings row; no
		// claims table (the side table keeps the seats).
		hs: setting,
		hostStatusCase: hostStatusCase{table: "shop_orders", no: "order_sn", status: "status", where: " AND delete_status = 0", libCancel: int64(5),
			statusScan: func() any { return new(int64) }, readStatus: func(v any) any { return *v.(*int64) }},
		col:     "create_time",
		insert:  "INSERT INTO shop_orders (order_sn, member, show_id, status, create_time) VALUES (?, ?, ?, 0, NULL)",
		pending: int64(0), paid: int64(1), userCancel: int64(4),
	},
}

// A NULL deadline (#37 item 4): a nullable deadline or creation column that
// holds NULL, in an order an operator made by hand or one whose deadline
// the host cleared. NULL means "never due": Check accepts the column, every
// read of the order answers (pending, Order.ExpireAt zero), its expiry
// message and warning are final, the expired pass never picks it (and
// pages past it to the due orders), Overdue does not count it, the lock
// pass leaves its seats to it, a payment pays it and a user's cancel
// cancels it. Judged from the host's rows and the seat store.
func TestHostNullDeadlineIsNeverDue(t *testing.T) {
	for _, c := range nullDeadlineCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { nullDeadline(t, c, d, db) })
		})
	}
}

func nullDeadline(t *testing.T, c nullDeadlineCase, d sqlstore.Dialect, db *sql.DB) {
	ctx := context.Background()
	s := hostStore(t, db, d, c.hs) // Check accepts the nullable column
	rs := redisSeats(t, s)
	book := &refundBook{}
	svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook(s.Scope()), Runtime: quiet})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	show, u := "ev"+testenv.Unique(), testenv.Unique()
	due := now.Add(-2 * time.Second)
	place := func(no, user, seat string) cancel.Placement {
		p := cancel.Placement{OrderNo: no + u, UserID: user, ShowID: show, Seats: []string{seat}, ExpireAt: due}
		require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
		return p
	}
	exec := func(q string, args ...any) {
		_, err := db.ExecContext(ctx, bindQ(d, q), args...)
		require.NoError(t, err, q)
	}
	// Placed due, then the operator clears their deadlines: never due now.
	kept := place("N", "u1", "n1")
	paid := place("P", "u2", "p1")
	dueOK := place("D", "u3", "d1") // an ordinary due order beside them
	for _, no := range []string{kept.OrderNo, paid.OrderNo} {
		exec("UPDATE "+c.table+" SET "+c.col+" = NULL WHERE "+c.no+" = ?"+c.where, no)
	}
	// The operator's own order, inserted by hand with no deadline.
	made := "M" + u
	exec(c.insert, made, "u4", show)
	if c.claim != "" {
		exec(c.claim, show, "m1", made)
	}
	untilDue(t, s, due)

	// Every read answers: pending, with no deadline.
	for _, no := range []string{kept.OrderNo, paid.OrderNo, made} {
		o, err := s.Order(ctx, no)
		if assert.NoError(t, err, "%s: an order with a NULL deadline is readable", no) {
			assert.Equal(t, expiry.StatusPending, o.Status, "%s", no)
			assert.True(t, o.ExpireAt.IsZero(), "%s: no deadline, not %v", no, o.ExpireAt)
		}
	}
	sts, err := s.Statuses(ctx, []string{kept.OrderNo, paid.OrderNo, made, dueOK.OrderNo})
	assert.NoError(t, err)
	assert.Len(t, sts, 4)
	_, _, err = s.Claims(ctx, "", 100)
	assert.NoError(t, err)

	// Its messages are final: acknowledged, never re-armed, never a cancel.
	sent := &countingSender{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: sent, Runtime: quiet})
	require.NoError(t, err)
	for _, no := range []string{kept.OrderNo, made} {
		out, err := h.Handle(ctx, expiry.Message{OrderNo: no})
		assert.NoError(t, err, "%s", no)
		assert.Equal(t, expiry.OutcomeFinal, out, "%s: never due, its expiry message is final", no)
		out, err = h.Handle(ctx, expiry.Message{OrderNo: no, Warning: true, Lead: time.Minute})
		assert.NoError(t, err, "%s", no)
		assert.Equal(t, expiry.OutcomeFinal, out, "%s: its warning too", no)
	}
	assert.Zero(t, sent.count(), "nothing re-armed")

	// The expired pass's scan finds the due order alone, page by page.
	var scanned []string
	for cursor, pages := "", 0; ; pages++ {
		require.Less(t, pages, 10, "the scan does not end")
		nos, next, err := s.Expired(ctx, cursor, 1)
		require.NoError(t, err)
		scanned = append(scanned, nos...)
		if next == "" {
			break
		}
		cursor = next
	}
	assert.Equal(t, []string{dueOK.OrderNo}, scanned, "never due: the scan never lists them")
	n, _, err := s.Overdue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "Overdue counts the due order alone")

	// Reconcile rounds expire the due order and leave them pending, their
	// seats theirs.
	const settle = 100 * time.Millisecond
	r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Settle: settle, Batch: 1, Runtime: quiet})
	require.NoError(t, err)
	for round := 1; round <= 2; round++ {
		time.Sleep(2 * settle)
		rep, err := r.Round(ctx)
		assert.NoError(t, err, "round %d", round)
		t.Logf("round %d: %+v", round, rep)
	}
	assert.Equal(t, c.libCancel, c.rowStatus(t, db, d, dueOK.OrderNo), "I3: the due order beside them is expired")
	assert.Empty(t, holder(t, rs, show, "d1"), "I2: its seat is free")
	for _, p := range []cancel.Placement{kept, paid} {
		assert.Equal(t, c.pending, c.rowStatus(t, db, d, p.OrderNo), "%s: never due, still pending", p.OrderNo)
		assert.Equal(t, "locked:"+p.OrderNo, holder(t, rs, show, p.Seats[0]), "%s keeps its seat", p.OrderNo)
	}
	assert.Equal(t, c.pending, c.rowStatus(t, db, d, made), "the operator's order is still pending")

	// A payment pays it; a user's cancel cancels it.
	for _, no := range []string{paid.OrderNo, made} {
		res, err := svc.Pay(ctx, cancel.Payment{OrderNo: no, PaymentID: "pay-" + no})
		if assert.NoError(t, err, "%s: a payment for an order with no deadline is honoured", no) {
			assert.True(t, res.Changed, "%s", no)
		}
		assert.Equal(t, c.paid, c.rowStatus(t, db, d, no), "%s is paid", no)
		assert.Zero(t, book.count(s.Scope(), "pay-"+no), "I14: honoured, not refunded")
	}
	assert.Equal(t, "sold:"+paid.OrderNo, holder(t, rs, show, "p1"), "I15: its seat is sold to it")
	res, err := svc.UserCancel(ctx, kept.OrderNo, kept.UserID)
	if assert.NoError(t, err) {
		assert.True(t, res.Changed, "the buyer may cancel an order that is never due")
	}
	assert.Equal(t, c.userCancel, c.rowStatus(t, db, d, kept.OrderNo))
	assert.Empty(t, holder(t, rs, show, "n1"), "I2: its seat is free")
}
