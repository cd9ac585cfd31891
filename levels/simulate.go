package levels

import "time"

// Chain is what Simulate reports for one order.
type Chain struct {
	// Levels are the levels of each hop in order; len(Levels) is the number
	// of messages the order took.
	Levels []int
	// Late is how long after the deadline the last message arrived (0 or more).
	Late time.Duration
}

// Hops returns the number of messages in the chain.
func (c Chain) Hops() int { return len(c.Levels) }

// maxSimHops stops Simulate on a chain that would not converge (only possible
// with a transit function that returns negative times).
const maxSimHops = 100_000

// Simulate plays the re-arm chain of an order that is due after expiry: each
// hop is planned with Plan(remaining, slack) and arrives after its level's
// delay plus transit(hop) (hop counted from 1; transit may be nil for zero).
// The chain ends with the first arrival at or after the deadline. It is the
// model behind the hop counts quoted in this package's documentation and a
// cheap way to choose a slack for a level table.
func Simulate(t Table, expiry, slack time.Duration, transit func(hop int) time.Duration) Chain {
	var c Chain
	if t.Len() == 0 {
		return c
	}
	now := time.Duration(0)
	for hop := 1; hop <= maxSimHops; hop++ {
		level := t.Plan(expiry-now, slack)
		c.Levels = append(c.Levels, level)
		now += t.Delay(level)
		if transit != nil {
			now += transit(hop)
		}
		if now >= expiry {
			c.Late = now - expiry
			break
		}
	}
	return c
}
