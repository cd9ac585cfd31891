package explore

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	depthFlag   = flag.Int("explore.depth", depth(), "the longest step sequence the exploration enumerates (default: OE_EXPLORE_DEPTH, else defaultDepth)")
	workersFlag = flag.Int("explore.workers", runtime.GOMAXPROCS(0), "how many sequences are replayed at once")
)

// explorer is a breadth-first search over step sequences, each replayed
// from a fresh world (stateless model checking), states deduplicated by
// hash. It goes a layer at a time (every state first reached in k steps,
// then in k+1), so that each state is expanded once, from the fewest steps
// that reach it (with the most steps left); the states of a layer are
// expanded in parallel by up to workers goroutines.
type explorer struct {
	pool    *pool
	kinds   []kind
	shared  bool
	backend backend // memory, but for replays (replay_test.go)
	workers int
	// reduce leaves out the steps that reach no state the others do not
	// (expand says which); off, every step is taken
	// (TestReductionsKeepEveryState compares the two).
	reduce bool

	mu sync.Mutex
	// settled holds every state reached (the distinct states) with the
	// findings of its settle, so that a shorter sequence to the same
	// state can claim them.
	settled map[[16]byte][]record
	// queued holds the states queued for expansion: reached by a step that
	// broke no ledger, with steps left.
	queued map[[16]byte]bool
	// dead holds, per dead state (observation.deadHash), the findings of
	// its killed settle (see settleAll).
	dead map[[16]byte][]finding
	// free are worlds done with, reset for reuse (world, done).
	free []*world
	best map[string]record // finding class → its shortest sequence
	err  error             // the first failure of the explorer itself
	// firsts, when not nil, collects the sequence that reached each
	// distinct state first (run with one worker, they are the same on
	// every run): the interleavings the replays take to the other backends.
	firsts [][]step

	// violations count the sequences and settles breaking a ledger, and
	// repeats those whose every finding is there by design (byDesign);
	// asleep counts the steps left out asleep (expand), reused the
	// killed settles taken from a state alike once its stopped operations
	// are dead (settleAll).
	sequences, steps, settles, violations, repeats, asleep, reused int
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

// node is a state reached by seq. Its observation is only kept while it
// is judged and expanded (a layer of a deep run holds many nodes).
type node struct {
	seq  []step
	obs  *observation
	hist history
	fp   uint64
	// sleep are the steps its expansion leaves out (see expand).
	sleep map[step]slept
}

func newExplorer(kinds []kind, shared bool, workers int) *explorer {
	return &explorer{pool: newPool(), kinds: kinds, shared: shared, backend: memory, workers: max(workers, 1), reduce: true,
		queued: map[[16]byte]bool{}, dead: map[[16]byte][]finding{}, settled: map[[16]byte][]record{}, best: map[string]record{}, byKind: map[int]int{}}
}

// world returns a fresh world: one done with and reset, or a new one;
// wireTenants has built one of this wiring already, so an error here is
// the explorer's own.
func (x *explorer) world() *world {
	x.mu.Lock()
	var w *world
	if n := len(x.free); n > 0 {
		w, x.free = x.free[n-1], x.free[:n-1]
	}
	x.mu.Unlock()
	if w == nil {
		var err error
		if w, err = newWorld(x.pool, x.shared, x.backend, x.kinds); err != nil {
			panic(err)
		}
	}
	w.installHooks(x.kinds)
	return w
}

// done hands back w, whose operations have all ended, for world to reuse.
func (x *explorer) done(w *world) {
	if !w.reset() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.free) < 4*x.workers {
		x.free = append(x.free, w)
	}
}

// replay builds a fresh world and runs n's sequence in it, checking that it
// makes the very calls it made the first time (the replay is
// deterministic). It returns nil after a failure. The operations of the
// steps that run to completion do not stop at their gates (world.fast):
// only the last step of a sequence is judged, and it is run apart.
func (x *explorer) replay(n *node) *world {
	w := x.world()
	w.fast = true
	for _, s := range n.seq {
		w.run(x.kinds, s)
	}
	w.fast = false
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

func (x *explorer) failed() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err != nil
}

