package sqlstore_test

// Review of 811c60a (MariaDB's batch: a plain pick of the listed orders
// pending and due, then a lock of those by number that reads a "still
// pending and due" flag) on host-mapped schemas. What happens between the
// pick and the lock is driven by a wrapping database/sql driver that runs
// a callback on another connection just before the batch's locking read.
// Judged by outcomes: which orders are cancelled and reported, whether the
// host's next write of an order the batch does not cancel waits on the
// batch (I12, I19).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// pickStepConnector wraps a driver.Connector: before a prepared statement whose
// SQL matches is queried, the armed callback (if any) runs once.
type pickStepConnector struct {
	base driver.Connector
	mu   sync.Mutex
	on   func(query string) bool
	fn   func()
	ran  atomic.Int32
}

func (c *pickStepConnector) arm(on func(string) bool, fn func()) {
	c.mu.Lock()
	c.on, c.fn = on, fn
	c.mu.Unlock()
}

func (c *pickStepConnector) before(query string) {
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

func (c *pickStepConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pickStepConn{Conn: cn, c: c}, nil
}

func (c *pickStepConnector) Driver() driver.Driver { return c.base.Driver() }

type pickStepConn struct {
	driver.Conn
	c *pickStepConnector
}

func (s *pickStepConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := s.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &pickStepStmt{Stmt: st, q: q, c: s.c}, nil
}

func (s *pickStepConn) Prepare(q string) (driver.Stmt, error) {
	return s.PrepareContext(context.Background(), q)
}

func (s *pickStepConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return s.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
}

func (s *pickStepConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return s.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (s *pickStepConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		s.c.before(q)
	}
	return s.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (s *pickStepConn) Ping(ctx context.Context) error { return s.Conn.(driver.Pinger).Ping(ctx) }

func (s *pickStepConn) ResetSession(ctx context.Context) error {
	if r, ok := s.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (s *pickStepConn) IsValid() bool {
	if v, ok := s.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (s *pickStepConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type pickStepStmt struct {
	driver.Stmt
	q string
	c *pickStepConnector
}

func (s *pickStepStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *pickStepStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.before(s.q)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (s *pickStepStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// pickStepMySQL is a fresh MariaDB database (testenv.MySQL) opened a second
// time through a pickStepConnector.
func pickStepMySQL(t *testing.T) (*sql.DB, *pickStepConnector) {
	base := testenv.MySQL(t)
	var name string
	require.NoError(t, base.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv("OE_MYSQL_DSN"))
	require.NoError(t, err)
	cfg.DBName = name
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	sc := &pickStepConnector{base: conn}
	db := sql.OpenDB(sc)
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	return db, sc
}

func isPickBatchLock(q string) bool {
	return strings.HasPrefix(q, "SELECT o.") && strings.Contains(q, "FOR UPDATE SKIP LOCKED")
}

// pickCase is a host schema, a change the host makes to one listed due
// order ("X") in the instant between the batch's pick and its lock, and
// the host's next write of X.
type pickCase struct {
	name      string
	hs        hostSchema
	noClaims  bool
	nos       [3]string // stuck, X, and a plain due order
	change    string    // the host's change of X (one ? for its number)
	next      string    // the host's next write of X (one ? for its number)
	cancelled func(t *testing.T, db *sql.DB, no string) bool
}

func statusIs(table, noCol, statusCol, where string, want any) func(t *testing.T, db *sql.DB, no string) bool {
	return func(t *testing.T, db *sql.DB, no string) bool {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table+" WHERE "+noCol+" = ? AND CAST("+statusCol+" AS BINARY) = CAST(? AS BINARY)"+where, no, fmt.Sprint(want)).Scan(&n))
		return n == 1
	}
}

var pickCases = []pickCase{
	{
		// I19: the operator holds X (a status of the host's own) just
		// after the pick; then releases it (back to pending).
		name: "seatflow/operator-hold", hs: seatflow, nos: [3]string{"stuckA", "holdA", "plainA"},
		change:    "UPDATE order_info SET status = 7 WHERE order_no = ?",
		next:      "UPDATE order_info SET status = 0 WHERE order_no = ?",
		cancelled: statusIs("order_info", "order_no", "status", "", 2),
	},
	{
		// The host extends X by its own SQL just after the pick.
		name: "seatflow/host-extends", hs: seatflow, nos: [3]string{"stuckB", "extB", "plainB"},
		change:    "UPDATE order_info SET expire_time = UTC_TIMESTAMP() + INTERVAL 1 HOUR WHERE order_no = ?",
		next:      "UPDATE order_info SET remark = 'paid at the till' WHERE order_no = ?",
		cancelled: statusIs("order_info", "order_no", "status", "", 2),
	},
	{
		// I10/I19 on a folding collation: the host writes "NEW", not the
		// mapping's "new", on an integer-numbered table.
		name: "numericorder/case-variant-status", hs: numericOrder, nos: [3]string{"1001", "1002", "1003"},
		change:    "UPDATE int_orders SET status = 'NEW' WHERE number = ?",
		next:      "UPDATE int_orders SET status = 'new' WHERE number = ?",
		cancelled: statusIs("int_orders", "number", "status", "", "cancelled"),
	},
	{
		// CHAR(24) numbers: the buyer pays X by the library's path just
		// after the pick (written here as the store's payment would be).
		name: "charids/paid", hs: charIDs, nos: [3]string{"stuckD", "paidD", "plainD"},
		change:    "UPDATE order_info SET status = 1, pay_no = 'P-D' WHERE order_no = ?",
		next:      "UPDATE order_info SET remark = 'shipped' WHERE order_no = ?",
		cancelled: statusIs("order_info", "order_no", "status", "", 2),
	},
	{
		// Out of scope just after the pick: soft-deleted.
		name: "softdelete/deleted", hs: softDelete, nos: [3]string{"stuckE", "delE", "plainE"},
		change:    "UPDATE gorm_orders SET deleted_at = UTC_TIMESTAMP() WHERE order_no = ?",
		next:      "UPDATE gorm_orders SET updated_at = UTC_TIMESTAMP() WHERE order_no = ?",
		cancelled: statusIs("gorm_orders", "order_no", "status", "", "expired"),
	},
	{
		// Out of scope just after the pick: moved to tenant 8.
		name: "shop/moved-tenant", hs: shop, nos: [3]string{"stuckF", "movF", "plainF"},
		change:    "UPDATE shop_order SET tenant_id = 8 WHERE tenant_id = 7 AND order_code = ?",
		next:      "UPDATE shop_order SET note = 'moved' WHERE tenant_id = 8 AND order_code = ?",
		cancelled: statusIs("shop_order", "order_code", "state", " AND tenant_id = 7", "EXPIRED"),
	},
}

// TestReview5HostChangeBetweenPickAndLock (I1, I2, I12, I19): a batch of
// three due orders on a host's schema: "stuck" (its hook waits on a coupon
// row an admin holds), X (the host changes it in the instant between the
// batch's pick and its lock: an operator hold, an extension, a case
// variant of the pending status, a payment, a soft delete, a move to
// another tenant) and a plain due one. Outcomes: the batch cancels and
// reports stuck and the plain one, not X; and X is not held by the batch:
// the host's next write of X answers within a second while the stuck hook
// holds its own batch.
func TestReview5HostChangeBetweenPickAndLock(t *testing.T) {
	for _, c := range pickCases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			db, sc := pickStepMySQL(t)
			s := hostStore(t, db, sqlstore.MySQL, c.hs)
			_, err := db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			for i, no := range c.nos {
				p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
			}
			stuck, x, plain := c.nos[0], c.nos[1], c.nos[2]
			var changeErr error
			sc.arm(isPickBatchLock, func() {
				_, changeErr = db.ExecContext(ctx, c.change, x)
			})
			admin, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = admin.Rollback() })
			_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
			require.NoError(t, err)
			hookIn := make(chan struct{}, 1)
			s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
				if r.Order.No != stuck {
					return nil
				}
				hookIn <- struct{}{}
				_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
				return err
			})
			bctx, cancelBatch := context.WithTimeout(ctx, 8*time.Second)
			defer cancelBatch()
			var wg sync.WaitGroup
			var res []cancel.Result
			var batchErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, batchErr = s.CancelDue(bctx, []string{stuck, x, plain}, cancel.ReasonTimeout)
			}()
			select {
			case <-hookIn:
			case <-time.After(6 * time.Second):
				t.Fatal("the batch never reached the stuck hook")
			}
			require.EqualValues(t, 1, sc.ran.Load(), "the host's change ran between the pick and the lock")
			require.NoError(t, changeErr, "the host's change between the pick and the lock")
			time.Sleep(200 * time.Millisecond)

			hctx, cancelHost := context.WithTimeout(ctx, time.Second)
			began := time.Now()
			_, errNext := db.ExecContext(hctx, c.next, x)
			t.Logf("%s: the host's next write of %s: %v after %v", c.name, x, errNext, time.Since(began).Round(time.Millisecond))
			cancelHost()
			assert.NoError(t, errNext, "I12/I19: the host's write of an order the batch does not cancel waits on another order's stuck hook")

			require.NoError(t, admin.Rollback())
			wg.Wait()
			require.NoError(t, batchErr)
			var got []string
			for _, r := range res {
				got = append(got, r.Order.No)
			}
			assert.ElementsMatch(t, []string{stuck, plain}, got, "I2: the batch reports what it cancelled, once")
			assert.True(t, c.cancelled(t, db, stuck))
			assert.True(t, c.cancelled(t, db, plain))
			assert.False(t, c.cancelled(t, db, x), "I1: the order changed before the lock is not cancelled")
		})
	}
}
