package cancel_test

// review14: adversarial review of a02c2da (closeIfCancelled: after a
// user's or an operator's cancel whose COMMIT's outcome is unknown, the
// order is read again and its session closed only if it reads cancelled;
// closeAfter hands a close's paid answer to Pay up to three times). On the
// in-memory stores, judged by the invariants: refunds per payment id (I9,
// I14), who holds the seat, open sessions on cancelled orders with no
// "unclosed" count (I18), events.

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
)

// r14Store is a memstore whose faults the tests arm:
//   - inflight: the next user's/operator's CancelPending answers
//     expiry.ErrCommitUnknown with its COMMIT still in flight (the
//     client's context ended, or its connection broke, while the server
//     was still committing: fsync, a synchronous replica's ack); the
//     commit becomes visible just after the next plain read of the order
//     (a SELECT sees the row version before an in-flight commit, on
//     PostgreSQL and InnoDB alike).
//   - afterCancel: runs after a CancelPending that committed.
//   - failPay: the next PayPending calls fail with these errors.
//   - lostRecord: the next RecordDiscrepancy calls commit and lose their
//     reply (expiry.ErrCommitUnknown).
type r14Store struct {
	*memstore.Store
	mu          sync.Mutex
	inflight    bool
	pending     *cancel.Request
	afterCancel func()
	failPay     []error
	pays        int
	lostRecord  int
}

func (s *r14Store) CancelPending(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	s.mu.Lock()
	if s.inflight && !req.OnlyIfDue {
		s.inflight = false
		r := req
		s.pending = &r
		s.mu.Unlock()
		return cancel.Result{}, fmt.Errorf("r14: order %s: %w: %w", req.OrderNo, expiry.ErrCommitUnknown, context.DeadlineExceeded)
	}
	after := s.afterCancel
	s.mu.Unlock()
	res, err := s.Store.CancelPending(ctx, req)
	if err == nil && res.Changed && after != nil {
		after()
	}
	return res, err
}

func (s *r14Store) Order(ctx context.Context, no string) (expiry.Order, error) {
	o, err := s.Store.Order(ctx, no)
	s.mu.Lock()
	req := s.pending
	s.pending = nil
	s.mu.Unlock()
	if req != nil {
		// The in-flight COMMIT becomes visible now, just after the read.
		_, _ = s.Store.CancelPending(context.Background(), *req)
	}
	return o, err
}

func (s *r14Store) PayPending(ctx context.Context, p cancel.Payment) (cancel.Result, error) {
	s.mu.Lock()
	s.pays++
	var ferr error
	if len(s.failPay) > 0 {
		ferr, s.failPay = s.failPay[0], s.failPay[1:]
	}
	s.mu.Unlock()
	if ferr != nil {
		return cancel.Result{}, ferr
	}
	return s.Store.PayPending(ctx, p)
}

func (s *r14Store) RecordDiscrepancy(ctx context.Context, d cancel.Discrepancy) (bool, error) {
	rec, err := s.Store.RecordDiscrepancy(ctx, d)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lostRecord > 0 {
		s.lostRecord--
		return false, fmt.Errorf("r14: record %s: %w: %w", d.PaymentID, expiry.ErrCommitUnknown, errors.New("connection reset"))
	}
	return rec, err
}

type r14Env struct {
	*r12Env
	st *r14Store
}

func newR14Env(t *testing.T, more func(*cancel.Config)) *r14Env {
	e := newR12Env(t, nil)
	st := &r14Store{Store: e.store}
	e.serveFrom(t, st, more)
	return &r14Env{r12Env: e, st: st}
}

func (e *r14Env) refunded(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refunds[id]
}

