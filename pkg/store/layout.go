package store

import (
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/pkg/digest"
	"github.com/ferrydev/ferry/pkg/remap"
)

// The layout: every path under the store parent is named here, and nowhere
// else (TestNoStorePathJoinedElsewhere checks the code, and
// TestReadmeShowsTheLayout the tree in docs/store.md):
//
//	<parent>/                         FERRY_HOME, [store] dir, or the platform cache dir
//	  bin/cargo                       the shim (a link to ferry-shim)
//	  bin/ferry-rustc                 remap mode's rustc wrapper (a link to ferry-rustc)
//	  bus/ bus.json token bus.lock    the embedded bus's address, token and host lock
//	    jetstream/                    its stream store
//	  worktrees/                      agent worktrees, when FERRY_HOME names the parent
//	  <repo-name>-<hash>/             one store per repository (Key)
//	    store.json lock current watch.lock
//	    mnt/src mnt/target mnt/tmp    canonical mountpoints (empty on the host)
//	    outbox/<event id>.json        events waiting for the bus
//	    demand.log                    the agents' cargo calls, one JSON line each (package demand)
//	    pending/                      worktrees to adopt once a base is ready, one record each (package agent)
//	    tmp/                          scratch
//	    spare/src/ spare/ready        a checkout made for the next base's to take (package base)
//	    spare.lock
//	    bases/<commit>-<fp>/          immutable once base.json exists
//	      base.json src/ target/
//	      warm-units/                 the shim's records of the warm build's cargo calls (package units)
//	      relocation.json             built at host paths: what forks remove from target/ (package relocate)
//	      layer/upper/ layer/work/    while a layered refresh builds: its overlay over the seed's target (package base)
//	      private/                    while it builds: the warm commands' private layers and directories (as an agent's)
//	    bases/<commit>-<fp>.lock
//	    agents/<name>/
//	      agent.json lock busy.lock
//	      target/                     reflink and copy forks (ferry-ws/<path>/ inside)
//	      upper/ work/                overlay forks
//	      mount.lock ns.json          overlay: in-use lock and live namespace
//	      host-target                 overlay: a link into the live namespace's view, for the host
//	      plain/                      overlay: where host-target leads while no namespace lives (plain cargo's)
//	      view/                       overlay: where the live namespace also shows the fork (empty elsewhere)
//	      seen/                       a file per command the agent has run (package demand)
//	      last-build.json             the units its last build that compiled units compiled (ferry why)
//	      freshness/                  the mark of its last freshness check, and its links' texts (package freshness)
//	      private/                    its sandbox's private layers and directories (package confine):
//	        layers/<slot>/lock boot   a session's hold on the slot; the boot its layers were last mounted in
//	        layers/<slot>/<root>/upper/ work/   the private layer over host directory <root> ($HOME, $CARGO_HOME)
//	        tmp/                      its $TMPDIR, at mnt/tmp in the sandbox

// Names are the file and directory names of the layout, as the store tree
// of docs/store.md shows them.
var Names = []string{
	"bin", "cargo", "ferry-rustc", "bus", "bus.json", "token", "bus.lock", "jetstream", "worktrees",
	"store.json", "lock", "current", "watch.lock", "mnt", "src", "target", "outbox", "tmp",
	"bases", "base.json", "warm-units", "relocation.json", "agents", "agent.json", "busy.lock", "ferry-ws", "upper", "work",
	"mount.lock", "ns.json", "host-target", "plain", "view", "demand.log", "seen", "last-build.json", "pending", "layer", "next", "keys",
	"spare", "spare.lock", "ready", "private", "layers", "boot", "freshness", "links", "SHA256SUMS",
}

// ShimDir is where the shim is installed as cargo: <parent>/bin.
func ShimDir(parent string) string { return filepath.Join(parent, "bin") }

// ShimDir is the shim's directory of the store's parent.
func (s *Store) ShimDir() string { return ShimDir(s.Parent) }

// OfShim returns the store of the repository whose git common dir is
// commonDir under the store parent holding shimDir (the PATH entry through
// which the shim was reached as cargo). Unlike Open it checks nothing: the
// shim runs on every cargo call, and the command that installed it checked
// the path.
func OfShim(shimDir, commonDir string) *Store {
	parent := filepath.Dir(filepath.Clean(shimDir))
	if r, err := filepath.EvalSymlinks(parent); err == nil {
		parent = r
	}
	key := Key(commonDir)
	return &Store{Parent: parent, Dir: filepath.Join(parent, key), Key: key, commonDir: filepath.Clean(commonDir)}
}

// ShimLink is the shim as cargo: <parent>/bin/cargo.
func ShimLink(parent string) string { return filepath.Join(ShimDir(parent), "cargo") }

