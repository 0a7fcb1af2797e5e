package client

// SetDemandSource makes s measure its issuing with f (a running total of IDs)
// instead of its generators' counters: a utilisation source for tests on a fake
// clock. Call it before Open.
func SetDemandSource(s *Session, f func() uint64) { s.dem.source = f }

// DemandBusy reports whether s is leasing more node IDs, or giving some back, now.
func DemandBusy(s *Session) bool {
	d := s.dem
	d.mu.Lock()
	busy := d.growing
	d.mu.Unlock()
	return busy
}

// Extras returns s's extra sessions, oldest first.
func Extras(s *Session) []*Session {
	d := s.dem
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Session(nil), d.extras...)
}
