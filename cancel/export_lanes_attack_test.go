package cancel

// TimeoutLanesInUse is how many of s's Timeout lanes are in use (lone
// calls and batches in the store), so that an attack can check that lanes
// come back after panics, cancellations and storms
// (timeouts_attack_test.go).
func TimeoutLanesInUse(s *Service) int {
	if s.batcher == nil {
		return 0
	}
	s.batcher.mu.Lock()
	defer s.batcher.mu.Unlock()
	return s.batcher.inFlight
}
