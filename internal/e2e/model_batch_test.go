package e2e_test

// The model test's batch path (model_test.go): the decorators of the stores'
// batch methods (cancel.OrderStore's CancelDue, cancel.SeatStore's
// ReleaseAll); and ExpireBatch, which drives the
// reconciler's expired pass through cancel.Service.ExpireDue: cleanly, with
// some of a batch's orders decided between the pass's listing and its
// compare-and-set, and with the batch failing before its commit, after it
// (its answer lost: a crash between the commit and the releases), or in its
// release.
//
// What is judged is what happened: each order a batch cancelled goes
// through the same bookkeeping as a single cancel (onTransition: one
// transition, never early by the store's clock, with its own seats), each
// hold of a ReleaseAll is audited as a Release (only this order's locks,
// never a paid order's, never twice), and after the round no due order is
// left pending whatever the batch met (I3, I12); the ledgers (I8, I14, I15)
// are Check's and settle's, as for every other step.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"pgregory.net/rapid"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// mBatchOrders is mOrders with the store's CancelDue.
type mBatchOrders struct{ *mOrders }

// CancelDue passes a batch to the store, after ExpireBatch's race (midBatch)
// when one is armed, with the faults "before" (nothing committed) and
// "lost_ack" (committed, the answer lost). A row a stuck transaction holds
// is passed by, as sqlstore's SKIP LOCKED passes it.
func (s mBatchOrders) CancelDue(ctx context.Context, nos []string, reason cancel.Reason) ([]cancel.Result, error) {
	m := s.m
	m.stats.kinds["batch_cancel_calls_"+string(reason)]++
	m.stats.kinds[fmt.Sprintf("batch_cancel_size_%d", min(len(nos), 5))]++
	var raced []string
	if mid := m.midBatch; mid != nil {
		m.midBatch = nil
		raced = mid(nos)
	}
	mode, hit := m.fault("CancelDue", "")
	if mode == mBefore {
		return nil, injected("CancelDue")
	}
	ask := nos
	if slices.ContainsFunc(nos, func(no string) bool { return m.stuck[no] }) {
		ask = slices.DeleteFunc(slices.Clone(nos), func(no string) bool { return m.stuck[no] })
		m.stats.kinds["batch_stuck_passed_by"]++
	}
	res, err := s.inner.CancelDue(ctx, ask, reason)
	if err != nil {
		// Nothing changed (the contract): Check compares the store with
		// the model after the action.
		m.stats.kinds["batch_cancel_error"]++
		res = nil
	}
	seen := map[string]bool{}
	for _, r := range res {
		no := r.Order.No
		switch {
		case !slices.Contains(ask, no):
			m.violate("a batch of %v cancelled %s, which it was not given", ask, no)
			continue
		case seen[no] || !r.Changed:
			m.violate("a batch of %v answered %s twice or unchanged (changed=%v)", ask, no, r.Changed)
			continue
		}
		seen[no] = true
		// The same bookkeeping as a single cancel's: one transition, due
		// by the store's clock (I1, I4), the order's own seats.
		m.onTransition(no, expiry.StatusCancelled, &cancel.Request{OrderNo: no, Reason: reason, OnlyIfDue: true}, r)
		if o := m.orders[no]; hit && o != nil {
			o.lag = true // the Service never hears of it: its seats wait for the lock pass
		}
	}
	m.stats.kinds["batch_cancelled"] += len(seen)
	if len(seen) > 1 {
		m.stats.kinds["batch_cancelled_2+"]++
	}
	if len(raced) > 0 {
		m.stats.kinds["batch_race_lost"] += len(raced)
		if len(seen) > 0 {
			m.stats.kinds["batch_race_partial"]++ // some orders lost, the others cancelled in the same batch
		}
	}
	if hit {
		return nil, injected("CancelDue")
	}
	return res, err
}

// mBatchSeats is mSeats with the seat store's ReleaseAll.
type mBatchSeats struct{ *mSeats }

