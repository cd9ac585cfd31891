// Package expirytest has what tests of code built on package expiry need: a
// fake clock, and the conformance suite every expiry.DelaySender passes.
//
// # Names
//
// FakeClock and NewFakeClock: an expiry.Clock that moves only when told.
// Recorder: an expiry.Observer that keeps every event. RunSender,
// SenderHarness and Delivery: the DelaySender suite, what it needs of a
// transport, and a message as the suite saw it arrive.
package expirytest

import (
	"sort"
	"sync"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
)

// FakeClock is an expiry.Clock that moves only when told to. AfterFunc
// callbacks run synchronously inside Advance, in due order, so a test that
// advances the clock sees every effect when Advance returns. Safe for
// concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

var _ expiry.Clock = (*FakeClock)(nil)

type fakeTimer struct {
	c   *FakeClock
	at  time.Time
	seq int
	f   func()
}

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now implements expiry.Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements expiry.Clock.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t.stop
}

func (t *fakeTimer) stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock forward by d, running every callback that falls
// due on the way (including ones scheduled by those callbacks) at its time.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Pending returns how many callbacks are scheduled.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
