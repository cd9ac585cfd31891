package e2e_test

// The model test's invariants (model_test.go): the snapshot each action is
// judged against, the checks after every action, and the settle at the end.

import (
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

type mSnap struct {
	Statuses map[string]expiry.Status
	Seats    map[string]map[string]cancel.SeatState
	Held     map[string]int
}

func (m *machine) snapshot(t *rapid.T) *mSnap {
	st, err := m.env.store.Statuses(m.ctx, m.nos)
	if err != nil {
		t.Fatal(err)
	}
	s := &mSnap{Statuses: map[string]expiry.Status{}, Seats: map[string]map[string]cancel.SeatState{}, Held: map[string]int{}}
	for no, o := range st {
		s.Statuses[no] = o.Status
	}
	for _, show := range m.shows {
		s.Seats[show] = m.fs.show(m.ctx, show)
		for _, u := range m.users {
			n, err := m.env.seats.Held(m.ctx, show, u)
			if err != nil {
				t.Fatal(err)
			}
			s.Held[show+"/"+u] = n
		}
	}
	return s
}

// Check runs after every action: the invariants that hold at any moment.
//
// I8 (the counter equals the seats of the user's pending and paid orders) may
// lag, legitimately, in one way only: seats still locked by an order that is
// cancelled, or was never placed, because the step that frees them failed or
// never ran: a release that failed or whose answer was lost, a cancel whose
// commit answer was lost (the service never got to the release), a lock whose
// answer was lost or a placement whose outcome the host could not learn (the
// host gave up on an order that may hold seats), a host rollback whose release
// failed. Each of those injected failures marks the order (lag), and only a
// marked order may hold such stale locks; the counter must then equal the
// seats the user holds in the seat store, and I8 holds exactly for every user
// without stale locks. A reconcile round without failures ends the lag (once a
// never-placed order's locks are past the grace period); settle checks that.
func (m *machine) Check(t *rapid.T) {
	if len(m.bad) > 0 {
		t.Fatalf("invariant violations:\n  %s", strings.Join(m.bad, "\n  "))
	}
	snap := m.snapshot(t)
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// I1: the store agrees with the model; one transition at most, reported
	// at most once.
	for _, no := range m.nos {
		o := m.orders[no]
		got, ok := snap.Statuses[no]
		if ok != o.placed || (ok && got != o.status) {
			fail("I1: store has %s as %v (exists %v); the model says %s", no, got, ok, m.state(o))
		}
		if o.transitions > 1 || m.obs.cancelled[no]+m.obs.paid[no] > 1 {
			fail("I1: %s changed state %d times; reported cancelled %d, paid %d times", no, o.transitions, m.obs.cancelled[no], m.obs.paid[no])
		}
		if (m.obs.cancelled[no] > 0 && o.status != expiry.StatusCancelled && !o.reinstated) || (m.obs.paid[no] > 0 && o.status != expiry.StatusPaid) {
			fail("I1: %s is %s but was reported cancelled %d, paid %d times", no, m.state(o), m.obs.cancelled[no], m.obs.paid[no])
		}
	}

	// I14: no payment id both paid an order and was refunded.
	for _, no := range m.nos {
		if pid := m.orders[no].paidBy; pid != "" && m.refunded[pid] > 0 {
			fail("I14: payment %s paid %s and was refunded %d times", pid, no, m.refunded[pid])
		}
	}

	// I9: every refund owed was made once at the provider (refund keeps
	// one per payment id); settle checks that each was made.

	// The seat store against the order store (I2, I8), but for shows whose
	// seat state was lost and is not repaired yet: there only the counter's
	// floor holds.
	for _, show := range m.shows {
		if m.lost || m.lostShows[show] {
			for _, u := range m.users {
				if held := snap.Held[show+"/"+u]; held < 0 {
					fail("I8: %s/%s counter below zero: %d", show, u, held)
				}
			}
			continue
		}
		seats := snap.Seats[show]
		perUser, stale, want := map[string]int{}, map[string]int{}, map[string]int{}
		for seat, s := range seats {
			o := m.orders[s.OrderNo]
			if o == nil || o.p.ShowID != show || !slices.Contains(o.p.Seats, seat) || o.p.UserID != s.UserID {
				fail("seat %s/%s is %+v: not a seat of that order", show, seat, s)
				continue
			}
			perUser[s.UserID]++
			switch {
			case s.Status == cancel.SeatSold && o.status != expiry.StatusPaid:
				fail("I2: seat %s/%s sold to %s, which is %s", show, seat, s.OrderNo, m.state(o))
			case s.Status == cancel.SeatSold:
			case o.placed && o.status == expiry.StatusPending:
			case o.placed && o.status == expiry.StatusPaid:
				if !o.lag {
					fail("seat %s/%s of paid %s is still only locked, and no failure explains it", show, seat, s.OrderNo)
				}
			default: // cancelled, or never placed: a stale lock
				stale[s.UserID]++
				if !o.lag {
					fail("I2/I8: seat %s/%s still locked by %s %s, and no failure explains it", show, seat, m.state(o), s.OrderNo)
				}
			}
		}
		blocked := map[string]int{}
		for _, no := range m.nos {
			o := m.orders[no]
			if !o.placed || o.p.ShowID != show || o.status == expiry.StatusCancelled {
				continue
			}
			want[o.p.UserID] += len(o.p.Seats)
			for _, seat := range o.p.Seats {
				s, ok := seats[seat]
				if m.blockedSeat(no, o, seat, s, ok) {
					blocked[o.p.UserID]++
					continue
				}
				if !ok || s.OrderNo != no || (o.status == expiry.StatusPending && s.Status != cancel.SeatLocked) {
					fail("I2: seat %s/%s of %s order %s is %+v (held %v)", show, seat, o.status, no, s, ok)
				}
			}
		}
		for _, u := range m.users {
			held := snap.Held[show+"/"+u]
			if want[u] > m.limit && !m.wiped {
				fail("I17: %s/%s holds %d seats in pending and paid orders, past the limit %d", show, u, want[u], m.limit)
			}
			switch {
			case held < 0:
				fail("I8: %s/%s counter below zero: %d", show, u, held)
			case held != perUser[u]:
				fail("I8: %s/%s counter %d, but the seat store holds %d seats for the user", show, u, held, perUser[u])
			case stale[u] == 0 && blocked[u] == 0 && held != want[u]:
				fail("I8: %s/%s counter %d, the user's pending and paid orders hold %d seats", show, u, held, want[u])
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("invariant violations:\n  %s", strings.Join(bad, "\n  "))
	}
}

// blockedSeat reports whether seat, of the live order no, is rightly not its
// in the seat store now (s, ok: the seat's state there), because of a loss:
//
//   - a failed placement's lock (that a failure left) holds a seat SQL gives
//     the order; the reconciler releases it after the grace period;
//   - that lock was released, and the seat waits for a claims pass to reach
//     the order's claim (reclaim): the pass under way may have passed it
//     while the lock held the seat, so the claim comes back in the next.
func (m *machine) blockedSeat(no string, o *mOrder, seat string, s cancel.SeatState, ok bool) bool {
	if !o.lagBehind {
		return false
	}
	if ok {
		other := m.orders[s.OrderNo]
		return s.OrderNo != no && other != nil && other.lag
	}
	return m.reclaim[[2]string{o.p.ShowID, seat}] != nil
}

// unheld counts the seats of the live order no that the seat store rightly
// does not hold for it now (blockedSeat): a release frees the others only.
func (m *machine) unheld(no string, o *mOrder) int {
	state := m.fs.show(m.ctx, o.p.ShowID)
	n := 0
	for _, seat := range o.p.Seats {
		if s, ok := state[seat]; m.blockedSeat(no, o, seat, s, ok) {
			n++
		}
	}
	return n
}

// freedBlocked notes that seat, which a lock of order by held, was freed:
// when that lock was a stale one (a failure left it) on a seat SQL gives
// another live order after a loss (blockedSeat), the order waits for a
// claims pass to give the seat back (reclaim).
func (m *machine) freedBlocked(show, seat, by string) {
	if o := m.orders[by]; o == nil || !o.lag {
		return
	}
	for _, no := range m.nos {
		o := m.orders[no]
		if no == by || !o.placed || !o.lagBehind || o.status == expiry.StatusCancelled || o.p.ShowID != show || !slices.Contains(o.p.Seats, seat) {
			continue
		}
		passes := map[*reconcile.Reconciler]int{}
		for _, h := range m.hosts {
			passes[h] = 2 // the pass under way may have passed the claim already
		}
		m.reclaim[[2]string{show, seat}] = passes
		m.stats.kinds["blocked_claim_freed"]++
		return
	}
}

// settle ends a run: the failures stop, time passes until every lock of a
// missing order is past the grace period (on the fake clock, until every order
// is due too), and a fresh reconciler host runs a complete round. Then nothing
// is pending past due (I3), no seat lock is stale (I8 exactly), every paid
// seat is sold, and a second round has nothing left to do.
func (m *machine) settle(t *rapid.T) {
	m.armed = map[string]mMode{}
	m.outage = 0
	m.hits = m.hits[:0]
	m.stuck = map[string]bool{}
	m.backoff = map[string]time.Time{} // settle's reconciler is a fresh host
	m.refundDown = false
	if m.env.clock != nil {
		latest := m.appNow()
		for _, o := range m.orders {
			if o.p.ExpireAt.After(latest) {
				latest = o.p.ExpireAt
			}
		}
		m.pass(latest.Sub(m.appNow()) + max(m.env.grace, m.env.settle) + time.Second)
	} else {
		m.pass(max(m.env.grace, m.env.settle) + 10*time.Millisecond)
	}
	// A fresh host with the default bounds: one round covers every store of
	// a run (the model's hosts use small ones, so passes span rounds).
	final := m.rcfg
	final.Batch, final.MaxPerRound = 0, 0
	r, err := reconcile.New(final)
	if err != nil {
		t.Fatal(err)
	}
	t0 := m.storeNow(t)
	if _, err := m.rounds(r); err != nil {
		t.Fatalf("final reconcile round: %v", err)
	}
	// A rebuild or a repair pass that the run left unfinished completes in
	// further rounds (each bounded by MaxPerRound claims).
	for i := 0; (m.lost || len(m.lostShows) > 0 || len(m.reclaim) > 0) && i < 20; i++ {
		if _, err := m.rounds(r); err != nil {
			t.Fatalf("final reconcile round: %v", err)
		}
	}
	if m.lost || len(m.lostShows) > 0 || len(m.reclaim) > 0 {
		t.Fatalf("the seat store was not repaired in 20 rounds (lost %v, shows %v, freed claims %v)", m.lost, m.lostShows, slices.Collect(maps.Keys(m.reclaim)))
	}
	m.noneDue(t0, "the final reconcile rounds")
	// I9: every payment answered with a discrepancy reached the hook, once.
	for i := 0; i < 50 && len(m.unrefunded()) > 0; i++ {
		m.pass(m.env.lease + time.Millisecond) // past the lease of a failed hook
		if _, err := r.Round(m.ctx); err != nil {
			t.Fatalf("reconcile round retrying refunds: %v", err)
		}
	}
	if left := m.unrefunded(); len(left) > 0 {
		t.Fatalf("I9: payments never refunded: %v", left)
	}
	for _, o := range m.orders {
		o.lag, o.lagBehind = false, false // nothing excuses a stale lock any more
	}
	m.Check(t)
	for _, show := range m.shows {
		for seat, s := range m.fs.show(m.ctx, show) {
			if o := m.orders[s.OrderNo]; o != nil && s.Status != cancel.SeatSold && o.status == expiry.StatusPaid {
				t.Fatalf("seat %s/%s of paid %s not sold after the final round: %+v", show, seat, s.OrderNo, s)
			}
		}
	}
	// A second round has nothing to repair. (In real time, orders that were
	// not due at the first round may be by now: only the fake clock stood
	// still, so only there must it expire nothing.)
	rep, err := r.Round(m.ctx)
	if err != nil || rep.Released+rep.Sold+rep.Restored != 0 || (m.env.clock != nil && rep.Expired != 0) {
		t.Fatalf("a second final round still did something: %+v, %v", rep, err)
	}
	m.Check(t)
	if m.env.clock != nil {
		for _, no := range m.nos {
			if o := m.orders[no]; o.placed && o.status == expiry.StatusPending {
				t.Fatalf("I3: %s pending although every order is past due", no)
			}
		}
	}
	m.stats.kinds["settle"]++
}

// unrefunded lists the payment ids owed a refund that the hook has not made.
func (m *machine) unrefunded() []string {
	var left []string
	for pid := range m.owed {
		if m.refunded[pid] == 0 {
			left = append(left, pid)
		}
	}
	slices.Sort(left)
	return left
}
