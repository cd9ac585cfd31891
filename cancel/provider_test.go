package cancel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/expirytest"
)

// The provider's side of a timeout (provider.go, I18) on the in-memory
// stores with a clock the test moves, so that every branch is judged
// without waiting: who paid, who holds the seat, who was refunded, when a
// due order was cancelled, and whether its session was closed before.
// cancel/sqlstore's provider tests run the same questions on the real
// stores.

// stepClock is a clock the test moves.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// scripted is a provider answering per order from scripts the test sets:
// the query's answer and error, the close's (by default the close closes a
// session that is not paid, and refuses a paid one with its payment). It
// records each call, and the order's status in the store when it closed.
type scripted struct {
	mu       sync.Mutex
	store    *memstore.Store
	query    map[string]cancel.PaymentAnswer
	queryErr map[string]error
	close    map[string]cancel.PaymentAnswer
	closeErr map[string]error
	queries  map[string]int
	closes   map[string]int
	closedAs map[string][]expiry.Status // the order's status at each successful close
	onQuery  func(no string)            // runs inside a query, once
}

func newScripted(store *memstore.Store) *scripted {
	return &scripted{store: store, query: map[string]cancel.PaymentAnswer{}, queryErr: map[string]error{}, close: map[string]cancel.PaymentAnswer{},
		closeErr: map[string]error{}, queries: map[string]int{}, closes: map[string]int{}, closedAs: map[string][]expiry.Status{}}
}

func (p *scripted) QueryPayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	p.queries[o.No]++
	a, err, hook := p.query[o.No], p.queryErr[o.No], p.onQuery
	p.onQuery = nil
	p.mu.Unlock()
	if hook != nil {
		hook(o.No)
	}
	if err != nil {
		return cancel.PaymentAnswer{}, err
	}
	if a.State == 0 {
		return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
	}
	return a, nil
}

func (p *scripted) ClosePayment(ctx context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closes[o.No]++
	if err := p.closeErr[o.No]; err != nil {
		return cancel.PaymentAnswer{}, err
	}
	if a, ok := p.close[o.No]; ok {
		return a, nil
	}
	if a := p.query[o.No]; a.State == cancel.PaymentPaid {
		return a, nil
	}
	cur, err := p.store.Order(ctx, o.No)
	if err != nil {
		return cancel.PaymentAnswer{}, err
	}
	p.closedAs[o.No] = append(p.closedAs[o.No], cur.Status)
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *scripted) counts(no string) (queries, closes, closed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queries[no], p.closes[no], len(p.closedAs[no])
}

// provEnv is a Service on the in-memory stores with the scripted provider.
type provEnv struct {
	clk     *stepClock
	store   *memstore.Store
	seats   *memstore.Seats
	prov    *scripted
	ev      *expirytest.Recorder
	svc     *cancel.Service
	mu      sync.Mutex
	refunds map[string]int
}

const (
	envRetry = 30 * time.Second
	envHold  = 10 * time.Minute
)

func newProvEnv(t *testing.T) *provEnv {
	clk := &stepClock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	e := &provEnv{clk: clk, store: memstore.NewStore(clk.now), seats: memstore.NewSeats(clk.now), ev: &expirytest.Recorder{}, refunds: map[string]int{}}
	e.prov = newScripted(e.store)
	var err error
	e.svc, err = cancel.New(cancel.Config{Store: e.store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev},
		Provider: e.prov, ProviderRetry: envRetry, MaxHold: envHold,
		OnDiscrepancy: func(_ context.Context, d cancel.Discrepancy) error {
			e.mu.Lock()
			e.refunds[d.PaymentID]++
			e.mu.Unlock()
			return nil
		}})
	require.NoError(t, err)
	return e
}

