package leasetx

import "github.com/idkeeper/idkeeper"

// Fresh is the generation an Init gives a store that holds none, at now (Unix
// ms): a new ID, number 1, OriginFresh.
func Fresh(now int64) idkeeper.Generation {
	return idkeeper.Generation{ID: idkeeper.NewGenerationID(), Number: 1, Origin: idkeeper.OriginFresh, At: MsTime(now)}
}

// ResetGeneration is the generation a Reset (idkeeper.LeaseStore.Reset) leaves
// at now (Unix ms) on a store holding cur (ok false: none), by a caller that saw
// seen: a new one, numbered past both, when the store holds none or still the
// one seen; else cur, marked recovered at now (another reset made it already).
func ResetGeneration(cur idkeeper.Generation, ok bool, seen idkeeper.Generation, now int64) idkeeper.ResetResult {
	if !ok || cur.ID == seen.ID {
		return idkeeper.ResetResult{NewGeneration: true, Generation: idkeeper.Generation{ID: idkeeper.NewGenerationID(),
			Number: max(cur.Number, seen.Number) + 1, Origin: idkeeper.OriginRecovered, At: MsTime(now)}}
	}
	cur.Origin, cur.At = idkeeper.OriginRecovered, MsTime(now)
	return idkeeper.ResetResult{Generation: cur}
}
