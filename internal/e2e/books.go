package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Outcome is what the world shows at one observation: the orders' rows, the
// seat store and the refunds the host's hook made. It is read from the
// stores and the hook, never from what the library reported, so the ledgers
// that judge it (Books) share no rule with the code they judge.
type Outcome struct {
	// Orders by number: status, the payment that paid it, and what was
	// placed (user, show, seats).
	Orders map[string]OrderOutcome
	// Seats by show and seat, as the seat store has them.
	Seats map[string]map[string]cancel.SeatState
	// Held is the seat store's purchase-limit counter by show and user.
	Held map[[2]string]int
	// Refunds counts the refund hook's successful calls by payment id.
	Refunds map[string]int
	// Answered are the payment ids whose callback got an answer (paid, a
	// repeat, or a discrepancy): once settled, each was honoured or
	// refunded.
	Answered map[string]bool
}

// OrderOutcome is one order's row.
type OrderOutcome struct {
	Status expiry.Status
	PaidBy string // the payment id that paid it ("" unless paid)
	UserID string
	ShowID string
	Seats  []string
}

// Books keeps the outcome ledgers of expiry/doc.go across observations: I14
// (payments), I15 (seats), I17 (limits). Observe each Outcome in order; a
// Books is not safe for concurrent use.
type Books struct {
	// Limit is the purchase limit every order was placed with (0: none).
	Limit int
	// fate is each payment id's first decided fate: "paid <order>" or
	// "refunded"; it never changes afterwards.
	fate map[string]string
	// sold is each seat sold once (show/seat → order): it stays sold to it.
	sold map[string]string
	// Observations counts the outcomes observed.
	Observations int
}

// Observe judges o against the ledgers and what earlier observations saw;
// settled says the world is quiet and repaired (every operation done, the
// reconciler run past its settle time), which adds the checks that only
// hold then. It returns one line per violation.
func (b *Books) Observe(o Outcome, settled bool) []string {
	if b.fate == nil {
		b.fate, b.sold = map[string]string{}, map[string]string{}
	}
	b.Observations++
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// I14: a payment id pays at most one order, is never both honoured and
	// refunded, and its fate never flips.
	paidBy := map[string]string{}
	for _, no := range sortedKeys(o.Orders) {
		ord := o.Orders[no]
		if ord.Status != expiry.StatusPaid || ord.PaidBy == "" {
			continue
		}
		if other, ok := paidBy[ord.PaidBy]; ok {
			fail("I14: payment %s paid two orders, %s and %s", ord.PaidBy, other, no)
		}
		paidBy[ord.PaidBy] = no
		if n := o.Refunds[ord.PaidBy]; n > 0 {
			fail("I14: payment %s paid order %s and was refunded %d times", ord.PaidBy, no, n)
		}
	}
	ids := map[string]bool{}
	for id := range paidBy {
		ids[id] = true
	}
	for id := range o.Refunds {
		ids[id] = true
	}
	for id := range o.Answered {
		ids[id] = true
	}
	for _, id := range sortedKeys(ids) {
		now := ""
		switch {
		case paidBy[id] != "":
			now = "paid " + paidBy[id]
		case o.Refunds[id] > 0:
			now = "refunded"
		}
		switch was := b.fate[id]; {
		case now == "" && was != "" && !strings.HasPrefix(was, "paid"):
			fail("I14: payment %s was %s, now it is neither paid nor refunded", id, was)
		case now == "" && was != "":
			fail("I14: payment %s %s, now that order is not paid by it", id, strings.Replace(was, "paid", "paid order", 1))
		case now != "" && was != "" && now != was:
			fail("I14: payment %s's fate flipped: %s, then %s", id, was, now)
		case now != "" && was == "":
			b.fate[id] = now
		}
		if settled && o.Answered[id] && now == "" {
			fail("I14: payment %s was answered but is neither honoured nor refunded once settled", id)
		}
	}

	// I15: a seat sold stays sold to its order; a seat sold is its paid
	// order's; after settle the seat store and SQL agree.
	for _, show := range sortedKeys(o.Seats) {
		for _, seat := range sortedKeys(o.Seats[show]) {
			st := o.Seats[show][seat]
			if st.Status != cancel.SeatSold {
				continue
			}
			key := show + "/" + seat
			if was, ok := b.sold[key]; ok && was != st.OrderNo {
				fail("I15: seat %s sold to %s, later sold to %s", key, was, st.OrderNo)
			}
			b.sold[key] = st.OrderNo
			if ord, ok := o.Orders[st.OrderNo]; ok && ord.Status != expiry.StatusPaid {
				fail("I15: seat %s sold to %s, which is %s", key, st.OrderNo, ord.Status)
			}
		}
	}
	for _, key := range sortedKeys(b.sold) {
		show, seat, _ := strings.Cut(key, "/")
		if _, observed := o.Seats[show]; !observed {
			continue
		}
		if st := o.Seats[show][seat]; st.Status != cancel.SeatSold || st.OrderNo != b.sold[key] {
			if settled || st.OrderNo != "" { // a lost Redis write may free it for a while; another holder never
				fail("I15: seat %s was sold to %s, now %+v", key, b.sold[key], st)
			}
		}
	}
	if settled {
		type holder struct {
			no     string
			status cancel.SeatStatus
		}
		want := map[string]map[string]holder{}
		for _, no := range sortedKeys(o.Orders) {
			ord := o.Orders[no]
			if ord.Status == expiry.StatusCancelled {
				continue
			}
			if want[ord.ShowID] == nil {
				want[ord.ShowID] = map[string]holder{}
			}
			for _, seat := range ord.Seats {
				if other, taken := want[ord.ShowID][seat]; taken {
					fail("I15: seat %s/%s held in SQL by two live orders, %s and %s", ord.ShowID, seat, other.no, no)
				}
				st := cancel.SeatLocked
				if ord.Status == expiry.StatusPaid {
					st = cancel.SeatSold
				}
				want[ord.ShowID][seat] = holder{no, st}
			}
		}
		for _, show := range sortedKeys(o.Seats) {
			for _, seat := range sortedKeys(o.Seats[show]) {
				st, w := o.Seats[show][seat], want[show][seat]
				_, known := o.Orders[st.OrderNo]
				switch {
				case w.no == "" && known:
					fail("I15: seat %s/%s is %+v in the seat store, free in SQL", show, seat, st)
				case w.no != "" && (st.OrderNo != w.no || st.Status != w.status):
					fail("I15: seat %s/%s is %+v in the seat store, %s's (%s) in SQL", show, seat, st, w.no, w.status)
				}
			}
		}
		for _, show := range sortedKeys(want) {
			for _, seat := range sortedKeys(want[show]) {
				if _, ok := o.Seats[show][seat]; !ok {
					fail("I15: seat %s/%s is %s's in SQL, free in the seat store", show, seat, want[show][seat].no)
				}
			}
		}
	}

	// I17: nobody holds more than the limit, in SQL or in the counter.
	if b.Limit > 0 {
		inSQL := map[[2]string]int{}
		for _, ord := range o.Orders {
			if ord.Status != expiry.StatusCancelled {
				inSQL[[2]string{ord.ShowID, ord.UserID}] += len(ord.Seats)
			}
		}
		for _, k := range sortedKeys(inSQL) {
			if n := inSQL[k]; n > b.Limit {
				fail("I17: user %s holds %d seats of show %s in pending and paid orders, past the limit %d", k[1], n, k[0], b.Limit)
			}
		}
		for _, k := range sortedKeys(o.Held) {
			if n := o.Held[k]; n > b.Limit {
				fail("I17: user %s's counter in show %s is %d, past the limit %d", k[1], k[0], n, b.Limit)
			}
		}
	}
	return bad
}

