package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// An adversarial review of 683108e (payment ids per scope, a payment for an
// order the host deleted is refunded, the placing savepoint), through the
// public API, judged by money and seats: who was refunded how often, what
// paid, which seats are held, which messages were sent.

// reviewWorld is one Service on one store, with a counting scheduler and
// a refund book.
type reviewWorld struct {
	d     sqlstore.Dialect
	db    *sql.DB
	s     *sqlstore.Store
	svc   *cancel.Service
	seats *memstore.Seats // the store's scope
	book  *refundBook
	label string // the book's key for this world's refunds
	sent  *countingSender
}

// quiet keeps the Service's warnings out of the test output.
var quiet = expiry.Runtime{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

type reviewOpts struct {
	mapping *sqlstore.Mapping // nil: the library's schema
	shared  *memstore.Seats   // nil: a new one
	book    *refundBook       // nil: a new one
	label   string            // "": the store's scope
	late    bool
	timeout time.Duration // PlaceTimeout
	hook    func(context.Context, cancel.Discrepancy) error
}

func reviewService(t *testing.T, db *sql.DB, d sqlstore.Dialect, o reviewOpts) *reviewWorld {
	t.Helper()
	ctx := context.Background()
	var ms []sqlstore.Mapping
	if o.mapping != nil {
		ms = append(ms, *o.mapping)
	}
	s, err := sqlstore.New(db, d, ms...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))
	if o.shared == nil {
		o.shared = memstore.NewSeats(nil)
	}
	if o.book == nil {
		o.book = &refundBook{}
	}
	if o.label == "" {
		o.label = s.Scope()
	}
	sent := &countingSender{}
	sched, err := expiry.NewScheduler(expiry.SchedulerConfig{Sender: sent, Runtime: quiet})
	require.NoError(t, err)
	seats := o.shared.Scoped(s.Scope())
	hook := o.book.hook(o.label)
	if o.hook != nil {
		hook = o.hook
	}
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: hook,
		AcceptLatePayments: o.late, Scheduler: sched, PlaceTimeout: o.timeout, Runtime: quiet})
	require.NoError(t, err)
	return &reviewWorld{d: d, db: db, s: s, svc: svc, seats: seats, book: o.book, label: o.label, sent: sent}
}

func (w *reviewWorld) place(t *testing.T, no, user string, seats ...string) {
	t.Helper()
	ctx := context.Background()
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: "ev", Seats: seats, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(w.db, nil)))
}

func (w *reviewWorld) pay(no, payment string) (cancel.Result, error) {
	return w.svc.Pay(context.Background(), cancel.Payment{OrderNo: no, PaymentID: payment})
}

func (w *reviewWorld) refunds(payment string) int { return w.book.count(w.label, payment) }

func (w *reviewWorld) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := w.db.ExecContext(context.Background(), bindQ(w.d, q), args...)
	require.NoError(t, err, q)
}

func (w *reviewWorld) status(t *testing.T, no string) (expiry.Status, bool) {
	t.Helper()
	o, err := w.s.Order(context.Background(), no)
	if errors.Is(err, expiry.ErrNotFound) {
		return 0, false
	}
	require.NoError(t, err)
	return o.Status, true
}

// deleteOrder is the host deleting one of its orders, its own way.
func deleteOrder(t *testing.T, w *reviewWorld, m *sqlstore.Mapping, no, how string) {
	t.Helper()
	switch {
	case m == nil:
		w.exec(t, "DELETE FROM oe_order WHERE order_no = ?", no)
	case how == "soft":
		w.exec(t, "UPDATE "+m.Orders.Table+" SET deleted = 1 WHERE "+m.Orders.OrderNo+" = ?", no)
	default:
		q := "DELETE FROM " + m.Orders.Table + " WHERE " + m.Orders.OrderNo + " = ?"
		args := []any{no}
		for _, c := range m.Orders.Where {
			if c.Column == "deleted" {
				continue
			}
			q += " AND " + c.Column + " = ?"
			args = append(args, c.Value)
		}
		w.exec(t, q, args...)
	}
}

// ---------------------------------------------------------------------------
// I14: a payment that paid its order is never refunded, whatever the host
// does with the order afterwards.

