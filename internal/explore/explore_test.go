package explore

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	depthFlag   = flag.Int("explore.depth", depth(), "the longest step sequence the exploration enumerates (default: OE_EXPLORE_DEPTH, else defaultDepth)")
	workersFlag = flag.Int("explore.workers", runtime.GOMAXPROCS(0), "how many sequences are replayed at once")
)

// explorer is a depth-first search over step sequences, each replayed from
// a fresh world (stateless model checking), states deduplicated by hash.
// Subtrees are explored in parallel by up to workers goroutines.
type explorer struct {
	pool    *pool
	kinds   []kind
	shared  bool
	backend backend       // memory, but for replays (replay_test.go)
	sem     chan struct{} // a token per extra worker

	mu sync.Mutex
	// visited holds, per state explored on, the most steps that were left
	// when it was reached: reached again with more left (by a shorter
	// sequence), it is explored again.
	visited map[[16]byte]int
	// settled holds every state reached (the distinct states) with the
	// findings of its settle, so that a shorter sequence to the same
	// state can claim them.
	settled map[[16]byte][]record
	best    map[string]record // finding class → its shortest sequence
	err     error             // the first failure of the explorer itself
	// firsts, when not nil, collects the sequence that reached each
	// distinct state first (run with one worker, they are the same on
	// every run): the interleavings the replays take to the other backends.
	firsts [][]step

	// violations count the sequences and settles breaking a ledger, and
	// repeats those whose every finding is there by design (byDesign).
	sequences, steps, settles, violations, repeats int
	// byKind counts the sequences explored by the kind of their last step,
	// so that the report shows every kind taken.
	byKind map[int]int
}

// record is a finding with the sequence that produced it.
type record struct {
	f    finding
	seq  []step
	at   bool // a settle's finding
	kill bool // at settle: the stopped operations were killed (else resumed)
}

// node is a state reached by seq.
type node struct {
	seq  []step
	obs  *observation
	hist history
	fp   uint64
}

func newExplorer(kinds []kind, shared bool, workers int) *explorer {
	return &explorer{pool: newPool(), kinds: kinds, shared: shared, backend: memory, sem: make(chan struct{}, max(workers-1, 0)),
		visited: map[[16]byte]int{}, settled: map[[16]byte][]record{}, best: map[string]record{}, byKind: map[int]int{}}
}

// world returns a fresh world; wireTenants has built one of this wiring
// already, so an error here is the explorer's own.
func (x *explorer) world() *world {
	w, err := newWorld(x.pool, x.shared, x.backend)
	if err != nil {
		panic(err)
	}
	w.installHooks(x.kinds)
	return w
}

// replay builds a fresh world and runs n's sequence in it, checking that it
// makes the very calls it made the first time (the replay is
// deterministic). It returns nil after a failure.
func (x *explorer) replay(n *node) *world {
	w := x.world()
	for _, s := range n.seq {
		w.run(x.kinds, s)
	}
	if w.fp != n.fp {
		w.finish(killAll)
		x.fail(fmt.Errorf("a replay of\n%smade other calls than before: the world is not deterministic", x.describe(n.seq)))
		return nil
	}
	x.count(func() { x.steps += len(n.seq) })
	return w
}

func (x *explorer) count(f func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f()
}

func (x *explorer) fail(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil {
		x.err = err
	}
}

// run explores every sequence of up to depth steps from the empty world.
func (x *explorer) run(depth int) {
	w := x.world()
	root := &node{obs: w.observe(), hist: history{}.clone(), fp: w.fp}
	h := root.obs.hash(root.hist)
	x.visited[h] = depth
	x.settled[h] = nil
	x.settleAll(w, root, h, depth)
	x.explore(root, depth)
}

