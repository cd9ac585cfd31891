package redisseat

import (
	"context"
	"fmt"
	"strconv"

	"github.com/seatflow/orderexpiry/cancel"
)

// maxReleaseSeats bounds the seats of one releaseAllScript call: a script
// runs atomically and blocks its shard meanwhile, so a longer list is cut
// into calls of about this many seats (each hold whole in one call).
const maxReleaseSeats = 2000

// ReleaseAll implements cancel.BatchReleaser: Release for each of holds,
// all of one show, in one EVALSHA (releaseAllScript; a list of more than
// about 2000 seats in a few). It returns how many seats each hold freed.
func (s *Seats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	if len(holds) == 0 {
		return nil, nil
	}
	show := holds[0].ShowID
	for _, h := range holds {
		if err := validateHold(h); err != nil {
			return nil, err
		}
		if h.ShowID != show {
			return nil, fmt.Errorf("redisseat: release all: holds of shows %s and %s in one call", show, h.ShowID)
		}
	}
	out := make([]int, 0, len(holds))
	for len(holds) > 0 {
		var argv []any
		k, seats := 0, 0
		for ; k < len(holds) && (k == 0 || seats+len(holds[k].Seats) <= maxReleaseSeats); k++ {
			h := holds[k]
			argv = append(argv, h.OrderNo, h.LockID, strconv.Itoa(len(h.Seats)))
			for _, seat := range h.Seats {
				argv = append(argv, seat)
			}
			seats += len(h.Seats)
		}
		ns, err := releaseAllScript.Run(ctx, s.rdb, s.keys(show)[:3], argv...).Int64Slice()
		if err = s.seen(err); err != nil {
			return nil, fmt.Errorf("redisseat: release all in show %s: %w", show, err)
		}
		if len(ns) != k {
			return nil, fmt.Errorf("redisseat: release all in show %s: %d counts for %d holds", show, len(ns), k)
		}
		for _, n := range ns {
			out = append(out, int(n))
		}
		holds = holds[k:]
	}
	return out, nil
}