// The library paid the order (its decision row exists), then the host
// deleted it; the provider repeats the callback. Every schema, soft and
// hard delete, late payments off and on.
func TestHostReviewPaidThenDeletedIsNotRefunded(t *testing.T) {
	mWindow, mShop := window.mapping, tenant(7)
	cases := []struct {
		name string
		m    *sqlstore.Mapping
		ddl  func(sqlstore.Dialect) []string
		how  string
	}{
		{"library/hard", nil, nil, "hard"},
		{"window/soft", &mWindow, window.ddl, "soft"},
		{"window/hard", &mWindow, window.ddl, "hard"},
		{"shop7/hard", &mShop, shop.ddl, "hard"},
	}
	for _, d := range allDialects {
		for _, c := range cases {
			t.Run(string(d)+"/"+c.name, func(t *testing.T) {
				db := openDB(t, d)
				if c.ddl != nil {
					applyDDL(t, db, c.ddl(d))
				}
				shared, book := memstore.NewSeats(nil), &refundBook{}
				for _, late := range []bool{false, true} {
					w := reviewService(t, db, d, reviewOpts{mapping: c.m, shared: shared, book: book, late: late})
					no, pay := fmt.Sprintf("o-%v", late), fmt.Sprintf("pay-%v", late)
					w.place(t, no, "u1", "a-"+no)
					res, err := w.pay(no, pay)
					require.NoError(t, err)
					require.True(t, res.Changed)
					deleteOrder(t, w, c.m, no, c.how)
					for i := 0; i < 3; i++ {
						_, err = w.pay(no, pay)
					}
					t.Logf("late=%v: repeated after the delete: %v", late, err)
					n, err := w.svc.RetryDiscrepancies(context.Background(), 10)
					require.NoError(t, err)
					assert.Zero(t, n)
					assert.Equal(t, 0, w.refunds(pay), "I14: %s paid %s; a repeated callback after the host deleted it must not refund it (late=%v)", pay, no, late)
				}
				// Paid late: a payment that reinstated its order after its
				// timeout, then the host deletes the order.
				w := reviewService(t, db, d, reviewOpts{mapping: c.m, shared: shared, book: book, late: true})
				w.place(t, "o-re", "u1", "a-re")
				_, err := w.svc.Cancel(context.Background(), cancel.Request{OrderNo: "o-re", Reason: cancel.ReasonTimeout})
				require.NoError(t, err)
				res, err := w.pay("o-re", "pay-re")
				require.NoError(t, err)
				require.Equal(t, expiry.StatusPaid, res.Order.Status, "reinstated")
				deleteOrder(t, w, c.m, "o-re", c.how)
				for i := 0; i < 2; i++ {
					_, err = w.pay("o-re", "pay-re")
				}
				t.Logf("the reinstating payment repeated after the delete: %v", err)
				assert.Equal(t, 0, w.refunds("pay-re"), "I14: pay-re reinstated o-re; it must not be refunded after the delete")
			})
		}
	}
}

// The order was paid by that payment id, but not through this version's
// Pay: by the host before it adopted the library (a brownfield table), or
// by a version of the library before on-time payments wrote a decision
// row. A repeated callback is answered as paid, without a refund, and
// records the payment's decision; the host then deletes the paid order (the
// buyer removes it from the history) and the provider repeats the callback
// once more: it must not be refunded (I14: honoured and refunded).
func TestHostReviewPaidOutsideThenDeletedNotRefunded(t *testing.T) {
	for _, d := range allDialects {
		for _, how := range []string{"soft", "hard"} {
			t.Run(string(d)+"/"+how, func(t *testing.T) {
				ctx := context.Background()
				db := openDB(t, d)
				applyDDL(t, db, window.ddl(d))
				m := window.mapping
				w := reviewService(t, db, d, reviewOpts{mapping: &m})
				now, err := w.s.Now(ctx)
				require.NoError(t, err)
				// Paid by the host: status 20, its payment in paid_txn.
				w.exec(t, "INSERT INTO orders (number, customer, show_code, status, created_ms, paid_txn) VALUES (?, 'u1', 'ev', 20, ?, 'pay-old')", "o-old", now.UnixMilli())
				res, err := w.pay("o-old", "pay-old")
				require.NoError(t, err, "a repeated callback of the payment that paid the order is answered as paid")
				assert.Equal(t, expiry.StatusPaid, res.Order.Status)
				require.Equal(t, 0, w.refunds("pay-old"))

				deleteOrder(t, w, &m, "o-old", how)
				_, err = w.pay("o-old", "pay-old")
				t.Logf("repeat after the %s delete: %v", how, err)
				assert.Equal(t, 0, w.refunds("pay-old"), "I14: pay-old paid o-old (paid_txn = pay-old); deleting the paid order must not turn its payment into a refund")
			})
		}
	}
}

