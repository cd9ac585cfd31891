package canceltest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

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
// cancel.Reinstater, cancel.DeadlineStore and cancel.WarnStore. A store that
// lacks one skips its cases, saying so.
func runLifecycle(t *testing.T, setup setupFunc, place placeFunc) {
	runLatePayments(t, setup, place)
	runDeadlines(t, setup, place)
	runWarnings(t, setup, place)
}

// reinstater is h's store as a cancel.Reinstater, or a skip.
func reinstater(t *testing.T, h StoreHarness) cancel.Reinstater {
	r, ok := h.Store.(cancel.Reinstater)
	if !ok {
		t.Skipf("%T does not implement cancel.Reinstater: late payments are refunded", h.Store)
	}
	return r
}

// deadlines is h's store as a cancel.DeadlineStore, or a skip.
func deadlines(t *testing.T, h StoreHarness) cancel.DeadlineStore {
	d, ok := h.Store.(cancel.DeadlineStore)
	if !ok {
		t.Skipf("%T does not implement cancel.DeadlineStore", h.Store)
	}
	return d
}

// warns is h's store as a cancel.WarnStore, or a skip.
func warns(t *testing.T, h StoreHarness) cancel.WarnStore {
	w, ok := h.Store.(cancel.WarnStore)
	if !ok {
		t.Skipf("%T does not implement cancel.WarnStore", h.Store)
	}
	return w
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
