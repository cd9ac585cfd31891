package reconcile

import (
	"context"
	"sync"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// minBatch is the fewest orders a worker's batch gets: below it, fewer
// workers take a page.
const minBatch = 16

// expireBatches cancels nos: the orders not backing off are cut
// into up to Workers batches run at once, each one ExpireDue bounded by
// OrderTimeout. A changed order counts as Expired; a listed order the batch
// did not change lost its race (paid, cancelled, or no longer due
// meanwhile). A batch that fails changed nothing: its orders are tried
// one by one (Cancel), so one bad order is counted, backed off and skipped
// alone and never holds the others back (I12).
func (r *Reconciler) expireBatches(ctx context.Context, nos []string, rep *Report) int {
	var todo []string
	for _, no := range nos {
		if r.waiting(no) {
			rep.Skipped++
			continue
		}
		todo = append(todo, no)
	}
	if len(todo) == 0 {
		return 0
	}
	workers := max(1, min(r.c.Workers, len(todo)/minBatch))
	size := (len(todo) + workers - 1) / workers
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for from := 0; from < len(todo); from += size {
		chunk := todo[from:min(from+size, len(todo))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ctx.Err() != nil {
				return
			}
			bctx, done := context.WithTimeout(ctx, r.c.OrderTimeout)
			res, err := r.c.Service.ExpireDue(bctx, chunk, cancel.ReasonReconcile)
			done()
			changed := make(map[string]bool, len(res))
			for _, c := range res {
				changed[c.Order.No] = true
				r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: c.Order.No, Reason: "expired", Seats: len(c.Seats)})
			}
			lost, held := 0, 0
			if err == nil && len(res) < len(chunk) {
				// Those the batch left: nothing if the order is gone, a
				// lost race if it was decided meanwhile; one still pending
				// is skipped (its row held by another transaction, which
				// the batch passes by), and the next round tries it again
				// at no cost. An extension that made it not due meanwhile
				// counts as skipped too: the next round's scan drops it.
				var left []string
				for _, no := range chunk {
					if !changed[no] {
						left = append(left, no)
					}
				}
				lost = len(left)
				if st, serr := r.c.Orders.Statuses(ctx, left); serr == nil {
					lost = 0
					for no, s := range st {
						if s.Status == expiry.StatusPending {
							held++
							r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSkipped, OrderNo: no, Reason: "held"})
							continue
						}
						lost++
					}
				}
			}
			mu.Lock()
			rep.Expired += len(res)
			rep.LostRaces += lost
			rep.Skipped += held
			mu.Unlock()
			if err == nil {
				return
			}
			r.log.WarnContext(ctx, "reconcile: a batch of expired orders failed; trying them one by one", "orders", len(chunk), "err", err)
			var rest []string
			for _, no := range chunk {
				if !changed[no] {
					rest = append(rest, no)
				}
			}
			r.cancelOneByOne(ctx, rest, rep, &mu)
		}()
	}
	wg.Wait()
	return len(todo)
}

// cancelOneByOne is the per-order path for the orders of a failed batch.
func (r *Reconciler) cancelOneByOne(ctx context.Context, nos []string, rep *Report, mu *sync.Mutex) {
	for _, no := range nos {
		if ctx.Err() != nil {
			return
		}
		r.cancelOne(ctx, no, rep, mu)
	}
}
