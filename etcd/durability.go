package etcd

import "context"

// Durability says what a restart of the store keeps (DESIGN §7, "Durability is
// decided at start-up"): every acknowledged write, because etcd answers a write
// only once a quorum of its members has it in its fsynced Raft log. The answer
// comes from the protocol, not from the cluster's settings, so it asks nothing
// and never fails; its signature is the one every store adapter shares.
func (s *Store) Durability(context.Context) (safe bool, why string, err error) {
	return true, "etcd cluster: every write is committed by a quorum of members, each fsyncing its log, before it is answered", nil
}
