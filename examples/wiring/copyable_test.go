package wiring_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExamplesAreCopyable: what a host copies (every package's
// example_test.go and the example programs under examples/) imports nothing
// from internal/ and discards no call's error with _.
func TestExamplesAreCopyable(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "internal" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		program := strings.HasPrefix(rel, "examples"+string(filepath.Separator)) && strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
		if program || d.Name() == "example_test.go" {
			files = append(files, path)
		}
		return nil
	}))
	require.NotEmpty(t, files)
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			assert.NotContains(t, imp.Path.Value, "orderexpiry/internal", "%s imports %s", path, imp.Path.Value)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Rhs) != 1 {
				return true
			}
			if _, call := as.Rhs[0].(*ast.CallExpr); !call {
				return true
			}
			// Errors come last: a call whose last result goes to _ drops one.
			if id, ok := as.Lhs[len(as.Lhs)-1].(*ast.Ident); ok && id.Name == "_" {
				t.Errorf("%s: the last result of a call (its error) is discarded with _; handle it", fset.Position(as.Pos()))
			}
			return true
		})
	}
}
