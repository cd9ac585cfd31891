package explore

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var reduceDepthFlag = flag.Int("reduce.depth", 5, "the depth at which TestReductionsKeepEveryState compares the reduced exploration with the full one")

// TestReductionsKeepEveryState explores every scenario to -reduce.depth
// twice, with the explorer's reductions (explorer.reduce: the steps
// expand leaves out, the killed settles settleAll takes from a state alike)
// and without, and requires the same distinct states, the same classes of
// finding of each state's settles, and the same classes of finding
// overall: the steps left out reach nothing the others do not. It prints
// how many sequences the reductions saved. Each exploration runs on one
// worker, so that both take their states in one order on every run: the
// state hash is not a perfect abstraction (two worlds alike to it may
// settle apart), and with two workers which of them a state's settle ran
// in changed from run to run.
func TestReductionsKeepEveryState(t *testing.T) {
	t.Parallel()
	shared := wireTenants(t)
	depth := min(*reduceDepthFlag, *depthFlag)
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			run := func(reduce bool) *explorer {
				x := newExplorer(sc.kinds(), shared, 1)
				defer x.pool.close()
				x.reduce = reduce
				x.run(depth)
				require.NoError(t, x.err)
				return x
			}
			full, reduced := run(false), run(true)
			var missing []string
			for h := range full.settled {
				if _, ok := reduced.settled[h]; !ok {
					missing = append(missing, fmt.Sprintf("%x", h))
				}
			}
			require.Empty(t, missing, "states the full exploration reaches and the reduced one does not (of %d)", len(full.settled))
			require.Len(t, reduced.settled, len(full.settled), "the reduced exploration reached states the full one does not")
			differ := 0
			for h, rs := range full.settled {
				if !slices.Equal(settleClasses(rs), settleClasses(reduced.settled[h])) {
					differ++
				}
			}
			require.Zero(t, differ, "states whose settles found other classes")
			require.Equal(t, slices.Sorted(maps.Keys(full.best)), slices.Sorted(maps.Keys(reduced.best)), "classes of finding")
			out := fmt.Sprintf("reductions %q at depth %d: %d distinct states either way, %d sequences explored reduced, %d full (%.0f%%); %d steps asleep, %d killed settles taken from a state alike\n",
				sc.name, depth, len(full.settled), reduced.sequences, full.sequences, 100*float64(reduced.sequences)/float64(full.sequences), reduced.asleep, reduced.reused)
			t.Log(out)
			fmt.Fprint(os.Stdout, out)
		})
	}
}

// settleClasses are the classes of a state's settle findings, each marked
// with how the settle ended its stopped operations, sorted.
func settleClasses(rs []record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s (killed: %v)", r.f.class, r.kill))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
