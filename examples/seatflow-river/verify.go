//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// The checks read back SQL (the truth about orders), the seat store and the
// decisions log both runs appended to; nothing a run remembered in memory
// survives the kill, so nothing of it is trusted here.

type orderRow struct {
	no, user, show      string
	status              expiry.Status
	reason              string
	expireMS, updatedMS int64
}

type seatKey struct{ show, seat string }

type claim struct {
	order string
	state int // 1 locked, 2 sold
}

type decision struct {
	run  int
	what string // "paid", "cancelled(timeout)", …
}

func (d *demo) loadOrders(ctx context.Context) (map[string]orderRow, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT order_no, user_id, show_id, status, COALESCE(cancel_reason, ''), expire_at_ms, updated_at_ms FROM oe_order")
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	defer rows.Close()
	out := map[string]orderRow{}
	for rows.Next() {
		var o orderRow
		if err := rows.Scan(&o.no, &o.user, &o.show, &o.status, &o.reason, &o.expireMS, &o.updatedMS); err != nil {
			return nil, fmt.Errorf("read orders: %w", err)
		}
		out[o.no] = o
	}
	return out, rows.Err()
}

func (d *demo) loadClaims(ctx context.Context) (map[seatKey]claim, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT show_id, seat_id, order_no, state FROM oe_order_seat")
	if err != nil {
		return nil, fmt.Errorf("read seat claims: %w", err)
	}
	defer rows.Close()
	out := map[seatKey]claim{}
	for rows.Next() {
		var k seatKey
		var c claim
		if err := rows.Scan(&k.show, &k.seat, &c.order, &c.state); err != nil {
			return nil, fmt.Errorf("read seat claims: %w", err)
		}
		out[k] = c
	}
	return out, rows.Err()
}

// loadDecisions reads the decisions log: "RUN ORDER WHAT" per line.
func loadDecisions(path string) (map[string][]decision, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]decision{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			// A line torn by the kill cannot happen (one write each),
			// but would show here.
			return nil, fmt.Errorf("decisions log: bad line %q", sc.Text())
		}
		run, err := strconv.Atoi(fields[0])
		if err != nil {
			return nil, fmt.Errorf("decisions log: bad line %q", sc.Text())
		}
		out[fields[1]] = append(out[fields[1]], decision{run, fields[2]})
	}
	return out, sc.Err()
}

func (o orderRow) outcome() string {
	switch o.status {
	case expiry.StatusPaid:
		return "paid"
	case expiry.StatusCancelled:
		return "cancelled(" + o.reason + ")"
	}
	return "pending"
}

