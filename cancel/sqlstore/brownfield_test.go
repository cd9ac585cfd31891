package sqlstore_test

import (
	"context"
	"database/sql"
	"sort"
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

// Host tables that lack what the library needs: no
// payment-id column, no claims table, a numeric show column, two tenants
// in one table. Each test judges outcomes (who paid, who was refunded, who
// holds which seat), on every dialect.

// bfRefunds counts the refund hook's calls by payment id.
type bfRefunds struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *bfRefunds) hook(_ context.Context, d cancel.Discrepancy) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[d.PaymentID]++
	return nil
}

func (r *bfRefunds) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// bfService wires a Service on s with a memstore seat store of s's scope.
func bfService(t *testing.T, s *sqlstore.Store, seats *memstore.Seats, refunds *bfRefunds) *cancel.Service {
	svc, err := cancel.New(cancel.Config{Store: s, Seats: seats.Scoped(s.Scope()), OnDiscrepancy: refunds.hook})
	require.NoError(t, err)
	return svc
}

// bfPlace places p through svc and s's own insert.
func bfPlace(t *testing.T, db *sql.DB, s *sqlstore.Store, svc *cancel.Service, p cancel.Placement) {
	require.NoError(t, svc.Place(context.Background(), p, s.Insert(db, nil)))
}

// seatsOf returns the seats of show held in seats' scope s, by holder.
func seatsOf(t *testing.T, seats *memstore.Seats, scope, show string) map[string]string {
	st, err := seats.Scoped(scope).Show(context.Background(), show)
	require.NoError(t, err)
	out := map[string]string{}
	for seat, v := range st {
		out[seat] = v.Status.String() + ":" + v.OrderNo
	}
	return out
}

// Item 1: a host table without a payment-id column. The provider repeats
// the callback of the payment that paid the order: the repeat is answered
// as paid by it (no error, never refunded), and the answer comes from this
// tenant's rows, even when another tenant has an order of the same number.
func TestRepeatedCallbackWithoutPaymentColumnAnswersPaid(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, shop.ddl(d))
			stores := map[int]*sqlstore.Store{}
			for _, tenant := range []int{7, 8} {
				m := shop.mapping
				m.Orders.PaymentID = ""
				m.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: tenant}}
				c := *m.Claims
				c.Where = []sqlstore.Condition{{Column: "tenant_id", Value: tenant}}
				m.Claims = &c
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				require.NoError(t, s.Check(ctx))
				stores[tenant] = s
			}
			seats, refunds := memstore.NewSeats(nil), &bfRefunds{}
			svc7, svc8 := bfService(t, stores[7], seats, refunds), bfService(t, stores[8], seats, refunds)
			now, err := stores[7].Now(ctx)
			require.NoError(t, err)
			p := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)}
			bfPlace(t, db, stores[7], svc7, p)
			bfPlace(t, db, stores[8], svc8, p)
			_, err = svc7.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P7"})
			require.NoError(t, err)
			_, err = svc8.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "P8"})
			require.NoError(t, err)
			for i := 0; i < 2; i++ { // the providers repeat their callbacks
				for tenant, svc := range map[int]*cancel.Service{7: svc7, 8: svc8} {
					id := map[int]string{7: "P7", 8: "P8"}[tenant]
					res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: id})
					require.NoError(t, err, "tenant %d: the repeat of %s is answered as paid", tenant, id)
					assert.Equal(t, expiry.StatusPaid, res.Order.Status)
					assert.Equal(t, id, res.PaymentID, "tenant %d: A was paid by %s", tenant, id)
				}
			}
			// A second payment is still told apart from the repeat.
			_, err = svc7.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "Q7"})
			require.ErrorIs(t, err, cancel.ErrDiscrepancy, "another payment for a paid order")
			assert.Zero(t, refunds.count("P7"), "I14: P7 paid A of tenant 7")
			assert.Zero(t, refunds.count("P8"), "I14: P8 paid A of tenant 8")
			assert.Equal(t, 1, refunds.count("Q7"), "I9: Q7 refunded once")
		})
	}
}

// Refund records are scoped like everything else: one tenant's store never
// hands another tenant's discrepancy to its refund hook.
func TestRefundRecordsAreScoped(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, shop.ddl(d))
			stores := map[int]*sqlstore.Store{}
			for _, tenant := range []int{7, 8} {
				m := shop.mapping
				m.Orders.Where = []sqlstore.Condition{{Column: "tenant_id", Value: tenant}}
				c := *m.Claims
				c.Where = []sqlstore.Condition{{Column: "tenant_id", Value: tenant}}
				m.Claims = &c
				s, err := sqlstore.New(db, d, m)
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				require.NoError(t, s.Migrate(ctx))
				stores[tenant] = s
			}
			recorded, err := stores[8].RecordDiscrepancy(ctx, cancel.Discrepancy{PaymentID: "P8", OrderNo: "A", UserID: "u1", Status: expiry.StatusCancelled})
			require.NoError(t, err)
			require.True(t, recorded)
			got7, err := stores[7].ClaimDiscrepancies(ctx, 0, 10)
			require.NoError(t, err)
			assert.Empty(t, got7, "tenant 7's store claims none of tenant 8's refunds")
			got8, err := stores[8].ClaimDiscrepancies(ctx, 0, 10)
			require.NoError(t, err)
			require.Len(t, got8, 1)
			assert.Equal(t, "P8", got8[0].PaymentID)
			assert.ErrorIs(t, stores[7].SettleDiscrepancy(ctx, "P8"), expiry.ErrNotFound, "not a refund of tenant 7")
			time.Sleep(5 * time.Millisecond) // the claim above tried it up to 1 ms ahead
			got8, err = stores[8].ClaimDiscrepancies(ctx, 0, 10)
			require.NoError(t, err)
			assert.Len(t, got8, 1, "tenant 7's store cannot settle tenant 8's refund")
		})
	}
}