// placeDue places no, due a second ago by the store's clock, one seat.
func (e *provEnv) placeDue(t *testing.T, no string) cancel.Placement {
	p := cancel.Placement{OrderNo: no, UserID: "u-" + no, ShowID: "s", Seats: []string{no + "-1"}, ExpireAt: e.clk.now().Add(-time.Second)}
	require.NoError(t, e.svc.Place(context.Background(), p, e.store.Place))
	return p
}

func (e *provEnv) order(t *testing.T, no string) expiry.Order {
	o, err := e.store.Order(context.Background(), no)
	require.NoError(t, err)
	return o
}

// holder is who holds no's seat in the seat store: "locked:X", "sold:X" or "".
func (e *provEnv) holder(t *testing.T, no string) string {
	st, err := e.seats.SeatStates(context.Background(), "s", []string{no + "-1"})
	require.NoError(t, err)
	s, ok := st[no+"-1"]
	if !ok {
		return ""
	}
	return s.Status.String() + ":" + s.OrderNo
}

func (e *provEnv) refunded(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refunds[id]
}

// answers are the provider's answers the Service counted for no, in order.
func (e *provEnv) answers(no string) []string {
	var out []string
	for _, ev := range e.ev.Of(expiry.KindProviderAnswered) {
		if ev.OrderNo == no {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// TestProviderAnswersDecideTheTimeout: each answer of the query and of the
// close, one due order each, judged by the order, its seat, the refunds,
// the close and the events.
func TestProviderAnswersDecideTheTimeout(t *testing.T) {
	ctx := context.Background()
	bad := errors.New("provider: 502")
	for _, tc := range []struct {
		name      string
		query     cancel.PaymentAnswer
		queryErr  error
		close     *cancel.PaymentAnswer
		closeErr  error
		cancelled bool
		status    expiry.Status
		waits     bool // re-armed ProviderRetry later
		closed    int  // successful closes
		answers   []string
		paidWith  string // the payment that paid it
	}{
		{name: "not paid: closed, then cancelled", cancelled: true, status: expiry.StatusCancelled, closed: 1, answers: []string{"not_paid", "closed"}},
		{name: "paid", query: cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-q"}, status: expiry.StatusPaid, answers: []string{"paid"}, paidWith: "pay-q"},
		{name: "open", query: cancel.PaymentAnswer{State: cancel.PaymentOpen}, status: expiry.StatusPending, waits: true, answers: []string{"open"}},
		{name: "error", queryErr: bad, status: expiry.StatusPending, waits: true, answers: []string{"unknown"}},
		{name: "paid without an id", query: cancel.PaymentAnswer{State: cancel.PaymentPaid}, status: expiry.StatusPending, waits: true, answers: []string{"unknown"}},
		{name: "paid with an invalid id", query: cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay q"}, status: expiry.StatusPending, waits: true, answers: []string{"unknown"}},
		{name: "an unknown state", query: cancel.PaymentAnswer{State: 9}, status: expiry.StatusPending, waits: true, answers: []string{"unknown"}},
		{name: "the close finds it paid", close: &cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-c"}, status: expiry.StatusPaid, answers: []string{"not_paid", "close_paid"}, paidWith: "pay-c"},
		{name: "the close fails", closeErr: bad, status: expiry.StatusPending, waits: true, answers: []string{"not_paid", "close_unknown"}},
		{name: "the close finds it processing", close: &cancel.PaymentAnswer{State: cancel.PaymentOpen}, status: expiry.StatusPending, waits: true, answers: []string{"not_paid", "close_open"}},
		{name: "the close answers paid without an id", close: &cancel.PaymentAnswer{State: cancel.PaymentPaid}, status: expiry.StatusPending, waits: true, answers: []string{"not_paid", "close_unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProvEnv(t)
			p := e.placeDue(t, "A")
			e.prov.query["A"], e.prov.queryErr["A"], e.prov.closeErr["A"] = tc.query, tc.queryErr, tc.closeErr
			if tc.close != nil {
				e.prov.close["A"] = *tc.close
			}
			cancelled, o, err := e.svc.Timeout(ctx, "A")
			require.NoError(t, err)
			assert.Equal(t, tc.cancelled, cancelled)
			assert.Equal(t, tc.status, o.Status, "the answer's order")
			now := e.order(t, "A")
			assert.Equal(t, tc.status, now.Status, "stored")
			assert.Equal(t, tc.answers, e.answers("A"))
			_, _, closed := e.prov.counts("A")
			assert.Equal(t, tc.closed, closed, "sessions closed")
			if closed > 0 {
				assert.Equal(t, []expiry.Status{expiry.StatusPending}, e.prov.closedAs["A"], "closed before the cancel")
			}
			if tc.waits {
				assert.Equal(t, e.clk.now().Add(envRetry), now.ExpireAt, "re-armed ProviderRetry later, by the store's clock")
				assert.Equal(t, now, o, "the caller (the Handler) re-arms to it")
				changed := e.ev.Of(expiry.KindDeadlineChanged)
				require.Len(t, changed, 1)
				assert.Equal(t, "provider_"+tc.answers[len(tc.answers)-1], changed[0].Reason)
				assert.Equal(t, envRetry+time.Second, changed[0].Delay, "from a second ago to ProviderRetry from now")
				assert.Equal(t, "locked:A", e.holder(t, "A"), "the buyer keeps the seat while it waits")
			} else {
				assert.Empty(t, e.ev.Of(expiry.KindDeadlineChanged))
			}
			switch tc.status {
			case expiry.StatusPaid:
				assert.Equal(t, "sold:A", e.holder(t, "A"), "the buyer who paid holds the seat")
				r, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: tc.paidWith}) // its callback, late
				require.NoError(t, err)
				assert.False(t, r.Changed)
				assert.Equal(t, tc.paidWith, r.PaymentID, "paid with the provider's payment")
				assert.Zero(t, e.refunded(tc.paidWith), "never refunded")
			case expiry.StatusCancelled:
				assert.Empty(t, e.holder(t, "A"), "the seat is free")
			}
			assert.Equal(t, p.OrderNo, o.No)
		})
	}
}

// TestProviderIsNotAskedOutsideItsWindow: an order not yet due, decided
// already, or missing is never asked about; one cancelled by its user or
// an operator is not asked either, only its session closed after.
func TestProviderIsNotAskedOutsideItsWindow(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	p := cancel.Placement{OrderNo: "F", UserID: "u", ShowID: "s", Seats: []string{"F-1"}, ExpireAt: e.clk.now().Add(time.Minute)}
	require.NoError(t, e.svc.Place(ctx, p, e.store.Place))
	cancelled, o, err := e.svc.Timeout(ctx, "F")
	require.NoError(t, err)
	assert.False(t, cancelled)
	assert.Equal(t, time.Minute, o.Remaining(), "not due: the Handler re-arms")

	e.placeDue(t, "P")
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "P", PaymentID: "pay-p"})
	require.NoError(t, err)
	cancelled, o, err = e.svc.Timeout(ctx, "P")
	require.NoError(t, err)
	assert.False(t, cancelled)
	assert.Equal(t, expiry.StatusPaid, o.Status)

	_, _, err = e.svc.Timeout(ctx, "nope")
	assert.ErrorIs(t, err, expiry.ErrNotFound)

	e.placeDue(t, "U")
	r, err := e.svc.UserCancel(ctx, "U", "u-U")
	require.NoError(t, err)
	assert.True(t, r.Changed, "a user's cancel is the user's")
	e.placeDue(t, "X")
	r, err = e.svc.ExpireNow(ctx, "X")
	require.NoError(t, err)
	assert.True(t, r.Changed, "an operator's expire-now is the operator's")
	_, err = e.svc.Cancel(ctx, cancel.Request{OrderNo: "X", UserID: "u-X", Reason: cancel.ReasonUser, OnlyIfDue: true})
	assert.Error(t, err, "a user's due cancel is refused by the store")

	for _, no := range []string{"F", "P", "nope"} {
		q, c, _ := e.prov.counts(no)
		assert.Zero(t, q+c, "%s: the provider was asked", no)
	}
	for _, no := range []string{"U", "X"} {
		q, c, closed := e.prov.counts(no)
		assert.Zero(t, q, "%s: a user's or operator's cancel was made to wait on a query", no)
		assert.Equal(t, 1, c, "%s: its session is closed once", no)
		assert.Equal(t, 1, closed, "%s: closed", no)
		assert.Equal(t, []expiry.Status{expiry.StatusCancelled}, e.prov.closedAs[no], "%s: closed once the cancel committed", no)
	}
}

// TestUserCancelClosesTheSessionAfter (I18, I9): a user's cancel and an
// operator's expire-now close the order's provider session once they
// cancelled it, so that its buyer cannot pay an order that is gone, and
// never wait for the provider beyond the one close. Judged by outcomes:
// who holds the seat, that a payment the provider took as the cancel
// committed is refunded once (its callback lost or not), whether a
// session may stay open on a cancelled order (then counted "unclosed",
// once), and that a cancel the store refuses (another user's) closes
// nothing.
func TestUserCancelClosesTheSessionAfter(t *testing.T) {
	ctx := context.Background()
	bad := errors.New("provider: 502")
	for _, tc := range []struct {
		name     string
		close    *cancel.PaymentAnswer
		closeErr error
		operator bool // ExpireNow instead of the user's cancel
		answers  []string
		took     string // the payment the provider took as the cancel committed
		closed   int    // sessions the provider closed
	}{
		{name: "cancelled, then closed", answers: []string{"closed"}, closed: 1},
		{name: "expired by the operator, then closed", operator: true, answers: []string{"closed"}, closed: 1},
		{name: "the close finds a payment", close: &cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-c"}, answers: []string{"close_paid"}, took: "pay-c"},
		{name: "the operator's close finds a payment", operator: true, close: &cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-o"}, answers: []string{"close_paid"}, took: "pay-o"},
		{name: "the close fails", closeErr: bad, answers: []string{"close_unknown", "unclosed"}},
		{name: "the close finds it processing", close: &cancel.PaymentAnswer{State: cancel.PaymentOpen}, answers: []string{"close_open", "unclosed"}},
		{name: "the close answers paid without an id", close: &cancel.PaymentAnswer{State: cancel.PaymentPaid}, answers: []string{"close_unknown", "unclosed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newProvEnv(t)
			p := cancel.Placement{OrderNo: "A", UserID: "u-A", ShowID: "s", Seats: []string{"A-1"}, ExpireAt: e.clk.now().Add(time.Minute)}
			require.NoError(t, e.svc.Place(ctx, p, e.store.Place))
			e.prov.closeErr["A"] = tc.closeErr
			if tc.close != nil {
				e.prov.close["A"] = *tc.close
			}
			// Another user's cancel is refused and leaves the session alone.
			_, err := e.svc.UserCancel(ctx, "A", "u-B")
			require.ErrorIs(t, err, cancel.ErrNotOwner)
			_, closes, _ := e.prov.counts("A")
			require.Zero(t, closes, "another user's cancel closed the buyer's session")

			var res cancel.Result
			if tc.operator {
				res, err = e.svc.ExpireNow(ctx, "A")
			} else {
				res, err = e.svc.UserCancel(ctx, "A", "u-A")
			}
			require.NoError(t, err)
			assert.True(t, res.Changed, "the cancel asked for is made")
			queries, closes, closed := e.prov.counts("A")
			assert.Zero(t, queries, "a cancel someone asked for does not wait on a query")
			assert.Equal(t, 1, closes, "one close")
			assert.Equal(t, tc.closed, closed)
			if closed > 0 {
				assert.Equal(t, []expiry.Status{expiry.StatusCancelled}, e.prov.closedAs["A"], "closed once the cancel committed")
			}
			assert.Equal(t, tc.answers, e.answers("A"))
			assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status, "stored")
			assert.Empty(t, e.holder(t, "A"), "the seat is free")
			if tc.took != "" {
				assert.Equal(t, 1, e.refunded(tc.took), "I9: the payment the provider took is refunded, its callback lost")
				_, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: tc.took}) // its callback, late
				assert.ErrorIs(t, err, cancel.ErrDiscrepancy)
				assert.Equal(t, 1, e.refunded(tc.took), "I9: refunded once")
			}
			// A repeat changes nothing and closes nothing more.
			r, err := e.svc.UserCancel(ctx, "A", "u-A")
			require.NoError(t, err)
			assert.False(t, r.Changed)
			_, again, _ := e.prov.counts("A")
			assert.Equal(t, 1, again, "a decided order's session is not closed again")
			assert.Equal(t, tc.answers, e.answers("A"), "counted once")
		})
	}
}

// TestProviderWaitsUntilMaxHold (I17, I18): an order whose buyer stays on
// the provider's page waits ProviderRetry at a time, never cancelled before
// its placement plus MaxHold; there its session is closed and it is
// cancelled; with a close that fails there too, it is cancelled anyway and
// counted "unclosed".
func TestProviderWaitsUntilMaxHold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		closeErr error
		close    *cancel.PaymentAnswer
		last     string // the last answer counted
		paid     bool   // the close found the payment complete
	}{
		{name: "closed at the cap", last: "closed"},
		{name: "the close fails at the cap", closeErr: errors.New("provider: 503"), last: "unclosed"},
		{name: "the close finds it processing at the cap", close: &cancel.PaymentAnswer{State: cancel.PaymentOpen}, last: "unclosed"},
		{name: "the close finds it paid at the cap", close: &cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-cap"}, last: "close_paid", paid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newProvEnv(t)
			placed := e.clk.now()
			e.placeDue(t, "A")
			e.prov.query["A"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
			e.prov.closeErr["A"] = tc.closeErr
			if tc.close != nil {
				e.prov.close["A"] = *tc.close
			}
			rounds := 0
			for {
				cancelled, o, err := e.svc.Timeout(ctx, "A")
				require.NoError(t, err)
				if cancelled || o.Status == expiry.StatusPaid {
					assert.Equal(t, !tc.paid, cancelled)
					break
				}
				rounds++
				require.Less(t, rounds, 100)
				require.Greater(t, o.Remaining(), time.Duration(0))
				assert.False(t, o.ExpireAt.After(placed.Add(envHold)), "I17: never past the placement plus MaxHold")
				e.clk.add(o.Remaining()) // the re-armed message arrives
			}
			assert.Equal(t, placed.Add(envHold), e.clk.now(), "decided at the cap, not before")
			assert.Equal(t, int(envHold/envRetry), rounds, "waited ProviderRetry at a time")
			_, closes, closed := e.prov.counts("A")
			assert.Equal(t, 1, closes, "one close, at the cap")
			answers := e.answers("A")
			assert.Equal(t, tc.last, answers[len(answers)-1])
			switch {
			case tc.paid:
				assert.Equal(t, "sold:A", e.holder(t, "A"), "paid by the close's answer, its seat sold")
				assert.Zero(t, e.refunded("pay-cap"))
			case tc.last == "closed":
				assert.Equal(t, 1, closed)
				assert.Empty(t, e.holder(t, "A"))
			default:
				assert.Zero(t, closed)
				assert.Empty(t, e.holder(t, "A"), "cancelled at the cap whatever the provider says")
			}
		})
	}
}

