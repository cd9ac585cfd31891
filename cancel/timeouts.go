package cancel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// groupCommit groups Timeout calls into batches, as a database groups commits.
// Timeout calls take lanes, timeoutLanes of them: a call that finds a lane
// free goes alone, by the one-order path, so a quiet Service behaves as it
// would without batching; the calls that arrive while every lane is busy
// wait, and the next lane to come free takes all of them (up to MaxBatch)
// as one batch: one OrderStore.CancelDue transaction and one seat-store release
// per show. A consumer handling many due messages at once (an onsale's
// wave) thus cancels them in batches without its transport delivering
// batches. A lone call or a batch still in the store after laneStall is
// waiting (on a row another transaction holds, on a slow hook), not
// working, and gives its lane up, so slow orders never hold the others
// back for longer than that.
//
// A batch decides only the orders it cancelled (due and pending by the
// store's clock, I4). A call whose order it did not cancel (paid or
// cancelled already; not due: the Handler re-arms; missing; listed twice),
// and every call of a batch that failed or panicked before its commit, goes
// on alone outside the lanes: it reads its order, and answers with it when
// it is decided already, else goes by the one-order path. In a wave the
// reconciler and the consumer meet on the same orders, and a message whose
// order the reconciler cancelled then costs one read instead of a
// transaction. So a batch changes how the store is asked, never what a call
// answers. After a batch whose COMMIT's outcome is unknown (the store's
// error wraps expiry.ErrCommitUnknown) a call whose order it may have
// cancelled answers with that error, as the one-order path answers its own
// lost COMMIT: gone alone, it would find the batch's cancel and report it
// as nobody's. The others (their order pending or paid) go on as above. One order whose
// cancel is slow inside a batch's transaction (a slow hook) delays the others of that batch: they share one transaction.
type groupCommit struct {
	store OrderStore

	mu       sync.Mutex
	inFlight int            // lanes in use: lone calls and batches in the store
	queue    []*timeoutCall // the calls waiting for a lane
}

// timeoutLanes is how many lone Timeout calls and batches of one Service
// work in the store at once; the batches make up the concurrency the lanes
// take away. Part 11 of internal/bench chose two: 20 goroutines handing
// over due messages cancelled them fastest with 2 lanes on both databases
// (1: a little slower, 4: 10-20 % slower, 8: slower than no batches on
// PostgreSQL). laneStall is
// how long one may take before it counts as waiting and gives its lane up:
// a cancel's transaction takes milliseconds.
const timeoutLanes = 2

var laneStall = 100 * time.Millisecond // a variable for tests that hold calls in the store on purpose

// readBudget bounds the read of a queued Timeout whose batch did not
// cancel its order (readDecided): a read takes a millisecond or two, and
// one that takes longer is not the shortcut it is meant to be.
var readBudget = 100 * time.Millisecond // a variable for tests that count the reads on a loaded machine

// timeoutCall is one Timeout waiting for a lane. The batch sets res (and
// decided) before it closes done.
type timeoutCall struct {
	ctx     context.Context
	no      string
	done    chan struct{}
	decided bool // the batch cancelled the order: res is this call's Result
	res     Result
	// unknown is the batch's error when its COMMIT's outcome is unknown
	// (it wraps expiry.ErrCommitUnknown): the call answers with it, as the
	// one-order path answers a lost COMMIT.
	unknown error
}