// Item 2: a host that keeps seats only in Redis (no claims table). A
// cancel gives the seats back, and a payment sells them, right after the
// commit: no reconcile round is needed.
func TestWithoutClaimsTableSeatsFollowAtOnce(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, seatflow.ddl(d))
			m := seatflow.mapping
			m.Claims = nil
			s, err := sqlstore.New(db, d, m)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx))
			seats, refunds := memstore.NewSeats(nil), &bfRefunds{}
			svc := bfService(t, s, seats, refunds)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			a := cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "ev", Seats: []string{"a2", "a1"}, ExpireAt: now.Add(time.Hour)}
			b := cancel.Placement{OrderNo: "B", UserID: "u2", ShowID: "ev", Seats: []string{"b1"}, ExpireAt: now.Add(time.Hour)}
			bfPlace(t, db, s, svc, a)
			bfPlace(t, db, s, svc, b)

			res, err := svc.UserCancel(ctx, "A", "u1")
			require.NoError(t, err)
			require.True(t, res.Changed)
			got := append([]string(nil), res.Seats...)
			sort.Strings(got)
			assert.Equal(t, []string{"a1", "a2"}, got, "the cancel knows A's seats")
			assert.Equal(t, 2, res.Released, "and gives them back at once")
			_, err = svc.Pay(ctx, cancel.Payment{OrderNo: "B", PaymentID: "PB"})
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"b1": "sold:B"}, seatsOf(t, seats, s.Scope(), "ev"), "a1, a2 free; b1 sold to B")
			held, err := seats.Scoped(s.Scope()).Held(ctx, "ev", "u1")
			require.NoError(t, err)
			assert.Zero(t, held, "I8: u1's counter is back to 0")
		})
	}
}

// numericShow is SeatFlow's schema with an integer show column (events are
// rows with a numeric primary key in most shops).
var numericShow = hostSchema{
	name: "numeric-show",
	mapping: func() sqlstore.Mapping {
		m := seatflow.mapping
		m.Orders.NumericShowID = true
		return m
	}(),
	ddl: func(d sqlstore.Dialect) []string {
		return []string{
			sub(d, `CREATE TABLE order_info (
				{pk},
				order_no      VARCHAR(64) NOT NULL,
				user_id       VARCHAR(64) NOT NULL,
				show_id       BIGINT      NOT NULL,
				status        {tiny}      NOT NULL DEFAULT 0,
				expire_time   {dt}        NOT NULL,
				pay_no        VARCHAR(64) NULL,
				cancel_reason VARCHAR(32) NULL,
				update_time   {dt}        NULL
			){ci}`),
			"CREATE UNIQUE INDEX uk_order_no ON order_info (order_no)",
			"CREATE INDEX idx_status_expire ON order_info (status, expire_time, order_no)",
			sub(d, `CREATE TABLE order_seat (
				show_id  BIGINT      NOT NULL,
				seat_id  VARCHAR(64) NOT NULL,
				order_no VARCHAR(64) NOT NULL,
				PRIMARY KEY (show_id, seat_id)
			){ci}`),
			"CREATE INDEX idx_seat_order ON order_seat (order_no)",
		}
	},
	caseFolding: true,
	resolution:  time.Second,
}

// Item 3: a numeric show column maps, and every transition works on it.
func TestNumericShowColumn(t *testing.T) {
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			db := openDB(t, d)
			applyDDL(t, db, numericShow.ddl(d))
			s, err := sqlstore.New(db, d, numericShow.mapping)
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			require.NoError(t, s.Migrate(ctx))
			require.NoError(t, s.Check(ctx), "an integer show column maps")
			seats, refunds := memstore.NewSeats(nil), &bfRefunds{}
			svc := bfService(t, s, seats, refunds)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			bfPlace(t, db, s, svc, cancel.Placement{OrderNo: "A", UserID: "u1", ShowID: "42", Seats: []string{"a1"}, ExpireAt: now.Add(time.Hour)})
			o, err := s.Order(ctx, "A")
			require.NoError(t, err)
			assert.Equal(t, "42", o.ShowID)
			err = svc.Place(ctx, cancel.Placement{OrderNo: "B", UserID: "u1", ShowID: "042", Seats: []string{"b1"}, ExpireAt: now.Add(time.Hour)}, s.Insert(db, nil))
			require.ErrorIs(t, err, expiry.ErrInvalidID, "042 is no show of an integer column")
			res, err := svc.Pay(ctx, cancel.Payment{OrderNo: "A", PaymentID: "PA"})
			require.NoError(t, err)
			assert.Equal(t, []string{"a1"}, res.Seats)
			assert.Equal(t, map[string]string{"a1": "sold:A"}, seatsOf(t, seats, s.Scope(), "42"))
			claims, _, err := s.Claims(ctx, "", 10)
			require.NoError(t, err)
			require.Len(t, claims, 1)
			assert.Equal(t, "42", claims[0].ShowID)
		})
	}
}
