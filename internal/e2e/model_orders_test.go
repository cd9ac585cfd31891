package e2e_test

// The model test's actions on orders (model_test.go): placing, paying,
// user cancels, refunds and the data-loss and stuck-order faults.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Place places a new order through the library's placing call
// (cancel.Service.Place): lock the seats, insert the order in one
// transaction, schedule the message after commit; the library releases the
// seats when the insert fails, except after an unknown commit (the reconciler
// decides: a lock whose order is missing is released after the grace period).
func (m *machine) Place(t *rapid.T) {
	show := rapid.SampledFrom(m.shows).Draw(t, "show")
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	seats := rapid.SliceOfNDistinct(rapid.SampledFrom(m.pool), 1, 4, rapid.ID[string]).Draw(t, "seats")
	m.next++
	m.place(t, fmt.Sprintf("%so%d", m.env.prefix, m.next), user, show, seats, m.drawExpiry(t))
}

func (m *machine) drawExpiry(t *rapid.T) time.Time {
	offset := time.Duration(rapid.Int64Range(m.env.expiryMin.Milliseconds(), m.env.expiryMax.Milliseconds()).Draw(t, "expire_in_ms")) * time.Millisecond
	return m.storeNow(t).Add(offset).Truncate(time.Millisecond)
}

// place tries one placement and checks the library's answer against what the
// seat store and the order store hold.
func (m *machine) place(t *rapid.T, no, user, show string, seats []string, expireAt time.Time) {
	if r := m.env.resolution; r > 0 && !expireAt.Equal(expireAt.Truncate(r)) {
		expireAt = expireAt.Truncate(r).Add(r) // as the store keeps it: rounded up
	}
	p := cancel.Placement{OrderNo: no, UserID: user, ShowID: show, Seats: seats, ExpireAt: expireAt}
	o := m.orders[no]
	again := o != nil && o.placed
	if o == nil {
		o = &mOrder{p: p}
		m.orders[no] = o
		m.nos = append(m.nos, no)
	} else if !o.placed {
		o.p = p // a number tried before and never placed: a fresh try
	}

	// What the library must answer, from the stores as they are.
	state := m.fs.show(m.ctx, show)
	held, err := m.env.seats.Held(m.ctx, show, user)
	if err != nil {
		t.Fatal(err)
	}
	var want error
	for _, s := range seats {
		if _, taken := state[s]; taken {
			want = cancel.ErrSeatUnavailable
		}
	}
	if want == nil && held+len(seats) > m.limit {
		want = cancel.ErrLimitExceeded
	}
	if again {
		want = cancel.ErrOrderExists // refused before any lock
	}
	p.Limit = m.limit
	err = m.svc.Place(m.ctx, p, m.fo.Place) // Place schedules it (Config.Scheduler); a failed send is left to the reconciler
	switch {
	case m.hit("Lock", "Place", "Order"):
	case m.lost || m.lostShows[show]:
		// Seats SQL claims may look free in a seat store that lost them: the
		// store's unique claim refuses the order then, and the seats go back.
		if err != nil && !errors.Is(err, want) && !errors.Is(err, cancel.ErrSeatUnavailable) && !errors.Is(err, cancel.ErrLimitExceeded) {
			m.violate("place %s while the seat store lost data: %v", no, err)
		}
	case want == nil && err != nil:
		m.violate("place %v for %s: %v; want it placed", seats, no, err)
	case want != nil && !errors.Is(err, want):
		m.violate("place %v for %s: %v; want %v", seats, no, err, want)
	}
	if err != nil {
		m.stats.kinds["place_refused"]++
	}
}

// PlaceDupSeat places an order that lists one seat twice: refused as invalid,
// nothing locked (the limit counter must not count the seat twice, I8).
func (m *machine) PlaceDupSeat(t *rapid.T) {
	seat := rapid.SampledFrom(m.pool).Draw(t, "seat")
	m.next++
	no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
	p := cancel.Placement{OrderNo: no, UserID: m.users[0], ShowID: m.shows[0], Seats: []string{seat, seat}, ExpireAt: m.storeNow(t).Add(time.Second)}
	p.Limit = m.limit
	err := m.svc.Place(m.ctx, p, func(ctx context.Context, p cancel.Placement) error {
		m.violate("an order with a seat listed twice reached the store")
		return nil
	})
	m.expectErr("place with a seat listed twice", err, expiry.ErrInvalidID)
}

