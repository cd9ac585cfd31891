package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// The host is an actor: it deletes its closed orders, reuses payment ids
// across the tenants of one table (one provider account each), and runs
// statements of its own in the placing transaction. These tests play the
// host's part on every dialect and judge the outcome by money (who was
// refunded, what paid) and seats, not by the library's own rules.

// refundBook counts the refund hook's calls per scope and payment id.
type refundBook struct {
	mu    sync.Mutex
	calls map[string]int // scope + " " + payment id → hook calls
}

func (b *refundBook) hook(scope string) func(context.Context, cancel.Discrepancy) error {
	return func(_ context.Context, d cancel.Discrepancy) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.calls == nil {
			b.calls = map[string]int{}
		}
		b.calls[scope+" "+d.PaymentID]++
		return nil
	}
}

func (b *refundBook) count(scope, paymentID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[scope+" "+paymentID]
}

// tenantService is one tenant's Service on the shared shop tables: its own
// store (Where tenant_id = id), its own seat scope, its own refund hook.
func tenantService(t *testing.T, db *sql.DB, d sqlstore.Dialect, id int, seats *memstore.Seats, book *refundBook) (*sqlstore.Store, *cancel.Service) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlstore.New(db, d, tenant(id))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats.Scoped(s.Scope()), OnDiscrepancy: book.hook(s.Scope())})
	require.NoError(t, err)
	return s, svc
}

// Two tenants on one table, each with its own provider account: payment ids
// are per tenant. Tenant 7's pay-1 paid its order; tenant 8's own, unrelated
// pay-1 arrives for an order tenant 8 cancelled. It is tenant 8's money and
// must reach tenant 8's refund hook, once (I9, I14, I16); tenant 7's
// decision must not answer for it.
func TestHostPaymentIDsArePerTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		seats := memstore.NewSeats(nil)
		book := &refundBook{}
		s7, svc7 := tenantService(t, db, d, 7, seats, book)
		s8, svc8 := tenantService(t, db, d, 8, seats, book)
		now, err := s7.Now(ctx)
		require.NoError(t, err)

		p7 := cancel.Placement{OrderNo: "o1", UserID: "u7", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, svc7.Place(ctx, p7, s7.Insert(db, nil)))
		res, err := svc7.Pay(ctx, cancel.Payment{OrderNo: "o1", PaymentID: "pay-1"})
		require.NoError(t, err)
		require.True(t, res.Changed)

		// Tenant 7 also refunds a payment id of its own, pay-2.
		p7b := cancel.Placement{OrderNo: "o2", UserID: "u7", ShowID: "ev", Seats: []string{"a2"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, svc7.Place(ctx, p7b, s7.Insert(db, nil)))
		_, err = svc7.UserCancel(ctx, "o2", "u7")
		require.NoError(t, err)
		_, err = svc7.Pay(ctx, cancel.Payment{OrderNo: "o2", PaymentID: "pay-2"})
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)

		// Tenant 8: the same ids, its own orders.
		for _, c := range []struct{ no, pay string }{{"o8", "pay-1"}, {"o9", "pay-2"}} {
			p8 := cancel.Placement{OrderNo: c.no, UserID: "u8", ShowID: "ev", Seats: []string{c.no + "-x"}, ExpireAt: now.Add(time.Hour)}
			require.NoError(t, svc8.Place(ctx, p8, s8.Insert(db, nil)))
			_, err = svc8.UserCancel(ctx, c.no, "u8")
			require.NoError(t, err)
			for i := 0; i < 3; i++ { // the provider repeats its callback
				_, err = svc8.Pay(ctx, cancel.Payment{OrderNo: c.no, PaymentID: c.pay})
				require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			}
		}
		// Tenant 8 also pays an order with an id tenant 7 refunded.
		p8 := cancel.Placement{OrderNo: "o10", UserID: "u8", ShowID: "ev", Seats: []string{"b1"}, ExpireAt: now.Add(time.Hour)}
		require.NoError(t, svc8.Place(ctx, p8, s8.Insert(db, nil)))
		res, err = svc8.Pay(ctx, cancel.Payment{OrderNo: "o10", PaymentID: "pay-3"})
		require.NoError(t, err)
		require.True(t, res.Changed)
		_, err = svc7.Pay(ctx, cancel.Payment{OrderNo: "o2", PaymentID: "pay-3"})
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)

		assert.Equal(t, 0, book.count(s7.Scope(), "pay-1"), "tenant 7's pay-1 paid its order")
		assert.Equal(t, 1, book.count(s7.Scope(), "pay-2"), "tenant 7's pay-2 refunded once")
		assert.Equal(t, 1, book.count(s8.Scope(), "pay-1"), "I9: tenant 8's pay-1 is refunded once, whatever tenant 7 decided for its own pay-1")
		assert.Equal(t, 1, book.count(s8.Scope(), "pay-2"), "I9: tenant 8's pay-2 is refunded once")
		assert.Equal(t, 1, book.count(s7.Scope(), "pay-3"), "I9: tenant 7's pay-3 is refunded, whatever tenant 8's pay-3 paid")
		o, err := s7.Order(ctx, "o1")
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, o.Status)

		// The reconciler's retries stay in their scope: nothing left to
		// settle on either side, and no hook called again.
		for _, svc := range []*cancel.Service{svc7, svc8} {
			n, err := svc.RetryDiscrepancies(ctx, 10)
			require.NoError(t, err)
			assert.Equal(t, 0, n)
		}
		assert.Equal(t, 1, book.count(s8.Scope(), "pay-1"))
	})
}