// run explores every sequence of up to depth steps from the empty world,
// a layer at a time.
func (x *explorer) run(depth int) {
	w := x.world()
	root := &node{obs: w.observe(), hist: history{}.clone(), fp: w.fp}
	h := root.obs.hash(root.hist)
	x.queued[h] = true
	x.settled[h] = nil
	x.settleAll(w, root, h, depth)
	layer := []*node{root}
	for left := depth; left > 0 && len(layer) > 0 && !x.failed(); left-- {
		layer = x.layer(layer, left)
	}
}

// layer expands every state of a layer, with left steps left, on up to
// x.workers goroutines, and returns the states the next layer expands.
func (x *explorer) layer(nodes []*node, left int) []*node {
	var (
		mu   sync.Mutex
		next []*node
		i    atomic.Int64
		wg   sync.WaitGroup
	)
	add := func(c *node) {
		c.obs = nil // observed again when it is expanded
		mu.Lock()
		defer mu.Unlock()
		next = append(next, c)
	}
	for range x.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(i.Add(1)) - 1
				if j >= len(nodes) || x.failed() {
					return
				}
				x.expand(nodes[j], left, add)
				nodes[j] = nil
			}
		}()
	}
	wg.Wait()
	return next
}

// expand tries every step from n: each enabled kind run to completion,
// then stopped before each of the gated calls that run met, and for
// reconcile rounds each of its seat-store writes failing. Each new state
// with steps left is handed to add.
//
// With x.reduce, it leaves out the steps that reach no state another
// step does not reach in as few steps:
//   - resuming the operation the last step stopped: the two steps are
//     one step of that operation stopped later (or run to completion, or
//     with a later call failing) from the state before, which that state's
//     expansion took; nothing ran between them, not even the clock. Its
//     resumption is asleep in the state the stop reaches (anyOf), with
//     what its run to completion touched, and stays asleep after the steps
//     that are independent of it, as below: resumed after them, it
//     reaches what those steps taken before or after its one longer step
//     reach. Only when every step of that operation from the state before
//     broke no ledger: one that did is not extended, so its state is not
//     covered there (a round run whole is judged by I12, its two halves
//     are not).
//   - the steps asleep in n (n.sleep: partial-order reduction, see
//     por_test.go): a step u taken from a state before n, in which the
//     steps from there to n touch nothing u writes nor write anything u
//     touches (their footprints do not conflict), and which was either
//     taken there before the step toward n, or asleep there too. Taken
//     from n, u would reach the state that u then those steps reach, which
//     the search reaches that way round; so it is left out, and carried on
//     to the states after n for as long as the steps stay independent of it
//     (the sleep sets of Godefroid's partial-order methods).
func (x *explorer) expand(n *node, left int, add func(*node)) {
	// The first step is taken in the world that observes n.
	var w *world
	if n.obs == nil {
		if w = x.replay(n); w == nil {
			return
		}
		n.obs = w.observe()
	}
	defer func() {
		if w != nil {
			w.finish(killAll)
			x.done(w)
		}
	}()
	// taken are the steps taken from n so far, each with what it touched:
	// the steps taken after one that is independent of it leave it asleep.
	var taken []sleeper
	// try takes s from n, unless it is asleep; it returns the gated calls a
	// run to completion met (where it was taken), for its stops.
	// stopRest is what the run to completion of the kind being tried
	// touched: a step that stops that operation leaves its resumption
	// asleep, with that footprint (it covers every way on). The kind's
	// new states wait in stopped until all its steps are taken (allClean:
	// none broke a ledger), which decides whether that holds.
	var (
		stopRest footprint
		stopped  []*node
		allClean bool
	)
	try := func(s step) *slept {
		if x.reduce {
			if e, ok := n.sleep[s]; ok {
				x.count(func() { x.asleep++ })
				return &e
			}
		}
		var (
			c     *node
			log   *stepLog
			fp    footprint
			clean bool
		)
		if w != nil {
			c, log, fp, clean = x.childIn(w, n, s, left)
			w = nil
		} else {
			c, log, fp, clean = x.child(n, s, left)
		}
		if log == nil {
			return nil
		}
		e := slept{fp: fp}
		if s.stop < 0 && s.fail < 0 {
			e.gates, e.readsFirst = log.gates, log.readsFirst
		}
		if c != nil {
			if x.reduce {
				c.sleep = map[step]slept{}
				for u, ue := range n.sleep {
					if !ue.fp.conflicts(fp) {
						c.sleep[u] = ue
					}
				}
				for _, u := range taken {
					if !u.fp.conflicts(fp) {
						c.sleep[u.s] = u.slept
					}
				}
				if s.stop >= 0 && stopRest != nil {
					c.sleep[anyOf(s.kind)] = slept{fp: stopRest}
				}
			}
			stopped = append(stopped, c)
		}
		allClean = allClean && clean
		// A step that broke a ledger is not extended: what the steps after
		// it would reach, it does not, so it puts no step to sleep.
		if clean {
			taken = append(taken, sleeper{s, e})
		}
		return &e
	}
	for i, k := range x.kinds {
		parked := n.obs.parkedKind(i)
		if !parked && (!k.enabled(n.obs) || k.twin >= 0 && !n.obs.parkedKind(k.twin)) {
			continue
		}
		if _, ok := n.sleep[anyOf(i)]; ok && x.reduce {
			x.count(func() { x.asleep++ })
			continue
		}
		stopRest, stopped, allClean = nil, nil, true
		if run := try(complete(i)); k.clock == nil && run != nil {
			stopRest = run.fp
			first := 1
			if !parked && run.readsFirst {
				first = 0
			}
			for stop := first; stop < len(run.gates); stop++ {
				try(step{kind: i, stop: stop, fail: -1})
			}
			if k.faults {
				for g, at := range run.gates {
					if isSeatWrite(at) {
						try(step{kind: i, stop: -1, fail: g})
					}
				}
			}
		}
		for _, c := range stopped {
			if !allClean {
				delete(c.sleep, anyOf(i))
			}
			add(c)
		}
	}
}

