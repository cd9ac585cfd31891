package e2e_test

// The model test's actions on messages and time (model_test.go): deliveries
// (early, late, duplicated, stray), late payments, deadline changes,
// reconcile rounds, the clock and injected faults.

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Deliver hands a message in flight to the consumer: now (early, if the order
// is not due), at its due time, or late; it may be kept in flight to arrive
// again (a duplicate).
func (m *machine) Deliver(t *rapid.T) {
	if len(m.flights) == 0 {
		t.Skip("no message in flight")
	}
	i := rapid.IntRange(0, len(m.flights)-1).Draw(t, "flight")
	f := m.flights[i]
	switch rapid.SampledFrom([]string{"now", "on_time", "late"}).Draw(t, "when") {
	case "on_time":
		if d := f.due.Sub(m.appNow()); m.env.clock != nil || d < 400*time.Millisecond {
			m.pass(d)
		}
	case "late":
		extra := time.Duration(rapid.IntRange(1, 600).Draw(t, "late_by_s")) * time.Second
		if m.env.clock == nil {
			extra = extra / 3000 // 0.3 ms .. 200 ms
		}
		if d := f.due.Sub(m.appNow()); m.env.clock != nil || d < 400*time.Millisecond {
			m.pass(d + extra)
		}
	}
	again := rapid.Bool().Draw(t, "deliver_again_later")
	acked := m.deliver(t, f.msg, f.delivered > 0)
	f.delivered++
	if acked && !again {
		m.flights = slices.Delete(m.flights, i, i+1)
	}
}

// DeliverDuplicate delivers again a message that was already delivered (and
// acknowledged) once, as an at-least-once broker may.
func (m *machine) DeliverDuplicate(t *rapid.T) {
	if len(m.nos) == 0 {
		t.Skip("no order yet")
	}
	no := rapid.SampledFrom(m.nos).Draw(t, "order")
	m.deliver(t, expiry.Message{OrderNo: no, Hop: rapid.IntRange(1, 3).Draw(t, "hop")}, true)
}

// DeliverStray delivers a message nobody sent: an unknown order, or a body
// that is not a message at all.
func (m *machine) DeliverStray(t *rapid.T) {
	if rapid.Bool().Draw(t, "garbage") {
		body := rapid.SampledFrom([]string{"", "oe1 ", "oe1 x{y} 1", "oe1 ok 0", "hello", "oe1 " + strings.Repeat("a", 300) + " 1"}).Draw(t, "body")
		snap := m.snapshot(t)
		bad := m.obs.kinds[expiry.KindBadMessage]
		if v := m.shell.Process(m.ctx, expiry.Delivery{Body: []byte(body), TraceID: "trace"}); v != expiry.Ack {
			m.violate("I7: garbage %q got verdict %v, want Ack", body, v)
		}
		if m.obs.kinds[expiry.KindBadMessage] != bad+1 {
			m.violate("I7: garbage %q was not counted", body)
		}
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("I7: garbage %q changed the stores", body)
		}
		m.stats.kinds["deliver_garbage"]++
		return
	}
	m.deliver(t, expiry.Message{OrderNo: m.env.prefix + "stray" + strconv.Itoa(rapid.IntRange(0, 9).Draw(t, "n")), Hop: 1}, false)
}

