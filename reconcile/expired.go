package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// expiredPass is the expired pass's state: where a round that stopped at
// its bound left off, and the backoff of each order whose cancel failed.
type expiredPass struct {
	mu      sync.Mutex
	cursor  string
	backoff map[string]backoff
}

// backoff paces the retries of one order whose cancel failed, by
// Config.Clock: it paces this host's own work, no decision about the order
// depends on it.
type backoff struct {
	until time.Time
	wait  time.Duration
}

// expired runs the expired pass with keyset paging, so orders it skips do not come
// first again in every batch. A round that stops at its bound leaves its
// cursor to the next round, which goes on from there (and starts over once
// it reached the end): however many orders are backing off, the ones after
// them are reached.
func (r *Reconciler) expired(ctx context.Context, rep *Report) error {
	p := &r.expiredPass
	p.prune(r.c.Clock.Now())
	p.mu.Lock()
	cursor := p.cursor
	p.mu.Unlock()
	// The bound counts the orders tried; those backing off cost only their
	// index entries, read up to skipScanFactor times the bound.
	tried, scanned := 0, 0
	for tried < r.c.MaxPerRound && scanned < skipScanFactor*r.c.MaxPerRound {
		nos, next, err := r.c.Orders.Expired(ctx, cursor, min(r.c.Batch, r.c.MaxPerRound-tried))
		if err != nil {
			return fmt.Errorf("reconcile: scan expired: %w", err)
		}
		tried += r.cancelAll(ctx, nos, rep)
		scanned += len(nos)
		cursor = next
		if next == "" || ctx.Err() != nil {
			break
		}
	}
	p.mu.Lock()
	p.cursor = cursor
	p.mu.Unlock()
	// More work waits only if this round did some: a round that met nothing
	// but orders backing off waits for the interval like any other.
	rep.More = cursor != "" && tried > 0
	return ctx.Err()
}

// skipScanFactor bounds the expired pass's reading of orders that are backing off, as
// a multiple of MaxPerRound.
const skipScanFactor = 10

// cancelAll cancels the readable orders of nos in batches (expireBatches) and
// returns how many it tried (those not backing off).
func (r *Reconciler) cancelAll(ctx context.Context, nos []string, rep *Report) int {
	return r.expireBatches(ctx, r.readable(ctx, nos, rep), rep)
}

// cancelOne cancels one expired order, bounded by OrderTimeout, and counts
// it in rep under mu: a failure is backed off.
func (r *Reconciler) cancelOne(ctx context.Context, no string, rep *Report, mu *sync.Mutex) {
	octx, done := context.WithTimeout(ctx, r.c.OrderTimeout)
	var res cancel.Result
	err := r.contain(ctx, "the cancel of an expired order", func() (err error) {
		res, err = r.c.Service.Cancel(octx, cancel.Request{OrderNo: no, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
		return err
	})
	done()
	if errors.Is(err, expiry.ErrNotFound) && !errors.Is(err, cancel.ErrHook) { // a hook's own not-found is a failed cancel
		return
	}
	mu.Lock()
	switch {
	case err != nil:
		rep.Skipped++
	case res.Changed:
		rep.Expired++
	default:
		rep.LostRaces++
	}
	mu.Unlock()
	r.backOff(ctx, no, err)
	if err == nil && res.Changed {
		r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: no, Reason: "expired", Seats: len(res.Seats)})
	}
}

// contain runs f, in one of the pass's own goroutines, turning a panic (a
// host's hook's, raised in the store's transaction, which the store rolled
// back) into an error of what, logged: raised there, it would end the
// host's process. The orders then go on as after any failure: a batch's one
// by one, one order's backed off.
func (r *Reconciler) contain(ctx context.Context, what string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "reconcile: "+what+" panicked", "panic", fmt.Sprint(p))
			err = fmt.Errorf("reconcile: %s panicked: %v", what, p)
		}
	}()
	return f()
}

// waiting reports whether no is backing off after a failure.
func (r *Reconciler) waiting(no string) bool {
	p := &r.expiredPass
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.backoff[no]
	return ok && r.c.Clock.Now().Before(b.until)
}

