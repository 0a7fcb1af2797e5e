package leasetx

import "github.com/idkeeper/idkeeper"

// Adopt checks the pool p of an Init, Grow or Reset against the stored one
// (idkeeper.CheckPoolChange; with shrinkOK, for a Reset,
// idkeeper.CheckPoolReset): another First or layout, or (without shrinkOK) a
// smaller pool, is an INVALID_REQUEST Error. record reports that the store holds
// no pool yet and must record p's First and layout. p is valid.
func Adopt(stored, p idkeeper.PoolSpec, shrinkOK bool) (record bool, err error) {
	check := idkeeper.CheckPoolChange
	if shrinkOK {
		check = idkeeper.CheckPoolReset
	}
	if err := check(stored, p); err != nil {
		return false, err
	}
	return stored.Nodes == 0, nil
}