// A cancelled order the buyer then deleted (a soft delete, as shops with a
// "delete my order" button do, and a hard delete): the payment made just
// before the close arrives afterwards. The money was taken for an order
// that is gone: it is a discrepancy, recorded once and refunded once,
// however often the provider repeats it (I9, I14).
func TestHostDeletedOrderPaymentRefunded(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, _ *sql.DB) {
		for _, how := range []string{"soft", "hard"} {
			t.Run(how, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				m := window.mapping
				applyDDL(t, db, window.ddl(d))
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				require.NoError(t, s.Check(ctx))
				book := &refundBook{}
				seats := memstore.NewSeats(nil).Scoped(s.Scope())
				svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: book.hook(s.Scope())})
				require.NoError(t, err)

				p := cancel.Placement{OrderNo: "o1", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: time.Now().Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
				_, err = svc.UserCancel(ctx, "o1", "u1")
				require.NoError(t, err)
				// The host deletes the closed order, its own way.
				var q string
				if how == "soft" {
					q = "UPDATE " + m.Orders.Table + " SET deleted = 1 WHERE number = 'o1'"
				} else {
					q = "DELETE FROM " + m.Orders.Table + " WHERE number = 'o1'"
				}
				_, err = db.ExecContext(ctx, q)
				require.NoError(t, err)

				for i := 0; i < 3; i++ {
					_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "o1", PaymentID: "pay-del"})
					require.ErrorIs(t, err, cancel.ErrDiscrepancy, "a payment for an order that is gone is a discrepancy, not a not-found the provider retries for ever")
				}
				assert.Equal(t, 1, book.count(s.Scope(), "pay-del"), "I9: refunded exactly once")
				n, err := svc.RetryDiscrepancies(ctx, 10)
				require.NoError(t, err)
				assert.Equal(t, 0, n, "settled: nothing left to retry")
			})
		}
	})
}

// A statement of the host's inside the placing transaction loses a deadlock
// and the host carries on (it logs the error and returns nil). MariaDB has
// rolled the whole transaction back, the placement with it: Place must not
// report the order placed, and no expiry message may be sent for an order
// that does not exist (I6); the seats go back.
// SQLite has no deadlocks (its writers are serialised by the database
// lock), so the case is MariaDB's and PostgreSQL's.
func TestHostRowsSwallowedDeadlockPlacesNothing(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
		t.Run(string(d), func(t *testing.T) { hostRowsSwallowedDeadlock(t, d, openDB(t, d)) })
	}
}

