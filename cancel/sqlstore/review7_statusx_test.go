package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

func r7place(t *testing.T, db *sql.DB, s *sqlstore.Store, no string, exp time.Duration) {
	tx, err := db.Begin()
	require.NoError(t, err)
	require.NoError(t, s.Place(context.Background(), tx, cancel.Placement{OrderNo: no, UserID: "u1", ShowID: "7", Seats: []string{"S" + no}, ExpireAt: time.Now().Add(exp)}))
	require.NoError(t, tx.Commit())
}

// TestReview7TransitionsDoNotWaitOnAnotherLockedOrder: on every host schema
// on MariaDB, with two pending orders (one target, one held FOR UPDATE by a
// second connection) and a few decided ones, every single-order transition
// of the target finishes within 1 s (I12).
func TestReview7TransitionsDoNotWaitOnAnotherLockedOrder(t *testing.T) {
	for _, hs := range []hostSchema{seatflow, shop, softDelete, numericOrder, charIDs, window, setting, instant} {
		hs := hs
		t.Run(hs.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testenv.MySQL(t)
			s := hostStore(t, db, sqlstore.MySQL, hs)
			if hs.name == "setting" {
				_, _ = db.Exec("INSERT INTO shop_setting (id, unpaid_minutes) VALUES (1, 15)")
			}
			for _, no := range []string{"2001", "2002", "2003"} {
				r7place(t, db, s, no, time.Minute)
				_, err := s.PayPending(ctx, cancel.Payment{OrderNo: no, PaymentID: "p" + no})
				require.NoError(t, err)
			}
			r7place(t, db, s, "1000", 40*time.Second) // locked by the other tx
			r7place(t, db, s, "1005", 40*time.Second) // target
			r7place(t, db, s, "1009", 40*time.Second) // target 2 (pay)
			o := hs.mapping.Orders
			tx, err := db.Begin()
			require.NoError(t, err)
			defer tx.Rollback()
			var one int
			where := ""
			for _, c := range o.Where {
				if c.Value == nil || c.Value == sqlstore.IsNull {
					where += fmt.Sprintf(" AND %s IS NULL", c.Column)
					continue
				}
				where += fmt.Sprintf(" AND %s = %v", c.Column, c.Value)
			}
			require.NoError(t, tx.QueryRow(fmt.Sprintf("SELECT 1 FROM %s WHERE %s = ?%s FOR UPDATE", o.Table, o.OrderNo, where), "1000").Scan(&one))
			if hs.name != "setting" {
				_, _ = db.Exec("ANALYZE TABLE " + o.Table)
			}
			step := func(name string, f func(ctx context.Context) error) {
				c, cancelF := context.WithTimeout(ctx, time.Second)
				defer cancelF()
				start := time.Now()
				err := f(c)
				if err != nil && (errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 900*time.Millisecond) {
					t.Errorf("%s/%s waited on order 1000's lock: %v (%v)", hs.name, name, err, time.Since(start))
				}
			}
			step("SetDeadline extend", func(c context.Context) error {
				_, err := s.SetDeadline(c, cancel.DeadlineChange{OrderNo: "1005", In: 50 * time.Second})
				if errors.Is(err, cancel.ErrUnsupported) {
					return nil
				}
				return err
			})
			step("SetDeadline shorten", func(c context.Context) error {
				_, err := s.SetDeadline(c, cancel.DeadlineChange{OrderNo: "1005", In: 30 * time.Second, Shorten: true})
				if errors.Is(err, cancel.ErrUnsupported) {
					return nil
				}
				return err
			})
			step("MarkWarned", func(c context.Context) error { _, err := s.MarkWarned(c, "1005", 20*time.Minute); return err })
			step("CancelPending due", func(c context.Context) error {
				_, err := s.CancelPending(c, cancel.Request{OrderNo: "1005", Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				return err
			})
			step("CancelDue", func(c context.Context) error {
				_, err := s.CancelDue(c, []string{"1005"}, cancel.ReasonTimeout)
				return err
			})
			step("PayPending owner", func(c context.Context) error {
				_, err := s.PayPending(c, cancel.Payment{OrderNo: "1009", UserID: "u1", PaymentID: "p1009"})
				return err
			})
			step("CancelPending owner", func(c context.Context) error {
				_, err := s.CancelPending(c, cancel.Request{OrderNo: "1005", Reason: cancel.ReasonTimeout, UserID: "u1"})
				return err
			})
			step("ReinstateCancelled", func(c context.Context) error {
				_, err := s.ReinstateCancelled(c, cancel.Payment{OrderNo: "1005", PaymentID: "late"}, func(context.Context, cancel.Hold, int) (string, error) { return "l", nil })
				if errors.Is(err, cancel.ErrNoSeatRecord) {
					return nil
				}
				return err
			})
			r7place(t, db, s, "1012", 40*time.Second)
			step("PayPending", func(c context.Context) error {
				_, err := s.PayPending(c, cancel.Payment{OrderNo: "1012", PaymentID: "p1012"})
				return err
			})
			r7place(t, db, s, "1015", 40*time.Second)
			step("CancelPending", func(c context.Context) error {
				_, err := s.CancelPending(c, cancel.Request{OrderNo: "1015", Reason: cancel.ReasonUser})
				return err
			})
		})
	}
}

// TestReview7CaseAndBlankVariantsAreNotPending: 'NEW', 'new ' in a
// case-folding VARCHAR status column are not the mapping's 'new' (I10).
func TestReview7CaseAndBlankVariantsAreNotPending(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, numericOrder)
	for no, st := range map[string]string{"3001": "NEW", "3002": "new "} {
		r7place(t, db, s, no, time.Minute)
		_, err := db.Exec("UPDATE int_orders SET status = ? WHERE number = ?", st, no)
		require.NoError(t, err)
		r, err := s.PayPending(ctx, cancel.Payment{OrderNo: no, PaymentID: "p" + no})
		var got string
		require.NoError(t, db.QueryRow("SELECT status FROM int_orders WHERE number = ?", no).Scan(&got))
		if r.Changed || got != st {
			t.Errorf("status %q paid as pending: %+v %v now %q", st, r, err, got)
		}
	}
}
