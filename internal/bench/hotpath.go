package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// runHotpath runs the testing.B benchmarks of the hot path (files
// expiry/*_bench_test.go) with -benchmem and tabulates them.
func runHotpath(c *common, args []string) error {
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	benchtime := fs.String("benchtime", "500ms", "go test -benchtime")
	count := fs.Int("count", 1, "go test -count")
	pkgs := fs.String("pkgs", "./expiry/", "packages whose benchmarks to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	argv := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", *benchtime, "-count", fmt.Sprint(*count)}
	argv = append(argv, strings.Fields(*pkgs)...)
	cmd := exec.Command("go", argv...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	fmt.Printf("`go %s` (in-memory stores of cancel/memstore; logs formatted by a text handler at Info level into io.Discard):\n\n", strings.Join(argv, " "))
	if err := cmd.Run(); err != nil {
		fmt.Print(out.String())
		return err
	}
	// With -count > 1, report the median ns/op of each benchmark.
	type row struct {
		ns            []float64
		bytes, allocs string
	}
	var names []string
	rows := map[string]*row{}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 8 && strings.HasPrefix(f[0], "Benchmark") {
			name := strings.TrimSuffix(f[0], "-"+lastDash(f[0]))
			r := rows[name]
			if r == nil {
				r = &row{}
				rows[name] = r
				names = append(names, name)
			}
			var ns float64
			fmt.Sscanf(f[2], "%g", &ns)
			r.ns = append(r.ns, ns)
			r.bytes, r.allocs = f[4], f[6]
		}
	}
	head := "ns/op"
	if *count > 1 {
		head = fmt.Sprintf("ns/op (median of %d)", *count)
	}
	t := newTable("benchmark", head, "B/op", "allocs/op")
	for _, name := range names {
		r := rows[name]
		sort.Float64s(r.ns)
		t.add(name, fmt.Sprintf("%.4g", r.ns[len(r.ns)/2]), r.bytes, r.allocs)
	}
	t.print(os.Stdout)
	return nil
}

func lastDash(s string) string {
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

var libraryModule = regexp.MustCompile(`(?m)^module\s+github\.com/seatflow/orderexpiry\s*$`)

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		// The library's go.mod, not internal/bench's own (module
		// github.com/seatflow/orderexpiry/internal/bench).
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && libraryModule.Match(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the orderexpiry module (go.mod not found)")
		}
		dir = parent
	}
}
