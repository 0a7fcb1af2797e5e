package main

import (
	"flag"
	"strconv"

	"github.com/idkeeper/idkeeper"
)

// keyQuotaFlag is --key-max-nodes-default of server and dev: the quota of every
// API key created without its own (admin keys and the bootstrap key included).
// Unset: a quarter of the pool (idkeeper.KeyQuotaQuarter); 0: no default quota.
type keyQuotaFlag struct {
	n   int
	set bool
}

const keyQuotaFlagName = "key-max-nodes-default"

func (f *keyQuotaFlag) register(fs *flag.FlagSet) {
	fs.Var(f, keyQuotaFlagName, "the most node IDs an API key without its own quota (--max-nodes; admin and bootstrap keys included) "+
		"may hold at once, its leases and the node IDs cooling after its Removes counted; 0: no default quota "+
		"(default: a quarter of the pool, rounded up)")
}

func (f *keyQuotaFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *keyQuotaFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return usagef("--%s %q: want a whole number, 0 or more", keyQuotaFlagName, v)
	}
	f.n, f.set = n, true
	return nil
}

// apply sets the registry's default quota: a quarter of the pool unless given.
func (f *keyQuotaFlag) apply(c *idkeeper.Config) {
	c.KeyMaxNodesDefault = idkeeper.KeyQuotaQuarter
	if f.set {
		c.KeyMaxNodesDefault = f.n
	}
}
