package sandbox

import (
	"errors"
	"fmt"
	"os"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// How builds are isolated: what a base records in its modes and an agent in
// its record, decided once (Decide) and never probed again for them.
const (
	// IsolationNamespace: builds run in the namespace sandbox, at the
	// canonical paths <store>/mnt/src and <store>/mnt/target.
	IsolationNamespace = "namespace"
	// IsolationOff: builds run at host paths, without namespaces: a base
	// in its checkout with its own target, an agent in its worktree with
	// its fork as the target dir. A fork built at other paths gets the
	// relocation plan (package relocate).
	IsolationOff = "off"
)

// Sandbox modes ([sandbox] mode, FERRY_SANDBOX).
const (
	ModeAuto = "auto"
	ModeOn   = "on"
	ModeOff  = "off"
)

// Decision is how builds are isolated under a sandbox mode on this host.
type Decision struct {
	Isolation string // IsolationNamespace or IsolationOff
	// Fallback is set when mode auto found the namespace sandbox blocked
	// and chose IsolationOff: what blocks it. Whoever decides prints
	// Warning once.
	Fallback *platform.Blocker
}

// Warning is the one line a command prints when auto fell back to host
// paths: the blocker, what it costs, and where the fix is. "" otherwise.
func (d Decision) Warning() string {
	if d.Fallback == nil {
		return ""
	}
	return fmt.Sprintf("user namespaces are blocked (%v): building without the namespace sandbox, at host paths, "+
		"where the first build after an edit rebuilds more; `ferry doctor` shows the fix that lets Ferry use the "+
		"faster, exact namespace mode again (or set [sandbox] mode = \"off\" to choose host paths and silence this)", d.Fallback)
}

// probe is Probe in a scratch directory; a variable so tests can block it.
var probe = func() error {
	tmp := os.TempDir()
	return Probe(Bind{Source: tmp, Target: tmp})
}

// Decide resolves mode ("auto", "on" or "off") on this host. Off never
// probes. On and auto build a sandbox for real (about 3.5 ms): on refuses
// a blocked host (failure.Blocked, the blocker named, its remedy the hint);
// auto falls back to IsolationOff with the blocker in Fallback. A probe that
// fails for another reason than the host's (no /proc/self/exe, say) is an
// error under either.
func Decide(mode string) (Decision, error) {
	if mode == ModeOff {
		return Decision{Isolation: IsolationOff}, nil
	}
	err := probe()
	if err == nil {
		return Decision{Isolation: IsolationNamespace}, nil
	}
	var se *SetupError
	if !errors.As(err, &se) {
		return Decision{}, fmt.Errorf("try the namespace sandbox: %w", err)
	}
	b := se.Blocker
	if b == nil {
		// A setup step failed the way no host setting explains: name the
		// step as the blocker.
		b = &platform.Blocker{Check: platform.CheckUserns, Setting: platform.SettingErrno, Value: se.Step + ": " + se.Err.Error(),
			Problem: "Ferry's sandbox could not be built.", Remedy: "run `ferry doctor` to see why"}
	}
	if mode == ModeAuto {
		if errors.Is(b, errors.ErrUnsupported) {
			// An operating system without namespaces (macOS): nothing to
			// fix, so nothing to warn about on every call.
			return Decision{Isolation: IsolationOff}, nil
		}
		return Decision{Isolation: IsolationOff, Fallback: b}, nil
	}
	return Decision{}, failure.Wrap(failure.Blocked, b.Opaque(),
		b.Remedy+"\n(or set [sandbox] mode = \"auto\" or \"off\", FERRY_SANDBOX, to build at host paths without the sandbox)",
		"the namespace sandbox is unavailable (sandbox mode %q)", mode)
}