// RemapWrapper is remap mode's rustc wrapper, installed beside the shim:
// <parent>/bin/ferry-rustc (package remap). Bases and agents name it by
// this one path, so Cargo's record of the wrapper is the same for all.
func RemapWrapper(parent string) string { return filepath.Join(ShimDir(parent), "ferry-rustc") }

// RemapWrapper is the rustc wrapper of the store's parent.
func (s *Store) RemapWrapper() string { return RemapWrapper(s.Parent) }

// BusDir is the bus directory under the store parent: <parent>/bus.
func BusDir(parent string) string { return filepath.Join(parent, "bus") }

// BusDir is the bus directory of the store's parent.
func (s *Store) BusDir() string { return BusDir(s.Parent) }

// Bus names the files of a bus directory.
type Bus struct {
	Info      string // bus.json: where the embedded bus listens, written by its host
	Token     string // the client token, 0600
	Lock      string // held by the host for its lifetime; records its pid
	JetStream string // the server's stream store
}

// BusFiles names the files of the bus directory dir.
func BusFiles(dir string) Bus {
	return Bus{
		Info:      filepath.Join(dir, "bus.json"),
		Token:     filepath.Join(dir, "token"),
		Lock:      filepath.Join(dir, "bus.lock"),
		JetStream: filepath.Join(dir, "jetstream"),
	}
}

// KeysDir is where the store parent keeps the key this host signs the
// bases it publishes with (package share).
func KeysDir(parent string) string { return filepath.Join(parent, "keys") }

// Secrets are the directories of the store parent that no sandbox shows:
// the bus's (its token, and bus.json with its address) and the signing
// keys'. Whoever reads them can publish on the bus, or sign bases runners
// trust.
func Secrets(parent string) []string { return []string{BusDir(parent), KeysDir(parent)} }

// Worktrees is the worktree parent under a store parent that FERRY_HOME
// names, when nothing names one of its own.
func Worktrees(parent string) string { return filepath.Join(parent, "worktrees") }

// OutboxDir is where the events of repository key's one-shot commands wait
// for the bus.
func OutboxDir(parent, key string) string { return filepath.Join(parent, key, "outbox") }

// OutboxFile is where event id waits in the outbox dir.
func OutboxFile(dir, id string) string { return filepath.Join(dir, id+".json") }

// OutboxGlob matches every repository's outbox under parent.
func OutboxGlob(parent string) string { return OutboxDir(parent, "*") }

func (s *Store) MetaPath() string      { return filepath.Join(s.Dir, "store.json") }
func (s *Store) LockPath() string      { return filepath.Join(s.Dir, "lock") }
func (s *Store) CurrentPath() string   { return filepath.Join(s.Dir, "current") }
func (s *Store) WatchLockPath() string { return filepath.Join(s.Dir, "watch.lock") }
func (s *Store) MntSrc() string        { return filepath.Join(s.Dir, "mnt", "src") }
func (s *Store) MntTarget() string     { return filepath.Join(s.Dir, "mnt", "target") }
func (s *Store) MntTmp() string        { return filepath.Join(s.Dir, "mnt", "tmp") }
func (s *Store) BasesDir() string      { return filepath.Join(s.Dir, "bases") }
func (s *Store) AgentsDir() string     { return filepath.Join(s.Dir, "agents") }
func (s *Store) TmpDir() string        { return filepath.Join(s.Dir, "tmp") }
func (s *Store) PendingDir() string    { return filepath.Join(s.Dir, "pending") }
func (s *Store) OutboxDir() string     { return OutboxDir(s.Parent, s.Key) }

// Spare names the spare checkout: a checkout made while a base builds,
// for the next base's checkout to take (package base).
type Spare struct {
	Dir   string
	Src   string // the checkout, a registered worktree
	Ready string // the commit it holds, written once it is complete
	Lock  string // beside Dir: held by whoever makes, takes or drops it
}

// Spare returns the paths of the store's spare checkout.
func (s *Store) Spare() Spare {
	dir := filepath.Join(s.Dir, "spare")
	return Spare{Dir: dir, Src: filepath.Join(dir, "src"), Ready: filepath.Join(dir, "ready"), Lock: filepath.Join(s.Dir, "spare.lock")}
}

// Why Ferry's checkouts are locked, as `git worktree list -v` shows it: a
// base's checkout, and the spare the next base build takes. Locked, git
// worktree prune leaves them be, and whoever lists the repository's
// worktrees sees whose they are.
func BaseCheckoutReason(id string) string {
	return "Ferry's checkout of base " + id + " (ferry gc removes it)"
}

// SpareCheckoutReason is the lock reason of the spare checkout.
const SpareCheckoutReason = "Ferry's spare checkout, which the next ferry base takes (ferry gc removes it)"

