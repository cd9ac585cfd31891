// Package reconcile repairs what the message path lost, in bounded rounds.
//
// SQL is the source of truth; Redis seat state is rebuilt from it. A round
// runs two scans:
//
//   - #1 expired: orders still pending past expire_at (by the database's
//     clock) go through the same cancel path as a timeout (a lost or
//     unsent message, a crash after commit);
//   - #4 seat locks: seats locked in Redis whose order is no longer pending
//     are fixed: released when the order is cancelled, or missing for longer
//     than a grace period (a crash between the Redis lock and the SQL commit);
//     marked sold when the order is paid (a lost Sell);
//   - and, when the seat store says it lost its data, a rebuild: every seat
//     claimed in SQL by a pending or paid order is given back its lock or
//     sale and its user's counter (Config.Claims and Config.Restorer); each
//     batch is then checked against SQL again, so a cancel that committed
//     while the batch was being restored does not leave its seats locked.
//
// Every action is a compare-and-set (the SQL cancel) or a script that checks
// the seat is still locked by that order, so several hosts may run rounds at
// once: they waste a little work, never correctness. Rounds are bounded (a
// batch size and a maximum per round) and stop when the context is done.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// ExpiredFinder finds pending orders that are past due.
//
// Expired returns up to limit numbers of orders that are pending and past
// expire_at by the store's clock, in (expire_at, order number) order,
// strictly after cursor ("" starts), following an index (never a full scan),
// and the cursor to continue from ("" when fewer than limit were returned).
// Keyset paging lets a round go past orders it skips (one whose cancel keeps
// failing) instead of meeting them first in every batch. Safe for
// concurrent use; errors are transient.
type ExpiredFinder interface {
	Expired(ctx context.Context, cursor string, limit int) (nos []string, next string, err error)
}

// StatusReader reads the status of many orders at once.
//
// Statuses returns the status of every order among nos that exists; orders
// that do not exist are absent from the map. Safe for concurrent use.
type StatusReader interface {
	Statuses(ctx context.Context, nos []string) (map[string]expiry.Status, error)
}

// LockScanner lists seat locks in the seat store, a bounded batch at a time.
//
// ScanLocks returns the locks found examining about count entries from
// cursor ("" starts a pass), and the cursor to continue from ("" when the
// pass is complete). A lock may be seen twice in a pass. Safe for concurrent
// use.
type LockScanner interface {
	ScanLocks(ctx context.Context, cursor string, count int) ([]cancel.SeatLock, string, error)
}

// ClaimScanner lists SQL's seat claims of pending and paid orders, a batch
// at a time, in key order after cursor ("" starts; "" returned: done). Safe
// for concurrent use.
type ClaimScanner interface {
	Claims(ctx context.Context, cursor string, limit int) ([]cancel.Claim, string, error)
}

// SeatRestorer rebuilds the seat store from SQL after it lost its data.
//
// Lost reports that it did (its marker is gone) and names the rebuild with a
// token: every caller gets the same token until MarkRestored succeeds or the
// store loses its data again (a new token then). Restore gives each claim's
// seat its state if the seat is free (and counts it for the user); it is
// idempotent. MarkRestored records a completed rebuild under token, only if
// token is still current (atomically); otherwise it returns an error
// wrapping cancel.ErrRestoreInterrupted and the rebuild starts over, so a
// second loss during a rebuild is never marked restored over a half-empty
// store. Safe for concurrent use.
type SeatRestorer interface {
	Lost(ctx context.Context) (token string, lost bool, err error)
	Restore(ctx context.Context, claims []cancel.Claim) (int, error)
	MarkRestored(ctx context.Context, token string) error
}

// Canceller is the cancel path; *cancel.Service implements it.
type Canceller interface {
	Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error)
}

