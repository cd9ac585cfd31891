// Package reconcile repairs what the message path lost, in bounded rounds.
//
// SQL is the source of truth; Redis seat state is rebuilt from it. A round
// runs these passes in this order, each bounded by Config.MaxPerRound, each
// run even when another failed (their errors are joined):
//
//   - expired orders: orders still pending past expire_at by the
//     database's clock go through the same cancel path as a timeout (a lost
//     or unsent message, a crash after commit). Each cancel is bounded by
//     Config.OrderTimeout; one that fails is skipped, counted and retried
//     with a backoff, so one stuck order never holds the others back (I12).
//     When the pass hits its bound, Run starts the next round at once, so a
//     backlog drains at the cancel path's rate, not a batch per interval;
//   - seat locks: seats locked in Redis whose order is no longer
//     pending are fixed: released when the order is cancelled, or missing
//     for longer than Config.Grace by the seat store's clock (a crash between
//     the lock and the SQL commit); marked sold when the order is paid. An
//     order decided less than Config.Settle ago by the database's clock is
//     left to the host that decided it, which releases or sells its seats
//     right after its commit: so one host frees an order's seats, not two
//     racing each other seat by seat, and only a decider that crashed (or
//     whose seat store call failed) leaves anything to repair. An order in
//     a status the host owns (expiry.StatusHost, I19) is the host's: its
//     locks are left as they are, and counted (Report.HostStatus);
//   - claims: SQL's seat claims of pending and paid orders (not those of
//     an order in a status the host owns: counted) are
//     given to the seat store, which fills the seats it lacks (a lost lock,
//     a show evicted or lost in a partial failure). When the seat store says
//     it lost all its data (its marker is gone) this is the rebuild, marked
//     complete under a token so a second loss during it starts it over;
//     otherwise the pass goes on slowly, round after round. Each batch that
//     restored anything is then checked against SQL again, so a cancel that
//     committed meanwhile does not leave its seats locked;
//   - sold seats (sold.go): seats
//     sold to an order SQL does not show paid (SQL went back in time: a
//     failover that lost commits) are counted and reported, never freed;
//   - refunds: recorded discrepancies whose refund hook failed or was
//     interrupted are handed to the hook again (I9).
//
// Every action is a compare-and-set (the SQL cancel) or a script that checks
// the seat is still locked by that order, so several hosts may run rounds at
// once: they waste a little work, never correctness. Rounds stop when the
// context is done.
//
// Interfaces (1): Service, the cancel path the expired pass calls
// (cancel.Service, or a host's wrapper of it). The stores are
// cancel.OrderStore and cancel.SeatStore, taken whole.
//
// # Names
//
// Besides the interfaces: Reconciler, New, Config and Report, the
// reconciler, its wiring and what a round did (a host logs or alerts on
// it); BatchDefault, WorkersDefault, MaxPerRoundDefault, GraceDefault,
// OrderTimeoutDefault, SettleDefault, BackoffMin and BackoffMax, Config's
// defaults and the skip backoff's bounds, exported so a host can see and
// derive from them.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Service is the cancel path the expired pass calls and the refund retries;
// *cancel.Service implements it (a host may wrap it: a test's fault, a
// metric). Its methods are cancel.Service's: ExpireDue cancels a page of
// expired orders in batches (one transaction per batch), a batch that
// fails is tried again order by order with Cancel, and
// RetryDiscrepancies hands up to limit recorded discrepancies whose refund
// hook failed back to the hook and returns how many succeeded. Scope is
// its order store's, which must be Config.Orders's.
type Service interface {
	Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error)
	ExpireDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error)
	RetryDiscrepancies(ctx context.Context, limit int) (int, error)
	Scope() string
}

// Defaults of Config.
const (
	BatchDefault        = 200
	WorkersDefault      = 4
	MaxPerRoundDefault  = 5000
	GraceDefault        = time.Minute
	OrderTimeoutDefault = 10 * time.Second
	SettleDefault       = 5 * time.Second
	// BackoffMin and BackoffMax bound the wait before a skipped order is
	// tried again: it starts at BackoffMin and doubles with every failure.
	BackoffMin = 10 * time.Second
	BackoffMax = 5 * time.Minute
)