// TestReview14InFlightCommitLandsAfterTheReRead (a hole of this review, fixed; I18): alice cancels
// her pending order, her buyer session still open at the provider. The
// cancel's COMMIT is on the wire when her request's context ends (or the
// connection breaks): the store answers expiry.ErrCommitUnknown, and the
// server finishes the commit a moment later. closeIfCancelled's plain
// read comes first and sees the order pending, so nothing is closed and
// nothing counted; the commit then lands. The order is cancelled with its
// session open and no "unclosed" count, and alice's retry finds it
// cancelled already (Changed false), so no later call closes it either:
// the buyer can still pay a cancelled order, which I18's close exists to
// prevent, and nobody is told. An unknown outcome that reads pending is
// still unknown. Fixed: the Service makes the cancel again
// (settleUnknown), whose compare-and-set waits for a commit in flight on
// the row, and closes the session of the order it finds cancelled.
func TestReview14InFlightCommitLandsAfterTheReRead(t *testing.T) {
	ctx := context.Background()
	e := newR14Env(t, nil)
	e.place(t, "A", time.Minute)
	e.paying("A")
	e.st.mu.Lock()
	e.st.inflight = true
	e.st.mu.Unlock()
	_, err := e.svc.UserCancel(ctx, "A", "u-A")
	if err != nil {
		// The second try (settleUnknown) met the in-flight commit: on a
		// database it waits for the row, then finds it cancelled.
		require.ErrorIs(t, err, expiry.ErrCommitUnknown)
	} // else the second try cancelled it first (this model lands the first after it)
	require.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status, "the in-flight commit landed")
	r, err := e.svc.UserCancel(ctx, "A", "u-A") // alice tries again
	require.NoError(t, err)
	require.False(t, r.Changed, "cancelled already")
	s := e.prov.state("A")
	if !s.closed {
		assert.GreaterOrEqual(t, e.count("A", "unclosed"), 1,
			"I18: order A is cancelled, its session open (the buyer can still pay it), and no 'unclosed' was counted")
	}
}

// TestReview14RefusedInFlightCancelClosesNothing (held; I10): mallory's
// cancel of alice's order, its no-op COMMIT in flight: the re-read sees
// pending, closes and counts nothing; the order stays alice's to pay.
func TestReview14RefusedInFlightCancelClosesNothing(t *testing.T) {
	ctx := context.Background()
	e := newR14Env(t, nil)
	e.place(t, "A", time.Minute)
	e.paying("A")
	e.st.mu.Lock()
	e.st.inflight = true
	e.st.mu.Unlock()
	_, err := e.svc.UserCancel(ctx, "A", "mallory")
	require.ErrorIs(t, err, expiry.ErrCommitUnknown)
	require.Equal(t, expiry.StatusPending, e.order(t, "A").Status)
	assert.False(t, e.prov.state("A").closed, "another user's refused cancel closed nothing")
	assert.Zero(t, e.count("A", "unclosed"))
	assert.True(t, e.prov.complete("A", "pay-a"), "alice can pay her pending order")
}

// TestReview14CallerGoneAfterTheCommit (held; I18): alice's HTTP request
// ends right after her cancel committed. The seat release and the close
// run under her dead context and fail; the cancel stands, and the open
// session is counted "unclosed" once (the release left to the reconciler).
func TestReview14CallerGoneAfterTheCommit(t *testing.T) {
	e := newR14Env(t, nil)
	e.place(t, "A", time.Minute)
	e.paying("A")
	ctx, stop := context.WithCancel(context.Background())
	e.st.mu.Lock()
	e.st.afterCancel = stop
	e.st.mu.Unlock()
	r, err := e.svc.UserCancel(ctx, "A", "u-A")
	require.NoError(t, err)
	require.True(t, r.Changed)
	require.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
	if !e.prov.state("A").closed {
		assert.Equal(t, 1, e.count("A", "unclosed"), "I18: the open session of a cancelled order is counted once")
	}
}