// Config wires a Reconciler. Expired, Canceller, Locks, Orders and Seats are
// required; Seller is optional (paid orders' locks are then left alone).
type Config struct {
	Expired   ExpiredFinder
	Canceller Canceller
	Locks     LockScanner
	Orders    StatusReader
	Seats     cancel.SeatReleaser
	Seller    cancel.SeatSeller
	// Claims and Restorer, both or neither, rebuild the seat store from SQL
	// when it lost its data (cancel/sqlstore and cancel/redisseat). Each
	// restored batch is checked against SQL again, so a seat restored for an
	// order that a cancel or payment decided meanwhile is released or sold
	// in the same round (a decision after the check finds the restored lock
	// itself).
	Claims   ClaimScanner
	Restorer SeatRestorer
	// Batch is how many orders or seat entries one query handles; 0: 200.
	Batch int
	// Workers is how many expired orders are cancelled at once; 0: 4.
	Workers int
	// MaxPerRound bounds the orders cancelled and the seat entries examined
	// in one round (each); 0: 5000.
	MaxPerRound int
	// Grace is how long a seat lock whose order does not exist is left alone:
	// longer than any placing transaction takes to commit after its seats are
	// locked. 0: one minute.
	Grace    time.Duration
	Observer expiry.Observer // nil: expiry.NopObserver
	Logger   *slog.Logger    // nil: slog.Default()
	Now      func() time.Time
}

// Reconciler runs reconcile rounds. Round may be called from several
// goroutines or hosts at once; the cursor of the seat-lock pass is kept
// between rounds so that a large seat store is covered over several rounds.
type Reconciler struct {
	c      Config
	obs    expiry.Observer
	log    *slog.Logger
	mu     sync.Mutex
	cursor string
	// restoring is the cursor of a rebuild in progress ("" with rebuilding
	// false: none).
	restoring  string
	rebuilding bool
}

