package explore

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/internal/testenv"
)

// The replays take the interleavings the exploration finds on the
// in-memory stores to the real ones: cancel/sqlstore on SQLite, MariaDB and
// PostgreSQL, cancel/redisseat on Redis and Redis Cluster, behind the same
// gates (stopped before the same gated call of each step), judged by the
// same ledgers after every step and at settle (realstores_test.go says how
// their clocks are moved).
//
// Which interleavings: systematically, the sequence that first reaches each
// distinct state of an exploration of -replay.depth steps (one worker, so
// the set is the same on every run): every state the exploration reaches at
// that depth, each by the sequence the explorer took to it, stop points,
// injected failures and both instances' interleavings included. All of
// them are replayed on SQLite (TestReplaySQLite); on the servers
// (TestReplayServers), every known sequence (sequences_test.go) and a
// deterministic sample of them, every k-th in the exploration's order.
//
// Each sequence is replayed on memstore too, by the same code, and the two
// verdicts (the classes of the ledgers' findings) must be equal: a
// difference is a finding of its own, printed with the sequence, whether
// or not either side broke a ledger. So are a step that the memstore run
// took but the other cannot (not enabled in its state, or finished before
// the gated call it should stop at), and a different list of gated calls
// met by a step (the stores answered differently).

var (
	replayDepthFlag  = flag.Int("replay.depth", defaultReplayDepth, "the exploration depth whose first-reaching sequences the replays take to SQLite (at most -explore.depth)")
	replaySampleFlag = flag.Int("replay.sample", 40, "how many of those sequences each scenario replays on each server backend (besides the known sequences)")
)

// replayDepth is the selection's depth: -replay.depth, but no deeper than
// -explore.depth (the test command's run without servers sets a small one).
func replayDepth() int { return min(*replayDepthFlag, *depthFlag) }

// verdict is what one replay of a sequence found.
type verdict struct {
	classes []string   // the findings' classes, sorted, without repeats
	texts   []string   // the findings, for the report
	gates   [][]string // per step, the gated calls met (lock ids removed)
	// diverged says where the replay could not follow the sequence ("":
	// it could).
	diverged string
	settled  int // settles run (1, or 2 with stopped operations at the end)
	// drift is the longest real time a world of the replay took to its
	// last clock step (see maxDrift).
	drift time.Duration
}

var lockIDText = regexp.MustCompile(`⟨[^⟩]*⟩`)

// replay runs seq on x's backend from a fresh world, judging after every
// step and at settle, with the stopped operations resumed, and, when some
// are stopped at the end, again with them killed (a crash).
func (x *explorer) replaySeq(seq []step) (verdict, error) {
	var v verdict
	var err error
	for _, kill := range []bool{false, true} {
		var more bool
		more, err = x.replayOnce(seq, kill, &v)
		if err != nil || v.diverged != "" || !more {
			break
		}
	}
	slices.Sort(v.classes)
	v.classes = slices.Compact(v.classes)
	return v, err
}

// replayOnce runs seq once and settles with kill; more says that some
// operations were stopped at the end (a settle with kill is worth a run).
func (x *explorer) replayOnce(seq []step, kill bool, v *verdict) (more bool, err error) {
	w, err := newWorld(x.pool, x.shared, x.backend, x.kinds)
	if err != nil {
		return false, err
	}
	w.installHooks(x.kinds)
	defer w.finish(killAll)
	prev, hist := w.observe(), history{}.clone()
	var all []finding
	first := !kill
	for i, s := range seq {
		k := x.kinds[s.kind]
		if !prev.parkedKind(s.kind) && (!k.enabled(prev) || k.twin >= 0 && !prev.parkedKind(k.twin)) {
			v.diverged = fmt.Sprintf("step %d (%s) is not enabled in the state before it", i+1, k.name)
			return false, nil
		}
		log := w.run(x.kinds, s)
		if s.stop >= 0 && log.stopped == "" {
			v.diverged = fmt.Sprintf("step %d (%s) finished before its gated call #%d", i+1, k.name, s.stop)
			return false, nil
		}
		if first {
			var gates []string
			for _, g := range log.gates {
				gates = append(gates, lockIDText.ReplaceAllString(g, "⟨⟩"))
			}
			v.gates = append(v.gates, gates)
		}
		obs := w.observe()
		var fs []finding
		fs, hist = judge(prev, hist, obs, i+1)
		all = append(all, fs...)
		prev = obs
		if w.err != nil {
			return false, fmt.Errorf("step %d (%s): %w", i+1, k.name, w.err)
		}
	}
	more = len(w.parked) > 0
	w.settle(x.kinds, kill)
	v.drift = max(v.drift, w.drift)
	obs := w.observe()
	fs, _ := judge(prev, hist, obs, len(seq)+1)
	all = append(all, fs...)
	all = append(all, judgeSettled(w, obs)...)
	all = append(all, w.facts.findings...)
	if w.err != nil {
		return false, fmt.Errorf("settle: %w", w.err)
	}
	v.settled++
	for _, f := range all {
		class := f.class
		if kill {
			class += " (stopped operations killed)"
		}
		v.classes = append(v.classes, class)
		v.texts = append(v.texts, class+": "+f.text)
	}
	return more, nil
}

