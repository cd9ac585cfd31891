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
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// counts is one package's figures.
type counts struct {
	names, types, interfaces, sentinels int
}

func (c *counts) add(o counts) {
	c.names += o.names
	c.types += o.types
	c.interfaces += o.interfaces
	c.sentinels += o.sentinels
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	pkgs, err := scan(root)
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
	fmt.Fprintln(w, "package\tnames\ttypes\tinterfaces\tsentinels\t")
	var total counts
	for _, d := range dirs {
		c := pkgs[d]
		total.add(c)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t\n", d, c.names, c.types, c.interfaces, c.sentinels)
	}
	fmt.Fprintf(w, "total (%d packages)\t%d\t%d\t%d\t%d\t\n", len(dirs), total.names, total.types, total.interfaces, total.sentinels)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
}

// scan counts every library package under root, keyed by its directory.
func scan(root string) (map[string]counts, error) {
	out := map[string]counts{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
		c, main, err := file(path)
		if err != nil {
			return err
		}
		if main {
			return nil // a command has no API
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		cur := out[dir]
		cur.add(c)
		out[dir] = cur
		return nil
	})
	return out, err
}

// file counts one file's exported declarations; main reports a package main.
func file(path string) (c counts, main bool, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return counts{}, false, err
	}
	if f.Name.Name == "main" {
		return counts{}, true, nil
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
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					c.names++
					c.types++
					if _, ok := s.Type.(*ast.InterfaceType); ok {
						c.interfaces++
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						c.names++
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