// ---------------------------------------------------------------------------
// Scopes: one key per (scope, payment id). What if one tenant's payments
// are seen under two scopes?

// One tenant's table spelled two ways (bare, and qualified with the
// connection's own schema, or in another case) would give two scopes on the
// same rows: a refund made through one store would be made again through
// the other, and a payment that paid would be refunded after a delete.
// Check refuses the second spelling, naming the one to use.
func TestHostReviewSplitScopeRefusedByCheck(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		var schema string
		switch d {
		case sqlstore.MySQL:
			require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&schema))
		case sqlstore.Postgres:
			require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
		default:
			schema = "main"
		}
		spellings := []string{schema + ".shop_order"}
		if d == sqlstore.SQLite {
			spellings = append(spellings, "SHOP_ORDER") // SQLite folds table names
		}
		for _, table := range spellings {
			m := tenant(7)
			m.Orders.Table = table
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			err = s.Check(ctx)
			require.ErrorIs(t, err, sqlstore.ErrMapping, "%s: one table, one scope", table)
			assert.ErrorContains(t, err, "name it shop_order")
		}
		m := tenant(7)
		s, err := sqlstore.New(db, d, m)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		require.NoError(t, s.Check(ctx), "the bare name is the scope's spelling")
	})
}

// ---------------------------------------------------------------------------
// Scopes that are really different: each decides its own ids, once.

// Goroutines record the same payment id at once through the library's
// schema, tenant 7 (two store instances, two hosts) and tenant 8: exactly
// one record per scope.
func TestHostReviewConcurrentRecordPerScope(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		var stores []*sqlstore.Store
		for _, m := range []*sqlstore.Mapping{nil, ptr(tenant(7)), ptr(tenant(7)), ptr(tenant(8))} {
			var ms []sqlstore.Mapping
			if m != nil {
				ms = append(ms, *m)
			}
			s, err := sqlstore.New(db, d, ms...)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			stores = append(stores, s)
		}
		for round := 0; round < 3; round++ {
			pay := fmt.Sprintf("pay-c%d", round)
			start := make(chan struct{})
			var mu sync.Mutex
			won := map[string]int{}
			var errs []error
			var wg sync.WaitGroup
			for i := 0; i < 16; i++ {
				s := stores[i%len(stores)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := s.RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: pay, OrderNo: "o1", UserID: "u", Status: expiry.StatusCancelled})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
					}
					if ok {
						won[s.Scope()]++
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs)
			assert.Equal(t, map[string]int{"": 1, stores[1].Scope(): 1, stores[3].Scope(): 1}, won, "one record per scope")
		}
	})
}

func ptr[T any](v T) *T { return &v }

// Goroutines deliver the same callback for a deleted order at once: a
// cancelled one is refunded once, a paid one never.
func TestHostReviewConcurrentPayDeletedOrder(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, window.ddl(d))
		m := window.mapping
		w := reviewService(t, db, d, reviewOpts{mapping: &m})
		w.place(t, "oc", "u1", "a1")
		_, err := w.svc.UserCancel(ctx, "oc", "u1")
		require.NoError(t, err)
		w.place(t, "op", "u1", "a2")
		_, err = w.pay("op", "pay-p")
		require.NoError(t, err)
		deleteOrder(t, w, &m, "oc", "soft")
		deleteOrder(t, w, &m, "op", "hard")
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < 12; i++ {
			no, pay := "oc", "pay-c"
			if i%2 == 1 {
				no, pay = "op", "pay-p"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := w.pay(no, pay)
				assert.True(t, err == nil || errors.Is(err, cancel.ErrDiscrepancy), "%v", err)
			}()
		}
		close(start)
		wg.Wait()
		assert.Equal(t, 1, w.refunds("pay-c"), "I9: once")
		assert.Equal(t, 0, w.refunds("pay-p"), "I14: it paid")
	})
}