// ReleaseAll passes the holds to the seat store and audits each as a
// Release, with the faults "before" (nothing reached the seat store),
// "lost_ack" (released, the answer lost) and "one_show" (the first show's
// step failed, the others' were done: -1 for each hold of it).
func (s mBatchSeats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	m := s.m
	m.stats.kinds["batch_release_calls"]++
	if len(holds) > 1 {
		m.stats.kinds["batch_release_2+"]++
	}
	mode, hit := m.fault("ReleaseAll", "")
	run, failed := holds, []bool(nil)
	if mode == mOneShow && len(holds) > 0 {
		failed = make([]bool, len(holds))
		run = nil
		for i, h := range holds {
			if failed[i] = h.ShowID == holds[0].ShowID; !failed[i] {
				run = append(run, h)
			}
		}
		if len(run) > 0 {
			m.stats.kinds["batch_release_one_show_others_done"]++
		}
	}
	for i, h := range holds {
		if o := m.orders[h.OrderNo]; hit && o != nil && (failed == nil || failed[i]) {
			o.lag = true // its seats stay locked (or the Service thinks so) until the lock pass
		}
	}
	if mode == mBefore {
		return nil, injected("ReleaseAll")
	}
	var ns []int
	var err error
	if len(run) > 0 {
		before, after := map[string]map[string]cancel.SeatState{}, map[string]map[string]cancel.SeatState{}
		for _, h := range run {
			before[h.ShowID] = s.show(ctx, h.ShowID)
		}
		ns, err = s.inner.ReleaseAll(ctx, run)
		for show := range before {
			after[show] = s.show(ctx, show)
		}
		s.auditReleaseAll(run, before, after, ns, err)
	}
	switch {
	case failed != nil:
		out, k := make([]int, len(holds)), 0
		for i := range holds {
			out[i] = -1
			if !failed[i] {
				if k < len(ns) {
					out[i] = ns[k]
				}
				k++
			}
		}
		return out, injected("ReleaseAll (one show)")
	case hit:
		return nil, injected("ReleaseAll")
	}
	return ns, err
}

// auditReleaseAll audits one ReleaseAll call: every seat it changed was
// locked by the order of one of its holds, and each hold is audited as a
// Release of its own (auditRelease), with the changes to its order's seats
// alone.
func (s *mSeats) auditReleaseAll(holds []cancel.Hold, before, after map[string]map[string]cancel.SeatState, ns []int, err error) {
	m := s.m
	orders := map[string]map[string]bool{} // show → the orders of its holds
	for _, h := range holds {
		if orders[h.ShowID] == nil {
			orders[h.ShowID] = map[string]bool{}
		}
		orders[h.ShowID][h.OrderNo] = true
	}
	for show, b := range before {
		a := after[show]
		for seat, as := range a {
			if bs, was := b[seat]; !was {
				m.violate("I2: a batch release in show %s created seat %s: %+v", show, seat, as)
			} else if bs != as && (bs.Status != cancel.SeatLocked || !orders[show][bs.OrderNo]) {
				m.violate("I2: a batch release changed seat %s/%s from %+v to %+v: not a lock of any of its orders", show, seat, bs, as)
			}
		}
		for seat, bs := range b {
			if _, still := a[seat]; !still && !orders[show][bs.OrderNo] {
				m.violate("I2: a batch release freed seat %s/%s (%+v): not a lock of any of its orders", show, seat, bs)
			}
		}
	}
	if err == nil && len(ns) != len(holds) {
		m.violate("a batch release of %d holds answered %d counts", len(holds), len(ns))
		return
	}
	for i, h := range holds {
		b := before[h.ShowID]
		a := make(map[string]cancel.SeatState, len(b))
		for seat, bs := range b {
			a[seat] = bs
			if bs.OrderNo != h.OrderNo {
				continue // another hold's change, audited there
			}
			if as, ok := after[h.ShowID][seat]; ok {
				a[seat] = as
			} else {
				delete(a, seat)
			}
		}
		n, herr := -1, err
		if i < len(ns) && ns[i] >= 0 {
			n, herr = ns[i], nil // this hold's step was done: its count must be right
		}
		s.auditRelease(h, b, a, n, herr)
	}
}

