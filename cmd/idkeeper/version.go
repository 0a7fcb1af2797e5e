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
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi, version, commit)
}

// versionOf is buildVersion over the build info bi (nil when there is none) and
// the link-time values: the module version the toolchain stamps (v1.2.3 for `go
// install …@v1.2.3`, a pseudo-version such as v0.0.0-20261130120000-abcdef123456
// for a build from a checkout) and the VCS revision, "-dirty" appended when the
// checkout had changes.
func versionOf(bi *debug.BuildInfo, linkVersion, linkCommit string) (v, c string) {
	v, c = linkVersion, linkCommit
	if bi != nil {
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
