package sqlstore_test

// Review of 81b2c33 (MariaDB's batch rolls back before its compare-and-set
// and picks again when its lock finds an order changed since the pick; at
// first at most three times, since then without a bound, shedding the
// orders that changed) on a host's schema (seatflow: order_info and
// its order_seat claims). What happens between the pick and the lock is
// driven by pickStepConnector (review5_batchpick_test.go), re-armed before
// every locking read. Judged by outcomes: what the batch cancels and
// reports (I1, I2), its hooks and their outbox rows (I2, I5), the seats it
// frees (I2), whether an order it does not cancel waits on it (I12).

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// r6EveryLock runs change(k) before the k-th locking read of the batch
// (k from 1), for every locking read, and counts them.
func r6EveryLock(sc *pickStepConnector, change func(k int)) *int {
	var n int
	var arm func()
	arm = func() {
		sc.arm(isPickBatchLock, func() {
			n++
			change(n)
			arm()
		})
	}
	arm()
	return &n
}

func r6seats(t *testing.T, db *sql.DB, no string) int {
	var n int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM order_seat WHERE order_no = ?", no).Scan(&n))
	return n
}

func r6status(t *testing.T, db *sql.DB, no string) int {
	var st int
	require.NoError(t, db.QueryRow("SELECT status FROM order_info WHERE order_no = ?", no).Scan(&st))
	return st
}

// TestReview6RepickHooksAndOutboxOnce (I1, I2, I5): a batch of five due
// orders whose hook writes one outbox row per cancelled order in the
// batch's transaction. Before the first locking read the buyer of "b" pays
// it; before the second the host extends "c"; before the third the host
// holds "d" (a status of its own, I19). So the batch rolls back twice
// after locking and reading some of its orders, and commits on its third
// pick. Outcomes: it reports "a" and "e" only, each once; the hook ran once
// for each of them and never for the others; the outbox has exactly one row
// per reported order; their seats are freed, the others' kept; b, c, d
// keep their state.
func TestReview6RepickHooksAndOutboxOnce(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, seatflow)
	_, err := db.ExecContext(ctx, "CREATE TABLE outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(64) NOT NULL, seats VARCHAR(255) NOT NULL)")
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	nos := []string{"r6a", "r6b", "r6c", "r6d", "r6e"}
	for i, no := range nos {
		p := cancel.Placement{OrderNo: no, UserID: "u" + no, ShowID: "ev", Seats: []string{fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d-2", i)}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, s.Insert(db, nil)(ctx, p))
	}
	var changeErr [3]error
	locks := r6EveryLock(sc, func(k int) {
		switch k {
		case 1:
			_, changeErr[0] = db.ExecContext(ctx, "UPDATE order_info SET status = 1, pay_no = 'P-b' WHERE order_no = 'r6b'")
		case 2:
			_, changeErr[1] = db.ExecContext(ctx, "UPDATE order_info SET expire_time = UTC_TIMESTAMP() + INTERVAL 1 HOUR WHERE order_no = 'r6c'")
		case 3:
			_, changeErr[2] = db.ExecContext(ctx, "UPDATE order_info SET status = 7 WHERE order_no = 'r6d'")
		}
	})
	var mu sync.Mutex
	hookCalls := map[string]int{}
	s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		mu.Lock()
		hookCalls[r.Order.No]++
		mu.Unlock()
		_, err := tx.ExecContext(ctx, "INSERT INTO outbox (order_no, seats) VALUES (?, ?)", r.Order.No, fmt.Sprint(r.Seats))
		return err
	})
	res, err := s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	require.NoError(t, err)
	for _, e := range changeErr {
		require.NoError(t, e)
	}
	t.Logf("locking reads: %d; hook calls: %v", *locks, hookCalls)
	assert.Equal(t, 4, *locks, "three changes, each seen by its own attempt, then a clean one")
	got := map[string][]string{}
	for _, r := range res {
		assert.NotContains(t, got, r.Order.No, "I2: reported twice")
		got[r.Order.No] = r.Seats
	}
	assert.Equal(t, map[string][]string{"r6a": {"s0-1", "s0-2"}, "r6e": {"s4-1", "s4-2"}}, got, "I2: the batch reports what it cancelled, with its seats, once")
	assert.Equal(t, map[string]int{"r6a": 1, "r6e": 1}, hookCalls, "I5: the hook runs once per cancelled order, never in a rolled-back attempt")
	rows, err := db.QueryContext(ctx, "SELECT order_no, COUNT(*) FROM outbox GROUP BY order_no")
	require.NoError(t, err)
	outbox := map[string]int{}
	for rows.Next() {
		var no string
		var n int
		require.NoError(t, rows.Scan(&no, &n))
		outbox[no] = n
	}
	require.NoError(t, rows.Close())
	assert.Equal(t, map[string]int{"r6a": 1, "r6e": 1}, outbox, "I6: one outbox row per cancelled order")
	want := map[string][2]int{"r6a": {2, 0}, "r6b": {1, 2}, "r6c": {0, 2}, "r6d": {7, 2}, "r6e": {2, 0}}
	for no, w := range want {
		assert.Equal(t, w[0], r6status(t, db, no), "status of %s", no)
		assert.Equal(t, w[1], r6seats(t, db, no), "claims of %s", no)
	}
	again, err := s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	require.NoError(t, err)
	assert.Empty(t, again, "I5: nothing is cancelled twice")
}

