package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// stamp formats a time read from a server, in UTC to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 MST") }

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// showOrder prints an order as SQL has it and its seats as Redis has them.
// A seat SQL and Redis disagree on is what the reconciler repairs: a
// cancelled order still locking seats, a pending one whose seats
// are gone.
func showOrder(ctx context.Context, e *env, no string, w io.Writer) error {
	if err := expiry.ValidateID("order number", no); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	o, err := e.store.Order(ctx, no)
	if errors.Is(err, expiry.ErrNotFound) {
		return fmt.Errorf("order %s: not in SQL", no)
	}
	if err != nil {
		return fmt.Errorf("order %s: %w", no, err)
	}
	show, err := e.seats.Show(ctx, o.ShowID)
	if err != nil {
		return fmt.Errorf("order %s: seats of show %s: %w", no, o.ShowID, err)
	}
	held, err := e.seats.Held(ctx, o.ShowID, o.UserID)
	if err != nil {
		return fmt.Errorf("order %s: seats held by %s: %w", no, o.UserID, err)
	}
	fmt.Fprintf(w, "order %s (read %s, by the database's clock)\n\nSQL\n", no, stamp(o.ReadAt))
	t := table(w)
	fmt.Fprintf(t, "  status\t%s\n  user\t%s\n  show\t%s\n", o.Status, o.UserID, o.ShowID)
	fmt.Fprintf(t, "  deadline\t%s\t%s\n", stamp(o.ExpireAt), due(o))
	if err := t.Flush(); err != nil {
		return err
	}
	var mine []string
	for seat, st := range show {
		if st.OrderNo == no {
			mine = append(mine, seat)
		}
	}
	sort.Strings(mine)
	fmt.Fprintf(w, "\nRedis (show %s)\n", o.ShowID)
	if len(mine) == 0 {
		fmt.Fprintln(w, "  no seat locked or sold for this order")
	} else {
		t = table(w)
		fmt.Fprintln(t, "  SEAT\tSTATE\tUSER\tLOCKED AT (Redis clock)")
		for _, seat := range mine {
			st := show[seat]
			state, at := "sold", ""
			if st.Status == cancel.SeatLocked {
				state, at = "locked", stamp(st.LockedAt)
			}
			fmt.Fprintf(t, "  %s\t%s\t%s\t%s\n", seat, state, st.UserID, at)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "  user %s holds %d seat(s) of show %s (the purchase-limit counter)\n", o.UserID, held, o.ShowID)
	if note := disagreement(o, len(mine)); note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	return nil
}

// due says how far the order is from its deadline, by the store's clock.
func due(o expiry.Order) string {
	left := o.Remaining().Round(time.Millisecond)
	switch {
	case o.Status != expiry.StatusPending:
		return ""
	case left > 0:
		return "due in " + left.String()
	default:
		return "OVERDUE by " + (-left).String()
	}
}

// disagreement names what the reconciler would repair about this order.
func disagreement(o expiry.Order, seatsInRedis int) string {
	switch {
	case o.Status == expiry.StatusCancelled && seatsInRedis > 0:
		return "! cancelled in SQL but seats still locked in Redis: the reconciler's lock pass releases them"
	case o.Status == expiry.StatusPending && o.Remaining() <= 0:
		return "! pending past its deadline: its expiry message is late or lost; the reconciler's expired pass cancels it"
	case o.Status != expiry.StatusCancelled && seatsInRedis == 0:
		return "! no seats in Redis for a live order: Redis lost them; the reconciler's claims pass restores them from SQL"
	}
	return ""
}

// overduePage is how many orders one scan query reads.
const overduePage = 500

// listOverdue prints up to n pending orders past their deadline, oldest
// first, paging through the reconciler's own index-backed scan.
func listOverdue(ctx context.Context, e *env, n int, w, progress io.Writer) error {
	total, oldest, err := e.store.Overdue(ctx)
	if err != nil {
		return fmt.Errorf("overdue: %w", err)
	}
	if total == 0 {
		fmt.Fprintln(w, "no pending order is past its deadline")
		return nil
	}
	fmt.Fprintf(w, "%d pending order(s) past their deadline, the oldest by %v (the database's clock)\n\n", total, oldest.Round(time.Millisecond))
	var rows []expiry.Order
	cursor, pages := "", 0
	for len(rows) < n {
		nos, next, err := e.store.Expired(ctx, cursor, min(overduePage, n-len(rows)))
		if err != nil {
			return fmt.Errorf("overdue: %w", err)
		}
		for _, no := range nos {
			o, err := e.store.Order(ctx, no)
			if errors.Is(err, expiry.ErrNotFound) {
				continue // deleted since the scan
			}
			if err != nil {
				return fmt.Errorf("overdue: order %s: %w", no, err)
			}
			if o.Status == expiry.StatusPending { // else decided since the scan
				rows = append(rows, o)
			}
		}
		if pages++; pages > 1 || next != "" {
			fmt.Fprintf(progress, "overdue: scanned %d orders…\n", len(rows))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(rows) == 0 { // all decided since Overdue counted them
		fmt.Fprintln(w, "none left: decided while listed")
		return nil
	}
	t := table(w)
	fmt.Fprintln(t, "ORDER\tUSER\tSHOW\tDEADLINE (database clock)\tOVERDUE BY")
	for _, o := range rows {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", o.No, o.UserID, o.ShowID, stamp(o.ExpireAt), (-o.Remaining()).Round(time.Millisecond))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if len(rows) == n && total > n {
		fmt.Fprintf(w, "the oldest %d of %d; -n for more\n", n, total)
	}
	return nil
}

// reconcileOnce runs one round and prints its report. A dry run gives the
// reconciler stores whose writes only count: it reads everything a round
// reads and reports what the round would change.
func reconcileOnce(ctx context.Context, e *env, dry bool, w, logs io.Writer) error {
	cfg := reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc,
		Runtime: expiry.Runtime{Logger: slog.New(slog.NewTextHandler(logs, nil))}}
	if dry {
		cfg.Seats = drySeats{e.seats}
		cfg.Service = dryService{e.store}
	}
	r, err := reconcile.New(cfg)
	if err != nil {
		return err
	}
	rep, err := r.Round(ctx)
	verb := "did"
	if dry {
		verb = "would do (dry run, nothing changed)"
	}
	fmt.Fprintf(w, "one reconcile round %s:\n", verb)
	t := table(w)
	for _, row := range []struct {
		what string
		n    int
	}{
		{"expired orders cancelled", rep.Expired},
		{"orders skipped (their cancel failed)", rep.Skipped},
		{"seat locks scanned", rep.Locks},
		{"seats released", rep.Released},
		{"seats left to the instance that just decided their order", rep.Settling},
		{"seats marked sold", rep.Sold},
		{"seats restored from SQL", rep.Restored},
		{"refund hooks retried", rep.Refunds},
	} {
		fmt.Fprintf(t, "  %s\t%d\n", row.what, row.n)
	}
	if ferr := t.Flush(); ferr != nil {
		return errors.Join(err, ferr)
	}
	if rep.Rebuilt {
		fmt.Fprintln(w, "  the seat store had lost its data (or was never rebuilt): rebuilt from SQL's claims")
	}
	if rep.More {
		fmt.Fprintln(w, "  more expired orders remain beyond this round's bound")
	}
	return err
}

// dryService stands in for the cancel service in a dry run: a cancel the
// real service would make (a pending order that is due by the store's
// clock) is reported as made, and nothing is written.
type dryService struct{ orders cancel.OrderStore }

// Scope is the order store's (a mapped store's reconciler is refused a
// service of another scope).
func (d dryService) Scope() string { return d.orders.Scope() }

// ExpireDue reports the orders Cancel would cancel, as the real service's
// batch would.
func (d dryService) ExpireDue(ctx context.Context, orderNos []string, reason cancel.Reason) ([]cancel.Result, error) {
	var out []cancel.Result
	for _, no := range orderNos {
		res, err := d.Cancel(ctx, cancel.Request{OrderNo: no, Reason: reason, OnlyIfDue: true})
		if err != nil && !errors.Is(err, expiry.ErrNotFound) {
			return out, err
		}
		if res.Changed {
			out = append(out, res)
		}
	}
	return out, nil
}

func (d dryService) Cancel(ctx context.Context, req cancel.Request) (cancel.Result, error) {
	o, err := d.orders.Order(ctx, req.OrderNo)
	if err != nil {
		return cancel.Result{}, err
	}
	due := o.Status == expiry.StatusPending && (!req.OnlyIfDue || o.Remaining() <= 0)
	return cancel.Result{Changed: due, Order: o}, nil
}

// RetryDiscrepancies retries nothing in a dry run.
func (dryService) RetryDiscrepancies(context.Context, int) (int, error) { return 0, nil }

// drySeats reads the real seat store and only counts its writes: Release
// and Sell report the seats still locked by the order (what the real call
// would change), Restore the claims it would restore, and MarkRestored
// leaves the store's "lost" marker alone.
type drySeats struct{ *redisseat.Seats }

func (d drySeats) Release(ctx context.Context, h cancel.Hold) (int, error) { return d.locked(ctx, h) }
func (d drySeats) Sell(ctx context.Context, h cancel.Hold) (int, error)    { return d.locked(ctx, h) }

// ReleaseAll reports what each hold's release would free, as Release.
func (d drySeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	out := make([]int, len(holds))
	for i, h := range holds {
		n, err := d.locked(ctx, h)
		if err != nil {
			return out, err
		}
		out[i] = n
	}
	return out, nil
}

func (drySeats) Restore(_ context.Context, claims []cancel.Claim) (int, error) {
	return len(claims), nil
}

func (drySeats) MarkRestored(context.Context, string) error { return nil }

func (d drySeats) locked(ctx context.Context, h cancel.Hold) (int, error) {
	show, err := d.Show(ctx, h.ShowID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, seat := range h.Seats {
		if st, ok := show[seat]; ok && st.OrderNo == h.OrderNo && st.Status == cancel.SeatLocked {
			n++
		}
	}
	return n, nil
}

// extend keeps a pending order open at least d from now, by the database's
// clock. An order already due, or already open longer, is left as it is.
func extend(ctx context.Context, e *env, no string, d time.Duration, w io.Writer) error {
	res, err := e.svc.Extend(ctx, no, "", d)
	if err != nil {
		return fmt.Errorf("extend %s: %w", no, err)
	}
	o := res.Order
	switch {
	case res.Changed:
		fmt.Fprintf(w, "order %s: deadline moved from %s to %s (%s)\n", no, stamp(res.Previous), stamp(o.ExpireAt), due(o))
	case o.Status != expiry.StatusPending:
		fmt.Fprintf(w, "order %s: not changed, it is %s\n", no, o.Status)
	case o.Remaining() <= 0:
		fmt.Fprintf(w, "order %s: not changed, it is already due (%s): the timeout decides it\n", no, due(o))
	default:
		fmt.Fprintf(w, "order %s: not changed, its deadline %s is already later (%s)\n", no, stamp(o.ExpireAt), due(o))
	}
	return nil
}

// expireNow cancels a pending order at once and gives its seats back.
func expireNow(ctx context.Context, e *env, no string, w io.Writer) error {
	res, err := e.svc.ExpireNow(ctx, no)
	if err != nil {
		return fmt.Errorf("expire %s: %w", no, err)
	}
	if !res.Changed {
		fmt.Fprintf(w, "order %s: not changed, it is %s\n", no, res.Order.Status)
		return nil
	}
	fmt.Fprintf(w, "order %s: cancelled now (reason expired); %d of %d seat(s) released in Redis\n", no, res.Released, len(res.Seats))
	return nil
}