// The library's own schema (scope "") beside a tenant on one database:
// the same payment id is one payment in each; each store claims and
// settles its own records only.
func TestHostReviewLibraryBesideTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		shared, book := memstore.NewSeats(nil), &refundBook{}
		var failLib sync.Once
		failing := func(ctx context.Context, dd cancel.Discrepancy) error {
			failed := false
			if dd.PaymentID == "pay-2" {
				failLib.Do(func() { failed = true })
			}
			if failed {
				return errors.New("provider down")
			}
			return book.hook("")(ctx, dd)
		}
		lib := reviewService(t, db, d, reviewOpts{shared: shared, book: book, hook: failing})
		m := tenant(7)
		t7 := reviewService(t, db, d, reviewOpts{mapping: &m, shared: shared, book: book})

		lib.place(t, "o1", "u1", "a1")
		_, err := lib.pay("o1", "pay-1")
		require.NoError(t, err)
		t7.place(t, "o1", "u7", "a1")
		_, err = t7.svc.UserCancel(ctx, "o1", "u7")
		require.NoError(t, err)
		_, err = t7.pay("o1", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		res, err := lib.pay("o1", "pay-1")
		require.NoError(t, err, "the library's pay-1 paid its o1: a repeat is answered as paid")
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		assert.Equal(t, 0, book.count("", "pay-1"))
		assert.Equal(t, 1, t7.refunds("pay-1"))

		// The library's pay-2 refund fails once: unsettled, in scope "".
		lib.place(t, "o2", "u1", "a2")
		_, err = lib.svc.UserCancel(ctx, "o2", "u1")
		require.NoError(t, err)
		_, err = lib.pay("o2", "pay-2")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		ds, err := t7.s.ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, ds, "I16: the tenant claims none of the library's records")
		require.ErrorIs(t, t7.s.SettleDiscrepancy(ctx, "pay-2"), expiry.ErrNotFound, "I16: nor settles them")
		ds, err = lib.s.ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		assert.Equal(t, "pay-2", ds[0].PaymentID)
		require.NoError(t, failing(ctx, ds[0]))
		require.NoError(t, lib.s.SettleDiscrepancy(ctx, "pay-2"))
		assert.Equal(t, 1, book.count("", "pay-2"))
		ds, err = lib.s.ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		assert.Empty(t, ds)
	})
}

// A callback for an order number that exists only in another tenant: this
// tenant's payment (its own provider account) is refunded here, and the
// other tenant's order is neither paid nor touched (I16); that tenant's own
// payment of the same id then pays it.
func TestHostReviewPayOtherTenantsOrder(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		shared, book := memstore.NewSeats(nil), &refundBook{}
		m7, m8 := tenant(7), tenant(8)
		w7 := reviewService(t, db, d, reviewOpts{mapping: &m7, shared: shared, book: book})
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8, shared: shared, book: book})
		w8.place(t, "o5", "u8", "x5")
		_, err := w7.pay("o5", "pay-5")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 1, w7.refunds("pay-5"))
		st, ok := w8.status(t, "o5")
		require.True(t, ok)
		assert.Equal(t, expiry.StatusPending, st, "I16: tenant 7's callback does not touch tenant 8's order")
		show, err := w8.seats.Show(ctx, "ev")
		require.NoError(t, err)
		assert.Equal(t, "o5", show["x5"].OrderNo)
		res, err := w8.pay("o5", "pay-5")
		require.NoError(t, err)
		assert.True(t, res.Changed)
		assert.Equal(t, 0, w8.refunds("pay-5"))
	})
}

// prevSchema is Schema(d) as the version before 683108e left it: the
// discrepancy table keyed by payment_id alone.
func prevSchema(t *testing.T, d sqlstore.Dialect) []string {
	stmts, err := sqlstore.Schema(d)
	require.NoError(t, err)
	var out []string
	for _, q := range stmts {
		if strings.Contains(q, "TABLE IF NOT EXISTS oe_payment_discrepancy ") {
			r := strings.Replace(q, "PRIMARY KEY (scope, payment_id)", "PRIMARY KEY (payment_id)", 1)
			require.NotEqual(t, q, r)
			q = r
		}
		out = append(out, q)
	}
	return out
}

