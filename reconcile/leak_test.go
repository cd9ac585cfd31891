package reconcile_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they start (handlers,
// senders, timers, reconcile loops) outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
