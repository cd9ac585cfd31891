package explore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/reconcile"
)

// orderNos are the order numbers each tenant uses (tenant 2 reuses one of
// tenant 1's: each tenant numbers its own orders).
var orderNos = [][]string{{"o1", "o2"}, {"o1"}}

// orderView is one order as Store.Order and Statuses show it.
type orderView struct {
	exists bool
	expiry.Order
	remaining time.Duration // to its deadline, by the store's clock
	age       time.Duration // since its last write (Statuses)
}

type claimView struct {
	tenant int
	cancel.Claim
}

type parkedView struct {
	kind  int
	age   time.Duration
	at    string
	trace string
}

// observation is what the public API shows of a world between two steps,
// with the facts the gates recorded.
type observation struct {
	now time.Time // the fake clock's
	// dbNow is the database's clock (the order stores'): the refund
	// lease is measured on it.
	dbNow time.Time
	// seatNow is the seat store's clock (the fake one on memstore): lock
	// ages are measured on it.
	seatNow time.Time
	orders  map[string]orderView
	claims  []claimView
	seats   map[string]map[string]cancel.SeatState // show → seat → state
	held    map[string]int                         // "show/user" → counter
	facts   facts
	parked  []parkedView
	// hooks and hookDown: the world's transition hook is installed, and
	// its outbox is down (world.hooks, world.hookDown).
	hooks, hookDown bool
	// grants is, per payment (payment.key), the refund grants the stopped
	// operations hold and those the hook's calls were made under, as the
	// I9 ledger will judge a later call (refundGrants).
	grants map[string]string
	// young is true when something still waits for time: a lock younger
	// than the grace, an order decided less than Settle ago, a refund
	// lease running, a stopped operation younger than PlaceTimeout.
	young bool
}

func (s *observation) order(tn int, no string) orderView {
	return s.orders["t"+strconv.Itoa(tn)+"/"+no]
}

func (s *observation) parkedKind(k int) bool {
	return slices.ContainsFunc(s.parked, func(p parkedView) bool { return p.kind == k })
}

// nextDeadline is how far the clock must move for the next pending order
// to be due (0: none is waiting).
func (s *observation) nextDeadline() time.Duration {
	var next time.Duration
	for _, o := range s.orders {
		if pending(o) && o.remaining > 0 && (next == 0 || o.remaining < next) {
			next = o.remaining
		}
	}
	return next
}