// TestProviderPaymentDecidedBefore (I9, I14): the provider names a payment
// id refunded before (another order's, cancelled by its user): it pays
// nothing, is not refunded twice, and the order is cancelled.
func TestProviderPaymentDecidedBefore(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	e.placeDue(t, "X")
	_, err := e.svc.UserCancel(ctx, "X", "u-X")
	require.NoError(t, err)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "X", PaymentID: "pay-x"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	require.Equal(t, 1, e.refunded("pay-x"))
	e.placeDue(t, "R")
	e.prov.query["R"] = cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-x"}
	cancelled, _, err := e.svc.Timeout(ctx, "R")
	require.NoError(t, err)
	assert.True(t, cancelled)
	assert.Equal(t, 1, e.refunded("pay-x"), "refunded once")
	assert.Empty(t, e.holder(t, "R"))
}

// TestProviderInTheReconcilersBatch: ExpireDue asks each listed order once
// (a number listed twice too), pays, waits and cancels as the answers say,
// and returns the cancelled ones only; the one-by-one fallback (Cancel
// with OnlyIfDue) asks as well.
func TestProviderInTheReconcilersBatch(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	for _, no := range []string{"BP", "BN", "BO", "BC"} {
		e.placeDue(t, no)
	}
	e.prov.query["BP"] = cancel.PaymentAnswer{State: cancel.PaymentPaid, PaymentID: "pay-bp"}
	e.prov.query["BO"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	res, err := e.svc.ExpireDue(ctx, []string{"BP", "BN", "BO", "BN"}, cancel.ReasonReconcile)
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, "BN", res[0].Order.No)
	assert.Equal(t, "sold:BP", e.holder(t, "BP"))
	assert.Empty(t, e.holder(t, "BN"))
	assert.Equal(t, "locked:BO", e.holder(t, "BO"))
	assert.Greater(t, e.order(t, "BO").Remaining(), time.Duration(0))
	q, _, closed := e.prov.counts("BN")
	assert.Equal(t, 1, q, "listed twice, asked once")
	assert.Equal(t, 1, closed)

	e.prov.query["BC"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	r, err := e.svc.Cancel(ctx, cancel.Request{OrderNo: "BC", Reason: cancel.ReasonReconcile, OnlyIfDue: true})
	require.NoError(t, err)
	assert.False(t, r.Changed, "the fallback asks too: the buyer is paying")
	assert.Equal(t, expiry.StatusPending, r.Order.Status)
	assert.Equal(t, "locked:BC", e.holder(t, "BC"))
	e.prov.query["BC"] = cancel.PaymentAnswer{State: cancel.PaymentNotPaid}
	e.clk.add(envRetry)
	r, err = e.svc.Cancel(ctx, cancel.Request{OrderNo: "BC", Reason: cancel.ReasonReconcile, OnlyIfDue: true})
	require.NoError(t, err)
	assert.True(t, r.Changed)
	_, _, closed = e.prov.counts("BC")
	assert.Equal(t, 1, closed)
}

// TestProviderTwoAsksOfOneOrder: a second ask that runs while the first
// waits for its answer (a timeout beside the reconciler) re-arms the
// order; the first, answered "open" too, then finds the order not due: it
// waits as the other decided, and closes nothing.
func TestProviderTwoAsksOfOneOrder(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	e.placeDue(t, "A")
	e.prov.query["A"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	e.prov.onQuery = func(no string) {
		_, _, err := e.svc.Timeout(ctx, no) // the other ask, inside the first's query
		assert.NoError(t, err)
	}
	cancelled, o, err := e.svc.Timeout(ctx, "A")
	require.NoError(t, err)
	assert.False(t, cancelled)
	assert.Equal(t, envRetry, o.Remaining(), "waits as the other ask decided")
	_, closes, _ := e.prov.counts("A")
	assert.Zero(t, closes, "a paying buyer's session is not closed")
	assert.NotContains(t, e.answers("A"), "unclosed")
}

// TestProviderIgnoringItsContext (I12): an adapter whose call ignores its
// context is not waited for past ProviderTimeout: the order waits, and
// another order's timeout is not held.
func TestProviderIgnoringItsContext(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	store, seats := memstore.NewStore(clk.now), memstore.NewSeats(clk.now)
	release := make(chan struct{})
	defer close(release)
	prov := deaf{release: release}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats, Provider: prov, ProviderTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "A", UserID: "u", ShowID: "s", Seats: []string{"a"}, ExpireAt: clk.now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, store.Place))
	done := make(chan error, 1)
	go func() {
		_, _, err := svc.Timeout(ctx, "A")
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute): // a liveness bound, far beyond ProviderTimeout
		t.Fatal("Timeout waited on a provider call that ignores its context")
	}
	o, err := store.Order(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, expiry.StatusPending, o.Status)
	assert.Equal(t, cancel.ProviderRetryDefault, o.Remaining(), "no answer: it waits")
}

