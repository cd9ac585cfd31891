package cancel

// TimeoutLanesInUse is how many of s's Timeout lanes are in use (lone
// calls and batches in the store), so that an attack can check that lanes
// come back after panics, cancellations and storms
// (timeouts_attack_test.go).
func TimeoutLanesInUse(s *Service) int {
	if s.timeouts == nil {
		return 0
	}
	s.timeouts.mu.Lock()
	defer s.timeouts.mu.Unlock()
	return s.timeouts.inFlight
}