func hostRowsSwallowedDeadlock(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
	ctx := context.Background()
	s, err := sqlstore.New(db, d, sqlstore.Mapping{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	_, err = db.ExecContext(ctx, "CREATE TABLE host_counter (id INT PRIMARY KEY, n INT NOT NULL)")
	require.NoError(t, err)
	for id := 1; id <= 200; id++ {
		_, err = db.ExecContext(ctx, bindQ(d, "INSERT INTO host_counter (id, n) VALUES (?, 0)"), id)
		require.NoError(t, err)
	}
	sent := &countingSender{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent})
	require.NoError(t, err)
	seats := memstore.NewSeats(nil)
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, Scheduler: sched})
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)

	// The other side of the deadlock: a transaction that holds rows
	// 2-200 and then wants row 1, which the host's rows function holds.
	// It has changed more rows, so InnoDB picks the host's transaction
	// as the deadlock's victim (PostgreSQL picks the first waiter).
	other, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer other.Rollback() //nolint:errcheck
	_, err = other.ExecContext(ctx, "UPDATE host_counter SET n = n + 1 WHERE id >= 2")
	require.NoError(t, err)

	var swallowed error
	rows := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		if _, err := tx.ExecContext(ctx, bindQ(d, "UPDATE host_counter SET n = n + 1 WHERE id = ?"), 1); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() {
			time.Sleep(200 * time.Millisecond) // the host's statement below waits first
			_, err := other.ExecContext(ctx, bindQ(d, "UPDATE host_counter SET n = n + 1 WHERE id = ?"), 1)
			done <- err
		}()
		_, err := tx.ExecContext(ctx, bindQ(d, "UPDATE host_counter SET n = n + 1 WHERE id = ?"), 2)
		oerr := <-done
		if err == nil {
			err = oerr // the other side lost the deadlock instead: no case for this test
			if err == nil {
				return errors.New("no deadlock happened")
			}
			return fmt.Errorf("the other transaction lost the deadlock: %w", err)
		}
		swallowed = err // the host logs it and carries on
		return nil
	}
	p := cancel.Placement{OrderNo: "o-dl", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)}
	err = svc.Place(ctx, p, s.Insert(db, rows))
	require.Error(t, swallowed, "the host's statement lost a deadlock")
	_, oerr := s.Order(ctx, "o-dl")
	if err == nil {
		require.NoError(t, oerr, "I6: Place said placed, so the order must exist")
	}
	if errors.Is(oerr, expiry.ErrNotFound) {
		require.Error(t, err, "the order does not exist: Place must not say it was placed")
		assert.Zero(t, sent.count(), "I6: no message for an order that does not exist")
		st, serr := seats.Show(ctx, "ev")
		require.NoError(t, serr)
		if !errors.Is(err, expiry.ErrCommitUnknown) {
			assert.Empty(t, st, "nothing placed: the seat goes back")
		}
	}
}

// countingSender counts the messages it is asked to send.
type countingSender struct {
	mu sync.Mutex
	n  int
}

func (c *countingSender) Send(context.Context, expiry.Message, time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return nil
}

func (c *countingSender) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// The host holds one due order's row (SELECT … FOR UPDATE while its
// checkout calls the payment provider). A batch of due orders that lists
// it must cancel the others at once and leave the held one to a later
// round (I12), on the library's schema and on a host's table alike.
func TestHostHeldRowDoesNotHoldTheBatch(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres} {
		for _, schema := range []string{"library", "shop"} {
			t.Run(string(d)+"/"+schema, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				var m sqlstore.Mapping
				table, where := "oe_order", "order_no = ?"
				if schema == "shop" {
					applyDDL(t, db, shop.ddl(d))
					// By its primary key: a scan would lock every row it
					// passes on MariaDB (REPEATABLE READ).
					m, table, where = shop.mapping, "shop_order", "tenant_id = 7 AND order_code = ?"
				}
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				now, err := s.Now(ctx)
				require.NoError(t, err)
				var nos []string
				for i := 0; i < 21; i++ {
					no := fmt.Sprintf("h%02d", i)
					nos = append(nos, no)
					p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{no + "-x"}, ExpireAt: now.Add(-2 * time.Second)}
					require.NoError(t, s.Insert(db, nil)(ctx, p))
				}
				held, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				t.Cleanup(func() { _ = held.Rollback() })
				var got int
				require.NoError(t, held.QueryRowContext(ctx, bindQ(d, "SELECT 1 FROM "+table+" WHERE "+where+" FOR UPDATE"), "h07").Scan(&got))

				bctx, cancelCtx := context.WithTimeout(ctx, 10*time.Second)
				defer cancelCtx()
				t0 := time.Now()
				res, err := s.CancelDue(bctx, nos, cancel.ReasonReconcile)
				waited := time.Since(t0)
				t.Logf("FIGURE held row, %s/%s: the batch of 21 with one held row answered in %v", d, schema, waited.Round(time.Millisecond))
				require.NoError(t, err, "a held row must not fail the batch (it waited %v)", waited)
				var done []string
				for _, r := range res {
					done = append(done, r.Order.No)
				}
				assert.Len(t, done, 20, "I12: every due order but the held one is cancelled")
				assert.NotContains(t, done, "h07", "the held order is left to its holder and a later round")
				assert.Less(t, waited, 5*time.Second, "I12: the others do not wait for the held row")
				require.NoError(t, held.Rollback())
				res, err = s.CancelDue(ctx, []string{"h07"}, cancel.ReasonReconcile)
				require.NoError(t, err)
				require.Len(t, res, 1, "released, the held order is cancelled by the next batch")
			})
		}
	}
}

