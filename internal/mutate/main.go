// Command mutate is the library's mutation testing: it changes one small
// thing in a package of the core (a mutant: a flipped condition, a moved
// boundary, a removed guard, a dropped call, a lock id or scope left out
// of a literal, two arguments swapped, one token of a Lua script), runs the
// suites that should notice, and reports the mutants no test killed.
//
// Run it from the repository's root, with the servers up
// (internal/testenv/services.sh start; its env exported):
//
//	go -C internal/mutate run . -pkg cancel                  # every mutant of one package
//	go -C internal/mutate run . -pkg all -money -sample 30  # 30 money mutants of each package
//	go -C internal/mutate run . -list -pkg reconcile        # the mutants, without running
//	go -C internal/mutate run . -pkg cancel -money -file provider.go  # one file's
//
// The suites a package's mutants are judged by are its own tests and
// those in other packages that drive it (targets below): a mutant of
// cancel/sqlstore is killed by its store suite, of cancel by the memstore
// suites and the reconciler's tests. The mutants run in a copy of the
// repository (a temporary directory), never in the working tree.
//
// equivalent.txt lists the mutants that no correct test can kill, one per
// line with the reason; they are reported apart. With -sample and -money
// the run exits 1 if any drawn money mutant survives: the CI check
// (internal/testenv/test.sh runs a rotating minute's worth).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// target is a package of the core and the tests that judge its mutants.
type target struct {
	dir   string   // the package, from the repository's root
	tests []string // go test arguments: packages, and -run where a suite is narrowed
}

var targets = []target{
	{"expiry", []string{"./expiry/"}},
	{"cancel", []string{"./cancel/", "./cancel/memstore/", "./reconcile/"}},
	{"cancel/memstore", []string{"./cancel/memstore/", "./cancel/"}},
	{"cancel/redisseat", []string{"./cancel/redisseat/"}},
	{"internal/seatlua", []string{"./cancel/redisseat/"}},
	{"reconcile", []string{"./reconcile/"}},
	{"cancel/sqlstore", []string{"./cancel/sqlstore/"}},
}

type outcome string

const (
	killed     outcome = "killed"
	survived   outcome = "survived"
	invalid    outcome = "invalid" // does not compile
	equivalent outcome = "equivalent"
)