// TestReview6RepickBoundHoldsTheFourthChange (I12): written against a bound
// of three repicks (81b2c33), which held the fourth change; the batch sheds
// every order that changed since, with no bound, and both cases must hold
// nothing.
//
// a batch of "stuck" (its hook waits on a coupon row an admin holds), four
// payable orders c1-c4 and a plain one. Before each of the batch's locking
// reads one more of c1-c4 is paid (the k-th before the k-th read), as in a
// payment wave that keeps landing between pick and lock. With three
// changes the fourth attempt is clean and nothing paid is held. With four,
// the last attempt (repicks exhausted) locks c4, paid, and keeps it for as
// long as the stuck hook runs: the host's write of c4 (issuing tickets)
// waits on another order's hook, which I12 forbids and 81b2c33 accepts as
// the bound's price. The subtests say which.
func TestReview6RepickBoundHoldsTheFourthChange(t *testing.T) {
	for _, changes := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d-changes", changes), func(t *testing.T) {
			ctx := context.Background()
			db, sc := pickStepMySQL(t)
			s := hostStore(t, db, sqlstore.MySQL, seatflow)
			_, err := db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
			require.NoError(t, err)
			now, err := s.Now(ctx)
			require.NoError(t, err)
			nos := []string{"a-stuck", "c1", "c2", "c3", "c4", "z-plain"}
			for i, no := range nos {
				p := cancel.Placement{OrderNo: no, UserID: "u" + no, ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
				require.NoError(t, s.Insert(db, nil)(ctx, p))
			}
			var changeErr error
			locks := r6EveryLock(sc, func(k int) {
				if k <= changes {
					if _, err := db.ExecContext(ctx, "UPDATE order_info SET status = 1, pay_no = ? WHERE order_no = ?", fmt.Sprintf("P-%d", k), fmt.Sprintf("c%d", k)); err != nil {
						changeErr = err
					}
				}
			})
			admin, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = admin.Rollback() })
			_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
			require.NoError(t, err)
			hookIn := make(chan struct{}, 1)
			s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
				if r.Order.No != "a-stuck" {
					return nil
				}
				hookIn <- struct{}{}
				_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
				return err
			})
			bctx, cancelBatch := context.WithTimeout(ctx, 10*time.Second)
			defer cancelBatch()
			var wg sync.WaitGroup
			var res []cancel.Result
			var batchErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, batchErr = s.CancelDue(bctx, nos, cancel.ReasonTimeout)
			}()
			select {
			case <-hookIn:
			case <-time.After(6 * time.Second):
				t.Fatal("the batch never reached the stuck hook")
			}
			require.NoError(t, changeErr)
			time.Sleep(100 * time.Millisecond)
			var held []string
			for k := 1; k <= changes; k++ {
				no := fmt.Sprintf("c%d", k)
				hctx, cancelHost := context.WithTimeout(ctx, time.Second)
				began := time.Now()
				_, err := db.ExecContext(hctx, "UPDATE order_info SET remark = 'tickets issued' WHERE order_no = ?", no)
				cancelHost()
				t.Logf("the host's write of %s (paid before lock %d): %v after %v", no, k, err, time.Since(began).Round(time.Millisecond))
				if err != nil {
					held = append(held, no)
				}
			}
			require.NoError(t, admin.Rollback())
			wg.Wait()
			require.NoError(t, batchErr)
			t.Logf("locking reads: %d", *locks)
			assert.Equal(t, changes+1, *locks, "a fresh pick for each change, then a clean attempt")
			var got []string
			for _, r := range res {
				got = append(got, r.Order.No)
			}
			wantGot := []string{"a-stuck", "z-plain"}
			if changes == 3 {
				wantGot = []string{"a-stuck", "c4", "z-plain"}
			}
			assert.ElementsMatch(t, wantGot, got, "I1/I2")
			for k := 1; k <= changes; k++ {
				assert.Equal(t, 1, r6status(t, db, fmt.Sprintf("c%d", k)), "I1: c%d stays paid", k)
			}
			assert.Empty(t, held, "I12: a paid order the batch does not cancel waits on another order's stuck hook")
		})
	}
}

