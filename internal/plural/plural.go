// Package plural writes a count with its noun: "1 API key", "3 API keys",
// "0 node IDs", for the messages and summaries that count things.
//
// It uses the standard library only, so the root package may import it too.
package plural

import "strconv"

// N is n and the noun: one when n is 1 (or -1), else many.
func N(n int, one, many string) string {
	if n == 1 || n == -1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}
