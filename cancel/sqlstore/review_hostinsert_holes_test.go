package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/memstore"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// Review of b84dd79 (an order the host inserts, read back by placeRest).

// hostOrderRow is a rows function inserting fillSchema's order row for p as
// the host would, with user and show as given (the placement's when "").
func hostOrderRow(d sqlstore.Dialect, now time.Time, user, show string, claimShow string, claims bool) func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
	return func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		u, sh := p.UserID, p.ShowID
		if user != "" {
			u = user
		}
		if show != "" {
			sh = show
		}
		_, err := tx.ExecContext(ctx, rebindQ(d, `INSERT INTO fill_order (tenant_id, order_no, user_id, show_id, status, expire_time, update_time, amount_cents, channel, remark, testmode, lock_version)
			VALUES (7, ?, ?, ?, 0, ?, ?, 2500, 'app', 'by the host', ?, 0)`), p.OrderNo, u, sh, p.ExpireAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime), true)
		if err != nil || !claims {
			return err
		}
		cs := p.ShowID
		if claimShow != "" {
			cs = claimShow
		}
		for _, seat := range p.Seats {
			if _, err := tx.ExecContext(ctx, rebindQ(d, "INSERT INTO fill_seat (tenant_id, show_id, seat_id, order_no, price_cents) VALUES (7, ?, ?, ?, 2500)"), cs, seat, p.OrderNo); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestReviewHostRowUserReadBackIsByteForByte: the host's rows insert the
// order with user "ann " (a VARCHAR column: the blank is the row's, not
// CHAR padding) for a placement of user "ann". hostPlacedOrder trims the
// user it reads back (idCol) and accepts the row as the placement's, so
// the order is placed and its seats locked for "ann"; yet every owner
// check compares bytes (I10), so "ann" cannot cancel the order she was
// told she placed (ErrNotOwner), and the seats stay hers until the
// deadline. Judged by the rows: either nothing is placed (the read-back
// refuses a user that is not the placement's byte for byte), or the
// placement's user owns the order she placed.
func TestReviewHostRowUserReadBackIsByteForByte(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))
			m := fillSchema.mapping
			m.Claims = nil
			m.Orders.Fill = hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version")
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)

			show := "rb" + testenv.Unique()
			p := cancel.Placement{OrderNo: "rb" + testenv.Unique(), UserID: "ann", ShowID: show, Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)}
			err = svc.Place(ctx, p, s.Insert(db, hostOrderRow(d, now, "ann ", "", "", false)))
			if err != nil {
				var n int
				require.NoError(t, db.QueryRow(rebindQ(d, "SELECT COUNT(*) FROM fill_order WHERE order_no = ?"), p.OrderNo).Scan(&n))
				assert.Zero(t, n, "refused: nothing placed")
				return
			}
			var user string
			require.NoError(t, db.QueryRow(rebindQ(d, "SELECT user_id FROM fill_order WHERE order_no = ?"), p.OrderNo).Scan(&user))
			res, err := svc.UserCancel(ctx, p.OrderNo, p.UserID)
			require.NoError(t, err, "the placement was accepted as user %q's, but the row's user is %q: she cannot cancel her own order", p.UserID, user)
			assert.True(t, res.Changed, "the placement was accepted as user %q's, but the row's user is %q: her own cancel changes nothing (%+v)", p.UserID, user, res)
		})
	}
}