// New returns a Reconciler, or an error naming a missing dependency.
func New(c Config) (*Reconciler, error) {
	switch {
	case c.Expired == nil:
		return nil, errors.New("reconcile: Config.Expired is nil")
	case c.Canceller == nil:
		return nil, errors.New("reconcile: Config.Canceller is nil")
	case c.Locks == nil:
		return nil, errors.New("reconcile: Config.Locks is nil")
	case c.Orders == nil:
		return nil, errors.New("reconcile: Config.Orders is nil")
	case c.Seats == nil:
		return nil, errors.New("reconcile: Config.Seats is nil")
	case (c.Claims == nil) != (c.Restorer == nil):
		return nil, errors.New("reconcile: Config.Claims and Config.Restorer go together")
	}
	if c.Batch <= 0 {
		c.Batch = 200
	}
	if c.MaxPerRound <= 0 {
		c.MaxPerRound = 5000
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Grace <= 0 {
		c.Grace = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	r := &Reconciler{c: c, obs: expiry.OrNop(c.Observer), log: c.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r, nil
}

// Report says what one round did.
type Report struct {
	Expired   int // orders cancelled by scan #1
	LostRaces int // expired orders someone else decided first
	Locks     int // seat locks found by scan #4
	Released  int // seats released by scan #4 (or by a rebuild's re-check)
	Sold      int // seats marked sold by scan #4 (or by a rebuild's re-check)
	Restored  int // seats given back their state by a rebuild from SQL
	// Complete is true when scan #4 finished a pass over the seat store.
	Complete bool
}

// Round runs scan #1 then scan #4, each bounded by MaxPerRound. An error
// stops the round; what was done before it is in the Report.
func (r *Reconciler) Round(ctx context.Context) (Report, error) {
	var rep Report
	if err := r.expired(ctx, &rep); err != nil {
		return rep, err
	}
	if err := r.restore(ctx, &rep); err != nil {
		return rep, err
	}
	err := r.locks(ctx, &rep)
	return rep, err
}

// restore runs (or continues) a rebuild of the seat store from SQL when the
// store says it lost its data; it marks the store restored after a complete
// pass. Bounded by MaxPerRound claims per round.
func (r *Reconciler) restore(ctx context.Context, rep *Report) error {
	if r.c.Restorer == nil {
		return nil
	}
	r.mu.Lock()
	cursor, rebuilding := r.restoring, r.rebuilding
	r.mu.Unlock()
	if !rebuilding {
		lost, err := r.c.Restorer.Lost(ctx)
		if err != nil {
			return fmt.Errorf("reconcile: seat store state: %w", err)
		}
		if !lost {
			return nil
		}
		r.log.WarnContext(ctx, "seat store lost its data; rebuilding it from SQL")
	}
	for seen := 0; seen < r.c.MaxPerRound; {
		claims, next, err := r.c.Claims.Claims(ctx, cursor, min(r.c.Batch, r.c.MaxPerRound-seen))
		if err != nil {
			return fmt.Errorf("reconcile: scan claims: %w", err)
		}
		n, err := r.c.Restorer.Restore(ctx, claims)
		rep.Restored += n
		if err != nil {
			return fmt.Errorf("reconcile: restore seats: %w", err)
		}
		if n > 0 {
			r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, Reason: "restored", Seats: n})
		}
		if n > 0 { // nothing restored: no lock of this batch can be stale
			if err := r.recheck(ctx, claims, rep); err != nil {
				return err
			}
		}
		seen += len(claims)
		cursor = next
		if next == "" {
			r.mu.Lock()
			r.restoring, r.rebuilding = "", false
			r.mu.Unlock()
			if err := r.c.Restorer.MarkRestored(ctx); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			r.log.InfoContext(ctx, "seat store rebuilt from SQL", "seats", rep.Restored)
			return nil
		}
	}
	r.mu.Lock()
	r.restoring, r.rebuilding = cursor, true
	r.mu.Unlock()
	return nil
}

// recheck closes the race between reading claims and restoring them: a
// cancel that committed (and released, finding nothing) in between would
// otherwise leave the restored lock until scan #4 came by. The restored locks
// of pending claims go through scan #4's repair at once. They came from SQL,
// so an order now missing is gone, not uncommitted: no grace period (a zero
// LockedAt is always past it).
func (r *Reconciler) recheck(ctx context.Context, claims []cancel.Claim, rep *Report) error {
	var locks []cancel.SeatLock
	for _, c := range claims {
		if c.Status == expiry.StatusPending { // paid is final: its sale stands
			locks = append(locks, cancel.SeatLock{ShowID: c.ShowID, SeatID: c.SeatID, OrderNo: c.OrderNo, UserID: c.UserID})
		}
	}
	return r.fixLocks(ctx, locks, rep)
}

func (r *Reconciler) expired(ctx context.Context, rep *Report) error {
	for rep.Expired+rep.LostRaces < r.c.MaxPerRound {
		nos, err := r.c.Expired.Expired(ctx, min(r.c.Batch, r.c.MaxPerRound-rep.Expired-rep.LostRaces))
		if err != nil {
			return fmt.Errorf("reconcile: scan expired: %w", err)
		}
		if err := r.cancelAll(ctx, nos, rep); err != nil {
			return err
		}
		if len(nos) < r.c.Batch {
			return nil
		}
	}
	return nil
}

// cancelAll cancels nos with up to Workers calls at once: each is its own
// transaction, so the database, not this loop, is the limit.
func (r *Reconciler) cancelAll(ctx context.Context, nos []string, rep *Report) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	work := make(chan string)
	for w := 0; w < min(r.c.Workers, len(nos)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no := range work {
				res, err := r.c.Canceller.Cancel(ctx, cancel.Request{OrderNo: no, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
				if errors.Is(err, expiry.ErrNotFound) {
					continue
				}
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = fmt.Errorf("reconcile: cancel %s: %w", no, err)
					}
				case res.Changed:
					rep.Expired++
				default:
					rep.LostRaces++
				}
				mu.Unlock()
				if err == nil && res.Changed {
					r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: no, Reason: "expired", Seats: len(res.Seats)})
				}
			}
		}()
	}
	for _, no := range nos {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		work <- no
	}
	close(work)
	wg.Wait()
	return firstErr
}