// Config wires a Reconciler. Orders, Seats and Service are required; zero
// numbers take the defaults above, negative ones are refused.
type Config struct {
	// Orders is the order store the passes read (the Service's own).
	Orders cancel.OrderStore
	// Seats is the seat store the passes scan and repair (the Service's
	// own).
	Seats   cancel.SeatStore
	Service Service
	// Batch is how many orders, claims or seat entries one query handles.
	Batch int
	// Workers is how many batches of expired orders are cancelled at once.
	Workers int
	// MaxPerRound bounds the orders, claims and seat entries each pass
	// handles in one round.
	MaxPerRound int
	// Grace is how long a seat lock whose order does not exist is left alone,
	// measured by the seat store's clock: longer than any placing
	// transaction takes to commit after its seats are locked (keep
	// cancel.Config.PlaceTimeout well below it).
	Grace time.Duration
	// OrderTimeout bounds the cancel of one expired order; one that takes
	// longer (a row held by a stuck transaction) is skipped for now.
	OrderTimeout time.Duration
	// Settle is how long after an order is decided (cancel.OrderState.Age, by the
	// store's clock) the lock pass leaves its locks to the host that decided it:
	// longer than that host takes from its commit to the seat store's reply
	// (one round trip; a cancel.Service call). A decider that crashed in
	// between is repaired by the first pass after Settle. The claims pass's re-check
	// of the locks it restored itself does not wait.
	Settle time.Duration
	// Runtime: the logger, the observer, and the Clock that paces Run and
	// the retries of skipped orders. The Clock never decides anything about
	// an order: every such "now" is the database's or the seat store's
	// (invariant I11).
	expiry.Runtime
}

func (c *Config) validate() error {
	switch {
	case c.Orders == nil:
		return errors.New("reconcile: Config.Orders is nil")
	case c.Seats == nil:
		return errors.New("reconcile: Config.Seats is nil")
	case c.Service == nil:
		return errors.New("reconcile: Config.Service is nil")
	}
	if err := cancel.CheckScope(c.Orders, c.Seats); err != nil {
		return fmt.Errorf("reconcile: Config.Orders and Config.Seats: %w", err)
	}
	if err := cancel.CheckScope(c.Orders, c.Service); err != nil {
		return fmt.Errorf("reconcile: Config.Orders and Config.Service: %w", err)
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"Batch", int64(c.Batch)}, {"Workers", int64(c.Workers)}, {"MaxPerRound", int64(c.MaxPerRound)},
		{"Grace", int64(c.Grace)}, {"OrderTimeout", int64(c.OrderTimeout)}, {"Settle", int64(c.Settle)}} {
		if f.v < 0 {
			return fmt.Errorf("reconcile: Config.%s is negative (%d)", f.name, f.v)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Batch, BatchDefault)
	def(&c.Workers, WorkersDefault)
	def(&c.MaxPerRound, MaxPerRoundDefault)
	if c.Grace == 0 {
		c.Grace = GraceDefault
	}
	if c.OrderTimeout == 0 {
		c.OrderTimeout = OrderTimeoutDefault
	}
	if c.Settle == 0 {
		c.Settle = SettleDefault
	}
	c.Runtime = c.Runtime.WithDefaults()
	return nil
}

// Reconciler runs reconcile rounds. Round may be called from several
// goroutines or hosts at once; the cursors of the passes are kept between
// rounds so that large stores are covered over several rounds.
type Reconciler struct {
	c   Config
	obs expiry.Observer
	log *slog.Logger

	mu      sync.Mutex
	due     string // the expired pass's, kept while a round stops at its bound
	cursor  string // the lock pass's
	claims  string // the claims pass's
	token   string // the rebuild in progress ("": none)
	backoff map[string]backoff

	soldPass soldPass // sold.go
}

// backoff paces the retries of one order whose cancel failed, by
// Config.Clock: it paces this host's own work, no decision about the order
// depends on it.
type backoff struct {
	until time.Time
	wait  time.Duration
}

// New returns a Reconciler, or an error naming the field that is missing or
// out of range.
func New(c Config) (*Reconciler, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{c: c, obs: c.Observer, log: c.Logger, backoff: map[string]backoff{}}
	return r, nil
}

