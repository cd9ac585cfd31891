package cancel

import "time"

// QueuedTimeouts is how many Timeout calls of s wait for a batch.
func QueuedTimeouts(s *Service) int {
	if s.batcher == nil {
		return 0
	}
	s.batcher.mu.Lock()
	defer s.batcher.mu.Unlock()
	return len(s.batcher.queue)
}

// SetLaneStall sets how long a Timeout store call may take before it gives
// its lane up, for a test that holds calls in the store on purpose; the
// returned function restores it.
func SetLaneStall(d time.Duration) (restore func()) {
	old := laneStall
	laneStall = d
	return func() { laneStall = old }
}

// SetReadBudget sets how long the read of a queued Timeout may take before
// the call goes by the one-order path, for a test that asserts which path
// answered on a machine whose load can make a read slow; the returned
// function restores it.
func SetReadBudget(d time.Duration) (restore func()) {
	old := readBudget
	readBudget = d
	return func() { readBudget = old }
}
