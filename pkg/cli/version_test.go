package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The version names a release or a commit, never "(devel)".
func TestVersionNeverDevel(t *testing.T) {
	commit := "8b12c2f4e1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6"
	info := func(version string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ferrydev/ferry", Version: version}, Settings: settings}, true
		}
	}
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: commit}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		name, release string
		read          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"go install at a tag", "", info("v0.4.0"), "ferry v0.4.0 go1.26.8"},
		{"a checkout the toolchain stamped", "", info("(devel)", vcs...), "ferry 8b12c2f4e1a0-dirty go1.26.8"},
		{"make build at a tag", "v0.4.0", info("(devel)"), "ferry v0.4.0 go1.26.8"},
		{"make build between tags", "v0.4.0-3-g8b12c2f", info("(devel)", vcs...), "ferry v0.4.0-3-g8b12c2f go1.26.8"},
		{"make build without tags", "8b12c2f", info("(devel)"), "ferry 8b12c2f go1.26.8"},
		{"make build without tags, commit recorded", "8b12c2f-dirty", info("(devel)", vcs...), "ferry 8b12c2f-dirty go1.26.8"},
		{"a release that is not the commit names it", "v0.4.0", info("(devel)", vcs...), "ferry v0.4.0 8b12c2f4e1a0+dirty go1.26.8"},
		{"nothing recorded", "", info("(devel)"), "ferry unknown go1.26.8"},
	} {
		got := readVersion(c.release, c.read).String()
		if got != c.want || strings.Contains(got, "devel") {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
