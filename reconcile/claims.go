package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// claimsPass is the claims pass's state: where it stopped, and the rebuild
// in progress.
type claimsPass struct {
	mu     sync.Mutex
	cursor string
	token  string // the rebuild in progress ("": none)
}

// restore runs the claims pass: the rebuild when the seat store lost its data, else
// the slow repair pass.
func (r *Reconciler) restore(ctx context.Context, rep *Report) error {
	token, lost, err := r.c.Seats.Lost(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: seat store state: %w", err)
	}
	p := &r.claimsPass
	p.mu.Lock()
	if lost && token != p.token { // a new loss: start over
		p.token, p.cursor = token, ""
		r.log.WarnContext(ctx, "seat store lost its data; rebuilding it from SQL")
	} else if !lost {
		p.token = ""
	}
	cursor := p.cursor
	p.mu.Unlock()
	for seen := 0; seen < r.c.MaxPerRound; {
		claims, next, err := r.c.Orders.Claims(ctx, cursor, min(r.c.Batch, r.c.MaxPerRound-seen))
		if err != nil {
			return fmt.Errorf("reconcile: scan claims: %w", err)
		}
		if err := r.repair(ctx, claims, rep); err != nil {
			return err
		}
		seen += len(claims)
		cursor = next
		p.mu.Lock()
		p.cursor = next
		p.mu.Unlock()
		if next == "" {
			rep.ClaimsComplete = true
			break
		}
	}
	if !lost || cursor != "" {
		return nil
	}
	err = r.c.Seats.MarkRestored(ctx, token)
	p.mu.Lock()
	p.token = "" // done, or interrupted: the next round asks Lost again
	p.mu.Unlock()
	if errors.Is(err, cancel.ErrRestoreInterrupted) {
		r.log.WarnContext(ctx, "seat store lost its data again during the rebuild; starting over")
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	rep.Rebuilt = true
	r.log.InfoContext(ctx, "seat store rebuilt from SQL", "seats", rep.Restored)
	return nil
}

// repair restores what the seat store lacks of claims. It asks the store
// which claims it lacks, then SQL again which of those are still live, and
// restores only those: a cancel that committed after the claims were read
// released its seats before the store was asked (the release follows the
// commit), so it is never restored, not even for a moment. Only a seat that
// was really lost can be restored for an order that a cancel decides in the
// short window that remains; recheck then releases it at once.
func (r *Reconciler) repair(ctx context.Context, claims []cancel.Claim, rep *Report) error {
	claims = r.heldClaims(ctx, r.readableClaims(ctx, claims, rep), rep)
	missing, err := r.c.Seats.Missing(ctx, claims)
	if err != nil || len(missing) == 0 {
		if err != nil {
			return fmt.Errorf("reconcile: compare claims with the seat store: %w", err)
		}
		return nil
	}
	nos := make([]string, 0, len(missing))
	for _, c := range missing {
		nos = append(nos, c.OrderNo)
	}
	statuses, err := r.c.Orders.Statuses(ctx, nos)
	if err != nil {
		return fmt.Errorf("reconcile: read statuses: %w", err)
	}
	live := missing[:0]
	var check []cancel.Claim // live but the host's: nothing for recheck to judge
	for _, c := range missing {
		st, ok := statuses[c.OrderNo]
		switch {
		case !ok || st.Status == expiry.StatusCancelled:
		case hostOwned(st.Status):
			c.Status = expiry.StatusPending // the host's: its seats held as a pending order's
			live = append(live, c)
		default:
			c.Status = st.Status // paid since the claims were read: restore the sale
			live = append(live, c)
			check = append(check, c)
		}
	}
	n, err := r.c.Seats.Restore(ctx, live)
	rep.Restored += n
	if err != nil {
		return fmt.Errorf("reconcile: restore seats: %w", err)
	}
	if n == 0 { // nothing restored: no lock of this batch can be stale
		return nil
	}
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, Reason: "restored", Seats: n})
	return r.recheck(ctx, check, rep)
}

// recheck closes the race between reading claims and restoring them: a
// payment that committed (and sold, finding nothing) in between would
// otherwise leave the restored lock of a paid order until the lock pass came by;
// its restored locks are sold at once (paid is final). A cancel that
// committed in between leaves a restored lock too, but that one is left to
// the lock pass, which names the lock it judged: a release here could not (Restore
// answers no lock id), and the order may be reinstated by a late payment,
// with a new lock of its own, between this read and the release.
func (r *Reconciler) recheck(ctx context.Context, claims []cancel.Claim, rep *Report) error {
	var locks []cancel.SeatLock
	for _, c := range claims {
		if c.Status == expiry.StatusPending { // paid is final: its sale stands
			locks = append(locks, cancel.SeatLock{ShowID: c.ShowID, SeatID: c.SeatID, OrderNo: c.OrderNo, UserID: c.UserID})
		}
	}
	return r.fixLocks(ctx, locks, true, rep)
}
