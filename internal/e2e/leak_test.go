package e2e_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. No
// filter is needed: database/sql pools (go-sql-driver/mysql, pgx stdlib,
// modernc sqlite) and go-redis clients are closed in t.Cleanup and leave no
// background goroutine behind once closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
