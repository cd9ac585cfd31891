// Command apicount prints the size of the library's public API, per package:
// exported names, types, interfaces and Err* sentinels.
//
// Run it from the repository's root:
//
//	go run ./internal/apicount
//
// It parses the non-test Go files of every package outside internal/,
// examples/ and testdata/ (nested modules included: the transports are part
// of what a host reads). An exported name is an exported top-level const,
// var, func or type, or an exported method of an exported type; fields and
// interface methods are not counted, as they are read with their type. A
// sentinel is an exported var whose name starts with Err.
//
// The column "own" is names less the methods that carry the name of a
// method of one of the library's interfaces, or of error and fmt.Stringer
// (an adapter's CancelPending is read where cancel.OrderStore documents
// it): what a reader learns that is not documented elsewhere.
//
// The library keeps more names than the 250 it aimed at, so each package's
// documentation says why it exports what it does: its "Names" section
// lists every exported top-level name (methods are read with their type).
// The column "unlisted" counts the names a package's documentation does not
// mention; with -check, apicount prints them and exits 1 unless there are
// none (internal/apicount's test runs it).
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
)

// counts is one package's figures.
type counts struct {
	names, types, interfaces, sentinels int
	implementing                        int // methods named as an interface method (see own)
	topLevel                            []string
	doc                                 string // the package documentation, of every file that has one
}

func (c *counts) add(o counts) {
	c.names += o.names
	c.types += o.types
	c.interfaces += o.interfaces
	c.sentinels += o.sentinels
	c.implementing += o.implementing
	c.topLevel = append(c.topLevel, o.topLevel...)
	c.doc += o.doc
}

// unlisted returns the exported top-level names the package documentation
// does not mention as a word.
func (c counts) unlisted() []string {
	var out []string
	for _, n := range c.topLevel {
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(c.doc) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func main() {
	root, check := ".", false
	for _, a := range os.Args[1:] {
		if a == "-check" {
			check = true
		} else {
			root = a
		}
	}
	pkgs, err := Scan(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "package\tnames\town\ttypes\tinterfaces\tsentinels\tunlisted\t")
	var total counts
	unlisted := 0
	for _, d := range dirs {
		c := pkgs[d]
		total.add(c)
		u := len(c.unlisted())
		unlisted += u
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", d, c.names, c.names-c.implementing, c.types, c.interfaces, c.sentinels, u)
	}
	fmt.Fprintf(w, "total (%d packages)\t%d\t%d\t%d\t%d\t%d\t%d\t\n", len(dirs), total.names, total.names-total.implementing, total.types, total.interfaces, total.sentinels, unlisted)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	if check && unlisted > 0 {
		for _, d := range dirs {
			if u := pkgs[d].unlisted(); len(u) > 0 {
				fmt.Fprintf(os.Stderr, "apicount: %s: its documentation does not list %s\n", d, strings.Join(u, ", "))
			}
		}
		os.Exit(1)
	}
}

// Scan counts every library package under root, keyed by its directory
// relative to root.
func Scan(root string) (map[string]counts, error) {
	ifaceMethods, err := interfaceMethods(root)
	if err != nil {
		return nil, err
	}
	return scan(root, ifaceMethods)
}

// scan counts every library package under root, keyed by its directory.
func scan(root string, ifaceMethods map[string]bool) (map[string]counts, error) {
	out := map[string]counts{}
	err := walk(root, func(path, dir string) error {
		c, main, err := file(path, ifaceMethods)
		if err != nil {
			return err
		}
		if main {
			return nil // a command has no API
		}
		cur := out[dir]
		cur.add(c)
		out[dir] = cur
		return nil
	})
	return out, err
}

// interfaceMethods names every method of the library's exported
// interfaces, with error's and fmt.Stringer's.
func interfaceMethods(root string) (map[string]bool, error) {
	out := map[string]bool{"Error": true, "String": true}
	err := walk(root, func(path, _ string) error {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if s, ok := n.(*ast.TypeSpec); ok && s.Name.IsExported() {
				if it, ok := s.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						for _, n := range m.Names {
							out[n.Name] = true
						}
					}
				}
			}
			return true
		})
		return nil
	})
	return out, err
}

// walk calls fn for every non-test Go file of the library under root, with
// its package's directory relative to root.
func walk(root string, fn func(path, dir string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || rel == "internal" || rel == "examples" || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return fn(path, filepath.ToSlash(filepath.Dir(rel)))
	})
}

// file counts one file's exported declarations; main reports a package main.
func file(path string, ifaceMethods map[string]bool) (c counts, main bool, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return counts{}, false, err
	}
	if f.Name.Name == "main" {
		return counts{}, true, nil
	}
	if f.Doc != nil {
		c.doc = f.Doc.Text()
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil && !exportedRecv(d.Recv.List[0].Type) {
				continue
			}
			c.names++
			if d.Recv == nil {
				c.topLevel = append(c.topLevel, d.Name.Name)
			}
			if d.Recv != nil && ifaceMethods[d.Name.Name] {
				c.implementing++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					c.names++
					c.types++
					c.topLevel = append(c.topLevel, s.Name.Name)
					if _, ok := s.Type.(*ast.InterfaceType); ok {
						c.interfaces++
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						c.names++
						c.topLevel = append(c.topLevel, n.Name)
						if d.Tok == token.VAR && strings.HasPrefix(n.Name, "Err") {
							c.sentinels++
						}
					}
				}
			}
		}
	}
	return c, false, nil
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