// violations are the classes of v that no byDesign reason covers.
func (v verdict) violations() []string {
	var out []string
	for _, c := range v.classes {
		if byDesign(c) == "" {
			out = append(out, c)
		}
	}
	return out
}

// selections caches selection's answers: every replay test of a run takes
// the same ones.
var selections sync.Map // "scenario|shared|depth" → *selected

type selected struct {
	once    sync.Once
	seqs    [][]step
	figures string
	err     error
}

// selection returns the sequences that first reached each distinct state of
// scenario sc explored to depth on memstore, in the exploration's order,
// with the exploration's figures.
func selection(sc scenario, shared bool, depth int) ([][]step, string, error) {
	v, _ := selections.LoadOrStore(fmt.Sprintf("%s|%v|%d", sc.name, shared, depth), &selected{})
	s := v.(*selected)
	s.once.Do(func() { s.seqs, s.figures, s.err = explored(sc, shared, depth) })
	return s.seqs, s.figures, s.err
}

func explored(sc scenario, shared bool, depth int) ([][]step, string, error) {
	x := newExplorer(sc.kinds(), shared, 1)
	defer x.pool.close()
	x.firsts = [][]step{}
	x.run(depth)
	if x.err != nil {
		return nil, "", x.err
	}
	return x.firsts, fmt.Sprintf("%d sequences explored, %d distinct states", x.sequences, len(x.settled)), nil
}

// replayFigures are one backend's figures for one scenario.
type replayFigures struct {
	sequences, steps, settles, violations, divergences, gateDiffs int
	slow                                                          int // replays run again: slower than maxDrift
	drift                                                         time.Duration
	took                                                          time.Duration
}

// compare replays seqs on memstore and on bs (one backend per worker, each
// taking every len(bs)-th sequence), and reports every violation and
// divergence through t (failing it), in the order of seqs, and the figures.
func compare(t *testing.T, bs []backend, sc scenario, shared bool, seqs [][]step) replayFigures {
	t.Helper()
	type result struct {
		mv, rv verdict
		err    error
		slow   int
	}
	results := make([]result, len(seqs))
	start := time.Now()
	var wg sync.WaitGroup
	for w, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mem := newExplorer(sc.kinds(), shared, 1)
			defer mem.pool.close()
			other := newExplorer(sc.kinds(), shared, 1)
			other.backend = b
			defer other.pool.close()
			for i := w; i < len(seqs); i += len(bs) {
				r := &results[i]
				if r.mv, r.err = mem.replaySeq(seqs[i]); r.err != nil {
					r.err = fmt.Errorf("memstore: %w", r.err)
					continue
				}
				r.rv, r.err = other.replaySeq(seqs[i])
				for ; errors.Is(r.err, errTooSlow) && r.slow < 10; r.slow++ {
					r.rv, r.err = other.replaySeq(seqs[i])
				}
			}
		}()
	}
	wg.Wait()
	fig := replayFigures{took: time.Since(start)}
	name := bs[0].name
	x := newExplorer(sc.kinds(), shared, 1) // for describe only
	defer x.pool.close()
	shown := 0
	show := func(format string, args ...any) {
		if shown < 5 { // the first few in full; the figures count them all
			t.Errorf(format, args...)
		} else {
			t.Fail()
		}
		shown++
	}
	for i, seq := range seqs {
		r := results[i]
		require.NoError(t, r.err, "%s replay of\n%s", name, x.describe(seq))
		fig.sequences++
		fig.steps += len(seq)
		fig.settles += r.rv.settled
		fig.slow += r.slow
		fig.drift = max(fig.drift, r.rv.drift)
		if vs := r.rv.violations(); len(vs) > 0 {
			fig.violations++
			show("%s: the ledgers found violations: %v\n%s\nfindings:\n  %s", name, vs, x.describe(seq), strings.Join(r.rv.texts, "\n  "))
		}
		switch {
		case r.mv.diverged != "":
			require.Failf(t, "memstore cannot replay its own sequence", "%s\n%s", r.mv.diverged, x.describe(seq))
		case r.rv.diverged != "" || !slices.Equal(r.mv.classes, r.rv.classes):
			fig.divergences++
			show("%s and memstore disagree on\n%s  memstore: %v\n  %s: %v %s\n  memstore's findings:\n    %s\n  %s's findings:\n    %s",
				name, x.describe(seq), r.mv.classes, name, r.rv.classes, r.rv.diverged,
				strings.Join(r.mv.texts, "\n    "), name, strings.Join(r.rv.texts, "\n    "))
		case !slices.EqualFunc(r.mv.gates, r.rv.gates, slices.Equal):
			fig.gateDiffs++
			show("%s and memstore met other gated calls on\n%s  memstore: %q\n  %s: %q", name, x.describe(seq), r.mv.gates, name, r.rv.gates)
		}
	}
	return fig
}