// The database's clock steps back an hour (a failover to a node whose clock
// was behind, an operator's correction) just after an order was cancelled
// by a host that crashed before its seat release. The reconciler's lock
// pass promises to repair it at its first pass after Settle, in wall time,
// whatever the database's clock did: the seat must be free within a few
// passes, not an hour later (I3).
//
// A step back of the clock is written as a step forward of the order's
// last-write time: the lock pass compares the two, and PostgreSQL has no
// per-session clock to step.
func TestHostClockStepBackKeepsSettle(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, _ *sql.DB) {
		for _, hs := range []*hostSchema{nil, &seatflow} {
			name := "library"
			if hs != nil {
				name = hs.name
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				var m sqlstore.Mapping
				shift := "UPDATE oe_order SET updated_at_ms = updated_at_ms + 3600000 WHERE order_no = 'c1'"
				if hs != nil {
					applyDDL(t, db, hs.ddl(d))
					m = hs.mapping
					shift = map[sqlstore.Dialect]string{
						sqlstore.MySQL:    "UPDATE order_info SET update_time = update_time + INTERVAL 1 HOUR WHERE order_no = 'c1'",
						sqlstore.Postgres: "UPDATE order_info SET update_time = update_time + INTERVAL '1 hour' WHERE order_no = 'c1'",
						sqlstore.SQLite:   "UPDATE order_info SET update_time = datetime(update_time, '+1 hour') WHERE order_no = 'c1'",
					}[d]
				}
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				seats := memstore.NewSeats(nil).Scoped(s.Scope())
				svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
				require.NoError(t, err)
				now, err := s.Now(ctx)
				require.NoError(t, err)
				p := cancel.Placement{OrderNo: "c1", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)}
				require.NoError(t, svc.Place(ctx, p, s.Insert(db, nil)))
				// The decider commits the cancel and dies before its release.
				res, err := s.CancelPending(ctx, cancel.Request{OrderNo: "c1", Reason: cancel.ReasonUser, UserID: "u1"})
				require.NoError(t, err)
				require.True(t, res.Changed)
				r, err := db.ExecContext(ctx, shift)
				require.NoError(t, err)
				n, err := r.RowsAffected()
				require.NoError(t, err)
				require.EqualValues(t, 1, n)

				const settle = 200 * time.Millisecond
				rec, err := reconcile.New(reconcile.Config{Orders: s, Seats: seats, Service: svc, Settle: settle})
				require.NoError(t, err)
				t0 := time.Now()
				var free bool
				for pass := 0; pass < 10 && !free; pass++ {
					time.Sleep(settle)
					_, err := rec.Round(ctx)
					require.NoError(t, err)
					st, err := seats.Show(ctx, "ev")
					require.NoError(t, err)
					free = len(st) == 0
				}
				t.Logf("FIGURE clock step back, %s/%s: the cancelled order's seat freed after %v (Settle %v)", d, name, time.Since(t0).Round(time.Millisecond), settle)
				assert.True(t, free, "I3: a cancelled order's seat is freed by the first passes after Settle, whatever the database's clock did")
			})
		}
	})
}