// A table of the previous version holds tenant 7's decisions: pay-1 paid
// o1 (honoured), pay-2 refunded for o2. After Migrate re-keys it, the
// tenant's repeated callbacks change nothing (even once o1 is deleted),
// and tenant 8's own pay-1 is its own payment.
func TestHostReviewRekeyKeepsDecisions(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, prevSchema(t, d))
		m7, m8 := tenant(7), tenant(8)
		scope7 := "shop_order?tenant_id=7"
		nowS := time.Now().Unix() + 3600
		for _, q := range []string{
			"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, payment_ref) VALUES (7, 'o1', 'u7', 'ev', 'PAID', ?, 'pay-1')",
			"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (7, 'o2', 'u7', 'ev', 'CANCELLED', ?, 'user')",
			"INSERT INTO shop_order (tenant_id, order_code, buyer, event_id, state, due_at, close_reason) VALUES (8, 'o8', 'u8', 'ev', 'CANCELLED', ?, 'user')",
		} {
			_, err := db.Exec(bindQ(d, q), nowS)
			require.NoError(t, err, q)
		}
		for _, r := range []struct {
			pay, no string
			st      int
		}{{"pay-1", "o1", 0}, {"pay-2", "o2", 2}} {
			_, err := db.Exec(bindQ(d, "INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms, settled_at_ms) VALUES (?, ?, ?, 'u7', ?, 1, 1, 1)"), r.pay, scope7, r.no, r.st)
			require.NoError(t, err)
		}
		shared, book := memstore.NewSeats(nil), &refundBook{}
		w7 := reviewService(t, db, d, reviewOpts{mapping: &m7, shared: shared, book: book})
		require.Equal(t, scope7, w7.s.Scope())
		w8 := reviewService(t, db, d, reviewOpts{mapping: &m8, shared: shared, book: book})

		res, err := w7.pay("o1", "pay-1")
		require.NoError(t, err)
		assert.Equal(t, expiry.StatusPaid, res.Order.Status)
		_, err = w7.pay("o2", "pay-2")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		deleteOrder(t, w7, &m7, "o1", "hard")
		_, err = w7.pay("o1", "pay-1")
		t.Logf("pay-1 after o1's delete: %v", err)
		assert.Equal(t, 0, w7.refunds("pay-1"), "I14: honoured before the re-key")
		assert.Equal(t, 0, w7.refunds("pay-2"), "I9: refunded before the re-key")
		_, err = w8.pay("o8", "pay-1")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		assert.Equal(t, 1, w8.refunds("pay-1"), "tenant 8's pay-1 is its own")
	})
}

// Four hosts start at once on a previous version's database and Migrate:
// every Migrate succeeds, the rows survive, and the new key works.
func TestHostReviewConcurrentMigrate(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, prevSchema(t, d))
		_, err := db.Exec("INSERT INTO oe_payment_discrepancy (payment_id, scope, order_no, user_id, status, recorded_at_ms, tried_at_ms) VALUES ('pay-1', 'shop_order?tenant_id=7', 'o1', 'u7', 2, 1, 1)")
		require.NoError(t, err)
		var stores []*sqlstore.Store
		for _, m := range []*sqlstore.Mapping{nil, ptr(tenant(7)), ptr(tenant(8)), nil} {
			var ms []sqlstore.Mapping
			if m != nil {
				ms = append(ms, *m)
			}
			s, err := sqlstore.New(db, d, ms...)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
		}
		start := make(chan struct{})
		errs := make([]error, len(stores))
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.Migrate(ctx)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "Migrate of host %d", i)
		}
		for _, s := range stores {
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
		}
		ok, err := stores[1].RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "o1", UserID: "u7", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.False(t, ok, "tenant 7's record survived the re-key")
		ok, err = stores[2].RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "o1", UserID: "u8", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.True(t, ok, "tenant 8's pay-1 is its own")
		ok, err = stores[0].RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "pay-1", OrderNo: "o1", UserID: "u", Status: expiry.StatusCancelled})
		require.NoError(t, err)
		assert.True(t, ok, "the library's pay-1 is its own")
		ds, err := stores[1].ClaimDiscrepancies(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		assert.Equal(t, "u7", ds[0].UserID)
	})
}

