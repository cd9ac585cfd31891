package explore

import (
	"fmt"
	"strconv"
	"strings"
)

// Partial-order reduction. Two steps taken from one state commute when
// neither touches what the other writes: run in either order they make the
// same calls with the same answers and reach the same state. The explorer
// takes only one of the two orders (sleep sets: explorer.expand), so each
// step is given a footprint, what it read and wrote, from the calls it made
// (every store call is logged by the gate with its arguments; the seat
// store's calls it lets through ungated and untraced, Refunded,
// MarkRefunded, SeatStates and ScanSold, are noted aside for this:
// gatedSeats.touch) and from its
// kind (kind.touches: the order its enabled reads, the facts it writes).
//
// The resources are named finely where the stores are keyed so (an order
// row, a payment id, a seat) and coarsely where a call reads a whole table
// (the reconciler's listings read every order, claim, lock or discrepancy
// of their store); every step reads the clock, and a step that moves it
// writes it, so no clock step commutes with anything.

// footprint maps a resource to how a step touched it (rd, wr or both).
type footprint map[string]uint8

const (
	rd uint8 = 1 << iota
	wr
)

const (
	clockRes = "clock"
	hookRes  = "hook outbox"
)

// orderRes is tenant tn's order no: its row, claims, facts (sent, deleted,
// held, its outbox records) and what a reconcile round backs off.
func orderRes(tn int, no string) string { return "order " + strconv.Itoa(tn) + "/" + no }

// payRes is tenant tn's payment id: its discrepancy record, refunds, and
// the provider's callback.
func payRes(tn int, id string) string { return "payment " + strconv.Itoa(tn) + "/" + id }

// refundRes is the seat store's refund record of a payment id
// (SeatStore.Refunded, MarkRefunded): keyed by the seat store's scope and
// the id alone, not by tenant, so two tenants on one seat store with the
// same payment id share it.
func refundRes(scope, id string) string { return "refund record " + scope + "|" + id }

func (f footprint) add(mode uint8, keys ...string) {
	for _, k := range keys {
		f[k] |= mode
	}
}

// conflicts says whether f and g touch a resource that one of them writes.
// A key ending in "*" stands for every resource it prefixes.
func (f footprint) conflicts(g footprint) bool {
	for a, ma := range f {
		for b, mb := range g {
			if (ma|mb)&wr != 0 && overlap(a, b) {
				return true
			}
		}
	}
	return false
}

func overlap(a, b string) bool {
	switch {
	case a == b:
		return true
	case strings.HasSuffix(a, "*"):
		return strings.HasPrefix(b, a[:len(a)-1])
	case strings.HasSuffix(b, "*"):
		return strings.HasPrefix(a, b[:len(b)-1])
	}
	return false
}

