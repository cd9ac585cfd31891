package explore

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// spec names one step of a known sequence: the catalog entry whose name
// starts with kind, run to completion, or stopped before its stop-th gated
// call of the step (counting from 1 here, for readability; 0: complete).
type spec struct {
	kind string
	stop int
}

// knownSequences are the holes the second outside review reported (issue
// 18) and the host's holes (issue 36), as step sequences of the explorer's catalogs. Each is a sequence whose
// states the exploration reaches at a depth of its length, by it or by an
// order of its steps that reaches the same states (explorer.expand's
// reductions; TestSequences checks that every step is one enabled in the
// state before it); the
// exploration prints the shortest sequence of each class of finding, which
// may be another member of the same class, so these are replayed and
// judged on their own too.
var knownSequences = []struct {
	name     string
	scenario string
	steps    []spec
}{
	{
		name:     "refunded payment honoured by its repeat: another order held the seat",
		scenario: "payments",
		steps:    []spec{{"place o1", 0}, {"timeout o1", 0}, {"place o2 by u2", 0}, {"pay o1", 0}, {"user cancel o2", 0}, {"pay o1", 0}},
	},
	{
		name:     "refunded payment honoured by its repeat: the timeout's release failed, the seat was its own order's",
		scenario: "payments",
		steps: []spec{{"place o1", 0}, {"timeout o1", 2}, {"pay o1", 0},
			{"clock: past Grace", 0}, {"reconcile round (tenant 1, instance 1)", 0}, {"pay o1", 0}},
	},
	{
		name:     "tenant 1's reconciler frees tenant 2's seat",
		scenario: "two tenants",
		steps:    []spec{{"place o1 by u1 on a1 (tenant 2", 0}, {"clock: past Grace", 0}, {"reconcile round (tenant 1", 0}},
	},
	{
		// The round's claims pass restores the seat from SQL later in the
		// same round: stopped before that, the paid order's seat is free
		// (and another order could take it).
		name:     "a stale lock pass frees the lock a late payment took again under the same number",
		scenario: "payments",
		steps: []spec{{"place o1", 0}, {"timeout o1", 2}, {"clock: past Grace", 0},
			{"reconcile round (tenant 1, instance 1)", 1}, {"reconcile round (tenant 1, instance 2)", 0},
			{"pay o1", 3}, {"reconcile round (tenant 1, instance 1)", 2}},
	},
	{
		name:     "a late reinstatement skips the purchase limit",
		scenario: "payments",
		steps:    []spec{{"place o1", 0}, {"timeout o1", 0}, {"place o2 by u1", 0}, {"pay o1", 0}},
	},
	// The host as an actor (issue 36): each found by the exploration with
	// its fix reverted (683108e, 7474557, 3c99675 and memstore's SKIP
	// LOCKED).
	{
		name:     "a payment for an order the host deleted (hard) is never refunded",
		scenario: "host deletes",
		steps:    []spec{{"place o1", 0}, {"timeout o1", 0}, {"host deletes o1 (hard", 0}, {"pay o1", 0}},
	},
	{
		name:     "a payment for an order the host deleted (soft) is never refunded",
		scenario: "host deletes",
		steps:    []spec{{"place o1", 0}, {"timeout o1", 0}, {"host deletes o1 (soft", 0}, {"pay o1", 0}},
	},
	{
		name:     "tenant 1's pay-1 answers for tenant 2's pay-1 (SQL: one discrepancy table)",
		scenario: "payment ids",
		steps:    []spec{{"place o1 by u1 on a1 (tenant 1", 0}, {"pay o1 with pay-1 (tenant 1", 0}, {"place o1 by u1 on a1 (tenant 2", 0}, {"pay o1 with pay-1 (tenant 2", 0}},
	},
	{
		name:     "after the database's clock steps back, a cancelled order's seat stays locked for the hour",
		scenario: "clock back",
		steps:    []spec{{"place o1", 0}, {"timeout o1", 2}, {"clock: the database's clock steps back", 0}},
	},
	{
		name:     "a batch that fails on a held row backs that order off past the hold",
		scenario: "host holds",
		steps: []spec{{"place o1", 0}, {"host holds o1", 0}, {"clock: to the next deadline", 0}, {"reconcile round", 0},
			{"host lets go of o1", 0}, {"reconcile round", 0}},
	},
}

// TestSequences replays the known sequences and judges them with the same
// ledgers, after every step and at settle (stopped operations resumed).
func TestSequences(t *testing.T) {
	shared := wireTenants(t)
	for _, tc := range knownSequences {
		t.Run(tc.name, func(t *testing.T) {
			var kinds []kind
			for _, sc := range scenarios {
				if sc.name == tc.scenario {
					kinds = sc.kinds()
				}
			}
			require.NotNil(t, kinds, "scenario %q", tc.scenario)
			x := newExplorer(kinds, shared, 1)
			defer x.pool.close()
			seq, err := resolve(kinds, tc.steps)
			require.NoError(t, err)
			fs, err := x.check(seq)
			require.NoError(t, err)
			out := x.explain(record{seq: seq, at: true})
			var found []string
			for _, f := range fs {
				found = append(found, f.class+": "+f.text)
			}
			t.Logf("%s:\n%s", tc.name, out)
			require.Empty(t, found, "the ledgers found violations in\n%s", out)
		})
	}
}

// resolve turns specs into steps of the catalog kinds.
func resolve(kinds []kind, specs []spec) ([]step, error) {
	seq := make([]step, 0, len(specs))
	for _, sp := range specs {
		i := slices.IndexFunc(kinds, func(k kind) bool { return strings.HasPrefix(k.name, sp.kind) })
		if i < 0 {
			return nil, fmt.Errorf("no step %q in the scenario", sp.kind)
		}
		seq = append(seq, step{kind: i, stop: sp.stop - 1, fail: -1})
	}
	return seq, nil
}

// check runs seq in a fresh world, judging after every step and at settle
// (stopped operations resumed). It fails when a step is not one the
// explorer takes from the state before it.
func (x *explorer) check(seq []step) ([]finding, error) { return x.checkWith(seq, nil) }

// checkWith is check, calling after (when not nil) with the world in the
// state the sequence reached, before the settle.
func (x *explorer) checkWith(seq []step, after func(*world)) ([]finding, error) {
	w := x.world()
	defer w.finish(killAll)
	prev, hist := w.observe(), history{}.clone()
	var all []finding
	for i, s := range seq {
		k := x.kinds[s.kind]
		if !prev.parkedKind(s.kind) && (!k.enabled(prev) || k.twin >= 0 && !prev.parkedKind(k.twin)) {
			return nil, fmt.Errorf("step %d (%s) is not enabled: the explorer would not take it", i+1, k.name)
		}
		log := w.run(x.kinds, s)
		if s.stop >= 0 && log.stopped == "" {
			return nil, fmt.Errorf("step %d (%s) finished before gated call %d", i+1, k.name, s.stop+1)
		}
		obs := w.observe()
		var fs []finding
		fs, hist = judge(prev, hist, obs, i+1)
		all = append(all, fs...)
		prev = obs
	}
	if after != nil {
		after(w)
	}
	w.settle(x.kinds, false)
	obs := w.observe()
	fs, _ := judge(prev, hist, obs, len(seq)+1)
	all = append(all, fs...)
	all = append(all, judgeSettled(w, obs)...)
	return append(all, w.facts.findings...), nil
}