// deaf blocks every call until released, whatever its context says.
type deaf struct{ release chan struct{} }

func (b deaf) QueryPayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	<-b.release
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (b deaf) ClosePayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	<-b.release
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// TestProviderConfig: the provider's fields are validated and defaulted.
func TestProviderConfig(t *testing.T) {
	s, seats := memstore.NewStore(nil), memstore.NewSeats(nil)
	for _, tc := range []struct {
		c    cancel.Config
		want string
	}{
		{cancel.Config{ProviderTimeout: -time.Second}, "ProviderTimeout"},
		{cancel.Config{ProviderRetry: -time.Second}, "ProviderRetry"},
		{cancel.Config{ProviderRetry: time.Microsecond}, "ProviderRetry"},
	} {
		tc.c.Store, tc.c.Seats = s, seats
		_, err := cancel.New(tc.c)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	assert.Equal(t, "paid", cancel.PaymentPaid.String())
	assert.Equal(t, "not_paid", cancel.PaymentNotPaid.String())
	assert.Equal(t, "open", cancel.PaymentOpen.String())
	assert.Equal(t, "PaymentState(9)", fmt.Sprint(cancel.PaymentState(9)))
}

// slowMove is the in-memory order store whose deadline moves take longer
// than ProviderRetry (a busy database): when the move returns, the store's
// clock has passed the new deadline.
type slowMove struct {
	*memstore.Store
	clk *stepClock
}

func (s slowMove) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	res, err := s.Store.SetDeadline(ctx, c)
	if err != nil || !res.Changed {
		return res, err
	}
	s.clk.add(c.In + time.Millisecond)
	res.Order, err = s.Store.Order(ctx, c.OrderNo)
	return res, err
}

