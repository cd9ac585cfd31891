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

// payingCase is a host schema whose own code moves a reservation to a
// payment status while the buyer is on the provider's page, two such
// values (two payment steps), and a value the mapping does not name that
// differs from one of them only by case (""  where the column compares
// integers).
type payingCase struct {
	hostStatusCase
	paying    [2]any
	paid      any // the value a payment writes, as read back
	lookalike any
}

var payingCases = []payingCase{
	{hostStatusCase: hostStatusCases[0], paying: [2]any{int64(4), int64(5)}, paid: int64(1)},
	{hostStatusCase: hostStatusCases[1], paying: [2]any{"PAYING", "AT_PSP"}, paid: "PAID", lookalike: "paying"},
}

// TestPayingStatusesArePayable (issue 39, I18, I19): a status the mapping
// names as Paying means the buyer is paying. The provider's callback for
// such an order pays it, as for a pending one: the host's row says paid,
// its seats are sold to it, nothing is refunded, and a repeated callback
// is answered. Until then the library does not expire it: its expiry
// message is final, the reconciler's rounds and a user's cancel leave its
// row and seats as they are, though its deadline has passed. A value that
// differs from a Paying one only by case is the host's (I10): its payment
// is refunded. Judged from the host's rows, the seat store and the refund
// book.
func TestPayingStatusesArePayable(t *testing.T) {
	for _, c := range payingCases {
		t.Run(c.hs.name, func(t *testing.T) {
			eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) { payingStatuses(t, c, d, db) })
		})
	}
}

func payingStatuses(t *testing.T, c payingCase, d sqlstore.Dialect, db *sql.DB) {
	ctx := context.Background()
	hs := c.hs
	hs.mapping.Orders.Statuses.Paying = c.paying[:]
	s := hostStore(t, db, d, hs)
	rs := redisSeats(t, s)
	ev := &events{}
	book := &refundBook{}
	svc, err := cancel.New(cancel.Config{Store: s, Seats: rs, OnDiscrepancy: book.hook(s.Scope()), Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
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
	first := place("A", "u1", "a1")  // on the provider's page
	second := place("B", "u2", "b1") // in the host's second payment step
	plain := place("C", "u3", "c1")  // pending: expires beside them
	c.setStatus(t, db, d, first.OrderNo, c.paying[0])
	c.setStatus(t, db, d, second.OrderNo, c.paying[1])
	var look cancel.Placement
	if c.lookalike != nil {
		look = place("L", "u4", "l1")
		c.setStatus(t, db, d, look.OrderNo, c.lookalike)
	}
	untilDue(t, s, due)

	// Not the library's to expire while the buyer pays.
	sent := &countingSender{}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: svc, Warner: svc, Sender: sent, Runtime: quiet})
	require.NoError(t, err)
	for _, p := range []cancel.Placement{first, second} {
		out, err := h.Handle(ctx, expiry.Message{OrderNo: p.OrderNo})
		assert.NoError(t, err, "%s", p.OrderNo)
		assert.Equal(t, expiry.OutcomeFinal, out, "%s: its expiry message is final", p.OrderNo)
		ures, err := svc.UserCancel(ctx, p.OrderNo, p.UserID)
		assert.NoError(t, err)
		assert.False(t, ures.Changed, "%s: a user's cancel changes nothing while the buyer pays", p.OrderNo)
	}
	const settle = 100 * time.Millisecond
	time.Sleep(2 * settle)
	r, err := reconcile.New(reconcile.Config{Orders: s, Seats: rs, Service: svc, Settle: settle, Batch: 100, Runtime: expiry.Runtime{Observer: ev, Logger: quiet.Logger}})
	require.NoError(t, err)
	for round := 0; round < 2; round++ {
		_, err := r.Round(ctx)
		assert.NoError(t, err)
	}
	assert.Equal(t, c.libCancel, c.rowStatus(t, db, d, plain.OrderNo), "I3: the pending order beside them is expired")
	assert.Empty(t, holder(t, rs, show, "c1"), "I2: its seat is free")
	for i, p := range []cancel.Placement{first, second} {
		assert.Equal(t, c.paying[i], c.rowStatus(t, db, d, p.OrderNo), "I18: %s is not expired while its buyer pays", p.OrderNo)
		assert.Equal(t, "locked:"+p.OrderNo, holder(t, rs, show, p.Seats[0]), "I15: %s keeps its seat", p.OrderNo)
	}

	// The provider's callback pays it; repeated, it is answered.
	for i, pay := range []cancel.Payment{
		{OrderNo: first.OrderNo, PaymentID: "pay-a" + u},
		{OrderNo: second.OrderNo, UserID: second.UserID, PaymentID: "pay-b" + u},
	} {
		p := []cancel.Placement{first, second}[i]
		res, err := svc.Pay(ctx, pay)
		if assert.NoError(t, err, "I18: the callback for %s, in a paying status, pays it", p.OrderNo) {
			assert.True(t, res.Changed)
		}
		res, err = svc.Pay(ctx, pay)
		assert.NoError(t, err, "a repeated callback is answered")
		assert.False(t, res.Changed)
		assert.Equal(t, c.paid, c.rowStatus(t, db, d, p.OrderNo), "the host's row says paid")
		assert.Equal(t, "sold:"+p.OrderNo, holder(t, rs, show, p.Seats[0]), "I15: its seat is sold to it")
		assert.Zero(t, book.count(s.Scope(), pay.PaymentID), "I9: nothing is refunded")
	}
	if c.lookalike != nil {
		_, err := svc.Pay(ctx, cancel.Payment{OrderNo: look.OrderNo, PaymentID: "pay-l" + u})
		assert.ErrorIs(t, err, cancel.ErrDiscrepancy, "I10: %q is not the mapping's %q", c.lookalike, c.paying[0])
		assert.Equal(t, c.lookalike, c.rowStatus(t, db, d, look.OrderNo))
		assert.Equal(t, 1, book.count(s.Scope(), "pay-l"+u), "I9: refunded once")
	}
	n, _, err := s.Overdue(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "no order is overdue")
}
