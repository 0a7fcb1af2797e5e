package idkeeper_test

import (
	"bytes"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
)

// recorder is an Observer that remembers what it saw.
type recorder struct {
	mu        sync.Mutex
	ops       []string
	reclaimed int
	resets    map[bool]int
	phases    []idkeeper.Phase
	clockOK   bool
	evidence  map[string]int
	cooling   int                      // CoolingGrants
	machines  []idkeeper.MachineLeases // the last Machines report
	// machineCount is the last Machines report's count of machine IDs.
	machineCount int
	auditDropped int // AuditDropped
}

func (r *recorder) Phase(p idkeeper.Phase, clockOK bool, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phases = append(r.phases, p)
	r.clockOK = clockOK
}

func (r *recorder) Evidence(kind string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evidence == nil {
		r.evidence = map[string]int{}
	}
	r.evidence[kind] += n
}

func (r *recorder) evidenceCount(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evidence[kind]
}

func (r *recorder) Operation(op string, code idkeeper.Code, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op+":"+string(code))
}

func (r *recorder) count(op string, code idkeeper.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.ops {
		if o == op+":"+string(code) {
			n++
		}
	}
	return n
}

func (r *recorder) Skew(string, time.Duration, idkeeper.SkewLevel) {}

func (r *recorder) CoolingGrants(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cooling += n
}

func (r *recorder) Machines(top []idkeeper.MachineLeases, machines int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.machines, r.machineCount = append([]idkeeper.MachineLeases(nil), top...), machines
}

func (r *recorder) Reclaimed(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reclaimed += n
}

func (r *recorder) JobLockOverrun(string, time.Duration) {}

func (r *recorder) AuditDropped(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auditDropped += n
}

func (r *recorder) StoreReset(newGeneration bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resets == nil {
		r.resets = map[bool]int{}
	}
	r.resets[newGeneration]++
}

// resetCount counts the recoveries that wrote a new generation (true) or kept
// another one (false).
func (r *recorder) resetCount(newGeneration bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets[newGeneration]
}

func (r *recorder) resetsTotal() int { return r.resetCount(true) + r.resetCount(false) }

// syncWriter is a log sink that goroutines may write to while the test reads it.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