// TestProviderSlowMoveIsNoCap: a re-arm that took so long that the order
// is due again when read after it was still a re-arm, not the maximum
// hold: the buyer's session is not closed and the order waits (the next
// ask decides).
func TestProviderSlowMoveIsNoCap(t *testing.T) {
	ctx := context.Background()
	clk := &stepClock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	store := memstore.NewStore(clk.now)
	prov := newScripted(store)
	ev := &expirytest.Recorder{}
	svc, err := cancel.New(cancel.Config{Store: slowMove{store, clk}, Seats: memstore.NewSeats(clk.now), Runtime: expiry.Runtime{Observer: ev},
		Provider: prov, ProviderRetry: envRetry, MaxHold: envHold})
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: "A", UserID: "u", ShowID: "s", Seats: []string{"a"}, ExpireAt: clk.now().Add(-time.Second)}
	require.NoError(t, svc.Place(ctx, p, store.Place))
	prov.query["A"] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
	cancelled, o, err := svc.Timeout(ctx, "A")
	require.NoError(t, err)
	assert.False(t, cancelled)
	assert.Equal(t, expiry.StatusPending, o.Status)
	_, closes, _ := prov.counts("A")
	assert.Zero(t, closes, "not at the maximum hold: the paying buyer's session stays open")
	assert.Len(t, ev.Of(expiry.KindDeadlineChanged), 1)
}

