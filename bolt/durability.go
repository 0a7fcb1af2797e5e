package bolt

import "context"

// Durability says what a restart of the store keeps (DESIGN §7, "Durability is
// decided at start-up"): every acknowledged write, because bbolt fsyncs each
// transaction before Update returns and the store answers after that. It asks
// nothing of the file and never fails; its signature is the one every store
// adapter shares, so that the server asks each store the same way.
func (s *Store) Durability(context.Context) (safe bool, why string, err error) {
	return true, "bbolt file: every write is fsynced before it is answered", nil
}
