package main

import (
	"flag"

	"github.com/idkeeper/idkeeper/internal/shortlease"
	"github.com/idkeeper/idkeeper/server"
)

// hiddenFlags are left out of a command's usage: test-only settings that an
// operator should never come across. They still work, from the environment too.
var hiddenFlags = map[string]bool{"unsafe-short-leases": true}

// unsafeFlags are the server's test-only settings, hidden from its usage.
type unsafeFlags struct {
	// shortLeases allows, on the registry's config (internal/shortlease), first-lease
	// and lease-duration down to 1 s, so that fault-injection tests (internal/harness/chaos)
	// complete in minutes. Never in production: a lease of seconds turns every GC
	// pause or network hiccup into a lost lease.
	shortLeases bool
}

func (u *unsafeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&u.shortLeases, "unsafe-short-leases", false,
		"TEST ONLY, never in production: allow first-lease and lease-duration down to 1s")
}

// apply copies the settings into c, logging a warning for each one set.
func (u *unsafeFlags) apply(c *server.Config) {
	if u.shortLeases {
		shortlease.Allow(&c.Registry)
		c.Logger.Warn("--unsafe-short-leases is set: leases of seconds are allowed; for fault-injection tests only")
	}
}