// Report says what one round did.
type Report struct {
	Expired   int // orders cancelled by the expired pass
	LostRaces int // expired orders someone else decided first
	// Skipped counts expired orders left for a later round: their cancel
	// failed or timed out in this round (backed off), their row was held
	// by another transaction (passed by, tried again next round), or they
	// are waiting out a backoff.
	Skipped int
	// Unreadable counts the rows SQL holds that no pass can act on: an
	// expired order whose number is not a valid id, a claim whose user,
	// order, show or seat is missing (NULL) or not a valid id (a legacy
	// row a host's old code wrote). Each is left as it is and reported, in
	// every round while it lasts, as an expiry.KindSkipped event with
	// Reason "unreadable" naming its order; the others go on.
	Unreadable int
	// HostStatus counts the orders in a status the host owns
	// (expiry.StatusHost, invariant I19) that the lock pass and the claims
	// pass went past: their seats are left as they are (neither freed, sold
	// nor restored) until the host gives the order a status of the
	// mapping. Each is reported, in every round while it lasts, as an
	// expiry.KindSkipped event with Reason "host_status" naming its order.
	HostStatus int
	Locks      int // seat locks found by the lock pass
	Released   int // seats released by the lock pass (or by the claims pass's re-check)
	Sold       int // seats marked sold by the lock pass (or by the claims pass's re-check)
	// Settling counts the seat locks the lock pass left to the host that decided
	// their order less than Config.Settle ago.
	Settling int
	Restored int // seats given back their state from SQL by the claims pass
	Refunds  int // refund hooks that succeeded on a retry
	// Diverged counts the sold seats the sold pass found this round whose
	// order SQL does not show paid (see sold.go): SQL went back in time.
	// They are never freed; each order is reported once per Reconciler as
	// an expiry.KindDiverged event, and counted again in every round while
	// it lasts, so a host can alert on it.
	Diverged int
	// More is true when the expired pass stopped at MaxPerRound with more orders
	// possibly due, having cancelled (or tried) some: Run starts the next
	// round at once, which goes on where this one stopped.
	More bool
	// Rebuilt is true when this round completed a rebuild of the seat store.
	Rebuilt bool
	// ClaimsComplete is true when the claims pass finished a pass over SQL's claims.
	ClaimsComplete bool
	// Complete is true when the lock pass finished a pass over the seat store.
	Complete bool
}

// Round runs every pass once. Each pass runs even when an earlier one
// failed; the error joins theirs, and the Report counts what was done.
func (r *Reconciler) Round(ctx context.Context) (Report, error) {
	var rep Report
	// The lock pass before the claims pass: a stale lock released first leaves its seat free for
	// the claim that SQL gives it, restored in this round if the claims pass reaches that claim
	// in it, else by the next pass that does (both are bounded by MaxPerRound).
	errs := []error{r.expired(ctx, &rep), r.locks(ctx, &rep), r.restore(ctx, &rep), r.sold(ctx, &rep), r.refunds(ctx, &rep)}
	return rep, errors.Join(errs...)
}

// restore runs the claims pass: the rebuild when the seat store lost its data, else
// the slow repair pass.
func (r *Reconciler) restore(ctx context.Context, rep *Report) error {
	token, lost, err := r.c.Seats.Lost(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: seat store state: %w", err)
	}
	r.mu.Lock()
	if lost && token != r.token { // a new loss: start over
		r.token, r.claims = token, ""
		r.log.WarnContext(ctx, "seat store lost its data; rebuilding it from SQL")
	} else if !lost {
		r.token = ""
	}
	cursor := r.claims
	r.mu.Unlock()
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
		r.mu.Lock()
		r.claims = next
		r.mu.Unlock()
		if next == "" {
			rep.ClaimsComplete = true
			break
		}
	}
	if !lost || cursor != "" {
		return nil
	}
	err = r.c.Seats.MarkRestored(ctx, token)
	r.mu.Lock()
	r.token = "" // done, or interrupted: the next round asks Lost again
	r.mu.Unlock()
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
	claims = r.libraryClaims(ctx, r.readableClaims(ctx, claims, rep), rep)
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
	for _, c := range missing {
		if st, ok := statuses[c.OrderNo]; ok && (st.Status == expiry.StatusPending || st.Status == expiry.StatusPaid) {
			c.Status = st.Status // paid since the claims were read: restore the sale
			live = append(live, c)
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
	return r.recheck(ctx, live, rep)
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

// expired runs the expired pass with keyset paging, so orders it skips do not come
// first again in every batch. A round that stops at its bound leaves its
// cursor to the next round, which goes on from there (and starts over once
// it reached the end): however many orders are backing off, the ones after
// them are reached.
func (r *Reconciler) expired(ctx context.Context, rep *Report) error {
	r.pruneBackoff()
	r.mu.Lock()
	cursor := r.due
	r.mu.Unlock()
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
	r.mu.Lock()
	r.due = cursor
	r.mu.Unlock()
	// More work waits only if this round did some: a round that met nothing
	// but orders backing off waits for the interval like any other.
	rep.More = cursor != "" && tried > 0
	return ctx.Err()
}

// skipScanFactor bounds the expired pass's reading of orders that are backing off, as
// a multiple of MaxPerRound.
const skipScanFactor = 10

// cancelAll cancels the readable orders of nos in batches (batch.go) and
// returns how many it tried (those not backing off).
func (r *Reconciler) cancelAll(ctx context.Context, nos []string, rep *Report) int {
	return r.expireBatches(ctx, r.readable(ctx, nos, rep), rep)
}

// cancelOne cancels one expired order, bounded by OrderTimeout, and counts
// it in rep under mu: a failure is backed off.
func (r *Reconciler) cancelOne(ctx context.Context, no string, rep *Report, mu *sync.Mutex) {
	octx, done := context.WithTimeout(ctx, r.c.OrderTimeout)
	res, err := r.c.Service.Cancel(octx, cancel.Request{OrderNo: no, Reason: cancel.ReasonReconcile, OnlyIfDue: true})
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
	r.settle(ctx, no, err)
	if err == nil && res.Changed {
		r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindRepaired, OrderNo: no, Reason: "expired", Seats: len(res.Seats)})
	}
}