// ---------------------------------------------------------------------------
// A payment for an order that is not there yet.

// The callback arrives for an order number that was never placed (refunded
// once); then the order is placed under that number, and the provider
// repeats the callback: the refunded payment must not pay it, nor be
// refunded again, nor reinstate it after its timeout.
func TestHostReviewPayBeforePlace(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		for _, late := range []bool{false, true} {
			w := reviewService(t, db, d, reviewOpts{late: late})
			no, pay := fmt.Sprintf("early-%v", late), fmt.Sprintf("pay-early-%v", late)
			_, err := w.pay(no, pay)
			require.ErrorIs(t, err, cancel.ErrDiscrepancy)
			require.Equal(t, 1, w.refunds(pay))
			w.place(t, no, "u1", "s-"+no)
			_, err = w.pay(no, pay)
			t.Logf("late=%v: repeat after the placement: %v", late, err)
			st, ok := w.status(t, no)
			require.True(t, ok)
			assert.Equal(t, expiry.StatusPending, st, "I14: a refunded payment pays nothing")
			_, err = w.svc.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout})
			require.NoError(t, err)
			_, err = w.pay(no, pay)
			t.Logf("late=%v: repeat after the timeout: %v", late, err)
			st, _ = w.status(t, no)
			assert.Equal(t, expiry.StatusCancelled, st, "I14: a refunded payment reinstates nothing")
			assert.Equal(t, 1, w.refunds(pay), "I9: once")
			show, err := w.seats.Show(ctx, "ev")
			require.NoError(t, err)
			assert.NotContains(t, show, "s-"+no, "the cancelled order's seat is free")
		}
	})
}

// PostgreSQL: the callback runs while the placement's transaction is open
// (the host's rows still running): the order is not visible, so the
// payment is refunded; after the commit its repeat pays nothing.
func TestHostReviewPayDuringPlace(t *testing.T) {
	d := sqlstore.Postgres
	db := openDB(t, d)
	ctx := context.Background()
	w := reviewService(t, db, d, reviewOpts{})
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	var payErr error
	rows := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		_, payErr = w.pay(p.OrderNo, "pay-race")
		return nil
	}
	p := cancel.Placement{OrderNo: "race", UserID: "u1", ShowID: "ev", Seats: []string{"r1"}, ExpireAt: now.Add(time.Hour)}
	require.NoError(t, w.svc.Place(ctx, p, w.s.Insert(db, rows)))
	require.ErrorIs(t, payErr, cancel.ErrDiscrepancy)
	assert.Equal(t, 1, w.refunds("pay-race"))
	_, err = w.pay("race", "pay-race")
	t.Logf("repeat after the commit: %v", err)
	st, _ := w.status(t, "race")
	assert.Equal(t, expiry.StatusPending, st, "I14: refunded, it pays nothing")
	assert.Equal(t, 1, w.refunds("pay-race"))
}

// The host deletes decided orders and reuses their numbers: an old
// payment's repeated callback neither pays the new order nor is refunded
// (again).
func TestHostReviewReusedNumber(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := reviewService(t, db, d, reviewOpts{late: true})
		w.place(t, "n1", "u1", "a1")
		_, err := w.pay("n1", "pay-paid")
		require.NoError(t, err)
		w.place(t, "n2", "u1", "a2")
		_, err = w.svc.UserCancel(ctx, "n2", "u1")
		require.NoError(t, err)
		_, err = w.pay("n2", "pay-refunded")
		require.ErrorIs(t, err, cancel.ErrDiscrepancy)
		for _, no := range []string{"n1", "n2"} {
			w.exec(t, "DELETE FROM oe_order_seat WHERE order_no = ?", no)
			w.exec(t, "DELETE FROM oe_order WHERE order_no = ?", no)
			w.place(t, no, "u2", "b-"+no)
		}
		for _, c := range []struct{ no, pay string }{{"n1", "pay-paid"}, {"n2", "pay-refunded"}} {
			_, err = w.pay(c.no, c.pay)
			t.Logf("%s repeated for the new %s: %v", c.pay, c.no, err)
			st, _ := w.status(t, c.no)
			assert.Equal(t, expiry.StatusPending, st, "an old payment does not pay the new %s", c.no)
		}
		assert.Equal(t, 0, w.refunds("pay-paid"), "I14: it paid the old n1")
		assert.Equal(t, 1, w.refunds("pay-refunded"), "I9: once")
		res, err := w.pay("n1", "pay-new")
		require.NoError(t, err)
		assert.True(t, res.Changed)
	})
}