// timeout is Service.Timeout's cancel: alone when a lane is free, else in
// the next batch.
func (t *groupCommit) timeout(ctx context.Context, s *Service, no string) (Result, error) {
	t.mu.Lock()
	if t.inFlight < timeoutLanes {
		t.inFlight++
		t.mu.Unlock()
		defer t.lane(s)() // even if the store panics: never leave calls queued
		return s.timeoutOne(ctx, no)
	}
	c := &timeoutCall{ctx: ctx, no: no, done: make(chan struct{})}
	t.queue = append(t.queue, c)
	t.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		// Left in the queue, it is skipped by the batch (take); if a batch
		// took it already, that batch may still cancel the order, and a
		// redelivery finds it decided.
		return Result{}, ctx.Err()
	}
	if c.decided {
		return c.res, nil
	}
	if c.unknown == nil && ctx.Err() != nil {
		// Both were ready (a batch that skipped this call, its caller gone,
		// closes done): select may take either, and a caller that left is
		// never served alone, which would cancel its order after it gave
		// up (CI run 111: a queued call cancelled its order and answered
		// nil to a caller whose context had ended).
		return Result{}, ctx.Err()
	}
	if c.unknown != nil {
		// Going alone would find the batch's own cancel, if it landed, and
		// answer it as somebody else's: the cancel would be reported by
		// nobody, its seats released by nobody but the reconciler. An
		// order still pending was not cancelled by it (a batch commits all
		// or nothing) and goes alone; a paid one it cannot have touched.
		// Pending may also be a COMMIT still landing on the server (a
		// replica's acknowledgement awaited): the lone compare-and-set then
		// waits on the batch's row lock and finds the order cancelled,
		// which is again the unknown outcome, not somebody else's cancel.
		if o, err := s.store.Order(ctx, no); err == nil && o.No == no {
			switch o.Status {
			case expiry.StatusPending:
				res, err := s.timeoutOne(ctx, no)
				if err == nil && !res.Changed && res.Order.Status == expiry.StatusCancelled {
					return Result{}, c.unknown
				}
				return res, err
			case expiry.StatusPaid:
				return Result{Order: o}, nil
			}
		}
		return Result{}, c.unknown
	}
	// A decided order stays decided for a timeout (a cancelled one paid
	// late becomes paid, never pending), so the read answers as the
	// compare-and-set would; anything else goes by the one-order path.
	if o, ok := s.readDecided(ctx, no); ok {
		return Result{Order: o}, nil
	}
	return s.timeoutOne(ctx, no)
}

// readDecided reads order no for a queued Timeout and reports whether it
// is decided (paid or cancelled; a status the library does not know
// goes by the one-order path). The read is a shortcut, never a step the
// answer needs: it gets at most readBudget of the caller's time, so a read
// that hangs (a replica that stopped answering) leaves the rest of the
// caller's deadline to the one-order path, which would have cancelled the
// order without it.
func (s *Service) readDecided(ctx context.Context, no string) (expiry.Order, bool) {
	rctx, stop := context.WithTimeout(ctx, readBudget)
	defer stop()
	o, err := s.store.Order(rctx, no)
	return o, err == nil && o.No == no && (o.Status == expiry.StatusPaid || o.Status == expiry.StatusCancelled)
}

// lane returns the function that gives up the lane a lone call or a batch
// holds (counted in inFlight): when it returns, or after laneStall,
// whichever comes first, and once.
func (t *groupCommit) lane(s *Service) func() {
	var once sync.Once
	free := func() { once.Do(func() { t.free(s) }) }
	stall := time.AfterFunc(laneStall, free)
	return func() {
		stall.Stop()
		free()
	}
}

// free hands a lane that came free to the calls that queued meanwhile, as
// a batch run by a goroutine of its own, or gives it back.
func (t *groupCommit) free(s *Service) {
	t.mu.Lock()
	calls := t.take()
	if len(calls) == 0 {
		t.inFlight--
	}
	t.mu.Unlock()
	if len(calls) > 0 {
		go t.drain(s, calls)
	}
}

// take removes up to MaxBatch calls from the queue, skipping those whose
// caller has gone. t.mu must be held.
func (t *groupCommit) take() []*timeoutCall {
	var calls []*timeoutCall
	n := 0
	for ; n < len(t.queue) && len(calls) < MaxBatch; n++ {
		if c := t.queue[n]; c.ctx.Err() == nil {
			calls = append(calls, c)
		} else {
			close(c.done)
		}
	}
	t.queue = append([]*timeoutCall(nil), t.queue[n:]...) // a fresh array: no finished call stays reachable
	return calls
}

// drain runs one batch on the lane it was handed; the lane then goes to
// the next batch, if calls queued meanwhile.
func (t *groupCommit) drain(s *Service, calls []*timeoutCall) {
	defer t.lane(s)()
	t.batch(s, calls)
}

