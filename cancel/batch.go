package cancel

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/seatflow/orderexpiry/expiry"
)

// MaxBatch is the most orders one OrderStore.CancelDue call takes, and the size of
// the slices Service.ExpireDue cuts a longer list into: one transaction locks
// every order of its batch, so an unbounded one would hold locks (and the
// seat store's script its shard) for as long as it runs.
const MaxBatch = 500

// ValidateBatch checks a batch of order numbers for OrderStore.CancelDue: at
// most MaxBatch, each a valid id (expiry.ValidateID). Errors wrap
// expiry.ErrInvalidID.
func ValidateBatch(orderNos []string, reason Reason) error {
	if len(orderNos) > MaxBatch {
		return fmt.Errorf("%w: %d orders in one batch, more than %d", expiry.ErrInvalidID, len(orderNos), MaxBatch)
	}
	if len(reason) > MaxReasonLen || expiry.ValidateID("reason", string(reason)) != nil {
		return fmt.Errorf("%w: reason %q (1-%d bytes of A-Z a-z 0-9 - _ .)", expiry.ErrInvalidID, reason, MaxReasonLen)
	}
	for _, no := range orderNos {
		if err := expiry.ValidateID("order number", no); err != nil {
			return err
		}
	}
	return nil
}

// ExpireDue expires the listed orders that are pending and due by the
// store's clock (reason ReasonReconcile unless given), as Cancel with
// Request.OnlyIfDue does for one, and returns one Result per order it
// cancelled (orders not pending, not due or missing are absent). Each slice
// of up to MaxBatch orders is one transaction (OrderStore.CancelDue), and
// the seats are then released in one seat-store round trip (one atomic
// step per show). As in Cancel, each cancelled order is observed
// (expiry.KindCancelled) and a failed release is logged and counted
// (expiry.KindReleaseFailed) and left to the reconciler, never an error:
// the orders are cancelled. An error means the slice that failed changed
// nothing (the Results of slices before it are returned with it), unless
// it wraps expiry.ErrCommitUnknown (the slice's COMMIT may have landed); the
// caller may try its orders one by one (Cancel), so one bad order is set
// aside alone.
func (s *Service) ExpireDue(ctx context.Context, orderNos []string, reason Reason) ([]Result, error) {
	if reason == "" {
		reason = ReasonReconcile
	}
	var out []Result
	for len(orderNos) > 0 {
		chunk := orderNos[:min(len(orderNos), MaxBatch)]
		orderNos = orderNos[len(chunk):]
		if err := ValidateBatch(chunk, reason); err != nil {
			return out, fmt.Errorf("cancel: expire due: %w", err)
		}
		var unclosed map[string]error
		if s.provider != nil {
			if chunk, unclosed = s.askAll(ctx, chunk); len(chunk) == 0 {
				continue
			}
		}
		res, err := s.store.CancelDue(ctx, chunk, reason)
		if err != nil {
			if errors.Is(err, expiry.ErrCommitUnknown) {
				for no, cerr := range unclosed { // the batch may have cancelled them
					s.unclosed(ctx, no, cerr)
				}
			}
			return out, fmt.Errorf("cancel: expire due: %w", err)
		}
		for _, r := range res {
			if cerr, ok := unclosed[r.Order.No]; ok {
				s.unclosed(ctx, r.Order.No, cerr)
			}
		}
		for _, r := range res {
			s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindCancelled, OrderNo: r.Order.No, Reason: string(reason), Seats: len(r.Seats),
				Deadline: r.Order.ExpireAt, At: r.Order.ReadAt})
		}
		s.releaseAll(ctx, res)
		out = append(out, res...)
	}
	return out, nil
}

// releaseAll releases the seats of cancelled orders (res, Released set in
// place) in one seat-store call: one round trip, one atomic step per show.
func (s *Service) releaseAll(ctx context.Context, res []Result) {
	byShow := map[string][]int{}
	var shows []string
	for i, r := range res {
		if len(r.Seats) == 0 {
			continue
		}
		if _, ok := byShow[r.Order.ShowID]; !ok {
			shows = append(shows, r.Order.ShowID)
		}
		byShow[r.Order.ShowID] = append(byShow[r.Order.ShowID], i)
	}
	sort.Strings(shows)
	hold := func(r Result) Hold {
		return Hold{ShowID: r.Order.ShowID, OrderNo: r.Order.No, UserID: r.Order.UserID, Seats: r.Seats, LockID: r.LockID}
	}
	failed := func(r Result, err error) {
		s.obs.Observe(ctx, expiry.Event{Kind: expiry.KindReleaseFailed, OrderNo: r.Order.No, Seats: len(r.Seats), Err: err})
		s.log.ErrorContext(ctx, "seat release failed after cancel; the reconciler will release them",
			"order", r.Order.No, "show", r.Order.ShowID, "seats", len(r.Seats), "err", err)
	}
	var idx []int
	var holds []Hold
	for _, show := range shows {
		for _, i := range byShow[show] {
			// A hold the seat store would refuse (a legacy row's order
			// with no user) would fail the whole call, every other
			// order's release with it: it is reported alone.
			if err := hold(res[i]).Validate(); err != nil {
				failed(res[i], err)
				continue
			}
			idx = append(idx, i)
			holds = append(holds, hold(res[i]))
		}
	}
	if len(holds) == 0 {
		return
	}
	ns, err := s.seats.ReleaseAll(ctx, holds)
	if len(ns) != len(idx) {
		if err == nil {
			err = fmt.Errorf("cancel: the seat store answered %d counts for %d holds", len(ns), len(idx))
		}
		ns = nil // no count says which: every hold is reported
	}
	for k, i := range idx {
		if ns == nil || ns[k] < 0 {
			failed(res[i], err)
			continue
		}
		res[i].Released = ns[k]
	}
}

// isNotFound reports an order that is gone, not a hook's own not-found
// (a failed cancel, ErrHook).
func isNotFound(err error) bool {
	return errors.Is(err, expiry.ErrNotFound) && !errors.Is(err, ErrHook)
}