// ---------------------------------------------------------------------------
// Insert: the host's rows end or abort the transaction.

type placeOutcome struct {
	err   error
	found bool
	st    expiry.Status
	held  string // the order holding the seat in the seat store ("" free)
	sent  int
}

func placeWith(t *testing.T, d sqlstore.Dialect, db *sql.DB, no string, timeout time.Duration, rows func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error) placeOutcome {
	t.Helper()
	ctx := context.Background()
	w := reviewService(t, db, d, reviewOpts{timeout: timeout})
	now, err := w.s.Now(ctx)
	require.NoError(t, err)
	p := cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "ev", Seats: []string{"seat-" + no}, ExpireAt: now.Add(time.Hour)}
	var out placeOutcome
	out.err = w.svc.Place(ctx, p, w.s.Insert(db, rows))
	out.st, out.found = w.status(t, no)
	show, err := w.seats.Show(ctx, "ev")
	require.NoError(t, err)
	out.held = show["seat-"+no].OrderNo
	out.sent = w.sent.count()
	return out
}

func hostTable(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
	_, err := db.Exec("CREATE TABLE host_extra (order_no VARCHAR(64) PRIMARY KEY)")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO host_extra (order_no) VALUES ('taken')")
	require.NoError(t, err)
}

// rows COMMITs (or, on MariaDB, runs DDL, an implicit commit) and returns
// nil: the order is committed; Place must say the commit is unknown, keep
// the seat, and schedule the order it finds.
func TestHostReviewRowsCommitThenNil(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ends := []string{"COMMIT"}
		if d == sqlstore.MySQL {
			ends = append(ends, "CREATE TABLE host_ddl (id INT)")
		}
		for i, end := range ends {
			o := placeWith(t, d, db, fmt.Sprintf("c%d", i), 0, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				_, err := tx.ExecContext(ctx, end)
				return err
			})
			t.Logf("%s: %v", end, o.err)
			require.True(t, o.found, "%s committed the placement", end)
			assert.ErrorIs(t, o.err, expiry.ErrCommitUnknown)
			assert.Equal(t, expiry.StatusPending, o.st)
			assert.Equal(t, fmt.Sprintf("c%d", i), o.held, "I2: the live order keeps its seat")
			assert.Equal(t, 1, o.sent, "the order the store shows is scheduled")
		}
	})
}

// rows ROLLBACKs and returns nil: nothing placed, the seat goes back, no
// message (I6).
func TestHostReviewRowsRollbackThenNil(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		o := placeWith(t, d, db, "rb", 0, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			_, err := tx.ExecContext(ctx, "ROLLBACK")
			return err
		})
		t.Logf("%v", o.err)
		require.Error(t, o.err)
		assert.NotErrorIs(t, o.err, expiry.ErrCommitUnknown)
		assert.False(t, o.found)
		assert.Empty(t, o.held, "the seat goes back")
		assert.Zero(t, o.sent, "I6")
	})
}

// rows swallows an error of its own statement and returns nil. PostgreSQL
// aborted the transaction: nothing placed, seat back, no message. MariaDB
// and SQLite undo the statement only: the order is placed.
func TestHostReviewRowsSwallowedError(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		hostTable(t, d, db)
		var swallowed error
		o := placeWith(t, d, db, "sw", 0, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			_, swallowed = tx.ExecContext(ctx, "INSERT INTO host_extra (order_no) VALUES ('taken')")
			return nil
		})
		require.Error(t, swallowed)
		t.Logf("swallowed %v; Place: %v", swallowed, o.err)
		if d == sqlstore.Postgres {
			require.Error(t, o.err)
			assert.False(t, o.found)
			assert.Empty(t, o.held)
			assert.Zero(t, o.sent, "I6")
			return
		}
		require.NoError(t, o.err)
		assert.True(t, o.found)
		assert.Equal(t, "sw", o.held)
		assert.Equal(t, 1, o.sent)
	})
}