// footprint is what step s of kind i touched in w, from log, the calls it
// made (reads included), whether it moved the clock, and its kind.
func (w *world) footprint(kinds []kind, i int, log stepLog, clockMoved bool) footprint {
	k := kinds[i]
	f := footprint{clockRes: rd, fmt.Sprintf("op %d", i): wr}
	for r, m := range k.touches {
		f.add(m, r)
	}
	if clockMoved {
		f.add(wr, clockRes)
	}
	if k.twin >= 0 {
		f.add(rd, fmt.Sprintf("op %d", k.twin)) // it starts only while its twin is in flight
	}
	if w.hooks {
		f.add(rd, hookRes) // every transition runs the hook
	}
	tn := k.tenant
	if tn == 0 {
		return f
	}
	seats := "seats " + w.tenants[tn-1].seatScope() + "|"
	counters := "counters " + w.tenants[tn-1].seatScope() + "|"
	orders := fmt.Sprintf("order %d/", tn)
	pays := fmt.Sprintf("payment %d/", tn)
	texts := make([]string, 0, len(log.calls)+len(log.touched))
	for _, c := range log.calls {
		texts = append(texts, c.text)
	}
	texts = append(texts, log.touched...)
	for _, text := range texts {
		name, rest, _ := strings.Cut(text, "(")
		args, _, _ := strings.Cut(rest, ")=")
		first, second, _ := strings.Cut(args, " ")
		switch name {
		case "Order":
			f.add(rd, orders+args)
		case "Statuses":
			for _, no := range strings.Split(args, ",") {
				f.add(rd, orders+no)
			}
		case "Expired", "Claims":
			f.add(rd, orders+"*")
		case "CancelPending", "SetDeadline", "MarkWarned", "Send":
			f.add(wr, orders+first)
			if name == "CancelPending" {
				f.add(rd, provRes(tn, first)) // ledger (a) reads the session at the commit
			}
		case "Insert":
			// A seat's claim is keyed by the seat: the insert reads
			// every other order's claims.
			f.add(wr, orders+first)
			f.add(rd, orders+"*")
		case "CancelDue":
			for _, no := range strings.Split(first, ",") {
				f.add(wr, orders+no)
				f.add(rd, provRes(tn, no)) // ledger (a) reads the session at the commit
			}
		case "QueryPayment":
			f.add(rd, provRes(tn, args), provDownRes)
		case "ClosePayment":
			f.add(wr, provRes(tn, args))
			f.add(rd, provDownRes)
		case "PayPending":
			f.add(wr, orders+first, pays+second)
		case "ReinstateCancelled":
			// It claims the order's seats again if no other order's
			// claim holds them.
			f.add(wr, orders+first, pays+second)
			f.add(rd, orders+"*")
		case "RecordDiscrepancy", "Refund":
			f.add(wr, pays+second)
		case "SettleDiscrepancy":
			f.add(wr, pays+args)
		case "ClaimDiscrepancies":
			f.add(wr, pays+"*")
		case "Lock", "Release", "Sell":
			// "no show:seat,seat⟨lock⟩"
			holdFootprint(f, seats, counters, second)
		case "ReleaseAll":
			// "no show:seat⟨lock⟩; no show:seat,seat⟨lock⟩": a Release of
			// each hold (one atomic step per show), so it writes what each
			// of those Releases writes.
			for _, h := range strings.Split(args, "; ") {
				if h == "" {
					continue
				}
				_, hold, _ := strings.Cut(h, " ")
				holdFootprint(f, seats, counters, hold)
			}
		case "SeatStates":
			// "show:seat,seat": the states of those seats (after a sale
			// that skipped some).
			show, list, _ := strings.Cut(args, ":")
			for _, seat := range strings.Split(list, ",") {
				f.add(rd, seats+show+"/"+seat)
			}
		case "ScanSold":
			// The sold pass reads every sold seat of the store.
			f.add(rd, seats+"*")
		case "Refunded":
			f.add(rd, refundRes(w.tenants[tn-1].seatScope(), args))
		case "MarkRefunded":
			// "no id"
			f.add(wr, refundRes(w.tenants[tn-1].seatScope(), second))
		case "Restore":
			// "show:seat=no/user/status,…"
			for _, c := range strings.Split(args, ",") {
				if c == "" {
					continue
				}
				at, _, _ := strings.Cut(c, "=")
				show, seat, _ := strings.Cut(at, ":")
				f.add(wr, seats+show+"/"+seat, counters+show)
			}
		case "ScanLocks", "Missing":
			f.add(rd, seats+"*")
		case "MarkRestored":
			f.add(wr, "restored "+w.tenants[tn-1].seatScope())
		case "Lost":
			f.add(rd, "restored "+w.tenants[tn-1].seatScope())
		default:
			panic(fmt.Sprintf("explore: the footprint does not know the call %s (por_test.go)", text))
		}
	}
	return f
}

// holdFootprint adds what a write of one hold ("show:seat,seat⟨lock⟩")
// writes: each of its seats, and the show's purchase-limit counters.
func holdFootprint(f footprint, seats, counters, hold string) {
	show, list, _ := strings.Cut(hold, ":")
	list, _, _ = strings.Cut(list, "⟨")
	for _, seat := range strings.Split(list, ",") {
		f.add(wr, seats+show+"/"+seat)
	}
	f.add(wr, counters+show)
}

// seatScope names the seat store t's wiring writes to: the one store ("")
// or t's scope of it. Scopes are stores of their own (memstore.Seats.Scoped,
// redisseat's key prefixes): what one holds, another never sees.
func (t *tenant) seatScope() string {
	if sc, ok := t.shared.(interface{ Scope() string }); ok {
		return sc.Scope()
	}
	return ""
}