// waiting reports whether no is backing off after a failure.
func (r *Reconciler) waiting(no string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.backoff[no]
	return ok && r.c.Clock.Now().Before(b.until)
}

// settle records the outcome of one order's cancel: a failure doubles its
// backoff (from BackoffMin up to BackoffMax), a success forgets it.
func (r *Reconciler) settle(ctx context.Context, no string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil || ctx.Err() != nil {
		delete(r.backoff, no)
		return
	}
	b := r.backoff[no]
	b.wait = min(max(2*b.wait, BackoffMin), BackoffMax)
	b.until = r.c.Clock.Now().Add(b.wait)
	r.backoff[no] = b
	r.obs.Observe(ctx, expiry.Event{Kind: expiry.KindSkipped, OrderNo: no, Reason: "cancel", Err: err})
	r.log.ErrorContext(ctx, "reconcile: cancel failed; skipping the order for now", "order", no, "retry_in", b.wait, "err", err)
}

// pruneBackoff forgets orders whose backoff ran out long ago (decided
// meanwhile, or never failing again), so the map holds only live failures.
func (r *Reconciler) pruneBackoff() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for no, b := range r.backoff {
		if r.c.Clock.Now().Sub(b.until) > BackoffMax {
			delete(r.backoff, no)
		}
	}
}

// locks runs the lock pass from where the last round left it.
func (r *Reconciler) locks(ctx context.Context, rep *Report) error {
	r.mu.Lock()
	cursor := r.cursor
	r.mu.Unlock()
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
		r.mu.Lock()
		r.cursor = next
		r.mu.Unlock()
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

// refunds hands failed refund hooks back to the host.
func (r *Reconciler) refunds(ctx context.Context, rep *Report) error {
	n, err := r.c.Service.RetryDiscrepancies(ctx, r.c.Batch)
	rep.Refunds += n
	if err != nil {
		return fmt.Errorf("reconcile: retry refund hooks: %w", err)
	}
	return nil
}

// Run calls Round every interval until ctx is done, logging errors (a failed
// pass is retried at the next round). A round whose the expired pass stopped at its
// bound is followed by the next at once, so a backlog drains at full rate.
// It returns ctx's error, or an error at once for an interval <= 0.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("reconcile: Run interval %v is not positive", interval)
	}
	wake := make(chan struct{}, 1)
	for {
		rep, err := r.Round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.ErrorContext(ctx, "reconcile round had errors", "err", err)
		case rep.Expired+rep.Released+rep.Sold+rep.Restored > 0:
			r.log.InfoContext(ctx, "reconcile round", "expired", rep.Expired, "released", rep.Released,
				"sold", rep.Sold, "restored", rep.Restored, "skipped", rep.Skipped)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rep.More {
			continue
		}
		stop := r.c.Clock.AfterFunc(interval, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-wake:
		}
	}
}