// DemandLog is the log of the agents' cargo calls (package demand).
func (s *Store) DemandLog() string { return filepath.Join(s.Dir, "demand.log") }

// LinkWindows holds the link windows of the store's bases, one file per
// owner (package base, links.go): when Ferry added or removed names of
// ready bases' files.
func (s *Store) LinkWindows() string { return filepath.Join(s.Dir, "links") }

// LinkWindow is the file of the link windows of base id.
func (s *Store) LinkWindow(id string) string { return filepath.Join(s.LinkWindows(), id+".json") }

// BaseDir is the directory of base id.
func (s *Store) BaseDir(id string) string { return filepath.Join(s.BasesDir(), id) }

// BaseLock is the lock file of base id, beside its directory so that
// discarding the directory never drops a held lock.
func (s *Store) BaseLock(id string) string { return filepath.Join(s.BasesDir(), id+".lock") }

// Base names the paths of one base.
type Base struct {
	Dir    string
	Record string // base.json, the ready marker, written last
	Src    string // the checkout
	Target string // the warm build's target dir
	// WarmUnits holds the shim's records of the warm build's cargo calls
	// and the write threshold (package units owns the files inside it),
	// while the base is built.
	WarmUnits string
	// Relocation is relocation.json, for a base built without the
	// namespace sandbox: what a fork of its target removes (package
	// relocate).
	Relocation string
	// Layer holds, while a layered refresh builds (package base), the
	// overlay it writes into: upper/ over the seed's target, and work/;
	// and next/, the seed's target laid as links while the warm build
	// runs. The upper's entries move into next/, which becomes the
	// target, when the warm build is done.
	Layer string
	// LayerNext is next/ in Layer.
	LayerNext string
	// Private holds, while the warm build runs, its sandbox's private
	// layers and directories (package confine).
	Private string
	// Contents is SHA256SUMS, the SHA-256 of each regular file of the
	// target, in sha256sum's format, relative to Dir (package base).
	Contents string
	Lock     string
}

// Base returns the paths of base id.
func (s *Store) Base(id string) Base {
	b := BaseFiles(s.BaseDir(id))
	b.Lock = s.BaseLock(id)
	return b
}

// BaseFiles names the files inside a base directory (Lock stays empty: it
// lives beside the directory).
func BaseFiles(dir string) Base {
	return Base{Dir: dir, Record: filepath.Join(dir, "base.json"), Src: filepath.Join(dir, "src"), Target: filepath.Join(dir, "target"),
		WarmUnits: filepath.Join(dir, "warm-units"), Relocation: filepath.Join(dir, "relocation.json"), Layer: filepath.Join(dir, "layer"),
		LayerNext: filepath.Join(dir, "layer", "next"), Private: filepath.Join(dir, "private"), Contents: filepath.Join(dir, "SHA256SUMS")}
}

// Agent names the paths of one agent.
type Agent struct {
	Dir       string
	Record    string // agent.json
	Lock      string // the agent lock (lock order: store, agent, base)
	Busy      string // busy.lock, held shared by every process run for the agent
	Target    string // the reflink or copy fork
	Upper     string // the overlay fork's upper layer
	Work      string // the overlay's work dir
	MountLock string // overlay: held shared by every process using the mount
	NS        string // overlay: ns.json, the live namespace
	// HostTarget is, for an overlay agent, the symbolic link that the
	// worktree's target link names: Ferry points it into the agent's
	// live namespace (/proc/<pid>/root/...), the only place its fork is
	// seen, and at nothing when none lives. No mount passes through it.
	HostTarget string
	// Plain is, for an overlay agent, what HostTarget names while no
	// namespace lives: a directory of the host's own, where a cargo run
	// without Ferry's shim (so outside the sandbox) builds cold, at host
	// paths, instead of failing on a link that leads nowhere.
	Plain string
	// View is, for an overlay agent, an empty directory that the agent's
	// namespace alone mounts the fork on too: reached through another
	// namespace's /proc/<pid>/root, it is empty, never another fork.
	View string
	// Seen holds a file per command the agent has run, so the shim tells
	// an agent's first call of a command (package demand).
	Seen string
	// LastBuild is last-build.json: the units the agent's last build that
	// compiled units compiled, for ferry why (package demand).
	LastBuild string
	// Private holds its sandbox's private layers and directories (package
	// confine): what its builds write to $HOME, $CARGO_HOME and $TMPDIR.
	Private string
	// Freshness holds the mark of its last freshness check and the texts
	// of its tracked links (package freshness): writable in its sandbox.
	Freshness string
}

// Agent returns the paths of agent name.
func (s *Store) Agent(name string) Agent { return AgentFiles(filepath.Join(s.AgentsDir(), name)) }

