package http

import "github.com/idkeeper/idkeeper/internal/problem"

// problemBody gives this package's tests the name it had before the problem
// writer moved to internal/problem.
func problemBody(err error) (status int, body map[string]any) {
	p := problem.From(err)
	return p.Status, p.Body
}
