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
//     until it is gone those rounds run this pass alone, and the passes
//     below keep their pace of once per interval (see Run);
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
	// OrderTimeout bounds the cancel of one batch of expired orders, and of
	// one order tried alone; one that takes longer is skipped for now. The
	// orders of a batch share its transaction: one whose host hook waits
	// on a lock delays its batch-mates once, by OrderTimeout at most; they
	// are then tried alone, Workers at once, and it backs off. A row
	// another transaction holds is passed by, not waited for.
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

	// Each pass's own state, under its own mutex, in the pass's file.
	expiredPass expiredPass // expired.go
	lockPass    lockPass    // locks.go
	claimsPass  claimsPass  // claims.go
	soldPass    soldPass    // sold.go
}

// New returns a Reconciler, or an error naming the field that is missing or
// out of range.
func New(c Config) (*Reconciler, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{c: c, obs: c.Observer, log: c.Logger}
	r.expiredPass.backoff = map[string]backoff{}
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
	// pass went past: their seats are held as a pending order's (neither
	// freed nor sold; locked again if the seat store lost them) until the
	// host gives the order a status of the mapping. Each is reported, in every round while it lasts, as an
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
// pass is retried at the next round). A round whose expired pass stopped at
// its bound is followed by the next at once, so a backlog drains at full
// rate; while it drains, those rounds run the expired pass alone, and the
// other passes (locks, claims, sold seats, refunds) run in a full round once
// per interval, as in quiet times: each of them starts again at most one
// interval and one round after it last started (measured by the Runtime's
// clock, and at once should that clock step back), backlog or not, also
// when a backlog ends. A host that wants every pass in every round calls
// Round itself. Run returns ctx's error, or an error at once for an
// interval <= 0.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("reconcile: Run interval %v is not positive", interval)
	}
	wake := make(chan struct{}, 1)
	var lastFull time.Time // when the last full round started
	backlog := false       // the last round's expired pass stopped at its bound
	for {
		var rep Report
		var err error
		passes := "all"
		// A clock that stepped back (a host's Clock without a monotonic
		// reading) makes the full round due, so that it never starves.
		if now := r.c.Clock.Now(); !backlog || now.Sub(lastFull) >= interval || now.Before(lastFull) {
			lastFull = now
			rep, err = r.Round(ctx)
		} else {
			// The other passes' repairs keep their pace (once per interval);
			// the rounds between give all their time to the backlog: on a
			// fast database those passes were nearly half of a round.
			passes = "expired"
			err = r.expired(ctx, &rep)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.ErrorContext(ctx, "reconcile round had errors", "passes", passes, "err", err)
		case rep.Expired+rep.Released+rep.Sold+rep.Restored > 0:
			r.log.InfoContext(ctx, "reconcile round", "passes", passes, "expired", rep.Expired, "released", rep.Released,
				"sold", rep.Sold, "restored", rep.Restored, "skipped", rep.Skipped)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if backlog = rep.More; backlog {
			continue
		}
		wait := interval
		if passes == "expired" {
			// The backlog is gone: the next full round is due one interval
			// after the last one started, not one interval from now.
			since := r.c.Clock.Now().Sub(lastFull)
			if since < 0 || since >= interval {
				continue
			}
			wait = interval - since
		}
		stop := r.c.Clock.AfterFunc(wait, func() {
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
