package reconcile_test

// Review of 811c60a (MariaDB's batch: a plain pick, then a lock by number
// that reads a "still pending and due" flag). Judged by outcomes: who is
// paid, who is cancelled, whether a payment of an order the batch does not
// cancel waits on the batch (I12), what the batch reported (I2).
//
// The pick and the lock are two statements; what happens between them is
// driven here by a wrapping database/sql driver (stepDB) that runs a
// callback on another connection just before the batch's locking read is
// sent: a payment (or a user's cancel) that commits in that instant.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// stepConnector wraps a driver.Connector: before a prepared statement whose
// SQL matches is queried, the armed callback (if any) runs once.
type stepConnector struct {
	base driver.Connector
	mu   sync.Mutex
	on   func(query string) bool
	fn   func()
	ran  atomic.Int32
}

func (c *stepConnector) arm(on func(string) bool, fn func()) {
	c.mu.Lock()
	c.on, c.fn = on, fn
	c.mu.Unlock()
}

func (c *stepConnector) before(query string) {
	c.mu.Lock()
	on, fn := c.on, c.fn
	if on != nil && on(query) {
		c.on, c.fn = nil, nil
	} else {
		fn = nil
	}
	c.mu.Unlock()
	if fn != nil {
		c.ran.Add(1)
		fn()
	}
}

func (c *stepConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &stepConn{Conn: cn, c: c}, nil
}

func (c *stepConnector) Driver() driver.Driver { return c.base.Driver() }

type stepConn struct {
	driver.Conn
	c *stepConnector
}

func (s *stepConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := s.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &stepStmt{Stmt: st, q: q, c: s.c}, nil
}

func (s *stepConn) Prepare(q string) (driver.Stmt, error) {
	return s.PrepareContext(context.Background(), q)
}

func (s *stepConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return s.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
}

func (s *stepConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return s.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (s *stepConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		s.c.before(q)
	}
	return s.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (s *stepConn) Ping(ctx context.Context) error { return s.Conn.(driver.Pinger).Ping(ctx) }

func (s *stepConn) ResetSession(ctx context.Context) error {
	if r, ok := s.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (s *stepConn) IsValid() bool {
	if v, ok := s.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (s *stepConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type stepStmt struct {
	driver.Stmt
	q string
	c *stepConnector
}

func (s *stepStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *stepStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.before(s.q)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *stepStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// stepMySQL is a fresh MariaDB database (testenv.MySQL) opened a second
// time through a stepConnector.
func stepMySQL(t *testing.T) (*sql.DB, *stepConnector) {
	base := testenv.MySQL(t)
	var name string
	require.NoError(t, base.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv("OE_MYSQL_DSN"))
	require.NoError(t, err)
	cfg.DBName = name
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	sc := &stepConnector{base: conn}
	db := sql.OpenDB(sc)
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	return db, sc
}

// isBatchLock matches the batch's locking read of the orders (MariaDB).
func isBatchLock(q string) bool {
	return strings.HasPrefix(q, "SELECT o.") && strings.Contains(q, "FOR UPDATE SKIP LOCKED")
}

// newStepEnv is newAtkEnv on MariaDB over a stepConnector.
func newStepEnv(t *testing.T) (*atkEnv, *stepConnector) {
	ctx := context.Background()
	db, sc := stepMySQL(t)
	store, err := sqlstore.New(db, sqlstore.MySQL)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	require.NoError(t, store.Migrate(ctx))
	ns := "atk" + testenv.Unique()
	seats, err := redisseat.New(testenv.Redis(t), ns)
	require.NoError(t, err)
	seats = seats.Scoped(store.Scope())
	svc, err := cancel.New(cancel.Config{Store: store, Seats: seats})
	require.NoError(t, err)
	now, err := store.Now(ctx)
	require.NoError(t, err)
	return &atkEnv{db: db, store: store, seats: seats, svc: svc, now: now, ns: ns}, sc
}

// TestReview5PaidBetweenPickAndLockHeldForTheBatch (I12, I14): a batch of
// three due orders: "stuck" (its hook waits on a coupon row an admin
// holds), "paid" (the buyer's payment commits in the instant between the
// batch's pick and its lock), "gone" (the buyer cancels it in that same
// instant). The batch must cancel "stuck" only, report it once, and hold
// neither of the two it does not cancel: a repeated callback of the paid
// order and a host's update of the paid order's row answer at once, while
// the stuck hook holds its own batch.
//
// 811c60a says "only an order that changes between the pick and the lock
// is held, and left out": the window in which an order must change is
// narrow, but the hold is not: it lasts as long as the batch (here, the
// stuck hook), exactly the hold TestReviewBatchLockHoldsOrdersItDoesNotCancel
// forbids for an order paid a moment earlier.
func TestReview5PaidBetweenPickAndLockHeldForTheBatch(t *testing.T) {
	ctx := context.Background()
	e, sc := newStepEnv(t)
	_, err := e.db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
	require.NoError(t, err)
	_, err = e.db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
	require.NoError(t, err)
	show := "ev" + testenv.Unique()
	due := e.now.Add(-2 * time.Minute)
	stuck := e.place(t, "stuck"+testenv.Unique(), "u0", show, due, "s-stuck")
	paid := e.place(t, "paid"+testenv.Unique(), "u1", show, due, "s-paid")
	gone := e.place(t, "gone"+testenv.Unique(), "u2", show, due, "s-gone")
	payPaid := cancel.Payment{OrderNo: paid.OrderNo, UserID: paid.UserID, PaymentID: "pay-" + testenv.Unique()}

	var between struct {
		pay, cancel error
	}
	sc.arm(isBatchLock, func() {
		_, between.pay = e.svc.Pay(ctx, payPaid)
		_, between.cancel = e.svc.UserCancel(ctx, gone.OrderNo, gone.UserID)
	})

	admin, err := e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Rollback() })
	_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
	require.NoError(t, err)
	hookIn := make(chan struct{}, 1)
	e.store.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		if r.Order.No != stuck.OrderNo {
			return nil
		}
		hookIn <- struct{}{}
		_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
		return err
	})
	bctx, cancelBatch := context.WithTimeout(ctx, 8*time.Second)
	defer cancelBatch()
	var wg sync.WaitGroup
	var batch []cancel.Result
	var batchErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch, batchErr = e.store.CancelDue(bctx, []string{stuck.OrderNo, paid.OrderNo, gone.OrderNo}, cancel.ReasonTimeout)
	}()
	select {
	case <-hookIn:
	case <-time.After(6 * time.Second):
		t.Fatal("the batch never reached the stuck hook")
	}
	require.EqualValues(t, 1, sc.ran.Load(), "the payment ran between the pick and the lock")
	require.NoError(t, between.pay, "the payment between the pick and the lock")
	require.NoError(t, between.cancel, "the buyer's cancel between the pick and the lock")
	time.Sleep(200 * time.Millisecond)

	pctx, cancelPay := context.WithTimeout(ctx, time.Second)
	began := time.Now()
	_, errRepeat := e.svc.Pay(pctx, payPaid)
	t.Logf("repeated callback of the order paid between pick and lock: %v after %v", errRepeat, time.Since(began))
	cancelPay()
	assert.NoError(t, errRepeat, "I12/I14: a repeated callback of an order the batch does not cancel waits on another order's stuck hook")

	hctx, cancelHost := context.WithTimeout(ctx, time.Second)
	began = time.Now()
	_, errHost := e.db.ExecContext(hctx, "UPDATE oe_order SET user_id = user_id WHERE order_no = ?", paid.OrderNo)
	t.Logf("host's update of the paid order's row: %v after %v", errHost, time.Since(began))
	cancelHost()
	assert.NoError(t, errHost, "I12: the host's update of an order the batch does not cancel waits on another order's stuck hook")

	hctx, cancelHost = context.WithTimeout(ctx, time.Second)
	began = time.Now()
	_, errGone := e.db.ExecContext(hctx, "UPDATE oe_order SET user_id = user_id WHERE order_no = ?", gone.OrderNo)
	t.Logf("host's update of the order cancelled by its buyer between pick and lock: %v after %v", errGone, time.Since(began))
	cancelHost()
	assert.NoError(t, errGone, "I12: the host's update of an order the batch does not cancel waits on another order's stuck hook")

	require.NoError(t, admin.Rollback())
	wg.Wait()
	require.NoError(t, batchErr)
	var got []string
	for _, r := range batch {
		got = append(got, r.Order.No)
	}
	assert.Equal(t, []string{stuck.OrderNo}, got, "I2: the batch reports the order it cancelled, once, and no other")
	assert.Equal(t, expiry.StatusPaid, e.status(t, paid.OrderNo))
	assert.Equal(t, expiry.StatusCancelled, e.status(t, gone.OrderNo))
	assert.Equal(t, expiry.StatusCancelled, e.status(t, stuck.OrderNo))
}

