package expirytest

import (
	"context"
	"sync"

	"github.com/seatflow/orderexpiry/expiry"
)

// Recorder is an expiry.Observer that keeps every event, for tests to
// count or read back. The zero value is ready; it is safe for concurrent
// use.
type Recorder struct {
	mu     sync.Mutex
	events []expiry.Event
}

// Observe implements expiry.Observer.
func (r *Recorder) Observe(_ context.Context, e expiry.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Count returns how many events of kind k were observed.
func (r *Recorder) Count(k expiry.Kind) int {
	return len(r.Of(k))
}

// Of returns the events of kind k, in the order they were observed.
func (r *Recorder) Of(k expiry.Kind) []expiry.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []expiry.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}