// slept is what a step taken from a state touched (its footprint), and
// for a run to completion the gated calls it met (and whether it read
// before the first): a state it is asleep in takes its stops and failures
// from them.
type slept struct {
	fp         footprint
	gates      []string
	readsFirst bool
}

type sleeper struct {
	s step
	slept
}

// anyOf is the key of n.sleep that leaves out every step of kind k (its
// stopped operation's resumption).
func anyOf(k int) step { return step{kind: k, stop: -2, fail: -2} }

func isSeatWrite(at string) bool {
	name, _, _ := strings.Cut(at, "(")
	switch name {
	case "Lock", "Release", "ReleaseAll", "Sell", "Restore", "MarkRestored":
		return true
	}
	return false
}

// child replays n's sequence plus s and judges the step. It returns the
// state reached when it is to be expanded: new, by a step that broke no
// ledger (a sequence that broke one is reported, not extended), with steps
// left after this one; and childIn's other answers.
func (x *explorer) child(n *node, s step, left int) (*node, *stepLog, footprint, bool) {
	w := x.replay(n)
	if w == nil {
		return nil, nil, nil, false
	}
	return x.childIn(w, n, s, left)
}

// childIn is child in w, a world in n's state, which it consumes. It also
// returns what the step touched (its footprint), and whether it broke no
// ledger.
func (x *explorer) childIn(w *world, n *node, s step, left int) (*node, *stepLog, footprint, bool) {
	now, dbNow := w.clk.Now(), w.clk.orderNow()
	log := w.run(x.kinds, s)
	fp := w.footprint(x.kinds, s.kind, log, !w.clk.Now().Equal(now) || !w.clk.orderNow().Equal(dbNow))
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
	expand := len(fs) == 0 && !x.queued[h] && left > 1
	if expand {
		x.queued[h] = true
	}
	x.mu.Unlock()

	if !settled {
		x.settleAll(w, c, h, left-1)
	} else {
		w.finish(killAll)
		x.done(w)
	}
	if !expand {
		return nil, &log, fp, len(fs) == 0
	}
	return c, &log, fp, true
}

