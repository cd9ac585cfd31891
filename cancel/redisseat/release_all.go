package redisseat

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
)

// maxReleaseSeats bounds the seats of one releaseAllScript call: a script
// runs atomically and blocks its shard meanwhile, so a show's longer list
// is cut into calls of about this many seats (each hold whole in one call).
const maxReleaseSeats = 2000

// releaseCall is one releaseAllScript call: a show and the indexes of its
// holds.
type releaseCall struct {
	show string
	idx  []int
	argv []any
}

// ReleaseAll implements cancel.SeatStore: Release for each of holds,
// one releaseAllScript call per show (a show's list of more than about
// 2000 seats in a few), all of them sent in one pipeline (one round trip;
// on Redis Cluster one per node). It returns how many seats each hold
// freed, -1 for each hold of a call that failed. Each call is atomic; on an
// error the calls that succeeded stay done (a release is idempotent: the
// reconciler's repair releases the rest).
func (s *Seats) ReleaseAll(ctx context.Context, holds []cancel.Hold) ([]int, error) {
	var calls []*releaseCall
	open := map[string]*releaseCall{}
	seats := map[string]int{}
	for i, h := range holds {
		if err := validateHold(h); err != nil {
			return nil, err
		}
		c := open[h.ShowID]
		if c == nil || seats[h.ShowID]+len(h.Seats) > maxReleaseSeats {
			c = &releaseCall{show: h.ShowID}
			calls, open[h.ShowID], seats[h.ShowID] = append(calls, c), c, 0
		}
		c.idx = append(c.idx, i)
		c.argv = append(c.argv, h.OrderNo, h.LockID, strconv.Itoa(len(h.Seats)))
		for _, seat := range h.Seats {
			c.argv = append(c.argv, seat)
		}
		seats[h.ShowID] += len(h.Seats)
	}
	out := make([]int, len(holds))
	if len(calls) == 0 {
		return out, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 {
		cmds[0] = releaseAllScript.Run(ctx, s.rdb, s.keys(calls[0].show)[:3], calls[0].argv...)
	} else {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
			for i, c := range calls {
				cmds[i] = releaseAllScript.EvalSha(ctx, p, s.keys(c.show)[:3], c.argv...)
			}
			return nil
		})
	}
	var errs []error
	for i, c := range calls {
		ns, err := cmds[i].Int64Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			ns, err = releaseAllScript.Run(ctx, s.rdb, s.keys(c.show)[:3], c.argv...).Int64Slice()
		}
		if err == nil && len(ns) != len(c.idx) {
			err = fmt.Errorf("%d counts for %d holds", len(ns), len(c.idx))
		}
		if err = s.seen(err); err != nil {
			errs = append(errs, fmt.Errorf("redisseat: release all in show %s: %w", c.show, err))
			for _, i := range c.idx {
				out[i] = -1
			}
			continue
		}
		for k, i := range c.idx {
			out[i] = int(ns[k])
		}
	}
	return out, errors.Join(errs...)
}