// deliver runs one delivery through the handler (directly or through the
// shell), checks its outcome against the model, and reports whether the
// transport may forget the message.
func (m *machine) deliver(t *rapid.T, msg expiry.Message, duplicate bool) bool {
	viaShell := rapid.Bool().Draw(t, "via_shell")
	o := m.orders[msg.OrderNo]
	before := m.state(o)
	var snap *mSnap
	if before != "pending" {
		snap = m.snapshot(t)
	}
	t0 := m.storeNow(t)
	var outcome expiry.Outcome
	var err error
	if viaShell {
		body, eerr := expiry.EncodeMessage(msg)
		if eerr != nil {
			t.Fatal(eerr)
		}
		v := m.shell.Process(m.ctx, expiry.Delivery{Body: body, TraceID: "trace-" + msg.OrderNo})
		outcome, err = m.obs.handled.Outcome, m.obs.handled.Err
		if (v == expiry.Ack) != (err == nil) {
			m.violate("shell verdict %v for outcome %v err %v", v, outcome, err)
		}
	} else {
		outcome, err = m.h.Handle(m.ctx, msg)
	}
	t1 := m.storeNow(t)
	if msg.Warning {
		return m.checkWarning(msg, o, before, outcome, err, t0, t1, snap, t)
	}

	kind := "deliver_" + before
	want := map[expiry.Outcome]bool{}
	switch before {
	case "missing":
		want[expiry.OutcomeMissing] = true
	case "paid", "cancelled":
		want[expiry.OutcomeFinal] = true
		kind = "deliver_final"
	default:
		due, notDue := !o.p.ExpireAt.After(t0), o.p.ExpireAt.After(t1)
		switch {
		case due && t0.Sub(o.p.ExpireAt) < time.Second:
			kind = "deliver_on_time"
		case due:
			kind = "deliver_late"
		case notDue:
			kind = "deliver_early"
		}
		want[expiry.OutcomeCancelled] = !notDue
		want[expiry.OutcomeRearmed] = !due
	}
	if duplicate {
		kind += "_duplicate"
	}
	m.stats.kinds[kind]++
	if m.hit("Order", "CancelPending", "Send") {
		want[expiry.OutcomeFailed] = true
	}
	if !want[outcome] {
		m.violate("delivery of %s (%s, due %s, store clock %s..%s): outcome %v err %v", msg.OrderNo, before, mDue(o), t0, t1, outcome, err)
	}
	if (outcome == expiry.OutcomeFailed) != (err != nil) {
		m.violate("delivery of %s: outcome %v with err %v", msg.OrderNo, outcome, err)
	}
	if snap != nil {
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("I5: a delivery for %s order %s changed the stores:\nbefore %+v\nafter  %+v", before, msg.OrderNo, snap, after)
		}
	}
	return err == nil
}

// checkWarning checks one delivery of a warning message: it fires the hook
// once, for a pending order within the lead of its deadline, re-arms when it
// came early (or the deadline was extended), and otherwise changes nothing.
func (m *machine) checkWarning(msg expiry.Message, o *mOrder, before string, outcome expiry.Outcome, err error, t0, t1 time.Time, snap *mSnap, t *rapid.T) bool {
	kind := "warning_" + before
	ok := false
	switch before {
	case "missing":
		ok = outcome == expiry.OutcomeMissing
	case "paid", "cancelled":
		ok = outcome == expiry.OutcomeFinal
	default:
		due := !o.p.ExpireAt.After(t0)
		switch outcome {
		case expiry.OutcomeWarned:
			ok = !due && !o.p.ExpireAt.Add(-msg.Lead).After(t1) && o.warned == 1
			kind = "warning_fired"
		case expiry.OutcomeRearmed:
			ok = o.p.ExpireAt.Add(-msg.Lead).After(t0) && o.warned == 0
			kind = "warning_early"
		case expiry.OutcomeFinal:
			ok = o.warned > 0 || !o.p.ExpireAt.After(t1)
			kind = "warning_final"
		}
	}
	m.stats.kinds[kind]++
	if m.hit("MarkWarned", "Send", "Order") && outcome == expiry.OutcomeFailed {
		ok = true
	}
	if !ok {
		m.violate("warning for %s (%s, due %s, lead %s, warned %d, store clock %s..%s): outcome %v err %v", msg.OrderNo, before, mDue(o), msg.Lead, m.warnedOf(o), t0, t1, outcome, err)
	}
	if snap != nil {
		if after := m.snapshot(t); !reflect.DeepEqual(snap, after) {
			m.violate("a warning for %s order %s changed the stores", before, msg.OrderNo)
		}
	}
	return err == nil
}

func (m *machine) warnedOf(o *mOrder) int {
	if o == nil {
		return 0
	}
	return o.warned
}

// PayLate pays an order that is cancelled (a late payment), once or
// repeated three times, by its owner: after a timeout or the reconciler it
// is reinstated when its seats are free, after the user's cancel or an
// expire-now it is refunded (once per payment id).
func (m *machine) PayLate(t *rapid.T) {
	var cancelled []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusCancelled {
			cancelled = append(cancelled, no)
		}
	}
	if len(cancelled) == 0 {
		t.Skip("no cancelled order")
	}
	no := rapid.SampledFrom(cancelled).Draw(t, "order")
	o := m.orders[no]
	m.next++
	pid := fmt.Sprintf("pay-%s-late%d", no, m.next)
	m.stats.kinds["pay_late_after_"+string(o.reason)]++
	for i := rapid.IntRange(1, 3).Draw(t, "callbacks"); i > 0; i-- {
		m.pay(t, no, o, o.p.UserID, true, pid)
	}
}

