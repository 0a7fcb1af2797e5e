package main

import (
	"runtime/debug"
	"testing"
)

// version reports the module version the toolchain stamped (go install …@v1.2.3)
// and the VCS revision unless the link-time values say otherwise.
func TestVersionOf(t *testing.T) {
	stamped := &debug.BuildInfo{Main: debug.Module{Path: "github.com/idkeeper/idkeeper", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		bi           *debug.BuildInfo
		linkV, linkC string
		wantV, wantC string
	}{
		{stamped, "", "", "v1.2.3", "abc123-dirty"},
		{stamped, "v9.9.9", "f00", "v9.9.9", "f00"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "(devel)", "unknown"},
		{nil, "", "", "(devel)", "unknown"},
	} {
		if v, cm := versionOf(c.bi, c.linkV, c.linkC); v != c.wantV || cm != c.wantC {
			t.Errorf("versionOf(%v, %q, %q) = %q, %q; want %q, %q", c.bi, c.linkV, c.linkC, v, cm, c.wantV, c.wantC)
		}
	}
}
