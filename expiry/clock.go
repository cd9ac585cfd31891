package expiry

import "time"

// Clock is the source of time for components that wait (the in-process
// sender) or stamp times (the after-commit scheduler). Tests substitute a
// fake (expirytest.FakeClock) so that nothing sleeps.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d, like time.AfterFunc.
	// stop prevents the call if it has not started, and reports whether it
	// did, like time.Timer's Stop.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}
