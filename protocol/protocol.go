// Package protocol is the vocabulary that both sides of IdKeeper's registry API
// share: who asks (Requester, with its random Instance, and the ClientInfo it
// reports for the lease history) and the bounds every side checks, the error codes
// a program branches on (Code) and the domain Error that carries one. The registry
// (package idkeeper, which re-exports every name here), its HTTP adapter and the
// client library all use these types, so a value means the same on both sides of
// the wire.
//
// It is standard library only and holds no policy: importing the client library
// pulls in this package, package snowflake and the JSON bodies, never the
// registry's engine.
package protocol

import "time"

// MaxCount is the largest number of node IDs one Alloc may ask for.
const MaxCount = 4096

// Millis truncates t to the millisecond in UTC: every time the registry stores or
// sends has this precision.
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