func main() {
	var (
		pkg     = flag.String("pkg", "all", "a target package (expiry, cancel, cancel/memstore, cancel/redisseat, internal/seatlua, reconcile, cancel/sqlstore) or all")
		money   = flag.Bool("money", false, "only the mutants on lines that decide money, seats, scope or time")
		sample  = flag.Int("sample", 0, "draw this many mutants per package (0: all)")
		seed    = flag.Uint64("seed", 0, "the sample's seed (0: the day of the year, so a daily run rotates)")
		list    = flag.Bool("list", false, "list the mutants and exit")
		timeout = flag.Duration("timeout", 10*time.Minute, "one mutant's test run")
		out     = flag.String("out", "", "append each result as a line to this file")
		file    = flag.String("file", "", "only the mutants of this file of the package (provider.go): a new file's mutants, before the daily draw meets them")
	)
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fail(err)
	}
	eq, err := readEquivalents(filepath.Join(root, "internal/mutate/equivalent.txt"))
	if err != nil {
		fail(err)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UTC().YearDay())
	}
	var work []target
	for _, t := range targets {
		if *pkg == "all" || *pkg == t.dir {
			work = append(work, t)
		}
	}
	if len(work) == 0 {
		fail(fmt.Errorf("no target %q", *pkg))
	}
	copyDir := ""
	if !*list {
		if copyDir, err = os.MkdirTemp("", "oe-mutate-"); err != nil {
			fail(err)
		}
		defer os.RemoveAll(copyDir)
		if err := exec.Command("cp", "-a", root+"/.", copyDir).Run(); err != nil {
			fail(fmt.Errorf("copy the repository: %w", err))
		}
	}
	var rows []row
	moneySurvived := 0
	for _, t := range work {
		ms, err := sites(root, t.dir)
		if err != nil {
			fail(err)
		}
		keys := keysOf(ms)
		if *money {
			var keep []mutant
			for _, m := range ms {
				if m.Money {
					keep = append(keep, m)
				}
			}
			ms = keep
		}
		if *file != "" {
			var keep []mutant
			for _, m := range ms {
				if filepath.Base(m.File) == *file {
					keep = append(keep, m)
				}
			}
			ms = keep
		}
		if *sample > 0 && *sample < len(ms) {
			r := rand.New(rand.NewPCG(*seed, uint64(len(t.dir))))
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			ms = ms[:*sample]
			sort.SliceStable(ms, func(i, j int) bool { return ms[i].from < ms[j].from || ms[i].File < ms[j].File })
		}
		if *list {
			for _, m := range ms {
				fmt.Printf("%s:%d\t%s\t%s\t%q → %q\tmoney=%v\n", m.File, m.Line, m.Func, m.Op, oneLine(m.Original), m.With, m.Money)
			}
			continue
		}
		rw := row{pkg: t.dir}
		for _, m := range ms {
			var o outcome
			if reason, ok := eq[keys[m]]; ok {
				o = equivalent
				_ = reason
			} else {
				o = run(copyDir, t, m, *timeout)
			}
			rw.add(o)
			line := fmt.Sprintf("%s\t%s:%d\t%s\t%s\t%q → %q\tmoney=%v\tkey=%s", o, m.File, m.Line, m.Func, m.Op, oneLine(m.Original), m.With, m.Money, keys[m])
			fmt.Println(line)
			if *out != "" {
				appendLine(*out, line)
			}
			if o == survived {
				rw.survivors = append(rw.survivors, m)
				if m.Money {
					moneySurvived++
				}
			}
		}
		rows = append(rows, rw)
	}
	if *list {
		return
	}
	fmt.Printf("\n| package | mutants | killed | survived | equivalent | not compiling |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %d | %d | %d |\n", r.pkg, r.n, r.killed, r.survived, r.equivalent, r.invalid)
	}
	if *sample > 0 && *money && moneySurvived > 0 {
		fmt.Printf("\n%d money mutant(s) survived: kill each with a test of the test command, or list it in internal/mutate/equivalent.txt with why\n", moneySurvived)
		os.Exit(1)
	}
}

type row struct {
	pkg                                      string
	n, killed, survived, equivalent, invalid int
	survivors                                []mutant
}

func (r *row) add(o outcome) {
	r.n++
	switch o {
	case killed:
		r.killed++
	case survived:
		r.survived++
	case equivalent:
		r.equivalent++
	case invalid:
		r.invalid++
	}
}

// run applies m in the copy, builds, runs t's tests, and puts the file
// back.
func run(dir string, t target, m mutant, timeout time.Duration) outcome {
	path := filepath.Join(dir, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	defer func() {
		if err := os.WriteFile(path, src, 0o644); err != nil {
			fail(err)
		}
	}()
	if err := os.WriteFile(path, m.apply(src), 0o644); err != nil {
		fail(err)
	}
	build := exec.Command("go", "vet", "./"+t.dir+"/")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "vet:") || strings.Contains(string(out), ".go:") {
			return invalid
		}
		fail(fmt.Errorf("vet %s: %v\n%s", t.dir, err, out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"test", "-count=1", "-failfast"}, t.tests...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		return survived
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) || ctx.Err() != nil {
		if strings.Contains(string(out), "build failed") || strings.Contains(string(out), "[setup failed]") {
			return invalid
		}
		return killed // a failing test, or one that hung past the timeout
	}
	fail(fmt.Errorf("go test: %v", err))
	return ""
}

// keysOf names each mutant (mutant.Key), counting the occurrences of the
// same text in the same function.
func keysOf(ms []mutant) map[mutant]string {
	seen := map[string]int{}
	out := make(map[mutant]string, len(ms))
	for _, m := range ms {
		base := m.Key(0)
		n := seen[base]
		seen[base]++
		out[m] = m.Key(n)
	}
	return out
}

// readEquivalents reads equivalent.txt: "key<TAB>reason" per line; # starts
// a comment.
func readEquivalents(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, ok := strings.Cut(line, "\t")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s: %q: a key, a tab, and why no correct test can kill it", path, line)
		}
		out[key] = reason
	}
	return out, sc.Err()
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("run it inside the repository: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutate:", err)
	os.Exit(2)
}
