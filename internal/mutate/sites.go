package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A mutant is one small change of one file: the bytes [from, to) replaced
// by with.
type mutant struct {
	File     string // relative to the repository's root
	Line     int
	Func     string // the enclosing function ("" at top level)
	Op       string // the operator (ops below)
	Original string
	With     string
	from, to int
	// Money marks a line that decides money, seats, scope or time (see
	// moneyLine): the mutants the CI sample draws from.
	Money bool
}

// Key names a mutant independently of line numbers, so that the list of
// equivalent mutants survives edits elsewhere in its file: the file, the
// function, the operator, the text it changes and, for a text that occurs
// several times in the function, which occurrence.
func (m mutant) Key(occurrence int) string {
	return fmt.Sprintf("%s|%s|%s|%s|%d", m.File, m.Func, m.Op, oneLine(m.Original), occurrence)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// The operators.
const (
	opBoundary = "boundary"      // < <=, > >=
	opFlip     = "flip"          // == !=, && ||
	opNot      = "not-removed"   // !x → x
	opGuard    = "guard-removed" // if c { return … } removed
	opStmt     = "stmt-dropped"  // a call statement removed
	opField    = "field-dropped" // LockID: x (and the other keys below) removed from a literal
	opSwap     = "args-swapped"  // f(a, b) → f(b, a) (when it still compiles)
	opLua      = "lua-token"     // one token of a Lua script
)

// fieldKeys are the composite-literal keys whose removal is a mutant: the
// lock ids, scopes and owners that name what a write may touch.
var fieldKeys = map[string]bool{"LockID": true, "Scope": true, "UserID": true, "ShowID": true, "OnlyIfDue": true, "Limit": true, "Reason": true, "Seats": true}

// moneyLine says whether a line decides money, seats, scope or time.
var moneyLine = regexp.MustCompile(`(?i)lock|seat|scope|refund|discrep|pay|sell|sold|releas|due|expire|deadline|now|limit|held|status|reinstat|claim|lease|age\b|settle`)

// quiet calls are left alone by opStmt: logs change nothing a test can
// judge by design.
var quiet = regexp.MustCompile(`\.(log|Log|logger)\.|slog\.|\.(Debug|Info|Warn|Error)(Context)?\(`)

// sites returns the mutants of the non-test Go files of dir (relative to
// root), in file and position order.
func sites(root, dir string) ([]mutant, error) {
	paths, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var out []mutant
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		ms, err := fileSites(rel, src)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// fileSites returns the mutants of one file.
func fileSites(rel string, src []byte) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(src), "\n")
	var out []mutant
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	add := func(fn string, at token.Pos, op string, from, to int, with string) {
		line := fset.Position(at).Line
		out = append(out, mutant{File: rel, Line: line, Func: fn, Op: op, Original: string(src[from:to]), With: with,
			from: from, to: to, Money: moneyLine.MatchString(lines[line-1])})
	}
	for _, d := range f.Decls {
		fn := ""
		var body ast.Node = d
		if fd, ok := d.(*ast.FuncDecl); ok {
			fn = fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) > 0 {
				fn = recvName(fd.Recv.List[0].Type) + "." + fn
			}
			if fd.Body == nil {
				continue
			}
			body = fd.Body
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if w, ok := binarySwap[n.Op]; ok {
					op := opFlip
					if n.Op == token.LSS || n.Op == token.LEQ || n.Op == token.GTR || n.Op == token.GEQ {
						op = opBoundary
					}
					p := off(n.OpPos)
					add(fn, n.OpPos, op, p, p+len(n.Op.String()), w)
				}
			case *ast.UnaryExpr:
				if n.Op == token.NOT {
					p := off(n.OpPos)
					add(fn, n.OpPos, opNot, p, p+1, "")
				}
			case *ast.IfStmt:
				if n.Else == nil && n.Init == nil && endsFlow(n.Body) && !errGuard(n.Cond) {
					add(fn, n.If, opGuard, off(n.Pos()), off(n.End()), "")
				}
			case *ast.ExprStmt:
				if _, ok := n.X.(*ast.CallExpr); ok {
					text := string(src[off(n.Pos()):off(n.End())])
					if !quiet.MatchString(text) {
						add(fn, n.Pos(), opStmt, off(n.Pos()), off(n.End()), "")
					}
				}
			case *ast.CompositeLit:
				for i, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					k, ok := kv.Key.(*ast.Ident)
					if !ok || !fieldKeys[k.Name] {
						continue
					}
					from, to := off(kv.Pos()), off(kv.End())
					// Take the comma with it: the one after, else the one before.
					if i+1 < len(n.Elts) {
						to = off(n.Elts[i+1].Pos())
					} else if i > 0 {
						from = off(n.Elts[i-1].End())
					}
					add(fn, kv.Pos(), opField, from, to, "")
				}
			case *ast.CallExpr:
				for i := 0; i+1 < len(n.Args); i++ {
					a, b := n.Args[i], n.Args[i+1]
					if simple(a) && simple(b) {
						at, bt := string(src[off(a.Pos()):off(a.End())]), string(src[off(b.Pos()):off(b.End())])
						if at != bt {
							add(fn, a.Pos(), opSwap, off(a.Pos()), off(b.End()), bt+", "+at)
						}
					}
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING && strings.Contains(n.Value, "redis.call") {
					out = append(out, luaSites(rel, fn, src, off(n.Pos()), off(n.End()), lines, fset.Position(n.Pos()).Line)...)
				}
			}
			return true
		})
		if gd, ok := d.(*ast.GenDecl); ok {
			_ = gd // string constants are reached by the Inspect above
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].from < out[j].from })
	return out, nil
}