// TestUnclosedCountedByEachPath: at the maximum hold with a close that
// fails, the reconciler's batch (ExpireDue) and its one-by-one fallback
// (Cancel with OnlyIfDue) cancel the order and count "unclosed" once each,
// and an order whose batch left it alone is not counted.
func TestUnclosedCountedByEachPath(t *testing.T) {
	ctx := context.Background()
	for _, path := range []string{"batch", "one by one"} {
		t.Run(path, func(t *testing.T) {
			e := newProvEnv(t)
			e.placeDue(t, "A")
			e.placeDue(t, "B")
			for _, no := range []string{"A", "B"} {
				e.prov.query[no] = cancel.PaymentAnswer{State: cancel.PaymentOpen}
				e.prov.closeErr[no] = errors.New("provider: 503")
			}
			e.clk.add(envHold) // past their cap: the first ask moves A there
			cancelled, _, err := e.svc.Timeout(ctx, "A")
			require.NoError(t, err)
			require.False(t, cancelled, "moved to its cap by this ask: the next one decides")
			_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "B", PaymentID: "pay-b"})
			require.NoError(t, err) // B is paid before the round: no ask, no alarm
			switch path {
			case "batch":
				res, err := e.svc.ExpireDue(ctx, []string{"A", "B"}, cancel.ReasonReconcile)
				require.NoError(t, err)
				require.Len(t, res, 1)
			default:
				r, err := e.svc.Cancel(ctx, cancel.Request{OrderNo: "A", Reason: cancel.ReasonReconcile, OnlyIfDue: true})
				require.NoError(t, err)
				require.True(t, r.Changed)
			}
			assert.Equal(t, []string{"open", "open", "unclosed"}, e.answers("A"))
			assert.Empty(t, e.answers("B"))
			assert.Empty(t, e.holder(t, "A"))
		})
	}
}

