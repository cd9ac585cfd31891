package cancel

import "time"

// QueuedTimeouts is how many Timeout calls of s wait for a batch.
func QueuedTimeouts(s *Service) int {
	if s.timeouts == nil {
		return 0
	}
	s.timeouts.mu.Lock()
	defer s.timeouts.mu.Unlock()
	return len(s.timeouts.queue)
}

// SetLaneStall sets how long a Timeout store call may take before it gives
// its lane up, for a test that holds calls in the store on purpose; the
// returned function restores it.
func SetLaneStall(d time.Duration) (restore func()) {
	old := laneStall
	laneStall = d
	return func() { laneStall = old }
}