// SeatReader is what ReadOutcome reads of the seat store.
type SeatReader interface {
	Show(ctx context.Context, show string) (map[string]cancel.SeatState, error)
	Held(ctx context.Context, show, user string) (int, error)
}

// ReadOutcome reads the seat store's state of shows (the seats, and the
// counters of users), then the orders among nos from db, in the library's
// own schema (oe_order). The seat store is read first: a seat sold there
// was paid in SQL before (the sale follows the commit), so a read that
// overlaps running operations never sees a sale that SQL does not have yet.
func ReadOutcome(ctx context.Context, db *sql.DB, postgres bool, seats SeatReader, shows, users, nos []string) (Outcome, error) {
	o := Outcome{Orders: map[string]OrderOutcome{}, Seats: map[string]map[string]cancel.SeatState{}, Held: map[[2]string]int{}}
	for _, show := range shows {
		st, err := seats.Show(ctx, show)
		if err != nil {
			return o, err
		}
		o.Seats[show] = st
		for _, u := range users {
			n, err := seats.Held(ctx, show, u)
			if err != nil {
				return o, err
			}
			o.Held[[2]string{show, u}] = n
		}
	}
	q := "SELECT status, COALESCE(payment_id, ''), user_id, show_id, COALESCE(seats, '') FROM oe_order WHERE order_no = ?"
	if postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return o, err
	}
	defer st.Close()
	for _, no := range nos {
		var ord OrderOutcome
		var status int
		var seatList string
		err := st.QueryRowContext(ctx, no).Scan(&status, &ord.PaidBy, &ord.UserID, &ord.ShowID, &seatList)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return o, fmt.Errorf("order %s: %w", no, err)
		}
		ord.Status = expiry.Status(status)
		if ord.Status != expiry.StatusPaid {
			ord.PaidBy = ""
		}
		if seatList != "" {
			ord.Seats = strings.Split(seatList, ",")
		}
		o.Orders[no] = ord
	}
	return o, nil
}

func sortedKeys[K interface {
	comparable
}, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return fmt.Sprint(out[i]) < fmt.Sprint(out[j]) })
	return out
}