// AgentFiles names the files of the agent directory dir.
func AgentFiles(dir string) Agent {
	return Agent{
		Dir:        dir,
		Record:     filepath.Join(dir, "agent.json"),
		Lock:       filepath.Join(dir, "lock"),
		Busy:       filepath.Join(dir, "busy.lock"),
		Target:     filepath.Join(dir, "target"),
		Upper:      filepath.Join(dir, "upper"),
		Work:       filepath.Join(dir, "work"),
		MountLock:  filepath.Join(dir, "mount.lock"),
		NS:         filepath.Join(dir, "ns.json"),
		HostTarget: filepath.Join(dir, "host-target"),
		Plain:      filepath.Join(dir, "plain"),
		View:       filepath.Join(dir, "view"),
		Seen:       filepath.Join(dir, "seen"),
		LastBuild:  filepath.Join(dir, "last-build.json"),
		Private:    filepath.Join(dir, "private"),
		Freshness:  filepath.Join(dir, "freshness"),
	}
}

// Private names the private layers and directories of a sandbox, in dir
// (an agent's Private, or a base's while it builds).
type Private struct{ Dir string }

// PrivateFiles names the private layers and directories in dir.
func PrivateFiles(dir string) Private { return Private{Dir: dir} }

// PrivateSlot is one set of private layers: a session holds Lock while it
// has them mounted (two mounts must never share an upper), and Boot names
// the boot they were last mounted in.
type PrivateSlot struct {
	Dir, Lock, Boot string
}

// Slot returns the paths of slot n.
func (p Private) Slot(n int) PrivateSlot {
	dir := filepath.Join(p.Dir, "layers", strconv.Itoa(n))
	return PrivateSlot{Dir: dir, Lock: filepath.Join(dir, "lock"), Boot: filepath.Join(dir, "boot")}
}

// Layer returns the upper and work dirs of the slot's private layer over
// the host directory root.
func (s PrivateSlot) Layer(root string) (upper, work string) {
	dir := filepath.Join(s.Dir, RootKey(root))
	return filepath.Join(dir, "upper"), filepath.Join(dir, "work")
}

// Tmp is the sandbox's $TMPDIR, bound on the store's mnt/tmp.
func (p Private) Tmp() string { return filepath.Join(p.Dir, "tmp") }

// RootKey names a host directory in a private dir: its last element (to be
// read) and a hash of the whole path (to be unique).
func RootKey(root string) string {
	sum := digest.Sum256([]byte(filepath.Clean(root)))
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == '\x00' {
			return '_'
		}
		return r
	}, filepath.Base(filepath.Clean(root)))
	if name == "/" || name == "." {
		name = "root"
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

// NestedTargets is the directory, inside an agent's (or base's) target,
// that holds the target dirs of nested Cargo workspaces.
func NestedTargets(target string) string { return filepath.Join(target, "ferry-ws") }

// NestedTarget is the target dir, inside an agent's (or base's) target, of
// the Cargo workspace nested at rel in the checkout (each workspace gets
// its own: Cargo hashes path packages relative to the workspace root).
func NestedTarget(target, rel string) string {
	if rel == "." || rel == "" {
		return target
	}
	return filepath.Join(NestedTargets(target), rel)
}

// RemapLink is the link inside a checkout through which remap mode's
// builds reach the target dir: <src>/.ferry-target (remap.Link, which
// remap mode's rustc wrapper looks for).
const RemapLink = remap.Link

// RecordedTarget tells where rel, a path below a store dir (relative to
// it, with forward slashes) as a build recorded it, lies: in a target dir
// (a base's target, mnt/target, an agent's fork, or a checkout's
// RemapLink, which counts as its base's target), with root that target
// and inner the path inside it; or, with ok false, anywhere else (a
// checkout, the store's own files).
func RecordedTarget(rel string) (root, inner string, ok bool) {
	parts := strings.Split(rel, "/")
	n := 0
	switch {
	case len(parts) >= 2 && parts[0] == "mnt" && parts[1] == "target":
		root, n = "mnt/target", 2
	case len(parts) >= 3 && parts[0] == "mnt" && parts[1] == "src" && parts[2] == RemapLink:
		root, n = "mnt/target", 3
	case len(parts) >= 3 && parts[0] == "bases" && parts[2] == "target":
		root, n = "bases/"+parts[1]+"/target", 3
	case len(parts) >= 4 && parts[0] == "bases" && parts[2] == "src" && parts[3] == RemapLink:
		root, n = "bases/"+parts[1]+"/target", 4
	case len(parts) >= 3 && parts[0] == "agents" && parts[2] == "target":
		root, n = "agents/"+parts[1]+"/target", 3
	default:
		return "", "", false
	}
	return root, strings.Join(parts[n:], "/"), true
}