// batch cancels calls' orders in one CancelDue and releases the seats of
// those it cancelled; every call's done is closed when it returns. A panic
// in the store's transaction (a host hook's) fails the batch: each call
// then goes alone and meets its own order's panic in its own goroutine, as
// without batches. A panic after the commit (a host Observer's, the seat
// store's) leaves the cancels answered and their seats to the reconciler.
func (t *groupCommit) batch(s *Service, calls []*timeoutCall) {
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	if len(calls) == 1 {
		return // alone after all: the one-order path, in the caller's goroutine
	}
	ctx, stop := batchContext(calls)
	defer stop()
	byNo := make(map[string]*timeoutCall, len(calls))
	nos := make([]string, 0, len(calls))
	for _, c := range calls {
		if _, dup := byNo[c.no]; dup {
			continue // the second call for one order goes alone: at most one sees it cancelled
		}
		byNo[c.no] = c
		nos = append(nos, c.no)
	}
	res, err := cancelDue(ctx, t.store, nos)
	if errors.Is(err, expiry.ErrCommitUnknown) {
		s.log.WarnContext(ctx, "a batch of timeouts lost its commit's outcome; each call answers so", "orders", len(nos), "err", err)
		for _, c := range calls {
			c.unknown = fmt.Errorf("cancel: timeout of order %s, in a batch: %w", c.no, err)
		}
		return
	}
	if err != nil {
		s.log.WarnContext(ctx, "a batch of timeouts failed; each order goes alone", "orders", len(nos), "err", err)
		return
	}
	var mine []Result
	var callers []*timeoutCall
	for _, r := range res {
		c := byNo[r.Order.No]
		if c == nil || c.decided {
			continue // an order this batch did not ask for, or one answered twice: not a second cancel
		}
		c.decided, c.res = true, r
		mine = append(mine, r)
		callers = append(callers, c)
	}
	t.answer(ctx, s, mine, callers)
	for i, c := range callers {
		c.res = mine[i]
	}
}

// answer reports and releases a batch's cancels with each order's host
// code apart, as the one-order path runs it: a panic of one order's (a host
// Observer's, the seat store's) is logged and leaves only that order's
// seats to the reconciler. After a panic in the batch's release, each
// order's seats are released again alone (a release is idempotent).
func (t *groupCommit) answer(ctx context.Context, s *Service, mine []Result, callers []*timeoutCall) {
	for i, r := range mine {
		s.contained(ctx, r.Order.No, func() {
			s.obs.Observe(callers[i].ctx, expiry.Event{Kind: expiry.KindCancelled, OrderNo: r.Order.No, Reason: string(ReasonTimeout), Seats: len(r.Seats),
				Deadline: r.Order.ExpireAt, At: r.Order.ReadAt})
		})
	}
	if s.contained(ctx, "", func() { s.releaseAll(ctx, mine) }) {
		return
	}
	for i := range mine {
		r := &mine[i]
		if len(r.Seats) == 0 {
			continue
		}
		s.contained(ctx, r.Order.No, func() {
			h := Hold{ShowID: r.Order.ShowID, OrderNo: r.Order.No, UserID: r.Order.UserID, Seats: r.Seats, LockID: r.LockID}
			n, err := s.seats.Release(ctx, h)
			if err != nil {
				s.obs.Observe(callers[i].ctx, expiry.Event{Kind: expiry.KindReleaseFailed, OrderNo: r.Order.No, Seats: len(r.Seats), Err: err})
				s.log.ErrorContext(ctx, "seat release failed after cancel; the reconciler will release them",
					"order", r.Order.No, "show", h.ShowID, "seats", len(h.Seats), "err", err)
				return
			}
			r.Released = n
		})
	}
}

// contained runs f and reports whether it returned; a panic in it is
// logged (for order no, "" for the whole batch), not raised: in a batch's
// goroutine it would end the process, where on the one-order path it is
// one caller's to recover.
func (s *Service) contained(ctx context.Context, no string, f func()) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "a batch of timeouts panicked after its commit; the reconciler repairs what it left",
				"order", no, "panic", fmt.Sprint(p))
			ok = false
		}
	}()
	f()
	return true
}

// cancelDue is store.CancelDue with a panic (a host hook's, inside the
// store's transaction, which the store rolled back) turned into an error.
func cancelDue(ctx context.Context, store OrderStore, nos []string) (res []Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("cancel: batch of timeouts panicked: %v", p)
		}
	}()
	return store.CancelDue(ctx, nos, ReasonTimeout)
}

// batchContext is the context of a batch: the values of its first call
// (one transaction cannot carry several), the latest of the calls'
// deadlines when every call has one, and cancelled once every call has
// gone, so that no batch works on for callers who all left.
func batchContext(calls []*timeoutCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	stopDeadline := func() {}
	if !latest.IsZero() {
		ctx, stopDeadline = context.WithDeadline(ctx, latest)
	}
	var left atomic.Int64
	left.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		stopDeadline()
		cancel()
	}
}
