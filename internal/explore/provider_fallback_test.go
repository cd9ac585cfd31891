package explore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// A hole found reading the reconciler's expired pass beside the provider
// query (not by the exploration, whose scenario has one order: a round
// asks about a batch's orders concurrently). It failed on bd4e670 and
// holds since Service.Cancel with OnlyIfDue asks the provider too:
//
//	go test -run TestFailedBatchAsksOneByOne ./internal/explore/
//
// cancel.Service.ExpireDue asks the provider about each due order of a
// batch, leaves out those it must not cancel (paid, waiting, or whose ask
// failed), and cancels the rest in one CancelDue. When that CancelDue
// fails, the reconciler (reconcile/expired.go, expireBatches) tries every
// order of its batch that the batch did not change one by one with
// Service.Cancel (ReasonReconcile, OnlyIfDue), which then never asked the
// provider: an order whose ask failed (here its re-arm's SetDeadline, in
// the same database blip that failed the CancelDue) is still due, and is
// cancelled with its buyer's session open at the provider, never closed
// (I18: before its maximum hold, and its session never closed). A
// re-armed order is safe there (no longer due); an order the provider
// answered paid for, whose Pay failed, is not.

// fallbackStore fails o1's re-arm and the batch's CancelDue once, as one
// database blip would.
type fallbackStore struct {
	*memstore.Store
	mu             sync.Mutex
	cancelDueFails int
}

var errBlip = errors.New("explore: the database blipped")

func (s *fallbackStore) SetDeadline(ctx context.Context, c cancel.DeadlineChange) (cancel.DeadlineResult, error) {
	if c.OrderNo == "o1" && c.Due {
		return cancel.DeadlineResult{}, errBlip
	}
	return s.Store.SetDeadline(ctx, c)
}

func (s *fallbackStore) CancelDue(ctx context.Context, nos []string, r cancel.Reason) ([]cancel.Result, error) {
	s.mu.Lock()
	fail := s.cancelDueFails > 0
	s.cancelDueFails--
	s.mu.Unlock()
	if fail {
		return nil, errBlip
	}
	return s.Store.CancelDue(ctx, nos, r)
}

// fallbackProvider: o1's buyer is paying (its session open until closed),
// o2's never started.
type fallbackProvider struct {
	mu     sync.Mutex
	open   map[string]bool
	closes []string
}

func (p *fallbackProvider) QueryPayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open[o.No] {
		return cancel.PaymentAnswer{State: cancel.PaymentOpen}, nil
	}
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *fallbackProvider) ClosePayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closes = append(p.closes, o.No)
	delete(p.open, o.No)
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

type nopSender struct{}

func (nopSender) Send(context.Context, expiry.Message, time.Duration) error { return nil }

// TestFailedBatchAsksOneByOne: two due orders in one
// round's batch, o1's buyer paying on the provider's page; o1's re-arm and
// the batch's CancelDue fail in one blip. Outcome required by I18: o1 is
// not cancelled before its maximum hold while its session is open.
func TestFailedBatchAsksOneByOne(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{now: epoch}
	store := &fallbackStore{Store: memstore.NewStore(clk.Now), cancelDueFails: 1}
	seats := memstore.NewSeats(clk.Now)
	prov := &fallbackProvider{open: map[string]bool{"o1": true}}
	rt := expiry.Runtime{Logger: slog.New(slog.DiscardHandler), Clock: clk}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: nopSender{}, Runtime: rt})
	require.NoError(t, err)
	svc, err := cancel.New(withShortenSink(cancel.Config{Store: store, Seats: seats, Runtime: rt, Provider: prov,
		MaxHold: time.Hour, ProviderRetry: 5 * time.Minute, AcceptLatePayments: true}, sched, nopSender{}))
	require.NoError(t, err)
	token, lost, err := seats.Lost(ctx)
	require.NoError(t, err)
	if lost {
		require.NoError(t, seats.MarkRestored(ctx, token))
	}
	for _, o := range []struct{ no, user, seat string }{{"o1", "u1", "a1"}, {"o2", "u2", "a2"}} {
		p := withLimit(cancel.Placement{OrderNo: o.no, UserID: o.user, ShowID: show1, Seats: []string{o.seat}, ExpireAt: clk.Now().Add(ttl)}, limit)
		require.NoError(t, place(ctx, svc, p, limit, func(ctx context.Context, p cancel.Placement) error { return store.Place(ctx, p) }))
	}
	clk.advance(ttl)
	rec, err := reconcile.New(reconcile.Config{Orders: store, Seats: seats, Service: svc, Workers: 1, Runtime: rt})
	require.NoError(t, err)
	rep, err := rec.Round(ctx)
	t.Logf("round: %+v, err %v; provider closes: %v", rep, err, prov.closes)
	o1, err := store.Order(ctx, "o1")
	require.NoError(t, err)
	prov.mu.Lock()
	open := prov.open["o1"]
	prov.mu.Unlock()
	require.False(t, o1.Status == expiry.StatusCancelled && open,
		"o1 was cancelled by the round's one-by-one fallback %v after its placement (MaxHold 1h) with its session open at the provider, never asked or closed", ttl)
}