// PlaceAgain places an order number that exists (a retry after an unknown
// commit, a double submit), with its own seats or others, by its owner or
// another user: refused, and the live order keeps its seats (I2, I8).
func (m *machine) PlaceAgain(t *rapid.T) {
	no, o := m.pickPlaced(t)
	p := o.p
	switch rapid.SampledFrom([]string{"same", "other_seats", "other_user"}).Draw(t, "again") {
	case "other_seats":
		p.Seats = rapid.SliceOfNDistinct(rapid.SampledFrom(m.pool), 1, 3, rapid.ID[string]).Draw(t, "seats")
	case "other_user":
		p.UserID = rapid.SampledFrom(m.users).Draw(t, "user")
	}
	m.stats.kinds["place_again_"+o.status.String()]++
	m.place(t, no, p.UserID, p.ShowID, p.Seats, p.ExpireAt)
}

// pickPlaced draws one of the orders placed (the action is skipped when
// there is none yet).
func (m *machine) pickPlaced(t *rapid.T) (string, *mOrder) {
	var placed []string
	for _, no := range m.nos {
		if m.orders[no].placed {
			placed = append(placed, no)
		}
	}
	if len(placed) == 0 {
		t.Skip("no order placed yet")
	}
	no := rapid.SampledFrom(placed).Draw(t, "order")
	return no, m.orders[no]
}

// pick draws one of the orders tried, or a number never used.
func (m *machine) pick(t *rapid.T) (string, *mOrder) {
	i := rapid.IntRange(-1, len(m.nos)-1).Draw(t, "order")
	if i < 0 {
		return m.env.prefix + "nosuch", nil
	}
	return m.nos[i], m.orders[m.nos[i]]
}

// who draws the user making a request: the owner, another user, or (for
// payment callbacks, which may carry none) nobody.
func (m *machine) who(t *rapid.T, o *mOrder, anonymous bool) (string, bool) {
	choices := []string{"owner", "other"}
	if anonymous {
		choices = append(choices, "nobody")
	}
	switch rapid.SampledFrom(choices).Draw(t, "who") {
	case "other":
		owner := "u1"
		if o != nil {
			owner = o.p.UserID
		}
		var others []string
		for _, u := range m.users {
			if u != owner {
				others = append(others, u)
			}
		}
		return rapid.SampledFrom(others).Draw(t, "other_user"), false
	case "nobody":
		return "", true
	}
	if o == nil {
		return "u1", true
	}
	return o.p.UserID, true
}

func (m *machine) Pay(t *rapid.T) {
	no, o := m.pick(t)
	user, rightful := m.who(t, o, true)
	kind := "pay"
	if !rightful {
		kind = "pay_wrong_user"
	}
	m.stats.kinds[kind]++
	m.pay(t, no, o, user, rightful, fmt.Sprintf("pay-%s-%d", no, rapid.IntRange(1, 2).Draw(t, "payment")))
}