func (r *Reconciler) locks(ctx context.Context, rep *Report) error {
	r.mu.Lock()
	cursor := r.cursor
	r.mu.Unlock()
	// Each call examines about Batch entries, locked or not.
	for calls := 0; calls*r.c.Batch < r.c.MaxPerRound; calls++ {
		locks, next, err := r.c.Locks.ScanLocks(ctx, cursor, r.c.Batch)
		if err != nil {
			return fmt.Errorf("reconcile: scan seat locks: %w", err)
		}
		rep.Locks += len(locks)
		if err := r.fixLocks(ctx, locks, rep); err != nil {
			return err
		}
		cursor = next
		r.mu.Lock()
		r.cursor = next
		r.mu.Unlock()
		if next == "" {
			rep.Complete = true
			return nil
		}
	}
	return nil
}

type orderLocks struct {
	show, user string
	seats      []string
	oldest     time.Time
}

func (r *Reconciler) fixLocks(ctx context.Context, locks []cancel.SeatLock, rep *Report) error {
	if len(locks) == 0 {
		return nil
	}
	byOrder := make(map[string]*orderLocks)
	var nos []string
	for _, l := range locks {
		ol := byOrder[l.OrderNo]
		if ol == nil { // an order's seats are all in one show
			nos = append(nos, l.OrderNo)
			ol = &orderLocks{show: l.ShowID, user: l.UserID, oldest: l.LockedAt}
			byOrder[l.OrderNo] = ol
		}
		ol.seats = append(ol.seats, l.SeatID)
		if l.LockedAt.Before(ol.oldest) {
			ol.oldest = l.LockedAt
		}
	}
	statuses, err := r.c.Orders.Statuses(ctx, nos)
	if err != nil {
		return fmt.Errorf("reconcile: read statuses: %w", err)
	}
	now := r.c.Now()
	for _, no := range nos {
		ol := byOrder[no]
		hold := cancel.Hold{ShowID: ol.show, OrderNo: no, UserID: ol.user, Seats: ol.seats}
		st, exists := statuses[no]
		switch {
		case exists && st == expiry.StatusPending:
			continue // the message path or scan #1 will decide it
		case exists && st == expiry.StatusPaid:
			if r.c.Seller == nil {
				continue
			}
			n, err := r.c.Seller.Sell(ctx, hold)
			if err != nil {
				return fmt.Errorf("reconcile: sell seats of %s: %w", no, err)
			}
			rep.Sold += n
			r.repaired(ctx, no, "sold", n)
		case !exists && now.Sub(ol.oldest) < r.c.Grace:
			continue // its placing transaction may not have committed yet
		default: // cancelled, or missing past the grace period
			n, err := r.c.Seats.Release(ctx, hold)
			if err != nil {
				return fmt.Errorf("reconcile: release seats of %s: %w", no, err)
			}
			rep.Released += n
			r.repaired(ctx, no, "released", n)
		}
	}
	return nil
}

func (r *Reconciler) repaired(ctx context.Context, no, what string, n int) {
	if n == 0 {
		return
	}
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: no, Reason: what, Seats: n})
	r.log.InfoContext(ctx, "reconciler repaired seats", "order", no, "action", what, "seats", n)
}

// Run calls Round every interval until ctx is done, logging errors (a failed
// round is retried at the next tick). It returns ctx's error.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := r.Round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.ErrorContext(ctx, "reconcile round failed", "err", err)
		case rep.Expired+rep.Released+rep.Sold > 0:
			r.log.InfoContext(ctx, "reconcile round", "expired", rep.Expired, "released", rep.Released, "sold", rep.Sold)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