// backOff records the outcome of one order's cancel: a failure doubles its
// backoff (from BackoffMin up to BackoffMax), a success forgets it.
func (r *Reconciler) backOff(ctx context.Context, no string, err error) {
	p := &r.expiredPass
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil || ctx.Err() != nil {
		delete(p.backoff, no)
		return
	}
	b := p.backoff[no]
	b.wait = min(max(2*b.wait, BackoffMin), BackoffMax)
	b.until = r.c.Clock.Now().Add(b.wait)
	p.backoff[no] = b
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSkipped, OrderNo: no, Reason: "cancel", Err: err})
	r.log.ErrorContext(ctx, "reconcile: cancel failed; skipping the order for now", "order", no, "retry_in", b.wait, "err", err)
}

// prune forgets orders whose backoff ran out long ago (decided meanwhile,
// or never failing again), so the map holds only live failures.
func (p *expiredPass) prune(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for no, b := range p.backoff {
		if now.Sub(b.until) > BackoffMax {
			delete(p.backoff, no)
		}
	}
}

// minBatch is the fewest orders a worker's batch gets: below it, fewer
// workers take a page.
const minBatch = 16

// expireBatches cancels nos: the orders not backing off are cut
// into up to Workers batches run at once, each one ExpireDue bounded by
// OrderTimeout. A changed order counts as Expired; a listed order the batch
// did not change lost its race (paid, cancelled, or no longer due
// meanwhile). A batch that fails changed nothing: its orders are tried
// one by one (Cancel), so one bad order is counted, backed off and skipped
// alone and never holds the others back (I12). After a batch whose COMMIT's
// outcome is unknown (expiry.ErrCommitUnknown) only its orders still
// pending go one by one; the others are skipped, as it may have cancelled
// them.
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
			var res []cancel.Result
			err := r.contain(ctx, "a batch of expired orders", func() (err error) {
				res, err = r.c.Service.ExpireDue(bctx, chunk, cancel.ReasonReconcile)
				return err
			})
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
			var rest []string
			for _, no := range chunk {
				if !changed[no] {
					rest = append(rest, no)
				}
			}
			if errors.Is(err, expiry.ErrCommitUnknown) {
				// One by one would find the batch's own cancels, if they
				// landed, and count them as lost races: those are left
				// (the lock pass frees their seats). An order still
				// pending was not cancelled by it (a batch commits all or
				// nothing), and goes one by one as after any failed batch,
				// so one whose batches always end so holds nobody back.
				r.log.WarnContext(ctx, "reconcile: a batch of expired orders lost its commit's outcome; the orders still pending go one by one", "orders", len(rest), "err", err)
				var pending []string
				if st, serr := r.c.Orders.Statuses(ctx, rest); serr == nil {
					for _, no := range rest {
						if o, ok := st[no]; ok && o.Status == expiry.StatusPending {
							pending = append(pending, no)
						}
					}
				}
				mu.Lock()
				rep.Skipped += len(rest) - len(pending)
				mu.Unlock()
				r.cancelOneByOne(ctx, pending, rep, &mu)
				return
			}
			r.log.WarnContext(ctx, "reconcile: a batch of expired orders failed; trying them one by one", "orders", len(chunk), "err", err)
			r.cancelOneByOne(ctx, rest, rep, &mu)
		}()
	}
	wg.Wait()
	return len(todo)
}

// cancelOneByOne is the per-order path for the orders of a failed batch,
// up to Workers at once: the order that failed the batch (a host's hook
// waiting on a lock) takes its OrderTimeout beside the others, not before
// them (I12).
func (r *Reconciler) cancelOneByOne(ctx context.Context, nos []string, rep *Report, mu *sync.Mutex) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(r.c.Workers, len(nos)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no := range work {
				r.cancelOne(ctx, no, rep, mu)
			}
		}()
	}
	for _, no := range nos {
		if ctx.Err() != nil {
			break
		}
		work <- no
	}
	close(work)
	wg.Wait()
}