// pay sends one payment callback and checks the answer (I1, I9).
func (m *machine) pay(t *rapid.T, no string, o *mOrder, user string, rightful bool, pid string) {
	before := m.state(o)
	// A late payment reinstates an order its timeout or the reconciler
	// cancelled when every seat is free; one held by another order (or
	// a stale lock) refunds it.
	late := !m.env.orderStoreOnly && !m.env.noLate && before == "cancelled" && (o.reason == cancel.ReasonTimeout || o.reason == cancel.ReasonReconcile)
	free := late && !m.lost && !m.lostShows[o.p.ShowID]
	if late {
		state := m.fs.show(m.ctx, o.p.ShowID)
		for _, s := range o.p.Seats {
			if _, taken := state[s]; taken {
				free = false
			}
		}
		// The purchase limit holds on this path too (I17): a buyer holding
		// other seats of the show may be refused.
		if held, err := m.env.seats.Held(m.ctx, o.p.ShowID, o.p.UserID); err != nil || held+len(o.p.Seats) > m.limit {
			free = false
		}
	}
	// An id answered as a discrepancy before is decided: refunded (I14).
	_, decided := m.owed[pid]
	res, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: no, UserID: user, PaymentID: pid})
	if decided && res.Changed {
		m.violate("I14: payment %s of %s was refused and refunded before, now it paid the order", pid, no)
	}
	if errors.Is(err, cancel.ErrDiscrepancy) {
		m.owed[pid] = no
	}
	// Order: a payment the seat store recorded refunded reads its order
	// (refusedBefore), and a failed read is the provider's to repeat.
	if m.hit("PayPending", "ReinstateCancelled", "Lock", "Sell", "Release", "Order") {
		return
	}
	switch {
	case late && rightful && free && !decided:
		if err != nil || !res.Changed {
			m.violate("late payment %s of %s (cancelled by %s, its seats free): changed=%v err=%v, want reinstated", pid, no, o.reason, res.Changed, err)
		}
		m.stats.kinds["pay_late_reinstated"]++
	case late && rightful && decided:
		m.expectErr("late payment "+pid+" of "+no+", refunded before", err, cancel.ErrDiscrepancy)
	case late && rightful && res.Changed:
		if m.lost || m.lostShows[o.p.ShowID] {
			m.stats.kinds["pay_late_reinstated_after_loss"]++
			break
		}
		m.violate("late payment %s of %s reinstated it, but a seat was held or the user at the limit", pid, no)
	case before == "missing":
		// The provider took the money for an order the store does not
		// have: a discrepancy, refunded once (I9, checked at the end).
		m.expectErr("pay "+no, err, cancel.ErrDiscrepancy)
		m.stats.kinds["discrepancy_missing"]++
	case !rightful:
		m.expectErr("pay "+no+" by "+user, err, cancel.ErrNotOwner)
	case before == "pending":
		if err != nil || !res.Changed {
			m.violate("pay pending %s: changed=%v err=%v", no, res.Changed, err)
		}
	case before == "paid" && o.paidBy == pid:
		if err != nil || res.Changed {
			m.violate("pay paid %s again with %s: changed=%v err=%v, want nothing", no, pid, res.Changed, err)
		}
	case before == "paid" || before == "cancelled":
		m.expectErr("pay "+before+" "+no+" with "+pid, err, cancel.ErrDiscrepancy)
		m.stats.kinds["discrepancy_"+before]++
	}
}

// PayAgain repeats a payment callback that was already sent, as providers do
// when the answer was an error or got lost (same payment id), or sends a
// second payment for an order paid or refunded already (a new payment id).
func (m *machine) PayAgain(t *rapid.T) {
	byPID := maps.Clone(m.owed)
	for _, no := range m.nos {
		if o := m.orders[no]; o.paidBy != "" {
			byPID[o.paidBy] = no
		}
	}
	if len(byPID) == 0 {
		t.Skip("no payment yet")
	}
	pid := rapid.SampledFrom(slices.Sorted(maps.Keys(byPID))).Draw(t, "payment")
	no := byPID[pid]
	o := m.orders[no] // nil: a number no order has (a payment refunded as such)
	user := "u1"
	if o != nil {
		user = o.p.UserID
	}
	if rapid.Bool().Draw(t, "second_payment") { // the buyer pays the same order again
		m.next++
		pid = fmt.Sprintf("pay-%s-second%d", no, m.next)
		m.stats.kinds["pay_second"]++
	} else {
		m.stats.kinds["pay_again"]++
	}
	m.pay(t, no, o, user, true, pid)
}

// refund is the host's refund hook: it counts successful calls per payment
// id (I9 wants exactly one for every discrepancy answered).
func (m *machine) refund(_ context.Context, d cancel.Discrepancy) error {
	if m.refundDown {
		m.stats.failures["refund_hook"]++
		return errors.New("model: the payment provider is down")
	}
	// The provider refunds once per payment id (the hook's idempotency
	// key): a second call is at least once by design, after a call that
	// stalled or died past Config.DiscrepancyLease between the record and
	// the hook's success (README, I9). It is counted; a refund of a payment
	// that paid an order is I14's, judged at Check.
	if m.refunded[d.PaymentID] > 0 {
		m.stats.kinds["refund_hook_repeated"]++
		return nil
	}
	m.refunded[d.PaymentID]++
	return nil
}

// FailRefunds makes the refund hook fail until the next FailRefunds (the
// reconciler must call it again later).
func (m *machine) FailRefunds(t *rapid.T) {
	m.refundDown = !m.refundDown
}