// hostTakes is a store on which the host moves order no into a status of
// its own (a payment step) while a cancel's COMMIT reply is lost: the
// first cancel answers expiry.ErrCommitUnknown, changing nothing, and every
// later one finds the order the host's, as a sqlstore mapping's Paying
// value reads.
type hostTakes struct {
	*memstore.Store
	no    string
	tries int
}

func (h *hostTakes) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	if req.OrderNo != h.no {
		return h.Store.CancelPending(ctx, req)
	}
	h.tries++
	if h.tries == 1 {
		return cancel.Result{}, fmt.Errorf("hostTakes: %w: connection reset", expiry.ErrCommitUnknown)
	}
	o, err := h.Store.Order(ctx, req.OrderNo)
	o.Status = expiry.StatusHost
	return cancel.Result{Order: o}, err
}

// TestUnknownCommitClosesOnlyACancelledOrder (I18): a user's cancel whose
// COMMIT reply is lost is made again; when the second try finds the order
// in the host's payment step (not cancelled, nothing changed), the buyer
// paying there keeps the session: nothing is closed, nothing counted.
func TestUnknownCommitClosesOnlyACancelledOrder(t *testing.T) {
	ctx := context.Background()
	e := newProvEnv(t)
	p := cancel.Placement{OrderNo: "A", UserID: "u-A", ShowID: "s", Seats: []string{"A-1"}, ExpireAt: e.clk.now().Add(time.Minute)}
	require.NoError(t, e.svc.Place(ctx, p, e.store.Place))
	store := &hostTakes{Store: e.store, no: "A"}
	svc, err := cancel.New(cancel.Config{Store: store, Seats: e.seats, Runtime: expiry.Runtime{Observer: e.ev}, Provider: e.prov})
	require.NoError(t, err)
	_, err = svc.UserCancel(ctx, "A", "u-A")
	require.ErrorIs(t, err, expiry.ErrCommitUnknown, "the first try's outcome stays unknown to the caller")
	assert.Equal(t, 2, store.tries, "made again")
	_, closes, _ := e.prov.counts("A")
	assert.Zero(t, closes, "the session of an order the cancel did not cancel was closed")
	assert.Empty(t, e.answers("A"), "nothing counted")
	assert.Equal(t, "locked:A", e.holder(t, "A"), "its seat is the buyer's")
}
