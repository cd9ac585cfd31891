package reconcile

import (
	"context"
	"sync"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// batchService is a Service that expires many orders in one call
// (*cancel.Service's ExpireDue: one transaction per batch when its store is
// a cancel.BatchCanceller, one Cancel per order otherwise). The expired
// pass uses it when the Service has it.
type batchService interface {
	ExpireDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error)
}

// minBatch is the fewest orders a worker's batch gets: below it, fewer
// workers take a page.
const minBatch = 16

// expireBatches is cancelAll through b: the orders not backing off are cut
// into up to Workers batches run at once, each one ExpireDue bounded by
// OrderTimeout. A changed order counts as Expired; a listed order the batch
// did not change lost its race (paid, cancelled, or no longer due
// meanwhile). A batch that fails changed nothing: its orders are tried
// one by one (Cancel), so one bad order is counted, backed off and skipped
// alone and never holds the others back (I12).
func (r *Reconciler) expireBatches(ctx context.Context, nos []string, rep *Report, b batchService) int {
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
			res, err := b.ExpireDue(bctx, chunk, cancel.ReasonReconcile)
			done()
			changed := make(map[string]bool, len(res))
			for _, c := range res {
				changed[c.Order.No] = true
				r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: c.Order.No, Reason: "expired", Seats: len(c.Seats)})
			}
			lost := 0
			if err == nil && len(res) < len(chunk) {
				// Those the batch left: a lost race if the order is still
				// there (decided, or no longer due), nothing if it is gone,
				// as cancelOne counts them.
				var left []string
				for _, no := range chunk {
					if !changed[no] {
						left = append(left, no)
					}
				}
				lost = len(left)
				if st, serr := r.c.Orders.Statuses(ctx, left); serr == nil {
					lost = len(st)
				}
			}
			mu.Lock()
			rep.Expired += len(res)
			rep.LostRaces += lost
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
