package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
)

// The checks read the stores back: SQL is the truth about orders, Redis about
// seats; what the demo or the library reported along the way is compared
// with them, never trusted instead of them.

type orderRow struct {
	no, user, show      string
	status              expiry.Status
	reason              string
	expireMS, updatedMS int64
}

type seatRow struct {
	order string
	state int // 1 locked, 2 sold
}

type seatKey struct{ show, seat string }

// rebind turns ? placeholders into $n for PostgreSQL.
func (d *demo) rebind(q string) string {
	if d.env.dialect != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// inShows returns "(?, ?, …)" and the run's shows: every query is limited to
// them, so runs sharing a database do not see each other.
func (d *demo) inShows() (string, []any) {
	args := make([]any, len(d.shows))
	for i, s := range d.shows {
		args[i] = s
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", len(d.shows)), ", ") + ")", args
}

func (d *demo) countPending(ctx context.Context) (int, error) {
	in, args := d.inShows()
	var n int
	err := d.env.db.QueryRowContext(ctx, d.rebind("SELECT COUNT(*) FROM oe_order WHERE status = 0 AND show_id IN "+in), args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count pending orders: %w", err)
	}
	return n, nil
}

func (d *demo) loadOrders(ctx context.Context) (map[string]orderRow, error) {
	in, args := d.inShows()
	rows, err := d.env.db.QueryContext(ctx, d.rebind(
		"SELECT order_no, user_id, show_id, status, COALESCE(cancel_reason, ''), expire_at_ms, updated_at_ms FROM oe_order WHERE show_id IN "+in), args...)
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

func (d *demo) loadSeatRows(ctx context.Context) (map[seatKey]seatRow, error) {
	in, args := d.inShows()
	rows, err := d.env.db.QueryContext(ctx, d.rebind("SELECT show_id, seat_id, order_no, state FROM oe_order_seat WHERE show_id IN "+in), args...)
	if err != nil {
		return nil, fmt.Errorf("read seat claims: %w", err)
	}
	defer rows.Close()
	out := map[seatKey]seatRow{}
	for rows.Next() {
		var k seatKey
		var r seatRow
		if err := rows.Scan(&k.show, &k.seat, &r.order, &r.state); err != nil {
			return nil, fmt.Errorf("read seat claims: %w", err)
		}
		out[k] = r
	}
	return out, rows.Err()
}

// verify checks the invariants on what the stores hold now, prints each
// check and the summary line (last), and returns errViolations if one failed.
func (d *demo) verify(ctx context.Context) error {
	orders, err := d.loadOrders(ctx)
	if err != nil {
		return err
	}
	claims, err := d.loadSeatRows(ctx)
	if err != nil {
		return err
	}
	locked, sold := map[seatKey]string{}, map[seatKey]string{}
	for _, show := range d.shows {
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
	d.tl.plain("verify (read back from SQL and Redis):")
	var violations []string
	check := func(name string, fails []string) {
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
	for _, p := range d.plans {
		if _, ok := orders[p.no]; !ok {
			f = append(f, p.no+" was placed but is not in SQL")
		}
	}
	for no := range orders {
		if d.byNo[no] == nil {
			f = append(f, no+" is in SQL but was never placed (a rejected or rolled-back order)")
		}
	}
	for _, x := range d.extras {
		if d.sends[x] > 0 {
			f = append(f, "a message was sent for "+x+", which never committed (I6)")
		}
	}
	check(fmt.Sprintf("the %d placed orders are in SQL; no rejected or rolled-back one is, nor was sent (I6)", len(d.plans)), sorted(f))

	f = nil
	var paid, cancelled, pending, byTimeout, byUser, byReconciler int
	var maxLateMS int64
	paidSeats := map[[2]string]int{}
	for _, o := range orders {
		want := "paid"
		switch o.status {
		case expiry.StatusPending:
			pending++
			continue
		case expiry.StatusPaid:
			paid++
		case expiry.StatusCancelled:
			cancelled++
			want = "cancelled(" + o.reason + ")"
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
		if got := d.decided[o.no]; len(got) != 1 || got[0] != want {
			f = append(f, fmt.Sprintf("%s is %s in SQL, the library reported %v", o.no, want, got))
		}
	}
	check(fmt.Sprintf("no order pending (I3): %d paid, %d cancelled", paid, cancelled), pendingFails(orders))
	check("each order decided exactly once, as the library reported (I1)", sorted(f))

	f = nil
	for _, o := range orders {
		if (o.reason == "timeout" || o.reason == "reconcile") && o.updatedMS < o.expireMS {
			f = append(f, fmt.Sprintf("%s cancelled (%s) %dms before expire_at", o.no, o.reason, o.expireMS-o.updatedMS))
		}
	}
	check(fmt.Sprintf("no timeout before expire_at by the database clock (I4); latest timeout %dms after it", maxLateMS), sorted(f))

	f = nil
	claimsOf := map[string]int{}
	for k, c := range claims {
		o, ok := orders[c.order]
		switch {
		case !ok:
			f = append(f, fmt.Sprintf("seat %s/%s claimed by unknown order %s", k.show, k.seat, c.order))
		case o.status != expiry.StatusPaid:
			f = append(f, fmt.Sprintf("seat %s/%s still claimed by %s order %s", k.show, k.seat, o.status, c.order))
		case c.state != 2:
			f = append(f, fmt.Sprintf("seat %s/%s of paid order %s is not marked sold", k.show, k.seat, c.order))
		default:
			paidSeats[[2]string{o.show, o.user}]++
		}
		claimsOf[c.order]++
	}
	for _, o := range orders {
		if p := d.byNo[o.no]; p != nil && o.status == expiry.StatusPaid && claimsOf[o.no] != len(p.seats) {
			f = append(f, fmt.Sprintf("paid order %s has %d seat claims, placed with %d", o.no, claimsOf[o.no], len(p.seats)))
		}
	}
	check("SQL seat claims: only paid orders keep seats, all marked sold", sorted(f))

	f = nil
	for k, no := range locked {
		f = append(f, fmt.Sprintf("seat %s/%s still locked by %s (%s)", k.show, k.seat, no, orders[no].status))
	}
	check("no seat locked in Redis (I2)", sorted(f))

	f = nil
	for k, c := range claims {
		if c.state == 2 && sold[k] != c.order {
			f = append(f, fmt.Sprintf("seat %s/%s sold to %s in SQL, Redis says %q", k.show, k.seat, c.order, sold[k]))
		}
	}
	for k, no := range sold {
		if c, ok := claims[k]; !ok || c.order != no || c.state != 2 {
			f = append(f, fmt.Sprintf("seat %s/%s sold to %s in Redis, not in SQL", k.show, k.seat, no))
		}
	}
	check(fmt.Sprintf("sold seats in Redis are exactly the seats of paid orders in SQL (%d)", len(sold)), sorted(f))

	f = nil
	pairs := map[[2]string]bool{}
	for _, p := range d.plans {
		pairs[[2]string{p.show, p.user}] = true
	}
	for _, s := range d.shows {
		pairs[[2]string{s, visitor}] = true
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
	check(fmt.Sprintf("purchase-limit counters equal the seats of paid orders (I8; %d user/show pairs)", len(pairs)), sorted(f))

	f = nil
	hooked := map[string]int{}
	for _, x := range d.discrepant {
		if hooked[x.paymentID]++; hooked[x.paymentID] == 2 {
			f = append(f, fmt.Sprintf("the refund hook ran more than once for payment %s of %s", x.paymentID, x.orderNo))
		}
		if o := orders[x.orderNo]; o.status != expiry.StatusCancelled {
			f = append(f, fmt.Sprintf("discrepancy reported for %s, which is %s", x.orderNo, o.status))
		}
	}
	check(fmt.Sprintf("every discrepancy (%d) is a payment for a cancelled order, refunded once per payment id", len(d.discrepant)), sorted(f))
	check("nothing went wrong while running (races, rejections, calls)", d.problems)

	d.tl.plain("")
	d.tl.plain("cancelled: %d by timeout, %d by their users, %d by the reconciler; %d messages for %d orders (%d re-arms)",
		byTimeout, byUser, byReconciler, d.hops, len(d.plans), d.rearms)
	d.tl.plain("summary: placed=%d paid=%d cancelled=%d pending=%d seats_locked=%d seats_sold=%d discrepancies=%d"+
		" races=%d rejected=%d rolled_back=%d hops=%d rearmed=%d by_reconciler=%d seats_repaired=%d bad_messages=%d max_late_ms=%d violations=%d",
		len(orders), paid, cancelled, pending, len(locked), len(sold), len(d.discrepant),
		d.races, d.rejected, d.rolledBack, d.hops, d.rearms, byReconciler, d.repairedSeats, d.badMessages, maxLateMS, len(violations))
	if len(violations) > 0 {
		return errViolations
	}
	return nil
}

func pendingFails(orders map[string]orderRow) []string {
	var f []string
	for _, o := range orders {
		if o.status == expiry.StatusPending {
			f = append(f, o.no+" is still pending")
		}
	}
	return sorted(f)
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