// PayLateResold cancels nothing itself: it places a new order on a seat of
// a cancelled order (the seat re-sold), then pays the cancelled one late:
// the seat is never taken from the new order.
func (m *machine) PayLateResold(t *rapid.T) {
	var cancelled []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusCancelled && (o.reason == cancel.ReasonTimeout || o.reason == cancel.ReasonReconcile) {
			cancelled = append(cancelled, no)
		}
	}
	if len(cancelled) == 0 {
		t.Skip("no order cancelled by a timeout")
	}
	no := rapid.SampledFrom(cancelled).Draw(t, "order")
	o := m.orders[no]
	seat := rapid.SampledFrom(o.p.Seats).Draw(t, "seat")
	m.next++
	other := fmt.Sprintf("%so%d", m.env.prefix, m.next)
	m.place(t, other, rapid.SampledFrom(m.users).Draw(t, "user"), o.p.ShowID, []string{seat}, m.storeNow(t).Add(m.env.expiryMax))
	m.next++
	m.stats.kinds["pay_late_resold"]++
	m.pay(t, no, o, o.p.UserID, true, fmt.Sprintf("pay-%s-late%d", no, m.next))
	if oo := m.orders[other]; oo.placed && oo.status == expiry.StatusPending && o.status == expiry.StatusPaid && !m.lost && !m.lostShows[o.p.ShowID] {
		m.violate("%s reinstated with seat %s, which %s holds", no, seat, other)
	}
}

// Extend extends an order's deadline (the buyer in the payment flow, by
// its owner or without a user), once or repeated; the messages in flight
// must follow the stored deadline (I4: never cancelled at the old one).
func (m *machine) Extend(t *rapid.T) {
	no, o := m.pickPlaced(t)
	by := ""
	if rapid.Bool().Draw(t, "by_owner") {
		by = o.p.UserID
	}
	d := time.Duration(rapid.Int64Range(1, m.env.expiryMax.Milliseconds()).Draw(t, "extend_ms")) * time.Millisecond
	before := m.state(o)
	t0 := m.storeNow(t)
	old := o.p.ExpireAt
	for i := 0; i < rapid.IntRange(1, 3).Draw(t, "calls"); i++ {
		res, err := m.svc.Extend(m.ctx, no, by, d)
		if m.hit("SetDeadline", "Order") {
			return
		}
		switch {
		case err != nil:
			m.violate("extend %s (%s): %v", no, before, err)
		case res.Changed && before != "pending":
			m.violate("extended %s order %s", before, no)
		case i == 0 && !res.Changed && before == "pending" && old.After(t0.Add(time.Second)) && old.Before(t0.Add(d-time.Second)):
			m.violate("extend pending %s (due %s) by %s at %s: not changed", no, old, d, t0)
		}
	}
	m.stats.kinds["extend_"+before]++
}

// ExpireNow is the operator's expire-now: a pending order is cancelled at
// once (reason expired); a late payment after it is refunded.
func (m *machine) ExpireNow(t *rapid.T) {
	no, o := m.pickPlaced(t)
	before := m.state(o)
	res, err := m.svc.ExpireNow(m.ctx, no)
	m.stats.kinds["expire_now_"+before]++
	if m.hit("CancelPending") {
		return
	}
	if err != nil || res.Changed != (before == "pending") {
		m.violate("expire-now of %s %s: changed=%v err=%v", before, no, res.Changed, err)
	}
}

// Shorten moves a pending order's deadline earlier (to within a tenth of
// the longest expiry); its new message arrives in time.
func (m *machine) Shorten(t *rapid.T) {
	no, o := m.pickPlaced(t)
	before := m.state(o)
	d := time.Duration(rapid.Int64Range(0, (m.env.expiryMax/10).Milliseconds()).Draw(t, "shorten_ms")) * time.Millisecond
	_, err := m.svc.Shorten(m.ctx, no, "", d)
	m.stats.kinds["shorten_"+before]++
	if m.hit("SetDeadline", "Order", "Send") {
		return
	}
	if err != nil {
		m.violate("shorten %s %s: %v", before, no, err)
	}
}

// WarnRedeliver delivers an order's warning message again (a broker's
// duplicate, after the payment, after the cancel): it never fires twice.
func (m *machine) WarnRedeliver(t *rapid.T) {
	no, _ := m.pickPlaced(t)
	m.deliver(t, expiry.Message{OrderNo: no, Hop: rapid.IntRange(1, 3).Draw(t, "hop"), Warning: true, Lead: m.lead}, true)
}

