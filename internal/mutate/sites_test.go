package main

import (
	"go/format"
	"strings"
	"testing"
)

const sample = `package p

import "context"

type Hold struct{ ShowID, LockID string }

func release(ctx context.Context, h Hold) error { return nil }

func due(now, at int, paid bool) bool {
	if paid {
		return false
	}
	_ = release(context.Background(), Hold{ShowID: "s", LockID: "l"})
	release(nil, Hold{ShowID: "s", LockID: "l"})
	return !paid && now >= at
}

var script = ` + "`" + `if redis.call('GET', k) == ARGV[1] and n < 3 then return n + 1 end -- a < b` + "`" + `
`

// Every operator finds its sites, and each mutant applied is still Go
// that gofmt parses (what it does is the test suites' to judge).
func TestSitesOfEveryOperator(t *testing.T) {
	ms, err := fileSites("p/p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	byOp := map[string][]mutant{}
	for _, m := range ms {
		byOp[m.Op] = append(byOp[m.Op], m)
		if _, err := format.Source(m.apply([]byte(sample))); err != nil {
			t.Errorf("%s at line %d (%q → %q) does not parse: %v", m.Op, m.Line, m.Original, m.With, err)
		}
	}
	want := map[string]int{
		opBoundary: 1, // >=
		opFlip:     1, // &&
		opNot:      1, // !paid
		opGuard:    1, // if paid { return false }
		opStmt:     1, // release(nil, …) alone: the assignment to _ is no call statement
		opField:    4, // ShowID and LockID, twice
		opSwap:     0, // no call here passes two names side by side
		opLua:      4, // ==, and, <, + 1 (the < in the comment is not one)
	}
	for op, n := range want {
		if len(byOp[op]) != n {
			t.Errorf("%s: %d sites, want %d: %+v", op, len(byOp[op]), n, byOp[op])
		}
	}
	for _, m := range byOp[opLua] {
		if m.With == "" {
			t.Errorf("lua token %q has no replacement", m.Original)
		}
	}
	for _, m := range byOp[opGuard] {
		if !strings.Contains(m.Original, "return false") {
			t.Errorf("the guard removed is %q", m.Original)
		}
	}
}

// A key survives an edit above its function: equivalent.txt stays valid.
func TestKeysIgnoreLineNumbers(t *testing.T) {
	a, err := fileSites("p/p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	b, err := fileSites("p/p.go", []byte(strings.Replace(sample, "import \"context\"", "import \"context\"\n\n// a comment\n// more", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ka, kb := keysOf(a), keysOf(b)
	if len(a) != len(b) {
		t.Fatalf("%d and %d mutants", len(a), len(b))
	}
	for i := range a {
		if ka[a[i]] != kb[b[i]] {
			t.Errorf("key %q became %q", ka[a[i]], kb[b[i]])
		}
		if a[i].Line == b[i].Line {
			t.Errorf("the edit moved no line")
		}
	}
}