// rows ends the transaction with a commit (explicit, or MariaDB's implicit
// commit of a DDL statement such as a lazily created audit table), then a
// statement of theirs fails and they return its error, as a host's rows
// do. The order is committed and pending, but Insert returns the rows'
// error as it is, a plain error: Place releases the live order's seat (I2)
// and schedules nothing. Likewise when the context ends after the rows'
// commit: the failed RELEASE is not "savepoint gone", and endedInRows says
// nothing was placed.
func TestHostReviewRowsCommitThenError(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		hostTable(t, d, db)
		type variant struct {
			name    string
			timeout time.Duration
			rows    func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error
		}
		vs := []variant{{"commit then a failed insert", 0, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO host_extra (order_no) VALUES ('taken')")
			return err
		}}, {"commit then the context ends", 500 * time.Millisecond, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
				return err
			}
			<-ctx.Done() // the host's rows outlive PlaceTimeout
			return nil
		}}}
		if d == sqlstore.MySQL {
			vs = append(vs, variant{"DDL then a failed insert", 0, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
				if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS host_audit (order_no VARCHAR(64) PRIMARY KEY)"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO host_extra (order_no) VALUES ('taken')")
				return err
			}})
		}
		for i, v := range vs {
			t.Run(v.name, func(t *testing.T) {
				no := fmt.Sprintf("ce%d", i)
				o := placeWith(t, d, db, no, v.timeout, v.rows)
				t.Logf("Place: %v", o.err)
				require.Error(t, o.err)
				require.True(t, o.found, "the rows' commit committed the placement")
				require.Equal(t, expiry.StatusPending, o.st)
				assert.Equal(t, no, o.held, "I2/I15: the seat of a live pending order is released (Place got a plain error: %v)", o.err)
				assert.ErrorIs(t, o.err, expiry.ErrCommitUnknown, "the placement committed: the outcome is not 'nothing placed'")
			})
		}
	})
}

// The library's own check on a table of the previous version whose key
// was never changed (a host that applies Schema's statements with its own
// migration tool, as the README allows, instead of Migrate: CREATE TABLE
// IF NOT EXISTS leaves the old key). Check must refuse it, or tenant 8's
// pay-1 must still be refunded.
func TestHostReviewCheckRefusesPreviousKey(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		applyDDL(t, db, shop.ddl(d))
		applyDDL(t, db, prevSchema(t, d))
		// The host's migration tool applies the new Schema's statements.
		stmts, err := sqlstore.Schema(d)
		require.NoError(t, err)
		for _, q := range stmts {
			if strings.Contains(q, "oe_payment_discrepancy") || strings.Contains(q, "oe_order_side") {
				_, err := db.Exec(q)
				require.NoError(t, err, q)
			}
		}
		book, shared := &refundBook{}, memstore.NewSeats(nil)
		var ws []*reviewWorld
		for _, id := range []int{7, 8} {
			s, err := sqlstore.New(db, d, tenant(id))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			cerr := s.Check(ctx)
			t.Logf("tenant %d: Check: %v", id, cerr)
			if cerr != nil {
				return // refused: the host is told to Migrate
			}
			seats := shared.Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats, OnDiscrepancy: book.hook(s.Scope()), Runtime: quiet})
			require.NoError(t, err)
			ws = append(ws, &reviewWorld{d: d, db: db, s: s, svc: svc, seats: seats, book: book, label: s.Scope(), sent: &countingSender{}})
		}
		for _, w := range ws {
			w.place(t, "o1", "u", "a1")
			_, err := w.svc.UserCancel(ctx, "o1", "u")
			require.NoError(t, err)
			_, err = w.pay("o1", "pay-1")
			t.Logf("%s: %v", w.label, err)
		}
		assert.Equal(t, 1, ws[0].refunds("pay-1"))
		assert.Equal(t, 1, ws[1].refunds("pay-1"), "Check passed, so tenant 8's pay-1 must be refunded (I9)")
	})
}
