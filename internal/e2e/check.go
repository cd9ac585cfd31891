package e2e

import (
	"context"
	"fmt"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
)

// Check verifies the invariants over a set of placed orders, once the world
// is quiet (no operation in flight) and a reconcile round has run. It
// returns one line per violation; none means I1, I2, I5 and I8 hold for them.
// With settled, every order must also have left pending (I3).
func (w *World) Check(ctx context.Context, placed []cancel.Placement, settled bool) ([]string, error) {
	var bad []string
	show, err := w.Seats.Show(ctx, w.ShowID)
	if err != nil {
		return nil, err
	}
	held := map[string]int{}
	users := map[string]bool{}
	w.Ledger.mu.Lock()
	defer w.Ledger.mu.Unlock()
	for _, p := range placed {
		users[p.UserID] = true
		o, err := w.Store.Order(ctx, p.OrderNo)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", p.OrderNo, err)
		}
		c, paid := w.Ledger.Cancelled[p.OrderNo], w.Ledger.Paid[p.OrderNo]
		switch o.Status {
		case expiry.StatusPaid:
			held[p.UserID] += len(p.Seats)
			if paid != 1 || c != 0 {
				bad = append(bad, fmt.Sprintf("I1/I5: %s paid, but the library reported %d payments and %d cancels", p.OrderNo, paid, c))
			}
			for _, s := range p.Seats {
				if st := show[s]; st.Status != cancel.SeatSold || st.OrderNo != p.OrderNo {
					bad = append(bad, fmt.Sprintf("I2: seat %s of paid order %s is %+v, want sold to it", s, p.OrderNo, st))
				}
			}
			if r := w.Ledger.Released[p.OrderNo]; r != 0 {
				bad = append(bad, fmt.Sprintf("I2: %d seats of paid order %s were released", r, p.OrderNo))
			}
		case expiry.StatusCancelled:
			if c != 1 || paid != 0 {
				bad = append(bad, fmt.Sprintf("I1/I5: %s cancelled, but the library reported %d cancels and %d payments", p.OrderNo, c, paid))
			}
			for _, s := range p.Seats {
				if st, ok := show[s]; ok && st.OrderNo == p.OrderNo {
					bad = append(bad, fmt.Sprintf("I2: seat %s of cancelled order %s is still %+v", s, p.OrderNo, st))
				}
			}
			if r := w.Ledger.Released[p.OrderNo]; r != len(p.Seats) {
				bad = append(bad, fmt.Sprintf("I2: cancelled order %s had %d seats released, want exactly %d", p.OrderNo, r, len(p.Seats)))
			}
		case expiry.StatusPending:
			held[p.UserID] += len(p.Seats)
			if settled {
				bad = append(bad, fmt.Sprintf("I3: %s still pending", p.OrderNo))
			}
			if c+paid != 0 {
				bad = append(bad, fmt.Sprintf("I1: %s pending, but reported %d cancels and %d payments", p.OrderNo, c, paid))
			}
		}
	}
	for u := range users {
		n, err := w.Seats.Held(ctx, w.ShowID, u)
		if err != nil {
			return nil, err
		}
		if n != held[u] {
			bad = append(bad, fmt.Sprintf("I8: user %s counter %d, holds %d seats in pending and paid orders", u, n, held[u]))
		}
		if n < 0 {
			bad = append(bad, fmt.Sprintf("I8: user %s counter below zero: %d", u, n))
		}
	}
	return bad, nil
}
