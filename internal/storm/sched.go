package storm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Scheduler runs calls at given offsets from its start, at most a fixed
// number at once, and refuses calls beyond its window (they are "lost").
type Scheduler struct {
	start   time.Time
	window  time.Duration
	sem     chan struct{}
	wg      sync.WaitGroup
	dropped atomic.Int64
}

// NewScheduler returns a Scheduler whose offset 0 is start.
func NewScheduler(start time.Time, window time.Duration, concurrency int) *Scheduler {
	return &Scheduler{start: start, window: window, sem: make(chan struct{}, concurrency)}
}

// Now returns the offset of the present moment.
func (s *Scheduler) Now() time.Duration { return time.Since(s.start) }

// Window returns the scheduler's window.
func (s *Scheduler) Window() time.Duration { return s.window }

// At runs f at offset off (now if off has passed). It returns false, and
// counts the call as dropped, when off is beyond the window. At may be called
// from a running call.
func (s *Scheduler) At(off time.Duration, f func()) bool {
	if off > s.window {
		s.dropped.Add(1)
		return false
	}
	s.wg.Add(1)
	time.AfterFunc(time.Until(s.start.Add(off)), func() {
		defer s.wg.Done()
		s.sem <- struct{}{}
		defer func() { <-s.sem }()
		f()
	})
	return true
}

// Wait waits for every call scheduled so far, and those they schedule.
func (s *Scheduler) Wait() { s.wg.Wait() }

// Dropped returns how many calls fell beyond the window.
func (s *Scheduler) Dropped() int64 { return s.dropped.Load() }
