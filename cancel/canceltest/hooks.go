package canceltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// hookSetter is a store that runs a cancel.Hook in its transitions
// (sqlstore's and memstore's SetHook).
type hookSetter interface {
	SetHook(h cancel.Hook)
}

// errHookTest is what the suite's failing hooks return.
var errHookTest = errors.New("canceltest: the hook failed on purpose")

// hookLog records what a hook saw, per order, and fails on demand.
type hookLog struct {
	mu    sync.Mutex
	calls map[string][]cancel.Result
	fail  map[string]bool // order → the hook fails (after its write)
	write func(ctx context.Context, tx cancel.Querier, r cancel.Result) error
}

func (l *hookLog) hook(ctx context.Context, tx cancel.Querier, r cancel.Result) error {
	if l.write != nil {
		if err := l.write(ctx, tx, r); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail[r.Order.No] {
		return fmt.Errorf("order %s: %w", r.Order.No, errHookTest)
	}
	l.calls[r.Order.No] = append(l.calls[r.Order.No], r)
	return nil
}

func (l *hookLog) setFail(no string, fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail[no] = fail
}

// committed returns the successful calls for no.
func (l *hookLog) committed(no string) []cancel.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[no]
}

// RunHooks runs the suite of a store's transition hook (cancel.Hook) on a
// store that has SetHook(cancel.Hook), as cancel/sqlstore's and
// cancel/memstore's do; newHarness must return a fresh store. With
// StoreHarness.HookOutbox, the hook also writes a row through the
// transaction it is given, and the rows are checked: present exactly for
// the transitions that committed. It is apart from RunStore so that the
// many mapped stores RunStore runs on pay for it only where it is wanted.
func RunHooks(t *testing.T, newHarness func(t *testing.T) StoreHarness) {
	setup := func(t *testing.T) (StoreHarness, time.Time) {
		h := newHarness(t)
		now, err := h.Now(context.Background())
		require.NoError(t, err)
		return h, now
	}
	place := func(t *testing.T, h StoreHarness, user string, expireAt time.Time, seats ...string) cancel.Placement {
		p := cancel.Placement{OrderNo: id("o"), UserID: user, ShowID: "show-1", Seats: seats, ExpireAt: expireAt}
		require.NoError(t, h.Place(context.Background(), p))
		return p
	}
	ctx := context.Background()
	hooked := func(t *testing.T) (StoreHarness, time.Time, *hookLog, func() []string) {
		h, now := setup(t)
		hs, ok := h.Store.(hookSetter)
		if !ok {
			t.Fatalf("the store %T has no SetHook(cancel.Hook)", h.Store)
		}
		l := &hookLog{calls: map[string][]cancel.Result{}, fail: map[string]bool{}}
		rows := func() []string { return nil }
		if h.HookOutbox != nil {
			var read func(ctx context.Context) ([]string, error)
			l.write, read = h.HookOutbox(t)
			rows = func() []string {
				got, err := read(ctx)
				require.NoError(t, err)
				return got
			}
		}
		hs.SetHook(l.hook)
		return h, now, l, rows
	}
	claimsOf := func(t *testing.T, h StoreHarness, no string) map[string]expiry.Status {
		out := map[string]expiry.Status{}
		for cursor := ""; ; {
			batch, next, err := h.Store.Claims(ctx, cursor, 100)
			require.NoError(t, err)
			for _, c := range batch {
				if c.OrderNo == no {
					out[c.SeatID] = c.Status
				}
			}
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	status := func(t *testing.T, h StoreHarness, no string) expiry.Status {
		o, err := h.Store.Order(ctx, no)
		require.NoError(t, err)
		return o.Status
	}

	// The hook runs once per transition this store makes, in it, and sees
	// what the call returns; never for a call that changed nothing.
	t.Run("HookSeesEachTransitionOnce", func(t *testing.T) {
		h, now, l, rows := hooked(t)
		due := place(t, h, "u1", now.Add(-time.Second), "a1", "a2")
		later := place(t, h, "u2", now.Add(time.Hour), "b1")
		paid := place(t, h, "u3", now.Add(time.Hour), "c1")

		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: due.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		require.True(t, res.Changed)
		assert.Equal(t, cancel.ReasonTimeout, res.Reason)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: due.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)
		notDue, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: later.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		require.False(t, notDue.Changed)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: later.OrderNo, Reason: cancel.ReasonUser, UserID: "u1"})
		require.ErrorIs(t, err, cancel.ErrNotOwner)
		p := pay(paid.OrderNo, "u3")
		payRes, err := h.Store.PayPending(ctx, p)
		require.NoError(t, err)
		require.True(t, payRes.Changed)
		_, err = h.Store.PayPending(ctx, p) // the provider repeats its callback
		require.NoError(t, err)
		_, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: paid.OrderNo, Reason: cancel.ReasonUser})
		require.NoError(t, err)

		for _, c := range []struct {
			no  string
			res cancel.Result
		}{{due.OrderNo, res}, {paid.OrderNo, payRes}} {
			calls := l.committed(c.no)
			require.Len(t, calls, 1, "one hook call for the one transition of %s", c.no)
			got := calls[0]
			assert.True(t, got.Changed)
			assert.Equal(t, c.res.Order.No, got.Order.No)
			assert.Equal(t, c.res.Order.UserID, got.Order.UserID)
			assert.Equal(t, c.res.Order.ShowID, got.Order.ShowID)
			assert.Equal(t, c.res.Order.Status, got.Order.Status)
			assert.ElementsMatch(t, c.res.Seats, got.Seats)
			assert.Equal(t, c.res.Reason, got.Reason)
			assert.Equal(t, c.res.PaymentID, got.PaymentID)
			assert.Equal(t, c.res.LockID, got.LockID)
		}
		assert.Equal(t, cancel.ReasonTimeout, l.committed(due.OrderNo)[0].Reason)
		assert.Equal(t, p.PaymentID, l.committed(paid.OrderNo)[0].PaymentID)
		assert.Empty(t, l.committed(later.OrderNo), "no hook for a cancel that was not due, nor for another user's")
		if h.HookOutbox != nil {
			assert.ElementsMatch(t, []string{due.OrderNo, paid.OrderNo}, rows(), "the hook's rows: exactly the transitions")
		}
	})

	// A late payment's reinstatement is a transition too: the hook sees
	// the order paid by that payment, with the seats it claimed again.
	t.Run("HookSeesReinstatement", func(t *testing.T) {
		h, now := setup(t)
		hs, ok := h.Store.(hookSetter)
		if !ok {
			t.Fatalf("the store %T has no SetHook(cancel.Hook)", h.Store)
		}
		late := place(t, h, "u4", now.Add(-time.Second), "d1", "d2")
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: late.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		require.True(t, res.Changed)
		var seen []cancel.Result
		hs.SetHook(func(_ context.Context, _ cancel.Querier, r cancel.Result) error {
			seen = append(seen, r)
			return nil
		})
		lp := pay(late.OrderNo, "u4")
		back, err := h.Store.ReinstateCancelled(ctx, lp, func(context.Context, cancel.Hold, int) (string, error) { return "1700000000000.1", nil })
		if errors.Is(err, cancel.ErrUnsupported) {
			t.Skip("the store cannot reinstate")
		}
		require.NoError(t, err)
		require.True(t, back.Changed)
		require.Len(t, seen, 1, "one hook call for the reinstatement")
		assert.Equal(t, late.OrderNo, seen[0].Order.No)
		assert.Equal(t, expiry.StatusPaid, seen[0].Order.Status)
		assert.ElementsMatch(t, []string{"d1", "d2"}, seen[0].Seats, "the reinstated order's seats")
		assert.Equal(t, lp.PaymentID, seen[0].PaymentID)
	})

	// A failing hook rolls the whole transition back; the next attempt,
	// with the hook succeeding, makes it.
	t.Run("FailingHookRollsBack", func(t *testing.T) {
		h, now, l, rows := hooked(t)
		c := place(t, h, "u1", now.Add(-time.Second), "a1", "a2")
		p := place(t, h, "u2", now.Add(time.Hour), "b1")
		claimsBefore := map[string]map[string]expiry.Status{c.OrderNo: claimsOf(t, h, c.OrderNo), p.OrderNo: claimsOf(t, h, p.OrderNo)}
		l.setFail(c.OrderNo, true)
		l.setFail(p.OrderNo, true)

		_, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.ErrorIs(t, err, cancel.ErrHook)
		require.ErrorIs(t, err, errHookTest, "the hook's own error is wrapped too")
		payment := pay(p.OrderNo, "u2")
		_, err = h.Store.PayPending(ctx, payment)
		require.ErrorIs(t, err, cancel.ErrHook)
		require.ErrorIs(t, err, errHookTest)
		require.NotErrorIs(t, err, cancel.ErrDiscrepancy, "a failed hook decides nothing about the payment")

		for _, no := range []string{c.OrderNo, p.OrderNo} {
			assert.Equal(t, expiry.StatusPending, status(t, h, no), "rolled back: %s still pending", no)
			assert.Equal(t, claimsBefore[no], claimsOf(t, h, no), "rolled back: the claims of %s as they were", no)
		}
		if h.HookOutbox != nil {
			assert.Empty(t, rows(), "the hook's writes rolled back with the transition")
		}
		nos, _, err := h.Store.Expired(ctx, "", 10)
		require.NoError(t, err)
		assert.Contains(t, nos, c.OrderNo, "still due for the reconciler")

		l.setFail(c.OrderNo, false)
		l.setFail(p.OrderNo, false)
		res, err := h.Store.CancelPending(ctx, cancel.Request{OrderNo: c.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
		require.NoError(t, err)
		assert.True(t, res.Changed, "the next attempt cancels")
		assert.ElementsMatch(t, c.Seats, res.Seats)
		res, err = h.Store.PayPending(ctx, payment) // the provider repeats the same payment
		require.NoError(t, err)
		assert.True(t, res.Changed, "the repeated payment, undecided by the failed attempt, pays")
		assert.Equal(t, payment.PaymentID, res.PaymentID)
		if !h.NoClaims {
			assert.Empty(t, claimsOf(t, h, c.OrderNo), "the cancel freed its claims")
			assert.Equal(t, map[string]expiry.Status{"b1": expiry.StatusPaid}, claimsOf(t, h, p.OrderNo))
		}
		assert.Len(t, l.committed(c.OrderNo), 1)
		assert.Len(t, l.committed(p.OrderNo), 1)
		if h.HookOutbox != nil {
			assert.ElementsMatch(t, []string{c.OrderNo, p.OrderNo}, rows())
		}
	})

	// Of concurrent transitions of one order, the hook runs for the one
	// that wins, once.
	t.Run("HookUnderRace", func(t *testing.T) {
		h, now, l, rows := hooked(t)
		o := place(t, h, "u1", now.Add(-time.Second), "a1")
		var wg sync.WaitGroup
		var mu sync.Mutex
		changed := 0
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var res cancel.Result
				var err error
				if i%2 == 0 {
					res, err = h.Store.PayPending(ctx, pay(o.OrderNo, ""))
				} else {
					res, err = h.Store.CancelPending(ctx, cancel.Request{OrderNo: o.OrderNo, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
				}
				if errors.Is(err, cancel.ErrDiscrepancy) {
					return
				}
				assert.NoError(t, err)
				if res.Changed {
					mu.Lock()
					changed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, 1, changed)
		calls := l.committed(o.OrderNo)
		require.Len(t, calls, 1, "one hook call, for the winner")
		assert.Equal(t, status(t, h, o.OrderNo), calls[0].Order.Status, "the hook saw the state that committed")
		if h.HookOutbox != nil {
			assert.Equal(t, []string{o.OrderNo}, rows())
		}
	})
}
