package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// lockPass is the lock pass's state: where it stopped.
type lockPass struct {
	mu     sync.Mutex
	cursor string
}

// locks runs the lock pass from where the last round left it.
func (r *Reconciler) locks(ctx context.Context, rep *Report) error {
	p := &r.lockPass
	p.mu.Lock()
	cursor := p.cursor
	p.mu.Unlock()
	var errs []error
	// Each call examines about Batch entries.
	for calls := 0; calls*r.c.Batch < r.c.MaxPerRound; calls++ {
		locks, next, err := r.c.Seats.ScanLocks(ctx, cursor, r.c.Batch)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("reconcile: scan seat locks: %w", err))...)
		}
		rep.Locks += len(locks)
		if err := r.fixLocks(ctx, locks, false, rep); err != nil {
			errs = append(errs, err)
		}
		cursor = next
		p.mu.Lock()
		p.cursor = next
		p.mu.Unlock()
		if next == "" {
			rep.Complete = true
			break
		}
	}
	return errors.Join(errs...)
}

type orderLocks struct {
	no, show, user, lockID string
	seats                  []string
	youngest               time.Duration
}

// fixLocks releases or sells the locks whose order is decided (past the
// settle time) or, past the grace period, missing. fromSQL (locks the claims pass
// restored itself, which no decider will come back for) sells a paid
// order's at once and releases nothing (see recheck).
// A failing order is counted in the error and does not stop the others.
func (r *Reconciler) fixLocks(ctx context.Context, locks []cancel.SeatLock, fromSQL bool, rep *Report) error {
	if len(locks) == 0 {
		return nil
	}
	// Grouped by lock, not by order number: the release or sale names the
	// lock judged (Hold.LockID), so a newer lock of the same order number
	// taken after the statuses were read (a late payment's reinstatement)
	// is never freed by this pass.
	// A lock id is unique within its show only: the show is in the key.
	type lockKey struct{ no, show, lockID string }
	byLock := make(map[lockKey]*orderLocks)
	var keys []lockKey
	var nos []string
	seen := make(map[string]bool)
	for _, l := range locks {
		k := lockKey{l.OrderNo, l.ShowID, l.LockID}
		ol := byLock[k]
		if ol == nil {
			keys = append(keys, k)
			ol = &orderLocks{no: l.OrderNo, show: l.ShowID, user: l.UserID, lockID: l.LockID, youngest: l.Age}
			byLock[k] = ol
			if !seen[l.OrderNo] {
				seen[l.OrderNo] = true
				nos = append(nos, l.OrderNo)
			}
		}
		ol.seats = append(ol.seats, l.SeatID)
		ol.youngest = min(ol.youngest, l.Age)
	}
	statuses, err := r.c.Orders.Statuses(ctx, nos)
	if err != nil {
		return fmt.Errorf("reconcile: read statuses: %w", err)
	}
	var errs []error
	skipped := map[string]bool{} // host-status orders reported in this call
	for _, k := range keys {
		ol, no := byLock[k], k.no
		hold := cancel.Hold{ShowID: ol.show, OrderNo: no, UserID: ol.user, Seats: ol.seats, LockID: ol.lockID}
		st, exists := statuses[no]
		if exists && st.LockID != "" && (ol.lockID != st.LockID || !sameShow(ol.show, st)) {
			// A lock the order does not hold (not the id the store kept,
			// or another show). Its seats that SQL gives the order are the
			// order's all the same (a seat store that went back in time
			// still has an older lock of the order): they are judged below
			// as the order's, so a paid order's are sold, never freed. The
			// others are nobody's once older than the grace period (a
			// placement or a reinstatement that took them and has not
			// committed yet is younger): released, never sold.
			own, others := splitOwn(ol, st)
			if len(others) > 0 && !fromSQL && ol.youngest >= r.c.Grace {
				h := hold
				h.Seats = others
				n, err := r.c.Seats.Release(ctx, h)
				if err != nil {
					errs = append(errs, fmt.Errorf("reconcile: release seats of %s: %w", no, err))
				} else {
					rep.Released += n
					r.repaired(ctx, no, "released", n)
				}
			}
			if len(own) == 0 {
				continue
			}
			hold.Seats = own
		}
		switch {
		case exists && st.Status == expiry.StatusPending:
			continue // the message path or the expired pass will decide it
		case exists && hostOwned(st.Status):
			// The host's order (I19): its seats are the host's to free or
			// sell, by giving the order a status of the mapping.
			r.hostStatus(ctx, no, rep, skipped)
			continue
		case exists && !fromSQL && st.Age != cancel.AgeUnknown && st.Age < r.c.Settle:
			rep.Settling += len(ol.seats) // its decider is releasing or selling them
			continue
		case exists && st.Status == expiry.StatusPaid:
			n, err := r.c.Seats.Sell(ctx, hold)
			if err != nil {
				errs = append(errs, fmt.Errorf("reconcile: sell seats of %s: %w", no, err))
				continue
			}
			rep.Sold += n
			r.repaired(ctx, no, "sold", n)
			continue
		case fromSQL:
			continue // a lock restored without its id: the lock pass releases it by the id it reads
		case !exists && ol.youngest < r.c.Grace:
			continue // its placing transaction may not have committed yet
		}
		// Cancelled, or missing past the grace period.
		n, err := r.c.Seats.Release(ctx, hold)
		if err != nil {
			errs = append(errs, fmt.Errorf("reconcile: release seats of %s: %w", no, err))
			continue
		}
		rep.Released += n
		r.repaired(ctx, no, "released", n)
	}
	return errors.Join(errs...)
}

// splitOwn splits the seats of a lock the order does not hold into those
// SQL gives the order (same show, among st.Seats) and the others.
func splitOwn(ol *orderLocks, st cancel.OrderState) (own, others []string) {
	for _, seat := range ol.seats {
		if sameShow(ol.show, st) && slices.Contains(st.Seats, seat) {
			own = append(own, seat)
		} else {
			others = append(others, seat)
		}
	}
	return own, others
}

// sameShow reports whether a lock in show may be the order's by its show:
// an order whose show the store could not read (ShowID "", never a valid
// id: a legacy row with a NULL show) is not known to be of another show, and
// freeing a pending or paid order's seats on that guess would break I2.
func sameShow(show string, st cancel.OrderState) bool {
	return st.ShowID == "" || show == st.ShowID
}

func (r *Reconciler) repaired(ctx context.Context, no, what string, n int) {
	if n == 0 {
		return
	}
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: no, Reason: what, Seats: n})
	r.log.InfoContext(ctx, "reconciler repaired seats", "order", no, "action", what, "seats", n)
}