// observe reads the world through the public API only. Times are read on
// the clocks of the stores that keep them: an order's remaining time on
// the order store's (Order's ReadAt), a lock's age on the seat store's.
// A failing read is the world's failure (w.err): it answers as if nothing
// was there.
func (w *world) observe() *observation {
	ctx := context.Background()
	now := w.clk.Now()
	seatNow, err := w.seatNow(ctx)
	w.readErr("the seat store's clock", err)
	s := &observation{now: now, dbNow: w.clk.orderNow(), seatNow: seatNow, orders: make(map[string]orderView, 3), seats: make(map[string]map[string]cancel.SeatState, 2), held: make(map[string]int, 4)}
	for _, t := range w.tenants {
		if t.idle {
			continue
		}
		var decided []string
		for i, no := range orderNos[t.n-1] {
			o, err := t.store.Order(ctx, no)
			if !errors.Is(err, expiry.ErrNotFound) {
				w.readErr("Order", err)
			}
			v := orderView{exists: err == nil, Order: o}
			if v.exists {
				v.remaining = o.ExpireAt.Sub(o.ReadAt)
				if o.Status != expiry.StatusPending {
					decided = append(decided, no)
				}
			}
			s.orders[t.orderKeys[i]] = v
		}
		// The age of a decided order (since its decision) is all the
		// ledgers and the hash read of Statuses.
		if len(decided) > 0 {
			st, err := t.store.Statuses(ctx, decided)
			w.readErr("Statuses", err)
			for _, no := range decided {
				k := key(t, no)
				v := s.orders[k]
				v.age = st[no].Age
				s.orders[k] = v
				if v.age < reconcile.SettleDefault {
					s.young = true
				}
			}
		}
		cs, _, err := t.store.Claims(ctx, "", 100)
		w.readErr("Claims", err)
		for _, c := range cs {
			s.claims = append(s.claims, claimView{t.n, c})
		}
		show, err := t.shared.Show(ctx, t.show)
		w.readErr("Show", err)
		s.seats[t.show] = show
		for _, st := range show {
			if st.Status == cancel.SeatLocked && seatNow.Sub(st.LockedAt) < reconcile.GraceDefault {
				s.young = true
			}
		}
		for i, u := range users {
			var err error
			s.held[t.heldKeys[i]], err = t.shared.Held(ctx, t.show, u)
			w.readErr("Held", err)
		}
	}
	w.mu.Lock()
	s.facts = w.facts.clone()
	s.hooks, s.hookDown = w.hooks, w.hookDown
	w.mu.Unlock()
	for _, d := range s.facts.disc {
		if !d.settled && s.dbNow.Sub(d.tried) < cancel.DiscrepancyLeaseDefault {
			s.young = true
		}
	}
	s.grants = refundGrants(w.parked, s.facts.calls, s.dbNow)
	for _, o := range w.parked {
		age := now.Sub(o.started)
		if age < cancel.PlaceTimeoutDefault {
			s.young = true
		}
		s.parked = append(s.parked, parkedView{kind: o.kind, age: age, at: o.at, trace: o.traceText()})
	}
	slices.SortFunc(s.parked, func(a, b parkedView) int { return a.kind - b.kind })
	return s
}

// observeOrders is the part of observe a clock step needs: the orders,
// with their remaining times.
func (w *world) observeOrders() *observation {
	ctx := context.Background()
	s := &observation{now: w.clk.Now(), dbNow: w.clk.orderNow(), orders: make(map[string]orderView, 3)}
	for _, t := range w.tenants {
		if t.idle {
			continue
		}
		for i, no := range orderNos[t.n-1] {
			o, err := t.store.Order(ctx, no)
			if !errors.Is(err, expiry.ErrNotFound) {
				w.readErr("Order", err)
			}
			v := orderView{exists: err == nil, Order: o}
			if v.exists {
				v.remaining = o.ExpireAt.Sub(o.ReadAt)
			}
			s.orders[t.orderKeys[i]] = v
		}
	}
	return s
}

// readErr records a failed read of the observer as the world's failure.
func (w *world) readErr(what string, err error) {
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("the observer's %s: %w", what, err)
	}
}

// clone copies f for an observation, which only reads it: an empty map is
// nil in the copy (most are empty most of the time).
func (f facts) clone() facts {
	c := facts{refunds: cloneMap(f.refunds), refStep: cloneMap(f.refStep),
		reason: cloneMap(f.reason), sent: cloneMap(f.sent), issued: cloneMap(f.issued), acked: cloneMap(f.acked),
		deleted: cloneMap(f.deleted), held: cloneMap(f.held), back: f.back, whole: cloneMap(f.whole), roundFailed: cloneMap(f.roundFailed),
		events: f.events, prov: f.prov.clone()}
	if len(f.hooked) > 0 {
		c.hooked = make(map[string][]expiry.Status, len(f.hooked))
		for k, v := range f.hooked {
			c.hooked[k] = slices.Clone(v)
		}
	}
	if len(f.calls) > 0 {
		c.calls = make(map[string][]hookCall, len(f.calls))
		for k, v := range f.calls {
			c.calls[k] = slices.Clone(v)
		}
	}
	if len(f.disc) > 0 {
		c.disc = make(map[string]*discFact, len(f.disc))
		for id, d := range f.disc {
			dd := *d
			c.disc[id] = &dd
		}
	}
	return c
}