// replayable drops the sequences with a step the SQL replays leave out
// (kind.noReplay).
func replayable(kinds []kind, seqs [][]step) [][]step {
	return slices.DeleteFunc(slices.Clone(seqs), func(seq []step) bool {
		return slices.ContainsFunc(seq, func(s step) bool { return kinds[s.kind].noReplay != "" })
	})
}

// replayOn replays, for each scenario, the sequences pick chooses from the
// memstore selection, on the backends of (one per worker: see compare), and
// prints the figures.
func replayOn(t *testing.T, of func(sc scenario) []backend, pick func(sc scenario, firsts [][]step) [][]step) {
	b := of(scenarios[0])[0]
	shared := wireTenants(t)
	depth := replayDepth()
	var total replayFigures
	for _, sc := range scenarios {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			start := time.Now()
			firsts, figures, err := selection(sc, shared, depth)
			require.NoError(t, err)
			selected := time.Since(start)
			seqs := replayable(sc.kinds(), pick(sc, firsts))
			fig := compare(t, of(sc), sc, shared, seqs)
			out := fmt.Sprintf("replay %s %q: %d sequences replayed (%d steps, %d settles) of the %d first-reaching sequences at depth %d (memstore: %s, %v), %d violations, %d divergences from memstore's verdicts, %d with other gated calls, %d run again (slower than maxDrift), slowest world %v to its last clock step, %v\n",
				b.name, sc.name, fig.sequences, fig.steps, fig.settles, len(firsts), depth, figures, selected.Round(time.Millisecond),
				fig.violations, fig.divergences, fig.gateDiffs, fig.slow, fig.drift.Round(time.Millisecond), fig.took.Round(time.Millisecond))
			t.Log(out)
			fmt.Fprint(os.Stdout, out)
			total.sequences += fig.sequences
			total.steps += fig.steps
			total.settles += fig.settles
			total.violations += fig.violations
			total.divergences += fig.divergences
			total.gateDiffs += fig.gateDiffs
			total.slow += fig.slow
			total.drift = max(total.drift, fig.drift)
			total.took += fig.took
		})
	}
	out := fmt.Sprintf("replay %s, all scenarios: %d sequences replayed, %d steps, %d settles, %d violations, %d divergences, %d with other gated calls, %d run again, slowest world %v, %v\n",
		b.name, total.sequences, total.steps, total.settles, total.violations, total.divergences, total.gateDiffs, total.slow, total.drift.Round(time.Millisecond), total.took.Round(time.Millisecond))
	t.Log(out)
	fmt.Fprint(os.Stdout, out)
}

// TestReplaySQLite replays every known sequence and every first-reaching
// sequence of the exploration at -replay.depth on cancel/sqlstore over
// SQLite (in this process, one database per tenant) with memstore's seat
// store, on -explore.workers workers, each on databases of its own.
func TestReplaySQLite(t *testing.T) {
	t.Parallel()
	var lib, host []backend
	for range max(1, *workersFlag) {
		lib = append(lib, backend{name: "sqlite", orders: newSQLOrders(t, sqlstore.SQLite, openSQLite(t), openSQLite(t)), seats: memSeats{}})
		host = append(host, backend{name: "sqlite", orders: newSQLHostOrders(t, sqlstore.SQLite, openSQLite(t), 2), seats: memSeats{}})
	}
	of := func(sc scenario) []backend {
		if sc.hostTables {
			return host
		}
		return lib
	}
	replayOn(t, of, func(sc scenario, firsts [][]step) [][]step { return append(knownOf(t, sc), firsts...) })
}

