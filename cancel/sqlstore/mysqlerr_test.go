package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/internal/testenv"
)

// TestMySQLErrorNumberOfRealErrors: the numbers mysqlErrorNumber reads by
// reflection are those of go-sql-driver/mysql's real errors from MariaDB,
// bare and wrapped, and they classify as the store needs: a duplicate key
// (1062) is a duplicate, a deadlock (1213) is retried.
func TestMySQLErrorNumberOfRealErrors(t *testing.T) {
	db := testenv.MySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, "CREATE TABLE oe_errs (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO oe_errs (id, v) VALUES (1, 0), (2, 0)")
	require.NoError(t, err)

	t.Run("duplicate key", func(t *testing.T) {
		_, err := db.ExecContext(ctx, "INSERT INTO oe_errs (id, v) VALUES (1, 0)")
		require.Error(t, err)
		require.Equal(t, "*mysql.MySQLError", fmt.Sprintf("%T", err), "the driver's own error type: %v", err)
		for _, e := range wrapped(err) {
			n, ok := mysqlErrorNumber(e)
			assert.True(t, ok, "%v", e)
			assert.EqualValues(t, 1062, n, "%v", e)
			assert.True(t, isDuplicate(e), "%v", e)
			assert.False(t, retryable(e), "%v", e)
		}
	})

	t.Run("deadlock", func(t *testing.T) {
		err := mariaDBDeadlock(ctx, t, db)
		require.Equal(t, "*mysql.MySQLError", fmt.Sprintf("%T", err), "the driver's own error type: %v", err)
		for _, e := range wrapped(err) {
			n, ok := mysqlErrorNumber(e)
			assert.True(t, ok, "%v", e)
			assert.EqualValues(t, 1213, n, "%v", e)
			assert.True(t, retryable(e), "%v", e)
			assert.False(t, isDuplicate(e), "%v", e)
		}
	})
}

// mariaDBDeadlock makes two transactions wait on each other's row lock and
// returns the error of the one InnoDB chose as the victim.
func mariaDBDeadlock(ctx context.Context, t *testing.T, db *sql.DB) error {
	t.Helper()
	var txs [2]*sql.Tx
	for i := range txs {
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		// Should deadlock detection be off, fail in seconds, not after 50.
		_, err = conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 10")
		require.NoError(t, err)
		txs[i], err = conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { txs[i].Rollback() })
		_, err = txs[i].ExecContext(ctx, "UPDATE oe_errs SET v = v + 1 WHERE id = ?", i+1)
		require.NoError(t, err)
	}
	errc := make(chan error, 2)
	for i, tx := range txs {
		go func() {
			_, err := tx.ExecContext(ctx, "UPDATE oe_errs SET v = v + 1 WHERE id = ?", 2-i) // the other's row
			if err != nil {
				tx.Rollback() // the victim's locks go; the other proceeds
			}
			errc <- err
		}()
	}
	var errs []error
	for range txs {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	require.Len(t, errs, 1, "exactly one transaction is the deadlock's victim: %v", errs)
	return errs[0]
}

// wrapped returns err bare and wrapped the ways the store and its callers
// wrap errors.
func wrapped(err error) []error {
	return []error{
		err,
		fmt.Errorf("sqlstore: cancel: %w", err),
		fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", err)),
		errors.Join(errors.New("first"), fmt.Errorf("second: %w", err)),
		fmt.Errorf("two: %w and %w", errors.New("other"), err),
	}
}

// MySQLError is a look-alike of the driver's type declared in another
// package: mysqlErrorNumber must not read it.
type MySQLError struct{ Number uint16 }

func (e *MySQLError) Error() string { return fmt.Sprintf("Error %d: look-alike", e.Number) }

func TestMySQLErrorNumberIgnoresOthers(t *testing.T) {
	for _, err := range []error{
		nil,
		errors.New("Error 1062 (23000): Duplicate entry '1' for key 'PRIMARY'"), // the driver's text, not its type
		&MySQLError{Number: 1062},
		fmt.Errorf("wrapped: %w", &MySQLError{Number: 1213}),
		(*MySQLError)(nil),
		errors.Join(errors.New("a"), errors.New("b")),
	} {
		n, ok := mysqlErrorNumber(err)
		assert.False(t, ok, "%#v", err)
		assert.Zero(t, n, "%#v", err)
	}
}

// TestNoDriverLinked: a host that imports sqlstore links no database driver
// (go-sql-driver/mysql's init would register "mysql" in a PostgreSQL-only
// host); the host imports the one it opens its *sql.DB with.
func TestNoDriverLinked(t *testing.T) {
	gobin, err := exec.LookPath("go") // go test puts its own GOROOT/bin first in PATH
	if err != nil {
		t.Skipf("no go command to list the package's dependencies: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", "github.com/seatflow/orderexpiry/cancel/sqlstore").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/seatflow/orderexpiry/cancel/sqlstore")
	for _, dep := range deps {
		for _, driver := range []string{"github.com/go-sql-driver/", "github.com/jackc/pgx", "modernc.org/sqlite"} {
			assert.False(t, strings.HasPrefix(dep, driver), "cancel/sqlstore imports %s", dep)
		}
	}
}
