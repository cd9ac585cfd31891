package sqlstore_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

var updateMigrations = flag.Bool("update-migrations", false, "rewrite migrations/ from Schema")

// migration is one version of the library's tables in the versioned files
// under migrations/ (see the README, "Migrations"): the statements of
// Schema that name one of its tables, and its tables dropped in reverse.
type migration struct {
	version int
	name    string
	tables  []string // in creation order
}

// The tables every store needs come first (a Mapping's store needs only
// them, as Migrate creates only them), then the library's own order tables
// (with the rest of Schema: SQLite's drop of an index an earlier version
// made).
var migrations = []migration{
	{1, "oe_side_tables", []string{"oe_payment_discrepancy", "oe_order_side"}},
	{2, "oe_order_tables", []string{"oe_order", "oe_order_seat"}},
}

// migrationFiles renders every file under migrations/ for d's Schema:
// goose's layout (one file a version, Up and Down annotated) and
// golang-migrate's (an .up.sql and a .down.sql a version).
func migrationFiles(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.Postgres, sqlstore.SQLite} {
		stmts, err := sqlstore.Schema(d)
		require.NoError(t, err)
		for k, m := range migrations {
			var up, down []string
			for _, q := range stmts {
				// Migrate's rule for a Mapping's store: the statements naming
				// these two tables (version 1), the rest (version 2).
				if side := strings.Contains(q, "oe_payment_discrepancy") || strings.Contains(q, "oe_order_side"); side == (k == 0) {
					up = append(up, q+";")
				}
			}
			for i := len(m.tables) - 1; i >= 0; i-- {
				down = append(down, "DROP TABLE IF EXISTS "+m.tables[i]+";")
			}
			head := fmt.Sprintf("-- orderexpiry's %s for %s: generated from cancel/sqlstore/schema/%s.sql\n-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.\n", strings.Join(m.tables, " and "), d, d)
			out[fmt.Sprintf("goose/%s/%05d_%s.sql", d, m.version, m.name)] = head + "\n-- +goose Up\n" + strings.Join(up, "\n\n") + "\n\n-- +goose Down\n" + strings.Join(down, "\n") + "\n"
			out[fmt.Sprintf("golang-migrate/%s/%06d_%s.up.sql", d, m.version, m.name)] = head + "\n" + strings.Join(up, "\n\n") + "\n"
			out[fmt.Sprintf("golang-migrate/%s/%06d_%s.down.sql", d, m.version, m.name)] = head + "\n" + strings.Join(down, "\n") + "\n"
		}
	}
	return out
}

// TestMigrationFiles keeps the versioned migration files equal to Schema,
// statement for statement: a change of the schema that forgets them fails
// here (internal/migrations applies them with each tool).
func TestMigrationFiles(t *testing.T) {
	want := migrationFiles(t)
	if *updateMigrations {
		require.NoError(t, os.RemoveAll("migrations"))
		for name, body := range want {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join("migrations", name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join("migrations", name), []byte(body), 0o644))
		}
	}
	got := map[string]string{}
	require.NoError(t, filepath.WalkDir("migrations", func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".sql") {
			return err
		}
		b, err := os.ReadFile(p)
		got[filepath.ToSlash(strings.TrimPrefix(p, "migrations"+string(filepath.Separator)))] = string(b)
		return err
	}))
	for name, body := range want {
		assert.Equal(t, body, got[name], "migrations/%s differs from Schema: go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations", name)
	}
	for name := range got {
		_, ok := want[name]
		assert.True(t, ok, "migrations/%s is not one of Schema's", name)
	}
}