// explore tries every step from n: each enabled kind run to completion,
// then stopped before each of the gated calls that run met, and for
// reconcile rounds each of its seat-store writes failing. Each new state is
// explored on, in this goroutine or, when a worker is free, in another.
func (x *explorer) explore(n *node, left int) {
	var wg sync.WaitGroup
	on := func(c *node) {
		if c == nil || left <= 1 {
			return
		}
		select {
		case x.sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-x.sem }()
				x.explore(c, left-1)
			}()
		default:
			x.explore(c, left-1)
		}
	}
	for i, k := range x.kinds {
		parked := n.obs.parkedKind(i)
		if !parked && (!k.enabled(n.obs) || k.twin >= 0 && !n.obs.parkedKind(k.twin)) {
			continue
		}
		c, log := x.child(n, complete(i), left)
		on(c)
		if k.clock != nil || log == nil {
			continue
		}
		first := 1
		if !parked && log.readsFirst {
			first = 0
		}
		for stop := first; stop < len(log.gates); stop++ {
			c, _ := x.child(n, step{kind: i, stop: stop, fail: -1}, left)
			on(c)
		}
		if k.faults {
			for g, at := range log.gates {
				if isSeatWrite(at) {
					c, _ := x.child(n, step{kind: i, stop: -1, fail: g}, left)
					on(c)
				}
			}
		}
	}
	wg.Wait()
}

func isSeatWrite(at string) bool {
	name, _, _ := strings.Cut(at, "(")
	switch name {
	case "Lock", "Release", "ReleaseAll", "Sell", "Restore", "MarkRestored":
		return true
	}
	return false
}

// child replays n's sequence plus s and judges the step. It returns the
// state reached when it is to be explored on: new, or reached with more
// steps left than before, by a step that broke no ledger (a sequence that
// broke one is reported, not extended).
func (x *explorer) child(n *node, s step, left int) (*node, *stepLog) {
	w := x.replay(n)
	if w == nil {
		return nil, nil
	}
	log := w.run(x.kinds, s)
	obs := w.observe()
	fs, hist := judge(n.obs, n.hist, obs, len(n.seq)+1)
	for _, f := range w.facts.findings {
		if f.step == len(n.seq)+1 {
			fs = append(fs, f)
		}
	}
	seq := append(slices.Clone(n.seq), s)
	h := obs.hash(hist)
	c := &node{seq: seq, obs: obs, hist: hist, fp: w.fp}

	x.mu.Lock()
	x.sequences++
	x.byKind[s.kind]++
	x.steps++
	x.tally(fs)
	for _, f := range fs {
		f.class += " — by " + x.kinds[s.kind].op
		x.keep(record{f: f, seq: seq})
	}
	// A state is settled once; reached again by a shorter sequence, its
	// settle's findings are that sequence's.
	rs, settled := x.settled[h]
	for _, r := range rs {
		r.seq = seq
		x.keep(r)
	}
	if !settled {
		x.settled[h] = nil
		if x.firsts != nil {
			x.firsts = append(x.firsts, seq)
		}
	}
	was, seen := x.visited[h]
	explore := len(fs) == 0 && (!seen || was < left-1)
	if explore {
		x.visited[h] = left - 1
	}
	x.mu.Unlock()

	if !settled {
		x.settleAll(w, c, h, left-1)
	} else {
		w.finish(killAll)
	}
	if !explore {
		return nil, &log
	}
	return c, &log
}

// settleAll settles n's state and judges the result: with every stopped
// operation resumed to completion (the settle proper), and with every one
// killed (a crash: it never resumes). w is a world in that state, consumed
// here. Resuming a stopped operation is a step, so the resumed settle of a
// state with steps left for each stopped operation is the killed settle of
// the state those steps reach, and is not run twice; nor are mixes (some
// resumed, the others killed) anywhere: they are steps, then kills.
func (x *explorer) settleAll(w *world, n *node, h [16]byte, left int) {
	p := len(n.obs.parked)
	x.settleOne(w, n, h, true)
	if p > 0 && left < p {
		if w := x.replay(n); w != nil {
			x.settleOne(w, n, h, false)
		}
	}
}

