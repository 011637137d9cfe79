package cli

import (
	"runtime/debug"
	"strings"
)

// Version is what this binary was built from, for `ferry --version`.
type Version struct {
	Module   string `json:"module"`   // the main module's path
	Version  string `json:"version"`  // its version: a tag, or (devel) in a checkout
	Commit   string `json:"commit"`   // the VCS revision, when the build recorded it
	Modified bool   `json:"modified"` // built from a checkout with uncommitted changes
	Time     string `json:"time,omitempty"`
	Go       string `json:"go"`
}

// ReadVersion reads the version the Go toolchain stamped into the binary.
func ReadVersion() Version {
	v := Version{Version: "(unknown)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module, v.Version, v.Go = bi.Main.Path, bi.Main.Version, bi.GoVersion
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
	return v
}

// String is the version on one line: "ferry (devel) 8b12c2f4e1a0+dirty go1.26.8".
func (v Version) String() string {
	parts := []string{"ferry", v.Version}
	if v.Commit != "" {
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
