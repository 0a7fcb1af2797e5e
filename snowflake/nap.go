package snowflake

import (
	"sync"
	"time"
)

// napper lets one caller sleep for all the callers of one generator that wait for
// the next millisecond; the others park on cond until its nap ends. A thread blocked
// in nanosleep keeps its P, and two or more such threads keep the runtime's sysmon
// polling every 20 µs, which costs more CPU than minting the IDs. One napper per
// generator rather than per process: waking parked goroutines adds latency, and a
// generator with a single caller (the common case, and the way to use more than one
// node ID) then never pays it.
type napper struct {
	mu      sync.Mutex
	cond    sync.Cond // L is &mu, set by init
	napping bool
	round   uint64 // completed naps
}

func (n *napper) init() { n.cond.L = &n.mu }

// nap returns after about d, or when the nap under way ends. Callers of one generator
// wait for the same millisecond, and an early return is harmless: they read the clock
// again.
func (n *napper) nap(d time.Duration) {
	n.mu.Lock()
	if n.napping {
		for round := n.round; n.round == round; {
			n.cond.Wait()
		}
		n.mu.Unlock()
		return
	}
	n.napping = true
	n.mu.Unlock()
	sleep(d)
	n.mu.Lock()
	n.napping = false
	n.round++
	n.mu.Unlock()
	n.cond.Broadcast()
}