// TestReview5OverlappingBatchesAndPayments (I1, I2): two reconcilers'
// batches over overlapping lists of 160 due orders (the first lists 0-119,
// the second 40-159, each in its own order), three times over, while 6
// payers pay every third order. Outcomes: every order ends paid or
// cancelled; each cancelled order is reported by exactly one batch; no
// paid order is reported; every order the batches report is cancelled.
func TestReview5OverlappingBatchesAndPayments(t *testing.T) {
	ctx := context.Background()
	e := newAtkEnv(t, sqlstore.MySQL, testenv.Redis(t))
	show := "ev" + testenv.Unique()
	due := e.now.Add(-time.Minute)
	var nos []string
	users := map[string]string{}
	for i := 0; i < 160; i++ {
		no := fmt.Sprintf("o%03d-%s", i, testenv.Unique())
		users[no] = fmt.Sprintf("u%d", i)
		e.place(t, no, users[no], show, due, fmt.Sprintf("s%03d", i))
		nos = append(nos, no)
	}
	work := make(chan string, len(nos))
	for i, no := range nos {
		if i%3 == 0 {
			work <- no
		}
	}
	close(work)
	var mu sync.Mutex
	reported := map[string]int{}
	paidBy := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no := range work {
				res, err := e.svc.Pay(ctx, cancel.Payment{OrderNo: no, UserID: users[no], PaymentID: "pay-" + no})
				if err == nil && res.Changed {
					mu.Lock()
					paidBy[no] = true
					mu.Unlock()
				}
			}
		}()
	}
	lists := [][]string{slices.Clone(nos[:120]), slices.Clone(nos[40:])}
	slices.Reverse(lists[1])
	for round := 0; round < 3; round++ {
		for _, l := range lists {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.store.CancelDue(ctx, l, cancel.ReasonReconcile)
				assert.NoError(t, err)
				mu.Lock()
				for _, r := range res {
					reported[r.Order.No]++
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	res, err := e.store.CancelDue(ctx, nos, cancel.ReasonReconcile) // what the rounds left (skipped rows)
	require.NoError(t, err)
	for _, r := range res {
		reported[r.Order.No]++
	}
	for _, no := range nos {
		st := e.status(t, no)
		switch {
		case paidBy[no]:
			assert.Equal(t, expiry.StatusPaid, st, no)
			assert.Zero(t, reported[no], "I2: a paid order reported cancelled: %s", no)
		default:
			assert.Equal(t, expiry.StatusCancelled, st, no)
			assert.Equal(t, 1, reported[no], "I2: a cancelled order reported once: %s", no)
		}
	}
}
