package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// The ledgers catch each class of wrong outcome, and pass a right one; each
// case is a sequence of observations, the last one settled.
func TestBooks(t *testing.T) {
	paid := func(by, user string, seats ...string) OrderOutcome {
		return OrderOutcome{Status: expiry.StatusPaid, PaidBy: by, UserID: user, ShowID: "s", Seats: seats}
	}
	cancelled := func(user string, seats ...string) OrderOutcome {
		return OrderOutcome{Status: expiry.StatusCancelled, UserID: user, ShowID: "s", Seats: seats}
	}
	pending := func(user string, seats ...string) OrderOutcome {
		return OrderOutcome{Status: expiry.StatusPending, UserID: user, ShowID: "s", Seats: seats}
	}
	sold := func(no, user string) cancel.SeatState {
		return cancel.SeatState{Status: cancel.SeatSold, OrderNo: no, UserID: user}
	}
	locked := func(no, user string) cancel.SeatState {
		return cancel.SeatState{Status: cancel.SeatLocked, OrderNo: no, UserID: user}
	}
	for _, c := range []struct {
		name string
		obs  []Outcome
		want string // "" none
	}{
		{"right", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1"), "o2": cancelled("u1", "a2")},
				Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1")}}, Held: map[[2]string]int{{"s", "u1"}: 1},
				Refunds: map[string]int{"p2": 1}, Answered: map[string]bool{"p1": true, "p2": true}},
		}, ""},
		{"honoured and refunded", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1")}},
				Refunds: map[string]int{"p1": 1}},
		}, "I14: payment p1 paid order o1 and was refunded"},
		{"refunded, then honoured", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": cancelled("u1", "a1")}, Refunds: map[string]int{"p1": 1}},
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1")}}},
		}, "I14: payment p1's fate flipped: refunded, then paid o1"},
		{"one payment, two orders", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1"), "o2": paid("p1", "u1", "a2")},
				Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1"), "a2": sold("o2", "u1")}}},
		}, "I14: payment p1 paid two orders"},
		{"answered, never decided", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": cancelled("u1", "a1")}, Answered: map[string]bool{"p1": true}},
		}, "I14: payment p1 was answered but is neither"},
		{"a sold seat freed", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1")}}},
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {}}},
		}, "I15: seat s/a1 was sold to o1"},
		{"a sold seat locked by another", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {"a1": sold("o1", "u1")}}},
			{Orders: map[string]OrderOutcome{"o1": paid("p1", "u1", "a1"), "o2": pending("u2", "a1")},
				Seats: map[string]map[string]cancel.SeatState{"s": {"a1": locked("o2", "u2")}}},
		}, "I15: seat s/a1 was sold to o1"},
		{"SQL and the seat store disagree", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": pending("u1", "a1")}, Seats: map[string]map[string]cancel.SeatState{"s": {}}},
		}, "I15: seat s/a1 is o1's in SQL, free in the seat store"},
		{"past the limit", []Outcome{
			{Orders: map[string]OrderOutcome{"o1": pending("u1", "a1"), "o2": paid("p1", "u1", "a2")},
				Seats: map[string]map[string]cancel.SeatState{"s": {"a1": locked("o1", "u1"), "a2": sold("o2", "u1")}}},
		}, "I17: user u1 holds 2 seats of show s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Books{Limit: 1}
			var bad []string
			for i, o := range c.obs {
				bad = append(bad, b.Observe(o, i == len(c.obs)-1)...)
			}
			if c.want == "" {
				assert.Empty(t, bad)
				return
			}
			assert.True(t, strings.Contains(strings.Join(bad, "\n"), c.want), "want %q in %q", c.want, bad)
		})
	}
}
