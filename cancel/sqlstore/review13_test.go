package sqlstore

// review13: adversarial review of 8fcfd14 (closeAfter: a user's cancel
// and an operator's ExpireNow close the provider's session after their
// commit, or when its outcome is unknown) on a real SQL store: SQLite
// whose COMMIT lands with its reply lost (lostAckDriver of
// commit_unknown_test.go). transition (transition.go) returns the COMMIT's
// error before it reads the order to tell "another user's" or "not
// pending", so a cancel the store refused is reported as an unknown
// commit, on every dialect; only the reply's loss is injected here.

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// r13Closer is a provider whose close bars the order's number for good.
type r13Closer struct {
	mu     sync.Mutex
	barred map[string]bool
}

func (p *r13Closer) QueryPayment(context.Context, expiry.Order) (cancel.PaymentAnswer, error) {
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

func (p *r13Closer) ClosePayment(_ context.Context, o expiry.Order) (cancel.PaymentAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.barred[o.No] = true
	return cancel.PaymentAnswer{State: cancel.PaymentNotPaid}, nil
}

// TestReview13RefusedCancelWithLostCommitReplyBarsTheBuyer (a hole of this review, fixed; I10,
// I18): alice's order is pending, her buyer on the provider's page.
// mallory's UserCancel is refused by the store (the owner's compare-and-
// set matches no row), but the no-op transaction's COMMIT reply is lost:
// CancelPending answers expiry.ErrCommitUnknown, and closeAfter closes
// alice's session (barred for good) under mallory's request. alice's
// order stays pending, holding its seat, unpayable until its timeout. With
// a store Hook (the host's audit row) every dialect takes this path
// (transitionTx); without one, SQLite's single-statement path is checked
// too.
func TestReview13RefusedCancelWithLostCommitReplyBarsTheBuyer(t *testing.T) {
	registerLostAck.Do(func() { sql.Register("sqlite-lostack", &lostAckDriver{}) })
	for _, hooked := range []bool{true, false} {
		t.Run(map[bool]string{true: "with a hook", false: "without a hook"}[hooked], func(t *testing.T) {
			db, err := sql.Open("sqlite-lostack", "file:"+filepath.Join(t.TempDir(), "oe.db"))
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			db.SetMaxOpenConns(1)
			s, err := New(db, SQLite)
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, s.Migrate(ctx))
			if hooked {
				s.SetHook(func(context.Context, cancel.Querier, cancel.Result) error { return nil })
			}
			prov := &r13Closer{barred: map[string]bool{}}
			svc, err := cancel.New(cancel.Config{Store: s, Seats: memstore.NewSeats(time.Now), Provider: prov, ProviderTimeout: time.Second})
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "A", UserID: "alice", ShowID: "s", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
			require.NoError(t, svc.Place(ctx, p, func(ctx context.Context, p cancel.Placement) error { return s.Place(ctx, db, p) }))

			loseAcks.Store(true)
			t.Cleanup(func() { loseAcks.Store(false) })
			_, err = svc.UserCancel(ctx, "A", "mallory")
			loseAcks.Store(false)
			require.Error(t, err, "refused")
			o, rerr := s.Order(ctx, "A")
			require.NoError(t, rerr)
			require.Equal(t, expiry.StatusPending, o.Status, "the store refused mallory's cancel")
			prov.mu.Lock()
			barred := prov.barred["A"]
			prov.mu.Unlock()
			assert.False(t, barred, "I18/I10: another user's refused cancel (%v) barred alice's session of her pending order", err)
		})
	}
}