// CaseVariant sends a request with a case-shifted id: another user's or
// another order's id on every dialect and collation (I10), so it finds
// nothing of the original's.
func (m *machine) CaseVariant(t *rapid.T) {
	no, o := m.pickPlaced(t)
	switch what := rapid.SampledFrom([]string{"user_cancel_user", "pay_user", "cancel_order", "pay_order"}).Draw(t, "variant"); what {
	case "user_cancel_user":
		_, err := m.svc.UserCancel(m.ctx, no, strings.ToUpper(o.p.UserID))
		if !m.hit("CancelPending") {
			m.expectErr("cancel "+no+" by a case variant of its user", err, cancel.ErrNotOwner)
		}
	case "pay_user":
		_, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: no, UserID: strings.ToUpper(o.p.UserID), PaymentID: "pay-" + no + "-case"})
		if !m.hit("PayPending", "Order") { // Order: a refunded id reads its order (refusedBefore)
			m.expectErr("pay "+no+" by a case variant of its user", err, cancel.ErrNotOwner)
		}
	case "cancel_order":
		_, err := m.svc.UserCancel(m.ctx, strings.ToUpper(no), o.p.UserID)
		if !m.hit("CancelPending") {
			m.expectErr("cancel a case variant of "+no, err, expiry.ErrNotFound)
		}
	case "pay_order":
		// No order has the variant's number: the money the provider took
		// for it is refunded once (I9, checked at the end), and the
		// original order is untouched (I10, checked after every step).
		pid := "pay-" + no + "-case"
		_, err := m.svc.Pay(m.ctx, cancel.Payment{OrderNo: strings.ToUpper(no), UserID: o.p.UserID, PaymentID: pid})
		if errors.Is(err, cancel.ErrDiscrepancy) {
			m.owed[pid] = strings.ToUpper(no)
		}
		if !m.hit("PayPending", "Order") {
			m.expectErr("pay a case variant of "+no, err, cancel.ErrDiscrepancy)
		}
	}
}

// StuckOrder makes every cancel of one pending order fail from now on (its
// row held by a stuck transaction) until the run settles: the reconciler
// must skip it and do the rest (I12).
func (m *machine) StuckOrder(t *rapid.T) {
	var pending []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending && !m.stuck[no] {
			pending = append(pending, no)
		}
	}
	if len(pending) == 0 {
		t.Skip("no pending order")
	}
	no := rapid.SampledFrom(pending).Draw(t, "order")
	m.stuck[no] = true
	m.orders[no].lag = true // a user cancel of it fails too: its seats stay locked
}

// Backlog places several orders that are due already (their messages lost in
// a broker outage, say), more than one reconcile round takes.
func (m *machine) Backlog(t *rapid.T) {
	n := rapid.IntRange(5, 16).Draw(t, "orders")
	for i := 0; i < n; i++ {
		m.next++
		no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
		seat := fmt.Sprintf("bk%d", m.next) // seats of their own: a backlog of placed orders
		m.brokerDown = true                 // the message is lost
		due := m.storeNow(t).Add(-time.Millisecond)
		if r := m.env.resolution; r > 0 {
			due = due.Truncate(r) // due already at the store's resolution too
		}
		m.place(t, no, m.users[i%len(m.users)], m.shows[i%2], []string{seat}, due)
		m.brokerDown = false
	}
	m.stats.kinds["backlog_orders"] += n
}

// WipeSeats makes the seat store lose all its data (a restart without
// persistence), possibly in the middle of a rebuild.
func (m *machine) WipeSeats(t *rapid.T) {
	if m.lost {
		m.stats.kinds["wipe_during_rebuild"]++
	}
	m.env.wipe()
	m.lost, m.wiped = true, true
	for _, o := range m.orders {
		o.lagBehind = o.placed
	}
	m.freed = map[[3]string]bool{}
}

// WipeShow makes the seat store lose one show's keys (an eviction, an async
// replica promoted): the marker stays, so only the claims pass repairs it.
func (m *machine) WipeShow(t *rapid.T) {
	show := rapid.SampledFrom(m.shows).Draw(t, "show")
	m.env.wipeShow(show)
	m.lostShows[show], m.wiped = true, true
	for _, o := range m.orders {
		o.lagBehind = o.lagBehind || o.placed && o.p.ShowID == show
	}
	// For each reconciler, the pass under way may have passed the show
	// already; the next one began after the loss. A fresh reconciler (the
	// final rounds') starts its first pass after it.
	m.repairPasses = map[*reconcile.Reconciler]int{}
	for _, h := range m.hosts {
		m.repairPasses[h] = 2
	}
	m.freed = map[[3]string]bool{}
}

func (m *machine) UserCancel(t *rapid.T) {
	no, o := m.pick(t)
	user, rightful := m.who(t, o, false)
	kind := "user_cancel"
	if !rightful {
		kind = "user_cancel_wrong_user"
	}
	m.stats.kinds[kind]++
	m.userCancel(no, o, user, rightful)
}