// TestReview14HandOnWhoseRecordReplyIsLost (held; I9): the buyer paid as
// alice cancelled (the callback lost); the close answers paid, Pay refuses
// it, and the discrepancy's COMMIT lands with its reply lost. The retry
// finds it recorded (ErrDiscrepancy) without calling the refund hook; the
// reconciler's RetryDiscrepancies refunds it after the lease, once, and a
// late callback refunds nothing more.
func TestReview14HandOnWhoseRecordReplyIsLost(t *testing.T) {
	ctx := context.Background()
	e := newR14Env(t, func(c *cancel.Config) { c.DiscrepancyLease = time.Minute })
	e.place(t, "A", time.Minute)
	require.True(t, e.prov.complete("A", "pay-a"))
	e.st.mu.Lock()
	e.st.lostRecord = 1
	e.st.mu.Unlock()
	r, err := e.svc.UserCancel(ctx, "A", "u-A")
	require.NoError(t, err)
	require.True(t, r.Changed)
	assert.Zero(t, e.count("A", "unclosed"), "recorded: not an alarm")
	e.clk.add(2 * time.Minute)
	_, err = e.svc.RetryDiscrepancies(ctx, 10)
	require.NoError(t, err)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "pay-a"}) // the late callback
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	e.clk.add(2 * time.Minute)
	_, err = e.svc.RetryDiscrepancies(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, e.refunded("pay-a"), "I9: the payment of a cancelled order is refunded once")
	assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
	assert.Empty(t, e.holder(t, "A"))
}

// TestReview14ExpireNowHandOnRetriedNeverReinstates (held; I9, I14): with
// late payments accepted, an operator's ExpireNow finds the payment
// completed at the close; the store fails the first two hand-ons
// (a connection reset, then a store Hook's error). The third refunds it
// once; the order stays cancelled, its seat free: ExpireNow is final.
func TestReview14ExpireNowHandOnRetriedNeverReinstates(t *testing.T) {
	ctx := context.Background()
	e := newR14Env(t, func(c *cancel.Config) { c.AcceptLatePayments = true })
	e.place(t, "A", time.Minute)
	require.True(t, e.prov.complete("A", "pay-a"))
	e.st.mu.Lock()
	e.st.failPay = []error{errors.New("connection reset by peer"), fmt.Errorf("audit: %w", cancel.ErrHook)}
	e.st.mu.Unlock()
	r, err := e.svc.ExpireNow(ctx, "A")
	require.NoError(t, err)
	require.True(t, r.Changed)
	assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status, "ExpireNow is final")
	assert.Empty(t, e.holder(t, "A"))
	assert.Equal(t, 1, e.refunded("pay-a"), "I9: refunded once")
	assert.Zero(t, e.count("A", "unclosed"))
	assert.Empty(t, e.ev.Of(expiry.KindReinstated))
}

// TestReview14HandOnFailsEveryTime (held; I9, I18): the store fails every
// hand-on (a Hook that keeps failing): three tries, then one "unclosed"
// naming the payment; the callback that arrives later refunds it once.
func TestReview14HandOnFailsEveryTime(t *testing.T) {
	ctx := context.Background()
	e := newR14Env(t, nil)
	e.place(t, "A", time.Minute)
	require.True(t, e.prov.complete("A", "pay-a"))
	hookErr := fmt.Errorf("audit: %w", cancel.ErrHook)
	e.st.mu.Lock()
	e.st.failPay = []error{hookErr, hookErr, hookErr}
	e.st.mu.Unlock()
	r, err := e.svc.UserCancel(ctx, "A", "u-A")
	require.NoError(t, err)
	require.True(t, r.Changed)
	e.st.mu.Lock()
	pays := e.st.pays
	e.st.mu.Unlock()
	assert.Equal(t, 3, pays, "three tries")
	assert.Equal(t, 1, e.count("A", "unclosed"))
	assert.Zero(t, e.refunded("pay-a"))
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "pay-a"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	_, err = e.svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "pay-a"})
	require.ErrorIs(t, err, cancel.ErrDiscrepancy)
	assert.Equal(t, 1, e.refunded("pay-a"), "I9: refunded once")
	assert.Equal(t, expiry.StatusCancelled, e.order(t, "A").Status)
}

func (e *r14Env) paying(no string) {
	e.prov.mu.Lock()
	e.prov.sess(no).paying = true
	e.prov.mu.Unlock()
}