// TestReviewHostClaimsReadBackChecksTheShow: the host's rows insert the
// order for show S1 and its claims under show S2 (a bug of theirs, or a
// copy-paste of the wrong show id). hostPlacedClaims compares the seat
// ids only (orderSeats does not select the claims' show), so the placement
// is accepted: the seat store locks S1's seats while the claims table —
// what the reconciler rebuilds the seat store from (Store.Claims), and
// what keeps a second order off a seat in the database — says the order
// holds S2's. Judged by who holds which seat in the rows: after a
// placement that succeeded, the order's claims are the placement's show
// and seats.
func TestReviewHostClaimsReadBackChecksTheShow(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, fillSchema.ddl(d))
			m := withFill(fillSchema.mapping, hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version"), hostWrites("price_cents"))
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
			seats := memstore.NewSeats(nil).Scoped(s.Scope())
			svc, err := cancel.New(cancel.Config{Store: s, Seats: seats})
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)

			s1, s2 := "s1"+testenv.Unique(), "s2"+testenv.Unique()
			p := cancel.Placement{OrderNo: "rs" + testenv.Unique(), UserID: "ann", ShowID: s1, Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour)}
			err = svc.Place(ctx, p, s.Insert(db, hostOrderRow(d, now, "", "", s2, true)))
			if err != nil {
				var n int
				require.NoError(t, db.QueryRow(rebindQ(d, "SELECT COUNT(*) FROM fill_order WHERE order_no = ?"), p.OrderNo).Scan(&n))
				assert.Zero(t, n, "refused: nothing placed")
				return
			}
			held, err := seats.Show(ctx, s1)
			require.NoError(t, err)
			assert.Equal(t, p.OrderNo, held["A1"].OrderNo, "the seat store: the order holds %s/A1", s1)
			claims, _, err := s.Claims(ctx, "", 100)
			require.NoError(t, err)
			var got []string
			for _, c := range claims {
				if c.OrderNo == p.OrderNo {
					got = append(got, c.ShowID+"/"+c.SeatID)
				}
			}
			assert.Equal(t, []string{s1 + "/A1"}, got, "the claims the reconciler rebuilds from: the placement was accepted, so the order must hold the placement's seat of its show")
		})
	}
}

// lostAbort arms galeraLossConn: the next SELECT on fill_order returns its
// rows, and then the transaction is gone without the connection being told
// (played, as galera_test.go's TestProofOfTheTransaction plays it, by a
// ROLLBACK nobody sees): Galera's brute-force abort landing while a SELECT
// runs (galera.go).
var lostAbort atomic.Bool

type galeraLossConnector struct{ driver.Connector }

func (c galeraLossConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &galeraLossConn{Conn: cn}, nil
}

type galeraLossConn struct{ driver.Conn }

func (c *galeraLossConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
}

func (c *galeraLossConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *galeraLossConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *galeraLossConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

func (c *galeraLossConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *galeraLossConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *galeraLossConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(q), "SELECT") || !strings.Contains(strings.ReplaceAll(q, "`", ""), "FROM fill_order WHERE") || !lostAbort.CompareAndSwap(true, false) {
		return rows, err
	}
	// The SELECT returns its rows; the abort lands; nobody is told.
	buf := &bufRows{cols: rows.Columns()}
	for {
		dest := make([]driver.Value, len(buf.cols))
		if err := rows.Next(dest); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
			break
		}
		for i, v := range dest {
			if b, ok := v.([]byte); ok {
				dest[i] = append([]byte(nil), b...)
			}
		}
		buf.rows = append(buf.rows, dest)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if _, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, "ROLLBACK", nil); err != nil {
		return nil, err
	}
	return buf, nil
}

type bufRows struct {
	cols []string
	rows [][]driver.Value
}

func (r *bufRows) Columns() []string { return r.cols }
func (r *bufRows) Close() error      { return nil }
func (r *bufRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

// TestReviewHostRowsReadBackOnGalera: on a Galera node a transaction can
// end while a SELECT runs, the SELECT return its rows and the report be
// lost; the statements after it then run on their own and COMMIT commits
// nothing (galera.go). Insert proves its transaction once, by RELEASE
// SAVEPOINT right after the host's rows; with a HostWrites order,
// placeRest then READS the host's row back (hostPlacedOrder) and WRITES
// the side row and the claims, and commits, with no proof after the read.
// The abort played during that read: the host's order row rolled back,
// the library's side row and claims committed one by one, and Insert
// returns nil, so Place sends the expiry message for an order that does
// not exist (I6) and the claims keep a seat for no order in the database.
// Judged by the rows after Insert.
func TestReviewHostRowsReadBackOnGalera(t *testing.T) {
	ctx := context.Background()
	d := sqlstore.MySQL
	db := openDB(t, d)
	applyDDL(t, db, fillSchema.ddl(d))
	m := withFill(fillSchema.mapping, hostWrites("amount_cents", "channel", "remark", "testmode", "lock_version"), []sqlstore.Condition{{Column: "price_cents", Value: 1500}})
	s, err := sqlstore.New(db, d, m)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Check(ctx))
	now, err := s.Now(ctx)
	require.NoError(t, err)

	// A second pool on the same database, whose connections play the loss.
	var name string
	require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&name))
	cfg, err := mysql.ParseDSN(os.Getenv(testenv.EnvMySQL))
	require.NoError(t, err)
	cfg.DBName = name
	cfg.InterpolateParams = true // every statement through QueryerContext/ExecerContext
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	lossy := sql.OpenDB(galeraLossConnector{conn})
	t.Cleanup(func() { lossy.Close() })

	p := cancel.Placement{OrderNo: "rg" + testenv.Unique(), UserID: "ann", ShowID: "rg-show", Seats: []string{"A1"}, ExpireAt: now.Add(time.Hour), LockID: ""}
	host := hostOrderRow(d, now, "", "", "", false)
	err = s.Insert(lossy, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		if err := host(ctx, tx, p); err != nil {
			return err
		}
		lostAbort.Store(true)
		return nil
	})(ctx, p)
	require.False(t, lostAbort.Load(), "the loss was played (the read-back ran): %v", err)
	var orders, claims int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM fill_order WHERE order_no = ?", p.OrderNo).Scan(&orders))
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM fill_seat WHERE order_no = ?", p.OrderNo).Scan(&claims))
	if err == nil {
		assert.Equal(t, 1, orders, "Insert reported the placement committed (Place now sends its message), so the order must exist (I6)")
	}
	if orders == 0 {
		assert.Zero(t, claims, "no order, yet its claims committed: a seat held in the database by an order that does not exist")
	}
}