// TestReplayServers replays, on MariaDB with Redis and on PostgreSQL with
// Redis Cluster, every known sequence and a deterministic sample of the
// first-reaching sequences (-replay.sample per scenario, evenly spread over
// the exploration's order).
func TestReplayServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (lib, host backend)
	}{
		{"mariadb+redis", func(t *testing.T) (backend, backend) {
			seats := newRedisSide(t, testenv.Redis(t))
			return backend{orders: newSQLOrders(t, sqlstore.MySQL, testenv.MySQL(t), testenv.MySQL(t)), seats: seats},
				backend{orders: newSQLHostOrders(t, sqlstore.MySQL, testenv.MySQL(t), 2), seats: seats}
		}},
		{"postgres+redis-cluster", func(t *testing.T) (backend, backend) {
			seats := newRedisSide(t, testenv.RedisCluster(t))
			return backend{orders: newSQLOrders(t, sqlstore.Postgres, testenv.Postgres(t), testenv.Postgres(t)), seats: seats},
				backend{orders: newSQLHostOrders(t, sqlstore.Postgres, testenv.Postgres(t), 2), seats: seats}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lib, host := tc.open(t)
			lib.name, host.name = tc.name, tc.name
			of := func(sc scenario) []backend {
				if sc.hostTables {
					return []backend{host}
				}
				return []backend{lib}
			}
			replayOn(t, of, func(sc scenario, firsts [][]step) [][]step {
				seqs := knownOf(t, sc)
				stride := max(1, (len(firsts)+*replaySampleFlag-1) / *replaySampleFlag)
				for i := 0; i < len(firsts); i += stride {
					seqs = append(seqs, firsts[i])
				}
				return seqs
			})
		})
	}
}

// knownOf returns the known sequences (sequences_test.go) of scenario sc.
func knownOf(t *testing.T, sc scenario) [][]step {
	var out [][]step
	kinds := sc.kinds()
	for _, tc := range knownSequences {
		if tc.scenario != sc.name {
			continue
		}
		seq, err := resolve(kinds, tc.steps)
		require.NoError(t, err, tc.name)
		out = append(out, seq)
	}
	return out
}

// TestShiftCoversEveryTimeColumn keeps the replays' clock honest: every
// time column (epoch milliseconds, "_ms") of every table of sqlstore's
// schema, on every dialect, is one that a clock step moves
// (sqlTimeColumns), and every table is one a world empties.
func TestShiftCoversEveryTimeColumn(t *testing.T) {
	table := regexp.MustCompile(`(?is)CREATE TABLE IF NOT EXISTS (\w+)\s*\((.*)\)`)
	column := regexp.MustCompile(`(?m)^\s*(\w+_ms)\s`)
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.MySQL, sqlstore.Postgres} {
		stmts, err := sqlstore.Schema(d)
		require.NoError(t, err)
		seen := map[string]bool{}
		found := 0
		for _, stmt := range stmts {
			m := table.FindStringSubmatch(stmt)
			if m == nil {
				continue
			}
			cols, ok := sqlTimeColumns[m[1]]
			require.True(t, ok, "%s: table %s is not in sqlTimeColumns: a world would not empty it", d, m[1])
			seen[m[1]] = true
			for _, c := range column.FindAllStringSubmatch(m[2], -1) {
				require.Contains(t, cols, c[1], "%s: %s.%s is a time column the replays' clock steps do not move (sqlTimeColumns)", d, m[1], c[1])
				found++
			}
		}
		require.Equal(t, 9, found, "%s: the time columns read from the schema (the test's own reading must not miss any)", d)
		require.ElementsMatch(t, slices.Collect(maps.Keys(sqlTimeColumns)), slices.Collect(maps.Keys(seen)), "%s: tables", d)
	}
}

// TestLockIDsTranslateOneToOne checks the seat store wrapper's id mapping
// (idMap) across clock steps: the library's ids stay what they were, the
// store's move with the lock times, and each maps back to the other.
func TestLockIDsTranslateOneToOne(t *testing.T) {
	l := &idMap{toStore: map[string]string{}, toLibrary: map[string]string{}}
	require.Equal(t, "1000.1", l.library("", show1, "1000.1"))
	require.Equal(t, "1000.2", l.library("", show1, "1000.2"))
	l.shift(300)
	require.Equal(t, "700.1", l.store("", show1, "1000.1"))
	require.Equal(t, "1000.1", l.library("", show1, "700.1"))
	require.Equal(t, "1500.3", l.library("", show1, "1500.3"), "a lock taken after the step")
	l.shift(500)
	require.Equal(t, "200.1", l.store("", show1, "1000.1"))
	require.Equal(t, "200.2", l.store("", show1, "1000.2"))
	require.Equal(t, "1000.3", l.store("", show1, "1500.3"))
	require.Equal(t, "1500.3", l.library("", show1, "1000.3"))
	require.Equal(t, "1000.1", l.store("", show2, "1000.1"), "another show's ids are its own")
}