// settleAll settles n's state and judges the result: with every stopped
// operation resumed to completion (the settle proper), and with every one
// killed (a crash: it never resumes). w is a world in that state, consumed
// here. Resuming a stopped operation is a step, so the resumed settle of a
// state with steps left for each stopped operation is the killed settle of
// the state those steps reach, and is not run twice; nor are mixes (some
// resumed, the others killed) anywhere: they are steps, then kills.
//
// A crash leaves what the stores hold: the killed settle of a state is
// the settle of what it shows once its stopped operations are gone (dead
// is that state's hash), and states alike but for their stopped
// operations share it. With x.reduce, a state whose dead state was
// settled before takes that settle's findings, and w, not needed for it,
// serves the resumed settle instead of a replay.
func (x *explorer) settleAll(w *world, n *node, h [16]byte, left int) {
	p := len(n.obs.parked)
	resume := p > 0 && left < p
	dead := n.obs.deadHash(n.hist)
	if x.reduce && p > 0 {
		x.mu.Lock()
		fs, ok := x.dead[dead]
		if ok {
			x.reused++
			x.judged(fs, n, h, true)
		}
		x.mu.Unlock()
		if ok {
			if resume {
				x.settleOne(w, n, h, false)
			} else {
				w.finish(killAll)
				x.done(w)
			}
			return
		}
	}
	fs := x.settleOne(w, n, h, true)
	x.mu.Lock()
	x.dead[dead] = fs
	x.mu.Unlock()
	if resume {
		if w := x.replay(n); w != nil {
			x.settleOne(w, n, h, false)
		}
	}
}

// settleOne settles w (in n's state), killing its stopped operations or
// resuming them, and judges it. It returns the findings.
func (x *explorer) settleOne(w *world, n *node, h [16]byte, kill bool) []finding {
	w.settle(x.kinds, kill)
	obs := w.observe()
	fs, _ := judge(n.obs, n.hist, obs, len(n.seq)+1)
	fs = append(fs, judgeSettled(w, obs)...)
	for _, f := range w.facts.findings {
		if f.step > len(n.seq) {
			fs = append(fs, f)
		}
	}
	x.done(w)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.settles++
	x.judged(fs, n, h, kill)
	return fs
}

// judged counts and keeps the findings fs of a settle of n's state (h),
// its stopped operations killed or resumed (x.mu held).
func (x *explorer) judged(fs []finding, n *node, h [16]byte, kill bool) {
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
	fmt.Fprintf(&b, "explore %q: reductions: %d steps left out asleep (partial order), %d killed settles taken from a state alike but for its stopped operations\n", name, x.asleep, x.reused)
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
	// Each replay builds a world and drops it: the exploration makes much
	// short-lived garbage on a small live heap (tens of MB). Collecting at
	// 5x the live heap instead of 2x took a quarter of its CPU time away;
	// the memory limit keeps a deep run's heap bounded all the same.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
	shared := wireTenants(t)
	var total struct{ sequences, states, steps, settles, violations, repeats, classes, asleep, reused int }
	start := time.Now()
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			x := newExplorer(sc.kinds(), shared, *workersFlag)
			defer x.pool.close()
			start := time.Now()
			if os.Getenv("EXP_DUMP") != "" {
				x.firsts = [][]step{}
			}
			x.run(*depthFlag)
			if d := os.Getenv("EXP_DUMP"); d != "" {
				f, _ := os.Create(d + "." + strings.ReplaceAll(sc.name, " ", "_"))
				for _, seq := range x.firsts {
					fmt.Fprintf(f, "%v\n", seq)
				}
				f.Close()
			}
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
			total.asleep += x.asleep
			total.reused += x.reused
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
	out := fmt.Sprintf("explore, all scenarios at depth %d: %d sequences explored, %d distinct states, %d steps run, %d settles, %d violations, %d with the refund hook repeated after a call stalled past the lease (by design, the stall shown), %d classes of finding, %d steps asleep, %d killed settles reused, %v\n",
		*depthFlag, total.sequences, total.states, total.steps, total.settles, total.violations, total.repeats, total.classes, total.asleep, total.reused, time.Since(start).Round(time.Millisecond))
	t.Log(out)
	fmt.Fprint(os.Stdout, out)
}

// wireTenants wires the two tenants on one seat store, as a host running two
// tenants on one Redis namespace would. If the library refuses that wiring
// at startup (a scope check), the test shows the refusal and wires each
// tenant on its own scope of the seat store.
func wireTenants(t *testing.T) bool {
	_, err := newWorld(nil, true, memory, nil)
	if err == nil {
		t.Log("explore: both tenants wired on one seat store (the library accepted it)")
		return true
	}
	msg := fmt.Sprintf("explore: the library refused two tenants on one seat store at startup (so each tenant gets its own scope of it): %v\n", err)
	t.Log(msg)
	fmt.Fprint(os.Stdout, msg)
	_, err = newWorld(nil, false, memory, nil)
	require.NoError(t, err, "each tenant on its own scope of the seat store")
	return false
}
