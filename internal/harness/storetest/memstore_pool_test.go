package storetest

import "github.com/idkeeper/idkeeper"

// The memStore's pool spec (issue #22): nodes[i] is node ID first+i.

// pool is the stored pool; zero without one.
func (d *memData) pool() idkeeper.PoolSpec {
	if len(d.nodes) == 0 {
		return idkeeper.PoolSpec{}
	}
	return idkeeper.PoolSpec{First: d.first, Nodes: len(d.nodes), Layout: d.lay}
}

// index returns the index in nodes of node ID id; ok is false outside the pool.
func (d *memData) index(id idkeeper.NodeID) (int, bool) {
	i := int(id - d.first)
	return i, id >= d.first && i < len(d.nodes)
}

// adopt checks p against the stored pool (only First and layout when shrinkOK)
// and stores p's First and layout when there is none.
func (d *memData) adopt(p idkeeper.PoolSpec, shrinkOK bool) error {
	if st := d.pool(); st.Nodes > 0 {
		if shrinkOK {
			if !st.SameSpace(p) {
				return idkeeper.PoolMismatch(st, p)
			}
			return nil
		}
		return idkeeper.CheckPoolChange(st, p)
	}
	d.first, d.lay = p.First, p.LayoutOrDefault()
	return nil
}