func mDue(o *mOrder) string {
	if o == nil {
		return "-"
	}
	return o.p.ExpireAt.String()
}

// Reconcile runs a reconcile "interval" on one of two reconciler hosts: a
// round, and the next at once while the last stopped at its bound (as Run
// does). Unless a failure struck the expired pass itself, that leaves no
// order pending that was due when it started, but the stuck ones (I3, I12).
func (m *machine) Reconcile(t *rapid.T) {
	host := rapid.IntRange(0, 1).Draw(t, "host")
	t0 := m.storeNow(t)
	rounds, err := m.rounds(m.hosts[host])
	m.stats.kinds[fmt.Sprintf("reconcile_rounds_%d", min(rounds, 3))]++
	if len(m.hits) == 0 && err != nil {
		m.violate("reconcile round without failures: %v", err)
	}
	// A failure after an order's commit (its release, a batch's answer)
	// or of another pass holds no due order back (I3, I12).
	if m.expiredPassIntact() {
		m.noneDue(t0, "a reconcile round")
	}
}

// rounds runs rounds on r while they stop at their bound (at most 40), and
// notes what the seat store's repair completed.
func (m *machine) rounds(r *reconcile.Reconciler) (int, error) {
	var errs []error
	for n := 1; ; n++ {
		rep, err := r.Round(m.ctx)
		errs = append(errs, err)
		if rep.Rebuilt {
			m.lost = false
			m.stats.kinds["rebuilt"]++
		}
		left, ok := m.repairPasses[r]
		if !ok && len(m.repairPasses) > 0 {
			left = 1 // a reconciler that began after the loss
		}
		if rep.ClaimsComplete && !m.lost && left > 0 {
			if m.repairPasses[r] = left - 1; left == 1 { // that pass began after the loss
				m.repairPasses = nil
				m.lostShows = map[string]bool{}
				m.stats.kinds["show_repaired"]++
			}
		}
		if rep.ClaimsComplete && !m.lost {
			for key, passes := range m.reclaim {
				left, ok := passes[r]
				if !ok {
					left = 1 // a reconciler that began after the release
				}
				if passes[r] = left - 1; left <= 1 { // that pass began after the release
					delete(m.reclaim, key)
					m.stats.kinds["blocked_claim_reclaimed"]++
				}
			}
		}
		m.stats.kinds["skipped"] += rep.Skipped
		m.stats.kinds["refund_retried"] += rep.Refunds
		if !rep.More || n == 40 {
			return n, errors.Join(errs...)
		}
	}
}

func (m *machine) noneDue(t0 time.Time, after string) {
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending && !o.p.ExpireAt.After(t0) && !m.stuck[no] &&
			!m.appNow().Before(m.backoff[no]) {
			m.violate("I3: %s still pending after %s, due %s (store clock %s)", no, after, o.p.ExpireAt, t0)
		}
	}
}

func (m *machine) PassTime(t *rapid.T) {
	if m.env.clock != nil {
		m.pass(time.Duration(rapid.IntRange(1, 900).Draw(t, "seconds")) * time.Second)
		return
	}
	m.pass(time.Duration(rapid.IntRange(10, 300).Draw(t, "ms")) * time.Millisecond)
}

func (m *machine) ArmFault(t *rapid.T) {
	f := rapid.SampledFrom(m.faultOps).Draw(t, "fault")
	mode := mBefore
	if f.lostAck && rapid.Bool().Draw(t, "lost_ack") {
		mode = mLostAck
	}
	m.armed[f.op] = mode
}

// SeatStoreOutage takes the seat store down for the next few actions: every
// seat operation fails.
func (m *machine) SeatStoreOutage(t *rapid.T) {
	m.outage = rapid.IntRange(1, 4).Draw(t, "actions") + 1 // +1: this action's own count-down
}

// SkewClock sets the placing host's clock ahead or behind (a tenth of the
// longest expiry: two minutes on the fake clock): its messages then arrive
// early (re-armed by the store's clock) or late (the reconciler's), and no
// decision may change (I4, I11).
func (m *machine) SkewClock(t *rapid.T) {
	unit := m.env.expiryMax / 10
	m.skew = time.Duration(rapid.IntRange(-1, 1).Draw(t, "skew")) * unit
	m.stats.kinds[fmt.Sprintf("skew_%+d", m.skew/unit)]++
}

// skewClock is a clock off by *skew.
type skewClock struct {
	expiry.Clock
	skew *time.Duration
}

func (c skewClock) Now() time.Time { return c.Clock.Now().Add(*c.skew) }