// userCancel sends one user's cancel and checks the answer.
func (m *machine) userCancel(no string, o *mOrder, user string, rightful bool) {
	before := m.state(o)
	unheld := 0
	if before == "pending" {
		unheld = m.unheld(no, o)
	}
	res, err := m.svc.UserCancel(m.ctx, no, user)
	if m.hit("CancelPending") {
		return
	}
	switch {
	case before == "missing":
		m.expectErr("cancel "+no, err, expiry.ErrNotFound)
	case !rightful:
		m.expectErr("cancel "+no+" by "+user, err, cancel.ErrNotOwner)
	case before == "pending":
		if err != nil || !res.Changed {
			m.violate("user cancel of pending %s: changed=%v err=%v", no, res.Changed, err)
		} else if want := len(o.p.Seats); !m.hit("Release") && !m.lost && !m.lostShows[o.p.ShowID] && (res.Released > want || res.Released < want-unheld) {
			m.violate("user cancel of %s released %d seats, want %d (%d of them rightly not its after a loss)", no, res.Released, want, unheld)
		}
	default:
		if err != nil || res.Changed {
			m.violate("user cancel of %s %s: changed=%v err=%v, want nothing", before, no, res.Changed, err)
		}
	}
}

// mMid is what runs between a cancel's commit and its release.
type mMid struct {
	order string
	run   func()
}

// CancelUnderScan is the hostile interleaving of two instances: a user's
// cancel commits, and before its release reaches the seat store the other
// host's reconciler runs a round. The order was decided moments ago, so
// that round must leave its locks to the canceller (reconcile.Config.Settle),
// which then frees every seat itself: one instance frees an order's seats,
// never two racing each other seat by seat. Checked when the round surely
// ran within the settle time: on the fake clock always, in real time when
// the time since the cancel began, plus the store's resolution of its
// write time, is shorter.
func (m *machine) CancelUnderScan(t *rapid.T) {
	var pending []string
	for _, no := range m.nos {
		if o := m.orders[no]; o.placed && o.status == expiry.StatusPending {
			pending = append(pending, no)
		}
	}
	if len(pending) == 0 {
		m.stats.kinds["cancel_under_scan_none_pending"]++
		return
	}
	no := rapid.SampledFrom(pending).Draw(t, "pending_order")
	o := m.orders[no]
	host := rapid.IntRange(0, 1).Draw(t, "host")
	// Seats lost (and maybe restored by that round) or a lock an earlier
	// failure left: the counts say nothing.
	unsure := o.lag || m.lost || m.lostShows[o.p.ShowID]
	// After a loss, a failed placement's lock (a failure left it) may hold
	// a seat SQL gives this order, or have held it and been released before
	// the claims pass came back to the claim, as Check's I2 allows: the
	// canceller cannot free that one.
	blocked := m.unheld(no, o)
	start := m.appNow()
	var byScan []string
	within := false
	m.midRelease = &mMid{order: no, run: func() {
		_, _ = m.rounds(m.hosts[host]) // an armed fault may fail it: it frees less, never more
		for _, seat := range o.p.Seats {
			if m.freed[[3]string{no, o.p.ShowID, seat}] {
				byScan = append(byScan, seat)
			}
		}
		within = m.appNow().Sub(start)+m.env.resolution < m.env.settle
	}}
	res, err := m.svc.UserCancel(m.ctx, no, o.p.UserID)
	ran := m.midRelease == nil
	m.midRelease = nil
	if m.hit("CancelPending") {
		return
	}
	if err != nil || !res.Changed {
		m.violate("cancel under scan of pending %s: changed=%v err=%v", no, res.Changed, err)
		return
	}
	switch {
	case !ran: // the release failed before the seat store
		m.stats.kinds["cancel_under_scan_release_failed"]++
	case !within || unsure:
		m.stats.kinds["cancel_under_scan_unchecked"]++
	default:
		m.stats.kinds["cancel_under_scan"]++
		if len(byScan) > 0 {
			m.violate("the other host's scan released seats %v of %s between its cancel's commit and the canceller's release", byScan, no)
		}
		if want := len(o.p.Seats); !m.hit("Release") && (res.Released > want || res.Released < want-blocked) {
			m.violate("cancel under scan of %s: the canceller released %d seats, want %d (%d of them held by a failed placement's lock)", no, res.Released, want, blocked)
		}
	}
}

func (m *machine) expectErr(what string, err, want error) {
	if !errors.Is(err, want) {
		m.violate("%s: err %v, want %v", what, err, want)
	}
}

func (m *machine) state(o *mOrder) string {
	if o == nil || !o.placed {
		return "missing"
	}
	return o.status.String()
}
