package explore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they start (an
// operation stopped at a gate and never released, a pool runner) outlives
// them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
