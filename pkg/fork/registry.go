package fork

import (
	"strings"
)

// backends is every backend, registered here and only here, in auto's
// order of preference (Auto). Reflink comes first because the overlay
// costs every call outside Cargo: the mount protocol on entry (Overlay's
// Enter), and one shared namespace per agent. Copy comes last: it needs
// nothing and costs the target's size per agent, and Auto falls back to
// the last one.
//
// A new backend is one file implementing Backend, one entry here, and
// one in package lifecycle's table naming how its forks are used once
// made (lifecycle.Bind for a fork that is a plain directory), which the
// per-call shim reads without linking this package;
// TestEveryBackendHasALifecycle fails for a backend missing there. ByName,
// Select, Auto, Names and the settings' check ([agent] backend,
// FERRY_BACKEND) all read this list, and TestConformance runs the
// conformance suite on every entry.
var backends = []Backend{Reflink(), Overlay(), Copy()}

// Backends returns every backend, in auto's order of preference.
func Backends() []Backend { return append([]Backend(nil), backends...) }

// Names are the values a backend setting takes: auto, then every
// backend's name.
func Names() []string {
	names := []string{NameAuto}
	for _, b := range backends {
		names = append(names, b.Name())
	}
	return names
}

// NameProblem says what is wrong with name as a backend setting, with a
// hint: "" when it is one of Names.
func NameProblem(name string) (msg, hint string) {
	for _, n := range Names() {
		if n == name {
			return "", ""
		}
	}
	msg = "not a fork backend; use one of " + strings.Join(Names(), ", ")
	switch name {
	case "hardlink", "hardlinks", "link":
		// Invariant 3 of the spec: there is no hardlink backend.
		return msg, "Ferry never forks with hardlinks: Cargo rewrites fingerprint files with File::create, " +
			"truncating the existing inode, so a hardlinked fork would let an agent's rebuild modify the base; " +
			"use reflink (copy-on-write, new inodes), copy, or auto"
	}
	return msg, "auto picks reflink where the store's filesystem can clone files, else overlay in the sandbox, else copy"
}
