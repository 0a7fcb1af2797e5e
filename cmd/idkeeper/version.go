package main

import (
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time:
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/idkeeper
//
// When empty, buildVersion falls back to the module version and VCS revision that
// the Go toolchain embeds.
var (
	version string
	commit  string
)

// buildVersion returns the version and commit of this binary, never empty:
// "(devel)" and "unknown" when nothing better is known.
func buildVersion() (v, c string) {
	v, c = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		if c == "" {
			var rev, dirty string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "-dirty"
					}
				}
			}
			if rev != "" {
				c = rev + dirty
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

func goVersion() string { return runtime.Version() }