// ExpireBatch places a few orders that are due already and runs a reconcile
// interval on one host, so that its expired pass cancels them in batches
// (Batch 4: a page, one ExpireDue), in one of these scenarios:
//
//   - clean: nothing in the way;
//   - race: between the pass's listing and its batch's compare-and-set,
//     some of the batch's pending orders are paid or cancelled by their
//     users (through the model's own Pay and UserCancel paths); the batch
//     must cancel only the others;
//   - cancel_due_before, cancel_due_lost_ack: the batch fails before its
//     commit, or commits and loses its answer (a crash between a batch's
//     commit and its releases: the seats stay locked until the lock pass);
//   - release_all_before, release_all_lost_ack, release_all_one_show: the
//     batch's release fails whole, runs and loses its answer, or fails for
//     one show (the orders are cancelled, their seats locked until the lock
//     pass);
//   - seat_store_down: every seat call of the round fails (its releases,
//     the lock pass).
//
// Whatever the batch met, no order that was due when the round began is
// left pending after it (I3; I12: a failed batch holds none back), unless
// a failure of the expired pass itself (a scan, a single cancel) explains
// it; the ledgers are Check's after the step and settle's at the end.
func (m *machine) ExpireBatch(t *rapid.T) {
	n := rapid.IntRange(2, 5).Draw(t, "orders")
	for i := 0; i < n; i++ {
		m.next++
		no := fmt.Sprintf("%so%d", m.env.prefix, m.next)
		seats := []string{fmt.Sprintf("bt%d", m.next), fmt.Sprintf("bt%d-2", m.next)}[:rapid.IntRange(1, 2).Draw(t, "seats")]
		due := m.storeNow(t).Add(-time.Millisecond)
		if r := m.env.resolution; r > 0 {
			due = due.Truncate(r)
		}
		m.place(t, no, rapid.SampledFrom(m.users).Draw(t, "user"), rapid.SampledFrom(m.shows).Draw(t, "show"), seats, due)
	}
	step := rapid.SampledFrom(m.batchSteps).Draw(t, "batch")
	m.stats.kinds["expire_batch_"+step]++
	var armed string
	switch step {
	case "race":
		m.midBatch = m.batchRace(t)
	case "seat_store_down":
		m.outage = max(m.outage, 1) // this action's: every seat call of the round fails
	case "cancel_due_before", "cancel_due_lost_ack", "release_all_before", "release_all_lost_ack", "release_all_one_show":
		op, mode := "CancelDue", mBefore
		switch step {
		case "cancel_due_lost_ack":
			mode = mLostAck
		case "release_all_before":
			op = "ReleaseAll"
		case "release_all_lost_ack":
			op, mode = "ReleaseAll", mLostAck
		case "release_all_one_show":
			op, mode = "ReleaseAll", mOneShow
		}
		if _, taken := m.armed[op]; !taken {
			m.armed[op], armed = mode, op
		}
	}
	host := rapid.IntRange(0, 1).Draw(t, "host")
	t0 := m.storeNow(t)
	calls := m.batchCalls()
	_, err := m.rounds(m.hosts[host])
	if m.midBatch != nil {
		m.midBatch = nil
		m.stats.kinds["expire_batch_race_unreached"]++
	}
	if _, left := m.armed[armed]; armed != "" && left {
		delete(m.armed, armed) // no batch reached the store, or none had seats to release
		m.stats.kinds["expire_batch_fault_unreached"]++
	}
	if m.batchCalls() == calls {
		m.stats.kinds["expire_batch_no_batch"]++
	}
	if len(m.hits) == 0 && err != nil {
		m.violate("reconcile round without failures: %v", err)
	}
	if m.expiredPassIntact() {
		m.noneDue(t0, "a reconcile round in batches ("+step+")")
	}
}

func (m *machine) batchCalls() int {
	return m.stats.kinds["batch_cancel_calls_"+string(cancel.ReasonReconcile)]
}

// expiredPassIntact reports whether the failures of this action left the
// reconciler's expired pass whole: none of them failed its scan or a cancel
// of its one-by-one path (a batch's failures are followed by that path, so
// they do not count, nor do the seat store's, which come after the commit).
func (m *machine) expiredPassIntact() bool {
	return !m.hit("Expired", "CancelPending", "Order")
}

// batchRace is ExpireBatch's race: run inside the next CancelDue, before
// the store sees it, it pays or user-cancels some of the batch's pending
// orders (one at least, mostly not all, so that the batch cancels the
// others) through the model's own paths, which check their answers, and
// returns those it decided. The reconciler calls the store from a goroutine
// of its own (and waits for it), so every choice is drawn here, before the
// round: rapid draws only on the test's goroutine.
func (m *machine) batchRace(t *rapid.T) func(nos []string) []string {
	const most = 8 // more than a model host's batch (4)
	pick := rapid.SliceOfN(rapid.Bool(), most, most).Draw(t, "race_pick")
	pays := rapid.SliceOfN(rapid.Bool(), most, most).Draw(t, "race_pay")
	all := rapid.IntRange(0, 3).Draw(t, "race_all") == 0
	return func(nos []string) []string {
		var pending []string
		for _, no := range nos {
			if o := m.orders[no]; o != nil && o.placed && o.status == expiry.StatusPending {
				pending = append(pending, no)
			}
		}
		if len(pending) == 0 {
			m.stats.kinds["batch_race_none_pending"]++
			return nil
		}
		var raced []string
		for i, no := range pending {
			if all || i < most && pick[i] {
				raced = append(raced, no)
			}
		}
		switch {
		case len(raced) == 0:
			raced = pending[:1]
		case len(raced) == len(pending) && !all && len(pending) > 1:
			raced = raced[:len(raced)-1]
		}
		for i, no := range raced {
			o := m.orders[no]
			if pays[i%most] {
				m.next++
				m.stats.kinds["batch_race_pay"]++
				m.pay(t, no, o, o.p.UserID, true, fmt.Sprintf("pay-%s-race%d", no, m.next))
			} else {
				m.stats.kinds["batch_race_user_cancel"]++
				m.userCancel(no, o, o.p.UserID, true)
			}
		}
		// The ones it decided (a fault may have failed a payment or a
		// cancel before its commit: that order is still the batch's).
		return slices.DeleteFunc(raced, func(no string) bool { return m.orders[no].status == expiry.StatusPending })
	}
}
