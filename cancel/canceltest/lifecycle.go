package canceltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// claimer is a strict seat claim for ReinstateCancelled, like the seat
// store's Lock: every seat must be free in it, all or nothing.
type claimer struct {
	mu    sync.Mutex
	held  map[string]string // show/seat → order
	calls atomic.Int32
	fail  error // returned instead of claiming, when set
	limit int   // the purchase limit of the last claim
	// lockID is the id the last successful claim returned (a seat store's
	// Lock returns the new lock's).
	lockID string
}

func newClaimer() *claimer { return &claimer{held: map[string]string{}} }

func (c *claimer) claim(_ context.Context, h cancel.Hold, limit int) (string, error) {
	n := c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = limit
	if c.fail != nil {
		return "", c.fail
	}
	for _, s := range h.Seats {
		if _, ok := c.held[h.ShowID+"/"+s]; ok {
			return "", fmt.Errorf("claimer: seat %s: %w", s, cancel.ErrSeatUnavailable)
		}
	}
	for _, s := range h.Seats {
		c.held[h.ShowID+"/"+s] = h.OrderNo
	}
	c.lockID = fmt.Sprintf("%d.%d", 1700000000000+int64(n), n)
	return c.lockID, nil
}

// runLifecycle is RunStore's part for the optional transitions:
// ReinstateCancelled, SetDeadline and MarkWarned. A store that answers one
// with cancel.ErrUnsupported skips its cases, saying so.
func runLifecycle(t *testing.T, setup setupFunc, place placeFunc) {
	runLatePayments(t, setup, place)
	runDeadlines(t, setup, place)
	runWarnings(t, setup, place)
}

// unsupported skips t when err says the store cannot do what is tested.
func unsupported(t *testing.T, h StoreHarness, what string, err error) {
	if errors.Is(err, cancel.ErrUnsupported) {
		t.Skipf("%T cannot %s (cancel.ErrUnsupported): %v", h.Store, what, err)
	}
}

// reinstater is h's store, or a skip when it cannot reinstate (late
// payments are refunded then).
func reinstater(t *testing.T, h StoreHarness) cancel.OrderStore {
	_, err := h.Store.ReinstateCancelled(context.Background(), pay(id("gone"), ""), func(context.Context, cancel.Hold, int) (string, error) {
		return "", errors.New("canceltest: no order to claim seats for")
	})
	unsupported(t, h, "reinstate a cancelled order", err)
	return h.Store
}

// deadlines is h's store, or a skip when it keeps no deadline to move.
func deadlines(t *testing.T, h StoreHarness) cancel.OrderStore {
	_, err := h.Store.SetDeadline(context.Background(), cancel.DeadlineChange{OrderNo: id("gone"), In: time.Minute})
	unsupported(t, h, "move a deadline", err)
	return h.Store
}

// warns is h's store, or a skip when it keeps no warned flag.
func warns(t *testing.T, h StoreHarness) cancel.OrderStore {
	_, err := h.Store.MarkWarned(context.Background(), id("gone"), time.Minute)
	unsupported(t, h, "mark an order warned", err)
	return h.Store
}

// timeout cancels the due order no by its timeout, which must change it.
func timeout(t *testing.T, h StoreHarness, no string) {
	res, err := h.Store.CancelPending(context.Background(), cancel.Request{OrderNo: no, Reason: cancel.ReasonTimeout, OnlyIfDue: true})
	require.NoError(t, err)
	require.True(t, res.Changed)
}

// claimsOf is SQL's seat claims of order no, seat by seat.
func claimsOf(t *testing.T, h StoreHarness, no string) map[string]expiry.Status {
	out := map[string]expiry.Status{}
	cursor := ""
	for {
		cs, next, err := h.Store.Claims(context.Background(), cursor, 100)
		require.NoError(t, err)
		for _, c := range cs {
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