var binarySwap = map[token.Token]string{
	token.LSS: "<=", token.LEQ: "<", token.GTR: ">=", token.GEQ: ">",
	token.EQL: "!=", token.NEQ: "==", token.LAND: "||", token.LOR: "&&",
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	}
	return "?"
}

// endsFlow reports whether a block ends by leaving: return, continue, break.
func endsFlow(b *ast.BlockStmt) bool {
	if len(b.List) == 0 {
		return false
	}
	switch s := b.List[len(b.List)-1].(type) {
	case *ast.ReturnStmt:
		return true
	case *ast.BranchStmt:
		return s.Tok == token.CONTINUE || s.Tok == token.BREAK
	}
	return false
}

// errGuard reports "err != nil": error plumbing, which every test that
// injects a fault kills, left out to spend the time on decisions.
func errGuard(c ast.Expr) bool {
	b, ok := c.(*ast.BinaryExpr)
	if !ok || b.Op != token.NEQ {
		return false
	}
	x, ok1 := b.X.(*ast.Ident)
	y, ok2 := b.Y.(*ast.Ident)
	return ok1 && ok2 && y.Name == "nil" && strings.HasSuffix(strings.ToLower(x.Name), "err")
}

// simple is an argument a swap may move: a name or a field.
func simple(e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name != "nil" && t.Name != "true" && t.Name != "false"
	case *ast.SelectorExpr:
		return simple(t.X)
	}
	return false
}

// luaToken finds the operators of a Lua script that a one-token change
// turns into another: comparisons, equality, and/or, +1/-1.
var luaToken = regexp.MustCompile(`<=|>=|~=|==|<|>|\band\b|\bor\b|\+ 1\b|- 1\b`)

var luaSwap = map[string]string{"<=": "<", ">=": ">", "<": "<=", ">": ">=", "~=": "==", "==": "~=", "and": "or", "or": "and", "+ 1": "+ 0", "- 1": "- 0"}

// luaSites returns the one-token mutants of the Lua script in src[from:to].
func luaSites(rel, fn string, src []byte, from, to int, lines []string, _ int) []mutant {
	var out []mutant
	body := string(src[from:to])
	for _, loc := range luaToken.FindAllStringIndex(body, -1) {
		tok := body[loc[0]:loc[1]]
		// Skip what is inside a Lua comment ("-- …" to the end of its line).
		lineStart := strings.LastIndex(body[:loc[0]], "\n") + 1
		if strings.Contains(body[lineStart:loc[0]], "--") {
			continue
		}
		at := from + loc[0]
		line := strings.Count(string(src[:at]), "\n") + 1
		out = append(out, mutant{File: rel, Line: line, Func: fn, Op: opLua, Original: tok, With: luaSwap[tok],
			from: at, to: at + len(tok), Money: true})
		_ = lines
	}
	return out
}

// apply returns src with m applied.
func (m mutant) apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(m.With))
	out = append(out, src[:m.from]...)
	out = append(out, m.With...)
	return append(out, src[m.to:]...)
}
