// Package shortlease lets this module's own programs allow leases of seconds,
// which an idkeeper.Config refuses: first-lease and lease-duration down to 1 s, so
// that the fault-injection suite (internal/harness/chaos) runs in minutes. It is left out
// of the public API on purpose: a lease of seconds turns every GC pause or network
// hiccup into a lost lease. Its callers are the hidden --unsafe-short-leases of
// cmd/idkeeper and the chaos programs under internal/harness/chaos/cmd.
//
// Standard library only: package idkeeper imports it to install the switch, and
// package backup to install the option of its restore plans (ImportOption).
package shortlease

// allow sets the switch on an *idkeeper.Config; it reports false for any other value.
var allow func(cfg any) bool

// Install is for package idkeeper only, at init: f sets the unexported short-lease
// switch of cfg, an *idkeeper.Config, and reports false for any other value.
func Install(f func(cfg any) bool) { allow = f }

// Allow lets cfg, an *idkeeper.Config, take first-lease and lease-duration down to
// 1 s. It panics for any other value.
func Allow(cfg any) {
	if allow == nil || !allow(cfg) {
		panic("shortlease: Allow wants an *idkeeper.Config")
	}
}

// importOption is package backup's Option that lets PlanFor and Import take a lease
// duration down to 1 s; package backup installs it at init.
var importOption any

// InstallImport is for package backup only, at init: opt is a backup.Option that
// lets its restore plans take lease durations down to 1 s.
func InstallImport(opt any) { importOption = opt }

// ImportOption returns the backup.Option that InstallImport installed, for the
// hidden --unsafe-short-leases of `idkeeper backup import` (the fault-injection
// suite imports backups into clusters that run leases of seconds). It panics when
// package backup is not linked in.
func ImportOption() any {
	if importOption == nil {
		panic("shortlease: package backup is not linked in")
	}
	return importOption
}