// TestReviewRowsCommitKeepsTheWholePlacement: b84dd79 moved the side row
// and the claims after the host's rows for every mapping. A rows function
// that ends the transaction itself (a COMMIT, or on MariaDB a DDL
// statement's implicit commit — the case Insert handles, see
// TestHostReviewRowsCommitThenNil) used to commit the whole placement with
// it; now it commits the order row alone: Insert answers
// ErrCommitUnknown, Place keeps the seat locked and schedules the order
// it finds pending — an order with no claims (and no lock id). Judged by
// who holds the seat: the order is paid, so the seat is sold; the claims
// the reconciler rebuilds the seat store from must say so (else a rebuild
// after a seat-store loss frees a paid order's seat: I2), and a cancel of
// a second such order must free its seat at its commit.
func TestReviewRowsCommitKeepsTheWholePlacement(t *testing.T) {
	eachDB(t, func(t *testing.T, d sqlstore.Dialect, db *sql.DB) {
		ctx := context.Background()
		w := reviewService(t, db, d, reviewOpts{})
		now, err := w.s.Now(ctx)
		require.NoError(t, err)
		commit := func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
			_, err := tx.ExecContext(ctx, "COMMIT")
			return err
		}
		paid := cancel.Placement{OrderNo: "rc-paid", UserID: "u1", ShowID: "ev", Seats: []string{"P1"}, ExpireAt: now.Add(time.Hour)}
		err = w.svc.Place(ctx, paid, w.s.Insert(db, commit))
		require.ErrorIs(t, err, expiry.ErrCommitUnknown)
		st, found := w.status(t, paid.OrderNo)
		require.True(t, found)
		require.Equal(t, expiry.StatusPending, st)
		res, err := w.pay(paid.OrderNo, "pay-rc")
		require.NoError(t, err)
		require.True(t, res.Changed, "paid")

		claims, _, err := w.s.Claims(ctx, "", 100)
		require.NoError(t, err)
		var sold []string
		for _, c := range claims {
			if c.OrderNo == paid.OrderNo {
				sold = append(sold, c.SeatID)
			}
		}
		assert.Equal(t, []string{"P1"}, sold, "I2: the paid order's seat, as the rows say (what a rebuild restores)")

		gone := cancel.Placement{OrderNo: "rc-cancel", UserID: "u1", ShowID: "ev", Seats: []string{"C1"}, ExpireAt: now.Add(time.Hour)}
		err = w.svc.Place(ctx, gone, w.s.Insert(db, commit))
		require.ErrorIs(t, err, expiry.ErrCommitUnknown)
		res, err = w.svc.UserCancel(ctx, gone.OrderNo, "u1")
		require.NoError(t, err)
		require.True(t, res.Changed)
		show, err := w.seats.Show(ctx, "ev")
		require.NoError(t, err)
		assert.NotEqual(t, gone.OrderNo, show["C1"].OrderNo, "the cancelled order's seat is freed at its cancel (Released %d, seats %v)", res.Released, res.Seats)
	})
}