// settleOne settles w (in n's state), killing its stopped operations or
// resuming them, and judges it.
func (x *explorer) settleOne(w *world, n *node, h [16]byte, kill bool) {
	w.settle(x.kinds, kill)
	obs := w.observe()
	fs, _ := judge(n.obs, n.hist, obs, len(n.seq)+1)
	fs = append(fs, judgeSettled(w, obs)...)
	for _, f := range w.facts.findings {
		if f.step > len(n.seq) {
			fs = append(fs, f)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.settles++
	x.tally(fs)
	for _, f := range fs {
		if !strings.Contains(f.class, "after settle") {
			f.class += " (at settle)"
		}
		r := record{f: f, seq: n.seq, at: true, kill: kill}
		x.settled[h] = append(x.settled[h], r)
		x.keep(r)
	}
}

// keep keeps r if it is the shortest sequence of its class so far (x.mu
// held).
func (x *explorer) keep(r record) {
	if b, ok := x.best[r.f.class]; ok && len(b.seq) <= len(r.seq) {
		return
	}
	x.best[r.f.class] = r
}

// describe renders a sequence as a readable step list, replaying it to show
// what each step did.
func (x *explorer) describe(seq []step) string {
	var b strings.Builder
	for i, s := range seq {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, x.stepName(s))
	}
	return b.String()
}

func (x *explorer) stepName(s step) string {
	name := x.kinds[s.kind].name
	switch {
	case s.stop >= 0:
		name += fmt.Sprintf(", stopped before gated call #%d of the step", s.stop)
	case s.fail >= 0:
		name += fmt.Sprintf(", gated call #%d of the step failing", s.fail)
	}
	return name
}

// explain replays r's sequence and renders each step with the calls it made.
func (x *explorer) explain(r record) string {
	var b strings.Builder
	w := x.world()
	for i, s := range r.seq {
		log := w.run(x.kinds, s)
		k := x.kinds[s.kind]
		var calls []string
		for _, c := range log.calls {
			if c.gated || strings.HasPrefix(c.text, "Statuses") || strings.HasPrefix(c.text, "ScanLocks") {
				calls = append(calls, c.text)
			}
		}
		what := "→ " + log.result
		switch {
		case log.stopped != "":
			what = "→ stopped before " + log.stopped
		case s.fail >= 0:
			what = fmt.Sprintf("(%s failing) → %s", log.gates[s.fail], log.result)
		}
		fmt.Fprintf(&b, "  %d. %s: %s %s\n", i+1, k.name, strings.Join(calls, ", "), what)
	}
	if r.at {
		for _, line := range w.settle(x.kinds, r.kill) {
			fmt.Fprintf(&b, "  settle: %s\n", line)
		}
	} else {
		w.finish(killAll)
	}
	if r.f.text != "" {
		fmt.Fprintf(&b, "  finding: %s\n", r.f.text)
	}
	return b.String()
}

// report renders the figures and the shortest sequence of each finding
// class.
func (x *explorer) report(name string, depth int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "explore %q: depth %d, %d kinds of step, tenants on one seat store: %v\n", name, depth, len(x.kinds), x.shared)
	fmt.Fprintf(&b, "explore %q: %d sequences explored, %d distinct states, %d steps run (replays included), %d settles, %d violations (sequences or settles breaking a ledger), %d with the refund hook repeated after a call stalled past the lease (by design, the stall shown), %d classes of finding, %v\n",
		name, x.sequences, len(x.settled), x.steps, x.settles, x.violations, x.repeats, len(x.best), took.Round(time.Millisecond))
	var kinds []string
	for i, k := range x.kinds {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k.name, x.byKind[i]))
	}
	fmt.Fprintf(&b, "explore %q: sequences by their last step: %s\n", name, strings.Join(kinds, "; "))
	classes := slices.Sorted(maps.Keys(x.best))
	slices.SortStableFunc(classes, func(a, b string) int { return len(x.best[a].seq) - len(x.best[b].seq) })
	for _, c := range classes {
		r := x.best[c]
		then := ""
		if r.at {
			then = " then settle"
		}
		fmt.Fprintf(&b, "\n%s — shortest sequence, %d steps%s:\n%s", c, len(r.seq), then, x.explain(r))
	}
	return b.String()
}

// depth is -explore.depth's default: OE_EXPLORE_DEPTH when it is a number
// from 1 (the test command's run without servers, which only checks that
// everything passes or skips, sets a small one: the exploration already ran
// under -race), else defaultDepth.
func depth() int {
	if n, err := strconv.Atoi(os.Getenv("OE_EXPLORE_DEPTH")); err == nil && n >= 1 {
		return n
	}
	return defaultDepth
}