func cloneMap[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// history is what the ledgers remember along a sequence.
type history struct {
	soldTo    map[string]string   // "show/seat" → the order it was seen sold to in the seat store
	paidSeats map[string][]string // paid order key → its SQL claims when first seen paid
	paidAt    map[string]int      // payment (payment.key) → the step its order was first seen paid
}

func (h history) clone() history {
	c := history{soldTo: maps.Clone(h.soldTo), paidSeats: map[string][]string{}, paidAt: maps.Clone(h.paidAt)}
	if c.soldTo == nil {
		c.soldTo = map[string]string{}
	}
	if c.paidAt == nil {
		c.paidAt = map[string]int{}
	}
	for k, v := range h.paidSeats {
		c.paidSeats[k] = slices.Clone(v)
	}
	return c
}

// hash is the canonical hash of a state: the observation (times relative
// to now, bucketed by the thresholds that matter), the facts, the stopped
// operations with everything they read, and the ledgers' history.
func (s *observation) hash(h history) [16]byte {
	b := make(hashText, 0, 1024)
	for _, k := range slices.Sorted(maps.Keys(s.orders)) {
		o := s.orders[k]
		if !o.exists {
			continue
		}
		b = b.add("o", k, o.UserID, o.ShowID, o.Status.String())
		if o.remaining > 0 {
			b = b.dur(o.remaining)
		} else {
			b = b.add("due")
		}
		if o.Status != expiry.StatusPending {
			b = b.bucket(o.age, reconcile.SettleDefault)
		}
		b = b.add(string(s.facts.reason[k])).flag(s.facts.sent[k]).end()
	}
	for _, c := range s.claims {
		b = b.add("c", strconv.Itoa(c.tenant), c.ShowID, c.SeatID, c.OrderNo, c.UserID, c.Status.String()).end()
	}
	for _, show := range slices.Sorted(maps.Keys(s.seats)) {
		for _, seat := range slices.Sorted(maps.Keys(s.seats[show])) {
			st := s.seats[show][seat]
			b = b.add("s", show, seat, st.Status.String(), st.OrderNo, st.UserID, lockID(show, st))
			if st.Status == cancel.SeatLocked {
				b = b.bucket(s.seatNow.Sub(st.LockedAt), reconcile.GraceDefault)
			}
			b = b.end()
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.held)) {
		if s.held[k] != 0 {
			b = b.add("h", k, strconv.Itoa(s.held[k])).end()
		}
	}
	for _, pm := range payments {
		id := pm.key()
		b = b.add("p", id, strconv.Itoa(min(s.facts.refunds[id], 2))).flag(s.facts.issued[id]).flag(s.facts.acked[id])
		if d := s.facts.disc[id]; d != nil {
			b = b.flag(d.settled).bucket(s.dbNow.Sub(d.tried), cancel.DiscrepancyLeaseDefault)
		} else {
			b = b.add("-")
		}
		paid, refunded := h.paidAt[id], s.facts.refStep[id]
		b = b.flag(paid > 0).flag(paid > 0 && refunded > 0 && refunded < paid).add(s.grants[id]).end()
	}
	for _, k := range slices.Sorted(maps.Keys(s.facts.deleted)) {
		b = b.add("deleted", k).end()
	}
	for _, k := range slices.Sorted(maps.Keys(s.facts.held)) {
		b = b.add("held", k).end()
	}
	if s.facts.back {
		b = b.add("clock back").end()
	}
	for _, k := range slices.Sorted(maps.Keys(s.facts.roundFailed)) {
		b = b.add("round failed", k).bucket(s.now.Sub(s.facts.roundFailed[k]), reconcile.BackoffMax).end()
	}
	if s.hooks {
		b = b.add("hook down").flag(s.hookDown).end()
		for _, k := range slices.Sorted(maps.Keys(s.facts.hooked)) {
			b = b.add("hooked", k)
			for _, st := range s.facts.hooked[k] {
				b = b.add(st.String())
			}
			b = b.end()
		}
	}
	b = s.facts.prov.hash(b, s)
	for _, p := range s.parked {
		b = b.add("x", strconv.Itoa(p.kind)).bucket(p.age, cancel.PlaceTimeoutDefault).add(p.at, p.trace).end()
	}
	for _, k := range slices.Sorted(maps.Keys(h.soldTo)) {
		b = b.add("sold", k, h.soldTo[k]).end()
	}
	for _, k := range slices.Sorted(maps.Keys(h.paidSeats)) {
		b = b.add("paid", k).add(h.paidSeats[k]...).end()
	}
	sum := sha256.Sum256(canonicalLockIDs(b))
	return [16]byte(sum[:16])
}

// hashText is a state's canonical text as hash builds it: fields separated
// by a space, entries ended by a semicolon.
type hashText []byte

func (b hashText) add(fields ...string) hashText {
	for _, f := range fields {
		b = append(append(b, f...), ' ')
	}
	return b
}

func (b hashText) flag(v bool) hashText {
	if v {
		return append(b, "true "...)
	}
	return append(b, "false "...)
}

func (b hashText) dur(d time.Duration) hashText {
	return append(strconv.AppendInt(b, int64(d), 10), "ns "...)
}

// bucket renders an age or remaining time relative to the threshold that
// matters for it: exact below, "old" at or above, so that states differing
// only in how far past a threshold they are hash alike.
func (b hashText) bucket(d, threshold time.Duration) hashText {
	if d >= threshold {
		return append(b, "old "...)
	}
	return b.dur(d)
}

func (b hashText) end() hashText { return append(b, ';') }

// deadHash is the hash of the state s shows once its stopped operations
// are killed: the stores and facts as they are, no operation in flight, and
// of the refund grants only those the hook's calls were made under.
func (s *observation) deadHash(h history) [16]byte {
	d := *s
	d.parked = nil
	d.grants = refundGrants(nil, s.facts.calls, s.dbNow)
	return d.hash(h)
}

// canonicalLockIDs renames the lock ids in text (the seat store's, which
// carry its clock and a counter, each ⟨show id⟩) in the order they first
// appear in it, so that states alike but for the names of their locks hash
// alike (a symmetry: the library only ever compares two ids of one show
// for equality), while the stopped operations that read a lock still tell
// whether it is the seat's current one. Ranking the ids by value instead
// told apart states that differ only in the order two locks were taken
// (or in a lock of another show bearing the same id by chance).
func canonicalLockIDs(text []byte) []byte {
	if !bytes.Contains(text, []byte("⟨")) {
		return text
	}
	return renameLockIDs(text, map[string]int{})
}

// renameLockIDs replaces each lock id ⟨…⟩ of text by its number in names,
// numbering the ids names does not have yet in the order they appear.
func renameLockIDs(text []byte, names map[string]int) []byte {
	const open, closing = "⟨", "⟩"
	out := make([]byte, 0, len(text))
	for {
		i := bytes.Index(text, []byte(open))
		if i < 0 {
			return append(out, text...)
		}
		j := bytes.Index(text[i:], []byte(closing))
		if j < 0 {
			return append(out, text...)
		}
		id := string(text[i : i+j+len(closing)])
		n, ok := names[id]
		if !ok {
			n = len(names)
			names[id] = n
		}
		out = append(out, text[:i]...)
		out = append(strconv.AppendInt(append(out, open...), int64(n), 10), closing...)
		text = text[i+j+len(closing):]
	}
}

// judge checks one observation, made after step, against the one before it
// and the history: the ledgers that hold at every observation. It returns
// the findings and the history extended by cur.
func judge(prev *observation, hist history, cur *observation, step int) ([]finding, history) {
	var fs []finding
	add := func(ledger, class, format string, args ...any) {
		fs = append(fs, finding{ledger: ledger, class: ledger + " " + class, text: fmt.Sprintf(format, args...)})
	}
	next := hist.clone()

	// The transition hook (cancel.Hook), when installed: its outbox has a
	// record for each time an order left pending, with its new status, and
	// none for a transition that rolled back (a pending order has none). A
	// late payment's reinstatement (cancelled to paid) is a transition too:
	// a reinstated order's records are its cancel's, then its payment's.
	if cur.hooks {
		for k, o := range cur.orders {
			got := cur.facts.hooked[k]
			switch {
			case !o.exists:
			case o.Status == expiry.StatusPending && len(got) > 0:
				add("hook", "a pending order has an outbox record", "order %s is pending, its outbox records %v", k, got)
			case o.Status == expiry.StatusPending:
			case len(got) == 0 || len(got) > 2:
				add("hook", "a decided order has not one outbox record per transition", "order %s is %s, its outbox records %v", k, o.Status, got)
			case got[len(got)-1] != o.Status:
				add("hook", "an outbox record says another status", "order %s is %s, its last outbox record says %s", k, o.Status, got[len(got)-1])
			case len(got) == 2 && got[0] != expiry.StatusCancelled:
				add("hook", "two outbox records that are not a cancel and a late payment", "order %s is %s, its outbox records %v", k, o.Status, got)
			}
		}
	}

	// I1: an order ends in one terminal state, and a paid one stays paid
	// (a late payment's reinstatement is the library's one documented way
	// from cancelled to paid).
	for k, p := range prev.orders {
		c := cur.orders[k]
		switch {
		case !p.exists:
		case !c.exists && cur.facts.deleted[k]: // the host deleted it
		case !c.exists:
			add("I1", "an order vanished", "order %s vanished", k)
		case p.Status == expiry.StatusPaid && c.Status != expiry.StatusPaid:
			add("I1", "a paid order left paid", "order %s was paid, now %s", k, c.Status)
		case p.Status != expiry.StatusPending && c.Status == expiry.StatusPending:
			add("I1", "an order went back to pending", "order %s was %s, now pending", k, p.Status)
		}
	}

	// I15: a seat SQL gives a live order is held by that order in the
	// seat store, and by no other (the seat store may hold a seat SQL has
	// let go of, for a while: a release follows the commit; never the
	// reverse).
	perUser := map[string]int{}
	for _, c := range cur.claims {
		perUser[c.ShowID+"/"+c.UserID]++
		st, ok := cur.seats[c.ShowID][c.SeatID]
		switch {
		case !ok:
			add("I15", fmt.Sprintf("a seat SQL gives a %s order is free in the seat store", c.Status),
				"seat %s/%s: SQL gives it to %s (tenant %d, %s), the seat store has it free", c.ShowID, c.SeatID, c.OrderNo, c.tenant, c.Status)
		case st.OrderNo != c.OrderNo:
			add("I15", fmt.Sprintf("a seat SQL gives a %s order is held by another order in the seat store", c.Status),
				"seat %s/%s: SQL gives it to %s (tenant %d, %s), the seat store has it %s", c.ShowID, c.SeatID, c.OrderNo, c.tenant, c.Status, seatState(st))
		}
	}
	// A seat sold stays sold to the same order.
	for k, no := range hist.soldTo {
		show, seat, _ := strings.Cut(k, "/")
		st, ok := cur.seats[show][seat]
		switch {
		case !ok:
			add("I15", "a sold seat was freed", "seat %s was sold to %s, now free", k, no)
		case st.Status != cancel.SeatSold || st.OrderNo != no:
			add("I15", "a sold seat changed hands", "seat %s was sold to %s, now %s", k, no, seatState(st))
		}
	}
	for show, seats := range cur.seats {
		for seat, st := range seats {
			if k := show + "/" + seat; st.Status == cancel.SeatSold && next.soldTo[k] == "" {
				next.soldTo[k] = st.OrderNo
			}
		}
	}
	// A paid order keeps its claims in SQL.
	for k, o := range cur.orders {
		if !o.exists || o.Status != expiry.StatusPaid {
			continue
		}
		var seats []string
		for _, c := range cur.claims {
			if fmt.Sprintf("t%d/%s", c.tenant, c.OrderNo) == k {
				seats = append(seats, c.SeatID)
			}
		}
		slices.Sort(seats)
		if was, ok := hist.paidSeats[k]; ok {
			if !slices.Equal(was, seats) {
				add("I15", "a paid order's seats changed in SQL", "order %s was paid with seats %v, now %v", k, was, seats)
			}
		} else {
			next.paidSeats[k] = seats
		}
	}

	// I17: the purchase limit holds in both stores, whatever gave the seats.
	for _, k := range slices.Sorted(maps.Keys(cur.held)) {
		if n := cur.held[k]; n > limit {
			add("I17", "a user's seat-store counter exceeds the limit", "counter %s is %d, limit %d", k, n, limit)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(perUser)) {
		if n := perUser[k]; n > limit {
			add("I17", "a user's seats in pending and paid orders exceed the limit", "%s has %d seats in pending and paid orders, limit %d", k, n, limit)
		}
	}

	// I14: a payment is honoured or refunded, never both; once decided it
	// never flips (the steps say which came first). I9: the refund hook
	// runs once per payment id, the count being the hook's calls.
	for _, pm := range payments {
		id, k := pm.key(), pm.orderKey()
		honoured := cur.orders[k].exists && cur.orders[k].Status == expiry.StatusPaid
		if honoured && next.paidAt[id] == 0 {
			next.paidAt[id] = step
		}
		n := cur.facts.refunds[id]
		if was := len(prev.facts.calls[id]); len(cur.facts.calls[id]) > max(was, 1) {
			cause, broken := judgeRepeat(cur.facts.calls[id])
			_, brokenBefore := judgeRepeat(prev.facts.calls[id])
			switch {
			case broken != "" && brokenBefore == "":
				add("I9", "the refund hook ran twice for one payment", "payment %s: refund hook called %d times: %s", id, n, broken)
			case broken == "" && was <= 1:
				add("I9", repeatByDesign, "payment %s: refund hook called %d times: %s", id, n, cause)
			}
		}
		wasBoth := hist.paidAt[id] > 0 && prev.orders[k].Status == expiry.StatusPaid && prev.facts.refunds[id] > 0
		if !honoured || n == 0 || wasBoth {
			continue
		}
		paid, refunded := next.paidAt[id], cur.facts.refStep[id]
		if refunded < paid {
			add("I14", "a refunded payment was honoured later", "payment %s refunded at step %d, then honoured at step %d (%s paid by it)", id, refunded, paid, k)
		} else {
			add("I14", "an honoured payment was refunded", "payment %s honoured at step %d (%s paid by it), refunded at step %d", id, paid, k, refunded)
		}
	}

	// I12: one stuck order never holds the others back. A reconcile round
	// run from its start to its end in this step leaves no order of its
	// tenant pending that was pending and due before it, and whose row
	// the host did not hold, unless it left it not due (a round that waits
	// for the payment provider moves the deadline: I18). (With the
	// transition hook installed a failed batch backs its orders off, by
	// design: not judged there.)
	if !cur.hooks {
		for tn, at := range cur.facts.whole {
			if at != step {
				continue
			}
			for _, no := range orderNos[tn-1] {
				k := fmt.Sprintf("t%d/%s", tn, no)
				if p := prev.orders[k]; pending(p) && p.remaining <= 0 && !prev.facts.held[k] && !cur.facts.held[k] && pending(cur.orders[k]) && cur.orders[k].remaining <= 0 {
					add("I12", "a reconcile round left a due order pending whose row no one held", "order %s was due %v before the round, pending after it", k, -p.remaining)
				}
			}
		}
	}
	return fs, next
}

// I9's repeats. The refund hook runs once per payment id, except that a
// call that stalls past the refund lease (cancel.Config.DiscrepancyLease,
// the world's: the default) between the store's grant of the payment and
// the hook lets another operation be granted it and call the hook too
// (expiry/doc.go, I9; cancel.DiscrepancyStore). The ledger judges a repeat
// by the outcomes the gates saw, never by the library's decisions: which
// operation called the hook, which grant of the store it held (its
// RecordDiscrepancy answered true, or its ClaimDiscrepancies listed the
// payment), and the database's clock at the grant and at the call.

// repeatByDesign is the class of a repeat excused by its own cause.
const repeatByDesign = "the refund hook ran again for one payment after a call stalled past the refund lease"

// refundLease is the world's cancel.Config.DiscrepancyLease (the default).
const refundLease = cancel.DiscrepancyLeaseDefault

// grant is a payment the discrepancy store gave an operation to refund.
type grant struct {
	at   time.Time // by the database's clock
	step int       // the step it was granted in
	n    int       // its place among the world's grants and calls (facts.events)
}

// hookCall is one call of the refund hook.
type hookCall struct {
	op   string    // the operation that made it ("" outside any)
	step int       // the step it was made in
	at   time.Time // by the database's clock
	n    int       // its place among the world's grants and calls
	held grant     // the grant the operation held for the payment…
	has  bool      // …if it held one
}

// judgeRepeat judges the calls of the refund hook for one payment: each
// repeat is excused (cause says by what) only when it shows its own cause:
// every call was made under a grant of the store, and each grant after the
// first came at least a lease after the one before it, while the operation
// holding that one had not called the hook yet (it stalled past its lease:
// the store rightly gave the payment to another). Otherwise broken says
// which call or grant no stall explains: a call under no grant (the hook
// called per callback), a grant within the lease of the one before, or a
// grant after the one before was used (a payment refunded, then given out
// again).
func judgeRepeat(calls []hookCall) (cause, broken string) {
	if len(calls) < 2 {
		return "", ""
	}
	for _, c := range calls {
		if !c.has {
			return "", fmt.Sprintf("%s called the hook at step %d holding no grant of the payment (no RecordDiscrepancy of it answered true, no ClaimDiscrepancies listed it)", c.op, c.step)
		}
	}
	byGrant := slices.SortedFunc(slices.Values(calls), func(a, b hookCall) int { return a.held.n - b.held.n })
	var causes []string
	for i := 1; i < len(byGrant); i++ {
		p, c := byGrant[i-1], byGrant[i]
		switch gap := c.held.at.Sub(p.held.at); {
		case gap < refundLease:
			return "", fmt.Sprintf("%s was granted the payment at step %d, %v after %s was (step %d): within the refund lease (%v)", c.op, c.held.step, gap, p.op, p.held.step, refundLease)
		case p.n < c.held.n:
			return "", fmt.Sprintf("%s was granted the payment at step %d after %s had called the hook under its grant (step %d)", c.op, c.held.step, p.op, p.step)
		}
		causes = append(causes, fmt.Sprintf("%s, granted the payment at step %d, stalled %v past it before its call at step %d; %s was granted it at step %d, the lease (%v) run out",
			p.op, p.held.step, p.at.Sub(p.held.at), p.step, c.op, c.held.step, refundLease))
	}
	return strings.Join(causes, "; "), ""
}

// refundGrants summarises, per payment, what the I9 ledger needs of a
// state to judge a later call of the hook (judgeRepeat), for the state
// hash: the grants the stopped operations hold and those the calls were
// made under, in the order they were given, each with its holder (the
// stopped operation's kind, or "called"), whether a lease has run since,
// and whether it came a lease after the grant before it.
func refundGrants(parked map[int]*op, calls map[string][]hookCall, now time.Time) map[string]string {
	type held struct {
		who string
		g   grant
	}
	per := map[string][]held{}
	for _, o := range parked {
		for id, g := range o.grants {
			per[id] = append(per[id], held{fmt.Sprintf("k%d", o.kind), g})
		}
	}
	for id, cs := range calls {
		for _, c := range cs {
			if c.has {
				per[id] = append(per[id], held{"called", c.held})
			}
		}
	}
	out := map[string]string{}
	for id, hs := range per {
		slices.SortFunc(hs, func(a, b held) int { return a.g.n - b.g.n })
		var b strings.Builder
		for i, h := range hs {
			after := i > 0 && h.g.at.Sub(hs[i-1].g.at) >= refundLease
			fmt.Fprintf(&b, "%s/%v/%v,", h.who, now.Sub(h.g.at) >= refundLease, after)
		}
		out[id] = b.String()
	}
	return out
}

// judgeSettled checks what must hold once everything settled: SQL and the
// seat store agree (I15), every counter equals its user's seats (I8), every
// payment made is honoured, its seats sold, or refunded (I14, I9).
func judgeSettled(w *world, cur *observation) []finding {
	var fs []finding
	add := func(ledger, class, format string, args ...any) {
		fs = append(fs, finding{ledger: ledger, class: ledger + " after settle, " + class, text: fmt.Sprintf(format, args...)})
	}
	claims := map[string]claimView{}
	count := map[string]int{}
	for _, c := range cur.claims {
		claims[c.ShowID+"/"+c.SeatID] = c
		count[c.ShowID+"/"+c.UserID]++
	}
	for _, t := range w.tenants {
		for _, seat := range t.seats {
			c, claimed := claims[t.show+"/"+seat]
			st, held := cur.seats[t.show][seat]
			switch {
			case claimed && c.Status == expiry.StatusPending && !(held && st.Status == cancel.SeatLocked && st.OrderNo == c.OrderNo):
				add("I15", "a pending order's seat is not locked by it", "seat %s/%s: pending %s (tenant %d) in SQL, %s in the seat store", t.show, seat, c.OrderNo, t.n, stateOrFree(st, held))
			case claimed && c.Status == expiry.StatusPaid && !(held && st.Status == cancel.SeatSold && st.OrderNo == c.OrderNo):
				add("I15", "a paid order's seat is not sold to it", "seat %s/%s: paid %s (tenant %d) in SQL, %s in the seat store", t.show, seat, c.OrderNo, t.n, stateOrFree(st, held))
			case !claimed && held:
				add("I15", "a seat no order has in SQL is taken in the seat store", "seat %s/%s: no claim in SQL, %s in the seat store", t.show, seat, seatState(st))
			}
		}
		for _, u := range users {
			k := t.show + "/" + u
			if cur.held[k] != count[k] {
				add("I8", "a counter differs from its user's seats", "counter %s is %d, its seats in pending and paid orders %d", k, cur.held[k], count[k])
			}
		}
	}
	if cur.hooks {
		// A transition whose hook failed was retried once the outbox came
		// back: no order is left pending past its deadline (I3).
		for k, o := range cur.orders {
			if pending(o) && o.remaining <= 0 {
				add("hook", "a due order is still pending", "order %s is pending %v past its deadline", k, -o.remaining)
			}
		}
	}
	fs = append(fs, judgeProvider(w, cur)...)
	for _, pm := range payments {
		id, k := pm.key(), pm.orderKey()
		if !cur.facts.issued[id] {
			continue
		}
		o := cur.orders[k]
		honoured := o.exists && o.Status == expiry.StatusPaid
		sold := true
		for _, c := range cur.claims {
			if c.tenant != pm.tenant || c.OrderNo != pm.order {
				continue
			}
			st, ok := cur.seats[c.ShowID][c.SeatID]
			if !ok || st.Status != cancel.SeatSold || st.OrderNo != c.OrderNo || st.UserID != o.UserID {
				sold = false
			}
		}
		switch {
		case !honoured && cur.facts.refunds[id] == 0:
			add("I14", "a payment is neither honoured nor refunded", "payment %s: %s not paid (%s), no refund", id, k, o.Status)
		case honoured && !sold:
			add("I14", "an honoured payment's seats are not sold to its buyer", "payment %s paid %s, whose seats are not all sold to %s", id, k, o.UserID)
		}
	}
	return fs
}

func stateOrFree(st cancel.SeatState, held bool) string {
	if !held {
		return "free"
	}
	return seatState(st)
}
