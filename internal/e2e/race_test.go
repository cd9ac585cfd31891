package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/e2e"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func TestRaceMariaDB(t *testing.T) {
	raceTest(t, testenv.MySQL(t), sqlstore.MySQL)
}

func TestRacePostgres(t *testing.T) {
	raceTest(t, testenv.Postgres(t), sqlstore.Postgres)
}

func TestRaceSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "race.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	raceTest(t, db, sqlstore.SQLite)
}

// raceTest places orders that are already due, then lets payments, user
// cancels, duplicated timeout deliveries and two reconcilers hit every order
// at the same moment. Exactly one of them may win each order, and after a
// final reconcile round I1, I2, I5 and I8 must hold.
func raceTest(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
	ctx := context.Background()
	show := "race-" + testenv.Unique()
	w := e2e.NewWorld(t, db, d, testenv.Redis(t), show)
	const orders = 150
	now, err := w.Store.Now(ctx)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	placed := make([]cancel.Placement, 0, orders)
	seat := 0
	for i := 0; i < orders; i++ {
		p := cancel.Placement{OrderNo: fmt.Sprintf("%s-%d", show, i), UserID: fmt.Sprintf("u%d", i%7), ShowID: show, ExpireAt: now.Add(-time.Second)}
		for n := 1 + rng.IntN(4); n > 0; n-- {
			seat++
			p.Seats = append(p.Seats, fmt.Sprintf("s%d", seat))
		}
		require.NoError(t, w.Place(ctx, p))
		placed = append(placed, p)
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	go1 := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f()
		}()
	}
	for _, p := range placed {
		go1(func() {
			if _, err := w.Service.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + p.OrderNo}); err != nil && !isDiscrepancy(err) {
				fail(fmt.Errorf("pay %s: %w", p.OrderNo, err))
			}
		})
		go1(func() {
			if _, err := w.Service.UserCancel(ctx, p.OrderNo, p.UserID); err != nil {
				fail(fmt.Errorf("user cancel %s: %w", p.OrderNo, err))
			}
		})
		for dup := 0; dup < 2; dup++ { // the broker delivers twice
			go1(func() {
				if _, err := w.Handler.Handle(ctx, expiry.Message{OrderNo: p.OrderNo, Hop: 1}); err != nil {
					fail(fmt.Errorf("timeout %s: %w", p.OrderNo, err))
				}
			})
		}
	}
	for host := 0; host < 2; host++ {
		r := w.Reconciler(t)
		go1(func() {
			if _, err := r.Round(ctx); err != nil {
				fail(fmt.Errorf("reconcile: %w", err))
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)

	_, err = w.Reconciler(t).Round(ctx)
	require.NoError(t, err)
	bad, err := w.Check(ctx, placed, true)
	require.NoError(t, err)
	assert.Empty(t, bad, "invariant violations")

	paid, cancelled := 0, 0
	for _, p := range placed {
		paid += w.Ledger.Paid[p.OrderNo]
		cancelled += w.Ledger.Cancelled[p.OrderNo]
	}
	assert.Equal(t, orders, paid+cancelled, "exactly one winner per order")
	t.Logf("FIGURE race %s: orders=%d callers_per_order=4 reconcilers=2 paid=%d cancelled=%d discrepancies=%d violations=%d", d, orders, paid, cancelled, w.Ledger.Kind(expiry.KindDiscrepancy), len(bad))
}

func isDiscrepancy(err error) bool { return err != nil && errors.Is(err, cancel.ErrDiscrepancy) }
