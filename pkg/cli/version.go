package cli

import (
	"runtime/debug"
	"strings"
)

// Version is what this binary was built from, for `ferry --version`.
type Version struct {
	Module   string `json:"module"`   // the main module's path
	Version  string `json:"version"`  // a release tag, git describe's name, or the commit; "unknown" when the build recorded none
	Commit   string `json:"commit"`   // the VCS revision, when the build recorded it
	Modified bool   `json:"modified"` // built from a checkout with uncommitted changes
	Time     string `json:"time,omitempty"`
	Go       string `json:"go"`
}

// release is the version make build stamps into the binaries (git describe
// of the checkout: a tag, or the commit, "-dirty" when modified), through
// -ldflags -X; empty in any other build.
var release string

// ReadVersion reads the version the binary was built as: the release make
// stamped, else the module version go install recorded (a tag), else the
// commit the Go toolchain recorded. It never says "(devel)": a build that
// recorded none of them says "unknown".
func ReadVersion() Version {
	return readVersion(release, debug.ReadBuildInfo)
}

func readVersion(release string, read func() (*debug.BuildInfo, bool)) Version {
	v := Version{Version: "unknown"}
	bi, ok := read()
	if ok {
		v.Module, v.Go = bi.Main.Path, bi.GoVersion
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			case "vcs.time":
				v.Time = s.Value
			}
		}
	}
	switch {
	case release != "":
		v.Version = release
	case v.Version == "unknown" && v.Commit != "":
		v.Version = Short(v.Commit)
		if v.Modified {
			v.Version += "-dirty"
		}
	}
	return v
}

// String is the version on one line: "ferry v0.4.0 go1.26.8", or for a
// build of a checkout "ferry 8b12c2f4e1a0-dirty go1.26.8"; a release stamped
// by make that is not the commit itself names the commit too.
func (v Version) String() string {
	parts := []string{"ferry", v.Version}
	if v.Commit != "" && !namesCommit(v.Version, v.Commit) {
		c := Short(v.Commit)
		if v.Modified {
			c += "+dirty"
		}
		parts = append(parts, c)
	}
	if v.Go != "" {
		parts = append(parts, v.Go)
	}
	return strings.Join(parts, " ")
}

// namesCommit reports whether version already names commit: it is the
// commit (abbreviated, "-dirty" or not), or git describe's name for it.
func namesCommit(version, commit string) bool {
	name := strings.TrimSuffix(version, "-dirty")
	if len(name) >= 7 && strings.HasPrefix(commit, name) {
		return true
	}
	return len(commit) >= 7 && strings.Contains(version, "-g"+commit[:7])
}
