package leasetx

// Cooling charges (idkeeper.LeaseStore.Remove, KeyCooling): a Remove that leaves
// a node cooling charges the key for it until the node's fenced watermark, with
// the node's last token then. A charge counts while its Until is not before now
// and the node is free with that last token still: a grant or a restore of the
// node gives it another token, which ends the charge without touching it. A
// Remove of the key drops its charges that count no more.

// Charge is one cooling charge of an API key.
type Charge struct {
	ID    uint32
	Until int64 // the fenced watermark the Remove left, Unix ms
	Token uint64
}

// Live reports whether the charge c counts at t's Now.
func Live(t Tx, c Charge) (bool, error) {
	if c.Until < t.Now() {
		return false, nil
	}
	n, err := t.Node(c.ID)
	if err != nil {
		return false, err
	}
	return !n.Held && n.LastToken == c.Token, nil
}

// LiveCharges returns those of cs that count at t's Now, in their order.
func LiveCharges(t Tx, cs []Charge) ([]Charge, error) {
	var live []Charge
	for _, c := range cs {
		ok, err := Live(t, c)
		if err != nil {
			return nil, err
		}
		if ok {
			live = append(live, c)
		}
	}
	return live, nil
}

// KeyCooling counts the node IDs charged to keyID for cooling at t's Now.
func KeyCooling(t Tx, keyID string) (int, error) {
	cs, err := t.Charges(keyID)
	if err != nil {
		return 0, err
	}
	live, err := LiveCharges(t, cs)
	return len(live), err
}

// ChargeRemoved rewrites keyID's charges after its Remove freed the nodes ids,
// whose records are now freed: the charges that still count, then one for each
// freed node whose fenced watermark is not before now, in ids' order. A node
// freed ready is charged to nobody.
func ChargeRemoved(t Tx, keyID string, ids []uint32, freed []Node) error {
	old, err := t.Charges(keyID)
	if err != nil {
		return err
	}
	cs, err := LiveCharges(t, old)
	if err != nil {
		return err
	}
	for i, id := range ids {
		if w := freed[i].Fenced(); w >= t.Now() {
			cs = append(cs, Charge{ID: id, Until: w, Token: freed[i].LastToken})
		}
	}
	return t.PutCharges(keyID, old, cs)
}