// TestReview6RepickContextEndsBetweenAttempts (I1, I2): the caller's
// context ends during a repick (the host pays "b" before the first locking
// read and the context is cancelled before the second). Outcomes: an
// error naming the context, no results, nothing cancelled, no hook run;
// the next batch cancels the due ones.
func TestReview6RepickContextEndsBetweenAttempts(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, seatflow)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	nos := []string{"x-a", "x-b", "x-c"}
	for i, no := range nos {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, s.Insert(db, nil)(ctx, p))
	}
	bctx, cancelBatch := context.WithCancel(ctx)
	defer cancelBatch()
	locks := r6EveryLock(sc, func(k int) {
		switch k {
		case 1:
			_, err := db.ExecContext(ctx, "UPDATE order_info SET status = 1 WHERE order_no = 'x-b'")
			require.NoError(t, err)
		case 2:
			cancelBatch()
		}
	})
	var hooks int
	s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error { hooks++; return nil })
	res, err := s.CancelDue(bctx, nos, cancel.ReasonTimeout)
	t.Logf("locking reads %d: %v, %v", *locks, res, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res)
	assert.Zero(t, hooks)
	for _, no := range nos {
		assert.Equal(t, map[string]int{"x-b": 1}[no], r6status(t, db, no), no)
	}
	res, err = s.CancelDue(ctx, nos, cancel.ReasonTimeout)
	require.NoError(t, err)
	assert.Len(t, res, 2)
}

// TestReview6RepickWindowSettingRow (I3, I12): the setting schema, whose
// deadline is the creation time plus a window read from a settings row in
// every statement (batchLock's flag reads it under FOR UPDATE SKIP
// LOCKED). A batch of one due order is held in its hook (a coupon row an
// admin holds); meanwhile a second batch lists another due order, and the
// shop's admin edits an unrelated setting of the same row. Outcomes: the
// second batch cancels its order at once (one due order never waits on
// another's hook, and a skipped settings row must not read as "not due"
// and send it round its repicks for nothing), and the admin's write is
// not held by the batch.
func TestReview6RepickWindowSettingRow(t *testing.T) {
	ctx := context.Background()
	db, sc := pickStepMySQL(t)
	s := hostStore(t, db, sqlstore.MySQL, setting)
	_, err := db.ExecContext(ctx, "CREATE TABLE coupon (id INT PRIMARY KEY, used INT NOT NULL)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO coupon (id, used) VALUES (1, 0)")
	require.NoError(t, err)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	for i, no := range []string{"st-stuck", "st-other"} {
		p := cancel.Placement{OrderNo: no, UserID: "u", ShowID: "ev", Seats: []string{fmt.Sprintf("s%d", i)}, ExpireAt: now.Add(-2 * time.Minute)}
		require.NoError(t, placeTx(t, db, s, p))
	}
	locks := r6EveryLock(sc, func(int) {})
	admin, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Rollback() })
	_, err = admin.ExecContext(ctx, "UPDATE coupon SET used = used WHERE id = 1")
	require.NoError(t, err)
	hookIn := make(chan struct{}, 1)
	s.SetHook(func(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
		if r.Order.No != "st-stuck" {
			return nil
		}
		hookIn <- struct{}{}
		_, err := tx.ExecContext(ctx, "UPDATE coupon SET used = used + 1 WHERE id = 1")
		return err
	})
	bctx, cancelBatch := context.WithTimeout(ctx, 8*time.Second)
	defer cancelBatch()
	var wg sync.WaitGroup
	var batchErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, batchErr = s.CancelDue(bctx, []string{"st-stuck"}, cancel.ReasonTimeout)
	}()
	select {
	case <-hookIn:
	case <-time.After(6 * time.Second):
		t.Fatal("the batch never reached the stuck hook")
	}
	before := *locks
	octx, cancelOther := context.WithTimeout(ctx, 2*time.Second)
	began := time.Now()
	res, errOther := s.CancelDue(octx, []string{"st-other"}, cancel.ReasonTimeout)
	cancelOther()
	t.Logf("the other batch: %d cancelled, %v after %v, %d locking reads", len(res), errOther, time.Since(began).Round(time.Millisecond), *locks-before)
	assert.NoError(t, errOther)
	assert.Len(t, res, 1, "I3/I12: a due order not cancelled while another batch's hook runs")
	assert.Equal(t, 1, *locks-before, "no repicks: nothing changed")

	hctx, cancelHost := context.WithTimeout(ctx, time.Second)
	began = time.Now()
	_, errAdmin := db.ExecContext(hctx, "UPDATE shop_setting SET flash_minutes = 61 WHERE id = 1")
	cancelHost()
	t.Logf("the admin's settings write: %v after %v", errAdmin, time.Since(began).Round(time.Millisecond))
	assert.NoError(t, errAdmin, "I12: the shop's settings row held by a batch's stuck hook")
	require.NoError(t, admin.Rollback())
	wg.Wait()
	require.NoError(t, batchErr)
}