// tally counts a sequence's or a settle's findings fs: a violation, or a
// repeat when every one of them is there by design. Called with x.mu held.
func (x *explorer) tally(fs []finding) {
	if len(fs) == 0 {
		return
	}
	for _, f := range fs {
		if byDesign(f.class) == "" {
			x.violations++
			return
		}
	}
	x.repeats++
}

// byDesign says why a class of finding is not a violation, or "" for any
// other class, which fails the test. Each is printed by every run with its
// shortest sequence.
func byDesign(class string) string {
	for prefix, why := range map[string]string{
		// A call stalled between the store's grant of the payment and its
		// hook past Config.DiscrepancyLease: the store gives the payment to
		// another operation (the reconciler), which calls the hook too. No
		// library can call a hook exactly once across a crash after the
		// provider refunded and before the record is settled; the hook is
		// at least once and the provider refunds once, keyed by payment id
		// (cancel.Config.OnDiscrepancy). The class is only given to a repeat
		// whose sequence shows that stall (judgeRepeat); any other repeat
		// is "I9 the refund hook ran twice for one payment", a violation.
		// The money ledger (I14) still judges every call: a hook call for
		// an honoured payment is a violation.
		"I9 " + repeatByDesign: "at least once by design: the call named stalled past Config.DiscrepancyLease between the store's grant of the payment and its hook, and the store gave the payment to the other call meanwhile; the provider refunds once, keyed by the payment id (cancel.Config.OnDiscrepancy)",
	} {
		if strings.HasPrefix(class, prefix) {
			return why
		}
	}
	return ""
}

// TestExplore enumerates, for each scenario, every sequence of up to
// -explore.depth steps, and fails on any finding of the outcome ledgers
// that is not there by design (byDesign), printing the figures and the
// shortest sequence of each class of finding.
func TestExplore(t *testing.T) {
	t.Parallel() // beside the replays, which wait on the servers
	shared := wireTenants(t)
	var total struct{ sequences, states, steps, settles, violations, repeats, classes int }
	start := time.Now()
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			x := newExplorer(sc.kinds(), shared, *workersFlag)
			defer x.pool.close()
			start := time.Now()
			x.run(*depthFlag)
			require.NoError(t, x.err)
			out := x.report(sc.name, *depthFlag, time.Since(start))
			t.Log(out)
			fmt.Fprint(os.Stdout, out)
			total.sequences += x.sequences
			total.states += len(x.settled)
			total.steps += x.steps
			total.settles += x.settles
			total.violations += x.violations
			total.repeats += x.repeats
			total.classes += len(x.best)
			var unknown []string
			for _, c := range slices.Sorted(maps.Keys(x.best)) {
				if why := byDesign(c); why != "" {
					t.Logf("BY DESIGN: %s: %s", c, why)
					continue
				}
				unknown = append(unknown, c)
			}
			require.Empty(t, unknown, "the outcome ledgers found violations; see the sequences above")
		})
	}
	out := fmt.Sprintf("explore, all scenarios at depth %d: %d sequences explored, %d distinct states, %d steps run, %d settles, %d violations, %d with the refund hook repeated after a call stalled past the lease (by design, the stall shown), %d classes of finding, %v\n",
		*depthFlag, total.sequences, total.states, total.steps, total.settles, total.violations, total.repeats, total.classes, time.Since(start).Round(time.Millisecond))
	t.Log(out)
	fmt.Fprint(os.Stdout, out)
}

// wireTenants wires the two tenants on one seat store, as a host running two
// tenants on one Redis namespace would. If the library refuses that wiring
// at startup (a scope check), the test shows the refusal and wires each
// tenant on its own scope of the seat store.
func wireTenants(t *testing.T) bool {
	_, err := newWorld(nil, true, memory)
	if err == nil {
		t.Log("explore: both tenants wired on one seat store (the library accepted it)")
		return true
	}
	msg := fmt.Sprintf("explore: the library refused two tenants on one seat store at startup (so each tenant gets its own scope of it): %v\n", err)
	t.Log(msg)
	fmt.Fprint(os.Stdout, msg)
	_, err = newWorld(nil, false, memory)
	require.NoError(t, err, "each tenant on its own scope of the seat store")
	return false
}