// verify checks what the stores hold now, prints each check and the
// summary (last), and returns errViolations if one failed.
func (d *demo) verify(ctx context.Context) error {
	orders, err := d.loadOrders(ctx)
	if err != nil {
		return err
	}
	claims, err := d.loadClaims(ctx)
	if err != nil {
		return err
	}
	decisions, err := loadDecisions(d.path + ".decisions")
	if err != nil {
		return err
	}
	jobs, err := d.jobsLeft(ctx)
	if err != nil {
		return err
	}
	locked, sold := map[seatKey]string{}, map[seatKey]string{}
	for _, show := range shows {
		seats, err := d.seats.Show(ctx, show)
		if err != nil {
			return err
		}
		for seat, st := range seats {
			if st.Status == cancel.SeatLocked {
				locked[seatKey{show, seat}] = st.OrderNo
			} else {
				sold[seatKey{show, seat}] = st.OrderNo
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	d.tl.plain("")
	d.tl.plain("verify (read back from SQL, the seat store and the decisions log of both runs):")
	var violations []string
	check := func(name string, fails []string) {
		slices.Sort(fails)
		if len(fails) == 0 {
			d.tl.plain("  ok    %s", name)
			return
		}
		d.tl.plain("  FAIL  %s", name)
		for i, f := range fails {
			if i == 10 {
				d.tl.plain("          … and %d more", len(fails)-10)
				break
			}
			d.tl.plain("          VIOLATION: %s", f)
		}
		violations = append(violations, fails...)
	}

	var f []string
	for no := range orders {
		if d.byNo[no] == nil {
			f = append(f, no+" is in SQL but not in the batch")
		}
	}
	check(fmt.Sprintf("%d of the %d planned orders were placed (before the kill), and nothing else", len(orders), len(d.plans)), f)

	f = nil
	var paid, cancelled, pending, byTimeout, byUser, byReconciler int
	var maxLateMS int64
	for _, o := range orders {
		switch o.status {
		case expiry.StatusPending:
			pending++
			f = append(f, fmt.Sprintf("%s is still pending, %dms past its deadline", o.no, d.nowMS()-o.expireMS))
		case expiry.StatusPaid:
			paid++
		case expiry.StatusCancelled:
			cancelled++
			switch o.reason {
			case "timeout":
				byTimeout++
				maxLateMS = max(maxLateMS, o.updatedMS-o.expireMS)
			case "reconcile":
				byReconciler++
			case "user":
				byUser++
			}
		}
	}
	check(fmt.Sprintf("every order ended: %d paid, %d cancelled, none pending (I3)", paid, cancelled), f)

	f = nil
	twice, unlogged := 0, 0
	perRun := map[int]int{}
	for no, ds := range decisions {
		o, ok := orders[no]
		if !ok {
			f = append(f, fmt.Sprintf("%s decided (%v) but not in SQL", no, ds))
			continue
		}
		if len(ds) > 1 {
			twice++
			f = append(f, fmt.Sprintf("%s decided %d times: %v", no, len(ds), ds))
		}
		for _, x := range ds {
			perRun[x.run]++
			if x.what != o.outcome() {
				f = append(f, fmt.Sprintf("%s: run %d reported %s, SQL says %s", no, x.run, x.what, o.outcome()))
			}
		}
	}
	for no, o := range orders {
		if o.status != expiry.StatusPending && len(decisions[no]) == 0 {
			unlogged++ // decided by run 1 in the instant between its commit and the log
		}
	}
	runs, byRun := make([]string, 0, d.run), make([]string, 0, d.run)
	for r := 1; r <= d.run; r++ {
		runs = append(runs, fmt.Sprintf("%d in run %d", perRun[r], r))
		byRun = append(byRun, strconv.Itoa(perRun[r]))
	}
	check(fmt.Sprintf("each order decided exactly once, as SQL has it (I1): %s; %d killed before its report", strings.Join(runs, ", "), unlogged), f)

	f = nil
	actedOut := 0
	for _, o := range orders {
		p := d.byNo[o.no]
		if p == nil {
			continue
		}
		timedOut := o.reason == "timeout" || o.reason == "reconcile"
		switch {
		case p.kind == kindPay && o.status == expiry.StatusPaid, p.kind == kindCancel && o.reason == "user":
		case p.kind != kindExpire && timedOut:
			actedOut++ // its user's action fell while the service was down
		case p.kind == kindExpire && timedOut:
		case o.status != expiry.StatusPending:
			f = append(f, fmt.Sprintf("%s ended %s, but its plan was: %s", o.no, o.outcome(), p.intent()))
		}
	}
	check(fmt.Sprintf("each order ended as its user acted; %d actions fell while the service was down (those orders expired)", actedOut), f)

	f = nil
	for _, o := range orders {
		if (o.reason == "timeout" || o.reason == "reconcile") && o.updatedMS < o.expireMS {
			f = append(f, fmt.Sprintf("%s cancelled (%s) %dms before its deadline", o.no, o.reason, o.expireMS-o.updatedMS))
		}
	}
	check(fmt.Sprintf("no order cancelled before its deadline by the database clock (I4); latest timeout %dms after it", maxLateMS), f)

	f = nil
	paidSeats := map[[2]string]int{}
	for k, c := range claims {
		o, ok := orders[c.order]
		switch {
		case !ok:
			f = append(f, fmt.Sprintf("seat %s/%s claimed by unknown order %s", k.show, k.seat, c.order))
		case o.status != expiry.StatusPaid:
			f = append(f, fmt.Sprintf("seat %s/%s still claimed by %s order %s", k.show, k.seat, o.outcome(), c.order))
		case c.state != 2:
			f = append(f, fmt.Sprintf("seat %s/%s of paid order %s is not marked sold", k.show, k.seat, c.order))
		default:
			paidSeats[[2]string{o.show, o.user}]++
		}
	}
	check("SQL seat claims: only paid orders keep seats, all sold", f)

	f = nil
	for k, no := range locked {
		f = append(f, fmt.Sprintf("seat %s/%s still locked by %s (%s)", k.show, k.seat, no, orders[no].outcome()))
	}
	check("no seat locked in the seat store (I2): none held by a cancelled order", f)

	f = nil
	for k, c := range claims {
		if c.state == 2 && sold[k] != c.order {
			f = append(f, fmt.Sprintf("seat %s/%s sold to %s in SQL, the seat store says %q", k.show, k.seat, c.order, sold[k]))
		}
	}
	for k, no := range sold {
		if c, ok := claims[k]; !ok || c.order != no || c.state != 2 {
			f = append(f, fmt.Sprintf("seat %s/%s sold to %s in the seat store, not in SQL", k.show, k.seat, no))
		}
	}
	check(fmt.Sprintf("sold seats in the seat store are exactly the paid orders' in SQL (%d)", len(sold)), f)

	f = nil
	pairs := map[[2]string]bool{}
	for _, p := range d.plans {
		pairs[[2]string{p.show, p.user}] = true
	}
	for pair := range pairs {
		held, err := d.seats.Held(ctx, pair[0], pair[1])
		if err != nil {
			return err
		}
		if held != paidSeats[pair] {
			f = append(f, fmt.Sprintf("%s in %s: limit counter %d, seats in paid orders %d", pair[1], pair[0], held, paidSeats[pair]))
		}
	}
	check(fmt.Sprintf("purchase-limit counters equal the seats of paid orders (I8; %d user/show pairs)", len(pairs)), f)

	f = nil
	if jobs > 0 {
		f = append(f, fmt.Sprintf("%d River jobs still to be worked", jobs))
	}
	check("River: no job left to work", f)
	check("nothing went wrong while running", slices.Clone(d.problems))

	d.tl.plain("")
	d.tl.plain("summary: planned=%d placed=%d paid=%d cancelled=%d pending=%d by_timeout=%d by_user=%d by_reconciler=%d"+
		" decided_by_run=%s decided_twice=%d unlogged=%d seats_restored=%d seats_locked=%d seats_sold=%d"+
		" missed_actions=%d rearmed=%d jobs_left=%d max_late_ms=%d violations=%d",
		len(d.plans), len(orders), paid, cancelled, pending, byTimeout, byUser, byReconciler,
		strings.Join(byRun, "/"), twice, unlogged, d.restored, len(locked), len(sold),
		actedOut, d.rearms, jobs, maxLateMS, len(violations))
	if len(violations) > 0 {
		return errViolations
	}
	return nil
}

func (d *demo) nowMS() int64 {
	now, err := d.store.Now(context.Background())
	if err != nil {
		return 0
	}
	return now.UnixMilli()
}
