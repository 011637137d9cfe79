package hostile_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
)

// confined is a small repository whose build script runs probe.sh, a
// script that tries to write where an attacker would (and reads the
// secrets), with a fake $HOME holding the store and the worktrees as the
// defaults do, and a git dependency that reaches $CARGO_HOME.
type confined struct {
	w                 *agenttest.World
	root, fakeHome    string
	cargoHome, rustup string
	probeOut          string
	dep               string // the git dependency's repository
}

// probeScript tries each class of path for its context ($1) and records
// what happened in $PROBE_OUT/<context>: "<class> wrote" or "denied", and
// for the secrets "hidden" or "visible". In a build script the worktree
// and the target are the package's dir and OUT_DIR.
const probeScript = `ctx=$1
out=$PROBE_OUT/$ctx
: > "$out.tmp"
name=ferry-probe-$ctx
try() {
	if [ -z "$2" ]; then return; fi
	if (echo x >> "$2/$name-$1") 2>/dev/null; then echo "$1 wrote" >> "$out.tmp"; else echo "$1 denied" >> "$out.tmp"; fi
}
hidden() {
	if [ -e "$2/secret" ]; then echo "$1 visible" >> "$out.tmp"; else echo "$1 hidden" >> "$out.tmp"; fi
}
try worktree "${CARGO_MANIFEST_DIR:-$PROBE_WORKTREE}"
try target "${OUT_DIR:-$PROBE_TARGET}"
try gitdir "$PROBE_GITDIR/hooks"
try cargohome "$CARGO_HOME/registry"
try home "$HOME"
try toolchain "$CARGO_HOME/bin"
try rustup "$PROBE_RUSTUP"
try ferrybin "$PROBE_FERRYBIN"
try otheragent "$PROBE_OTHER"
try store "$PROBE_STORE"
try tmp "$PROBE_OUT"
try tmpdir "${TMPDIR:-/tmp}"
[ "$ctx" = shell ] || try host /usr/local
hidden keys "$PROBE_KEYS"
hidden bus "$PROBE_BUS"
mv "$out.tmp" "$out"
`

const probeBuildScript = `fn main() {
    println!("cargo:rerun-if-env-changed=PROBE_CONTEXT");
    println!("cargo:rerun-if-env-changed=ATTACK");
    if std::env::var("ATTACK").is_ok() {
        let st = std::process::Command::new("sh")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/attack.sh"))
            .status()
            .unwrap();
        assert!(st.success());
    }
    if let Ok(ctx) = std::env::var("PROBE_CONTEXT") {
        let st = std::process::Command::new("sh")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/probe.sh"))
            .arg(ctx)
            .status()
            .unwrap();
        assert!(st.success());
    }
}
`

func newConfined(t *testing.T) *confined {
	t.Helper()
	fixture.RequireTools(t)
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	c := &confined{root: root, fakeHome: filepath.Join(root, "home"), probeOut: filepath.Join(root, "probes")}
	c.cargoHome = filepath.Join(c.fakeHome, ".cargo")
	if rh := os.Getenv("RUSTUP_HOME"); rh != "" {
		c.rustup = rh
	} else if h, err := os.UserHomeDir(); err == nil {
		if _, err := os.Stat(filepath.Join(h, ".rustup")); err == nil {
			c.rustup = filepath.Join(h, ".rustup")
		}
	}
	for _, d := range []string{c.probeOut, filepath.Join(c.cargoHome, "bin"), filepath.Join(c.cargoHome, "registry")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(c.fakeHome, ".bashrc"), []byte("# the host's\n"), 0o644)

	// The git dependency.
	c.dep = filepath.Join(root, "dep")
	writeFiles(t, c.dep, map[string]string{
		"Cargo.toml": "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/lib.rs": "pub fn answer() -> u32 { 42 }\n",
	})
	gitInit(t, c.dep)

	repo := filepath.Join(root, "repo")
	writeFiles(t, repo, map[string]string{
		"Cargo.toml": "[package]\nname = \"probed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n" +
			"dep = { git = \"file://" + c.dep + "\" }\n",
		"src/main.rs": "fn main() { println!(\"{}\", dep::answer()); }\n",
		"build.rs":    probeBuildScript,
		"probe.sh":    probeScript,
		"attack.sh":   attackScript,
		"tests/home.rs": "#[test]\nfn writes_home() {\n    let p = std::path::Path::new(&std::env::var(\"HOME\").unwrap()).join(\".config/probed/state\");\n" +
			"    std::fs::create_dir_all(p.parent().unwrap()).unwrap();\n    std::fs::write(&p, \"kept\").unwrap();\n" +
			"    assert_eq!(std::fs::read_to_string(&p).unwrap(), \"kept\");\n}\n",
		"ferry.toml": "[base]\nwarm = [\"cargo build\"]\n",
	})
	// The lockfile, fetched into a $CARGO_HOME of its own: the fake one
	// starts empty, for the base's fetch to fill.
	lock := exec.Command("cargo", "generate-lockfile")
	lock.Dir, lock.Env = repo, append(os.Environ(), "CARGO_HOME="+filepath.Join(root, "scratch-cargo"))
	if out, err := lock.CombinedOutput(); err != nil {
		t.Fatalf("cargo generate-lockfile: %v\n%s", err, out)
	}
	gitInit(t, repo)
	r, err := fixture.Open(repo)
	if err != nil {
		t.Fatal(err)
	}
	c.w = &agenttest.World{Repo: r, Bin: testenv.Binaries(t),
		Home: filepath.Join(c.fakeHome, ".cache", "ferry"), Worktrees: filepath.Join(c.fakeHome, ".local", "share", "ferry", "worktrees")}
	return c
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func gitInit(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"}} {
		c := exec.Command("git", args...)
		c.Dir = dir
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// env is the environment of every command: the fake $HOME and
// $CARGO_HOME, the real toolchain, and what probe.sh tries.
func (c *confined) env(ctx string, extra ...string) []string {
	store := c.storeDir()
	env := []string{"HOME=" + c.fakeHome, "CARGO_HOME=" + c.cargoHome, "PROBE_OUT=" + c.probeOut,
		"PROBE_GITDIR=" + filepath.Join(c.w.Repo.Dir, ".git"), "PROBE_FERRYBIN=" + c.w.Bin,
		"PROBE_STORE=" + store, "PROBE_KEYS=" + filepath.Join(c.w.Home, "keys"), "PROBE_BUS=" + filepath.Join(c.w.Home, "bus"),
		"PROBE_OTHER=" + filepath.Join(c.w.Worktrees, filepath.Base(store), "other")}
	if c.rustup != "" {
		env = append(env, "RUSTUP_HOME="+c.rustup, "PROBE_RUSTUP="+c.rustup)
	}
	if ctx != "" {
		env = append(env, "PROBE_CONTEXT="+ctx)
	}
	return append(env, extra...)
}

// storeDir is the repository's store dir, made or not.
func (c *confined) storeDir() string {
	common, err := filepath.EvalSymlinks(filepath.Join(c.w.Repo.Dir, ".git"))
	if err != nil {
		return ""
	}
	return filepath.Join(c.w.Home, store.Key(common))
}

// probe reads what probe.sh recorded for ctx.
func (c *confined) probe(t *testing.T, ctx string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(c.probeOut, ctx))
	if err != nil {
		t.Fatalf("the %s probe recorded nothing: %v", ctx, err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if class, what, ok := strings.Cut(sc.Text(), " "); ok {
			got[class] = what
		}
	}
	return got
}

// table reads the table of docs/store.md's "What an agent can touch":
// outcome by row (its first cell) and column.
func confinementTable(t *testing.T) (columns []string, rows map[string][]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "store.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(data), "## What an agent can touch")
	rows = map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cells[0] == "path":
			columns = cells[1:]
		case strings.HasPrefix(cells[0], "---"):
		default:
			rows[cells[0]] = cells[1:]
		}
	}
	return columns, rows
}

// The rows of the table, by the class probe.sh names them.
var tableRows = map[string]string{
	"worktree":   "the agent's worktree",
	"target":     "its target",
	"gitdir":     "the repository's git dir (hooks, config, refs)",
	"cargohome":  "`$CARGO_HOME` (registry, git checkouts)",
	"home":       "`$HOME` (`~/.bashrc`, `~/.gitconfig`, …)",
	"toolchain":  "toolchains (`$RUSTUP_HOME`, `$CARGO_HOME/bin`)",
	"rustup":     "toolchains (`$RUSTUP_HOME`, `$CARGO_HOME/bin`)",
	"ferrybin":   "Ferry's binaries",
	"otheragent": "other agents' worktrees",
	"store":      "the store (bases, other forks, records, the shim's link)",
	"keys":       "the signing keys (`keys/`)",
	"bus":        "the bus (`bus/`: token, address)",
	"tmp":        "`/tmp`",
	"tmpdir":     "`$TMPDIR`",
	"host":       "the rest of the host (`/usr`, `/etc`, …)",
}

// The table's columns, by context.
var tableColumns = map[string]string{
	"shim":  "the agent's cargo (shim)",
	"run":   "`ferry run`, `ferry shell`",
	"warm":  "a base's warm command",
	"shell": "the agent tool's own shell",
}

// Every cell of docs/store.md's confinement table, tried: a build script
// in a base's warm command and in an agent's cargo call, a `ferry run`
// command, and the agent tool's own shell each try to write every class of
// path and to read the secrets, and what happened (and what reached the
// host) is what the cell says. For a reflink-or-copy agent (a namespace
// per call) and an overlay agent (one shared namespace).
func TestConfinementTable(t *testing.T) {
	c := newConfined(t)
	w := c.w
	columns, rows := confinementTable(t)
	for _, col := range tableColumns {
		if !contains(columns, col) {
			t.Fatalf("docs/store.md's table has no column %q (it has %q)", col, columns)
		}
	}
	for class, row := range tableRows {
		if rows[row] == nil {
			t.Fatalf("docs/store.md's table has no row %q (for %s)", row, class)
		}
	}
	if len(rows) != len(uniq(tableRows)) {
		t.Errorf("docs/store.md's table has %d rows, the test tries %d", len(rows), len(uniq(tableRows)))
	}
	os.MkdirAll(filepath.Join(w.Home, "keys"), 0o700)
	os.WriteFile(filepath.Join(w.Home, "keys", "secret"), []byte("key\n"), 0o600)
	os.MkdirAll(filepath.Join(w.Home, "bus"), 0o700)
	os.WriteFile(filepath.Join(w.Home, "bus", "secret"), []byte("token\n"), 0o600)

	// The warm command: a build script in the base's cargo build.
	if _, stderr, err := w.Ferry(w.Repo.Dir, c.env("warm"), "base"); err != nil {
		t.Fatalf("ferry base: %v\n%s", err, stderr)
	}
	// The base fetched the git dependency into the host's $CARGO_HOME,
	// which its own build could not write.
	if m, _ := filepath.Glob(filepath.Join(c.cargoHome, "git", "checkouts", "dep-*")); len(m) == 0 {
		t.Errorf("the base did not fetch its git dependency into the host's $CARGO_HOME")
	}
	store := w.StoreDir(t)
	var b baseJSON
	out, _, _ := w.Ferry(w.Repo.Dir, c.env(""), "base", "--json")
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Target == "" {
		t.Fatalf("ferry base --json: %v\n%s", err, out)
	}
	c.check(t, "warm", rows, hostView{worktree: b.Src, target: []string{b.Target}})

	backends := []string{"copy"}
	if blocker, err := fork.OverlayBlocker(platform.Real(), store); err == nil && blocker == nil {
		backends = append(backends, "overlay")
	} else {
		t.Logf("the overlay backend is not tried: %v%v", blocker, err)
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			os.RemoveAll(c.probeOut)
			os.MkdirAll(c.probeOut, 0o755)
			other := w.SpawnWith(t, c.env(""), "other", "--backend", backend)
			a := w.SpawnWith(t, c.env(""), "a", "--backend", backend)
			defer func() {
				w.Ferry(w.Repo.Dir, c.env(""), "rm", "--force", "a")
				w.Ferry(w.Repo.Dir, c.env(""), "rm", "--force", "other")
			}()
			_ = other
			agentDir := filepath.Join(store, "agents", "a")
			view := hostView{worktree: a.Worktree, target: []string{filepath.Join(agentDir, "target"), filepath.Join(agentDir, "upper")},
				private: filepath.Join(agentDir, "private")}

			// The agent's cargo, through the shim: the build script probes.
			_, stderr, code := w.Cargo(a.Worktree, c.env("shim"), "build")
			if code != 0 {
				t.Fatalf("cargo build: exit %d\n%s", code, stderr)
			}
			if strings.Contains(stderr, "Compiling dep") {
				t.Errorf("the agent compiled the git dependency the base compiled:\n%s", stderr)
			}
			c.check(t, "shim", rows, view)

			// ferry run.
			if _, stderr, err := w.Ferry(a.Worktree, c.env("", "PROBE_WORKTREE="+a.Worktree, "PROBE_TARGET="+filepath.Join(store, "mnt", "target")),
				"run", "a", "--", "sh", filepath.Join(a.Worktree, "probe.sh"), "run"); err != nil {
				t.Fatalf("ferry run: %v\n%s", err, stderr)
			}
			c.check(t, "run", rows, view)

			// The agent tool's own shell: no sandbox at all.
			shellTarget := filepath.Join(agentDir, "target") // the fork's own directory
			if backend == "overlay" {
				shellTarget = "" // reached only while a namespace lives
			}
			sh := exec.Command("sh", filepath.Join(a.Worktree, "probe.sh"), "shell")
			sh.Dir = a.Worktree
			sh.Env = append(os.Environ(), c.env("", "PROBE_WORKTREE="+a.Worktree, "PROBE_TARGET="+shellTarget)...)
			if out, err := sh.CombinedOutput(); err != nil {
				t.Fatalf("probe in the shell: %v\n%s", err, out)
			}
			c.check(t, "shell", rows, view)
		})
	}
}

// hostView says where the host sees what a sandbox wrote through the
// canonical paths.
type hostView struct {
	worktree string
	target   []string // directories holding the target's files on the host
	private  string   // the agent's private dir
}

// check compares what the probe of ctx recorded, and what reached the
// host, with the table's column for ctx.
func (c *confined) check(t *testing.T, ctx string, rows map[string][]string, v hostView) {
	t.Helper()
	columns, _ := confinementTable(t)
	col := -1
	for i, name := range columns {
		if name == tableColumns[ctx] {
			col = i
		}
	}
	got := c.probe(t, ctx)
	name := "ferry-probe-" + ctx
	for class, row := range tableRows {
		want := rows[row][col]
		res, tried := got[class]
		if !tried {
			if class == "rustup" && c.rustup == "" || class == "host" && ctx == "shell" || class == "target" && ctx == "shell" && strings.Contains(t.Name(), "overlay") {
				continue
			}
			t.Errorf("%s: %s was not tried", ctx, class)
			continue
		}
		file := name + "-" + class
		onHost := c.onHost(t, ctx, class, file, v)
		inPrivate := v.private != "" && found(v.private, file)
		var ok bool
		switch {
		case strings.HasPrefix(want, "private layer"):
			ok = res == "wrote" && !onHost && (ctx == "warm" || inPrivate)
		case strings.HasPrefix(want, "private"):
			ok = res == "wrote" && !onHost
		case strings.HasPrefix(want, "writable"), strings.HasPrefix(want, "the host's"):
			ok = res == "wrote" && onHost
		case strings.HasPrefix(want, "read-only"):
			ok = res == "denied"
		case strings.HasPrefix(want, "hidden"):
			ok = res == "hidden"
		case strings.HasPrefix(want, "readable"):
			ok = res == "visible"
		case strings.HasPrefix(want, "as the user may"):
			ok = true
		default:
			t.Fatalf("docs/store.md's cell %q (%s, %s) says nothing the test knows", want, row, tableColumns[ctx])
		}
		if !ok {
			t.Errorf("%s × %s: the table says %q; the probe %s, and the host %s it", tableColumns[ctx], row, want, res,
				map[bool]string{true: "sees", false: "does not see"}[onHost])
		}
	}
	c.cleanHost(ctx)
}

// onHost reports whether the file the probe of ctx wrote for class is on
// the host where that class lives.
func (c *confined) onHost(t *testing.T, ctx, class, file string, v hostView) bool {
	w := c.w
	store := c.storeDir()
	switch class {
	case "worktree":
		return exists(filepath.Join(v.worktree, file))
	case "target":
		for _, d := range v.target {
			if found(d, file) {
				return true
			}
		}
		return false
	case "tmpdir":
		tmp := os.Getenv("TMPDIR")
		if tmp == "" {
			tmp = "/tmp"
		}
		return exists(filepath.Join(tmp, file))
	}
	dirs := map[string]string{
		"gitdir": filepath.Join(w.Repo.Dir, ".git", "hooks"), "cargohome": filepath.Join(c.cargoHome, "registry"),
		"home": c.fakeHome, "toolchain": filepath.Join(c.cargoHome, "bin"), "rustup": c.rustup, "ferrybin": w.Bin,
		"otheragent": filepath.Join(w.Worktrees, filepath.Base(store), "other"), "store": store, "tmp": c.probeOut, "host": "/usr/local",
	}
	return dirs[class] != "" && exists(filepath.Join(dirs[class], file))
}

// cleanHost removes what a probe wrote into shared host directories.
func (c *confined) cleanHost(ctx string) {
	for _, d := range []string{c.rustup, c.w.Bin, "/usr/local", os.Getenv("TMPDIR"), "/tmp"} {
		if d == "" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(d, "ferry-probe-"+ctx+"-*"))
		for _, f := range m {
			os.Remove(f)
		}
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// found reports whether a file named name lies anywhere below dir.
func found(dir, name string) bool {
	hit := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == name {
			hit = true
			return filepath.SkipAll
		}
		return nil
	})
	return hit
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func uniq(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}

// attackScript is what a hostile build script does to plant code for a
// later step outside its sandbox, and to change what another build
// compiles. Every step may fail: what reached the host is what counts.
// $PLANT is a directory of the host's /tmp, writable from the sandbox, the
// planted hooks' home.
const attackScript = `set +e
hook='#!/bin/sh
cp "$FERRY_HOME/keys/secret" "$PLANT/stolen" 2>/dev/null
echo "$0" >> "$PLANT/ran"
'
mkdir -p "$PLANT/hooks"
for h in post-checkout post-commit pre-commit reference-transaction post-index-change pre-auto-gc; do
	printf '%s' "$hook" > "$PLANT/hooks/$h"; chmod +x "$PLANT/hooks/$h"
	printf '%s' "$hook" > "$PROBE_GITDIR/hooks/$h" && chmod +x "$PROBE_GITDIR/hooks/$h"
	# The git dir as the checkout shows it (a main checkout adopted in place
	# holds it; a linked worktree's .git is a file, so this fails there).
	printf '%s' "$hook" > "$CARGO_MANIFEST_DIR/.git/hooks/$h" && chmod +x "$CARGO_MANIFEST_DIR/.git/hooks/$h"
done
printf '%s' "$hook" > "$PLANT/fsmonitor"; chmod +x "$PLANT/fsmonitor"
git config core.hooksPath "$PLANT/hooks"
git config core.fsmonitor "$PLANT/fsmonitor"
git config --global core.hooksPath "$PLANT/hooks"
git config --global core.fsmonitor "$PLANT/fsmonitor"
printf '%s' "$hook" > "$PROBE_FERRYBIN/ferry-shim.new" && mv -f "$PROBE_FERRYBIN/ferry-shim.new" "$PROBE_FERRYBIN/ferry-shim"
printf '%s' "$hook" > "$PROBE_STORE/../bin/cargo.new" && mv -f "$PROBE_STORE/../bin/cargo.new" "$PROBE_STORE/../bin/cargo"
printf '%s' "$hook" > "$CARGO_HOME/bin/cargo"
for f in "$CARGO_HOME"/git/checkouts/dep-*/*/src/lib.rs; do sed -i 's/42/666/' "$f"; done
echo 'fn main() { println!("planted"); }' > "$PROBE_OTHER/src/main.rs"
echo "$PLANT/hooks/post-checkout" >> "$HOME/.bashrc"
echo 'eval "$(cat /tmp/x)"' >> "$HOME/.profile"
exit 0
`

// A build script that plants git hooks (in the repository and through
// core.hooksPath and core.fsmonitor, in its config and ~/.gitconfig),
// replaces Ferry's shim and $CARGO_HOME/bin/cargo, edits the extracted
// source of a dependency, writes another agent's worktree and appends to
// ~/.bashrc changes nothing outside its sandbox: afterwards ferry spawn,
// ferry base, ferry rm and another agent's build run none of it, and
// nothing reads the signing key. The same agent's test that writes
// $HOME, and a dependency it adds, build and pass.
func TestBuildScriptAttacks(t *testing.T) {
	c := newConfined(t)
	w := c.w
	plant := filepath.Join(c.root, "plant")
	os.MkdirAll(filepath.Join(w.Home, "keys"), 0o700)
	os.WriteFile(filepath.Join(w.Home, "keys", "secret"), []byte("key\n"), 0o600)
	os.WriteFile(filepath.Join(c.cargoHome, "bin", "cargo"), []byte("#!/bin/sh\necho the host's\n"), 0o755)
	env := func(extra ...string) []string {
		return c.env("", append([]string{"PLANT=" + plant, "GIT_CONFIG_GLOBAL=" + filepath.Join(c.fakeHome, ".gitconfig")}, extra...)...)
	}
	if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "base"); err != nil {
		t.Fatalf("ferry base: %v\n%s", err, stderr)
	}
	store := w.StoreDir(t)
	backends := []string{"copy"}
	if blocker, err := fork.OverlayBlocker(platform.Real(), store); err == nil && blocker == nil {
		backends = append(backends, "overlay")
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			shim, _ := os.ReadFile(filepath.Join(w.Bin, "ferry-shim"))
			shimLink, _ := os.Readlink(filepath.Join(w.Home, "bin", "cargo"))
			other := w.SpawnWith(t, env(), "other", "--backend", backend)
			a := w.SpawnWith(t, env(), "a", "--backend", backend)
			defer func() {
				w.Ferry(w.Repo.Dir, env(), "rm", "--force", "a")
				w.Ferry(w.Repo.Dir, env(), "rm", "--force", "other")
			}()
			if _, stderr, code := w.Cargo(a.Worktree, env("ATTACK=1"), "build"); code != 0 {
				t.Fatalf("the attacking build: exit %d\n%s", code, stderr)
			}

			// Nothing planted reached the host.
			for _, h := range []string{"post-checkout", "post-commit", "pre-commit", "reference-transaction", "post-index-change", "pre-auto-gc"} {
				if exists(filepath.Join(w.Repo.Dir, ".git", "hooks", h)) {
					t.Errorf("hook %s was planted in the repository", h)
				}
			}
			for _, f := range []string{filepath.Join(w.Repo.Dir, ".git", "config"), filepath.Join(c.fakeHome, ".gitconfig")} {
				if data, _ := os.ReadFile(f); strings.Contains(string(data), plant) {
					t.Errorf("%s names the planted hooks:\n%s", f, data)
				}
			}
			if now, _ := os.ReadFile(filepath.Join(w.Bin, "ferry-shim")); string(now) != string(shim) {
				t.Errorf("Ferry's shim was replaced")
			}
			if now, _ := os.Readlink(filepath.Join(w.Home, "bin", "cargo")); now != shimLink {
				t.Errorf("the store's cargo link now names %q", now)
			}
			if data, _ := os.ReadFile(filepath.Join(c.cargoHome, "bin", "cargo")); string(data) != "#!/bin/sh\necho the host's\n" {
				t.Errorf("$CARGO_HOME/bin/cargo was replaced:\n%s", data)
			}
			if m, _ := filepath.Glob(filepath.Join(c.cargoHome, "git", "checkouts", "dep-*", "*", "src", "lib.rs")); len(m) == 0 {
				t.Errorf("no checkout of the dependency on the host")
			} else if data, _ := os.ReadFile(m[0]); !strings.Contains(string(data), "42") {
				t.Errorf("the host's source of the dependency was changed:\n%s", data)
			}
			if data, _ := os.ReadFile(filepath.Join(other.Worktree, "src", "main.rs")); strings.Contains(string(data), "planted") {
				t.Errorf("another agent's worktree was written")
			}
			for _, f := range []string{".bashrc", ".profile"} {
				if data, _ := os.ReadFile(filepath.Join(c.fakeHome, f)); strings.Contains(string(data), plant) || strings.Contains(string(data), "/tmp/x") {
					t.Errorf("~/%s was appended to:\n%s", f, data)
				}
			}

			// The steps that follow run none of it.
			out, stderr, code := w.Cargo(other.Worktree, env(), "run")
			if code != 0 || strings.TrimSpace(out) != "42" {
				t.Errorf("another agent's build printed %q (exit %d), want the dependency's own 42:\n%s", out, code, stderr)
			}
			third := w.SpawnWith(t, env(), "third", "--backend", backend)
			w.Ferry(w.Repo.Dir, env(), "rm", "--force", "third")
			_ = third
			if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "base", "--rebuild"); err != nil {
				t.Errorf("ferry base --rebuild: %v\n%s", err, stderr)
			}
			git := exec.Command("git", "status", "--porcelain")
			git.Dir, git.Env = other.Worktree, append(os.Environ(), env()...)
			git.Run()
			for _, f := range []string{"ran", "stolen"} {
				if data, err := os.ReadFile(filepath.Join(plant, f)); err == nil {
					t.Errorf("a planted hook ran (%s):\n%s", f, data)
				}
			}

			// The agent's own test writes $HOME, and passes; a dependency
			// it adds goes to its private $CARGO_HOME.
			if _, stderr, code := w.Cargo(a.Worktree, env(), "test"); code != 0 {
				t.Errorf("cargo test (a test that writes $HOME): exit %d\n%s", code, stderr)
			}
			if exists(filepath.Join(c.fakeHome, ".config", "probed")) {
				t.Errorf("the test's write to $HOME reached the host")
			}
			// ferry list counts what the agent's builds wrote there.
			out, _, _ = w.Ferry(w.Repo.Dir, env(), "list", "--json")
			var listed []struct {
				Name         string `json:"name"`
				SandboxBytes int64  `json:"sandbox_bytes"`
			}
			json.Unmarshal([]byte(out), &listed)
			for _, e := range listed {
				if e.Name == "a" && e.SandboxBytes <= 0 {
					t.Errorf("ferry list --json gives agent a sandbox_bytes %d after its builds wrote $HOME", e.SandboxBytes)
				}
			}
			dep2 := filepath.Join(c.root, "dep2-"+backend)
			writeFiles(t, dep2, map[string]string{
				"Cargo.toml": "[package]\nname = \"dep2\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
				"src/lib.rs": "pub fn more() -> u32 { 7 }\n",
			})
			gitInit(t, dep2)
			manifest := filepath.Join(a.Worktree, "Cargo.toml")
			data, _ := os.ReadFile(manifest)
			os.WriteFile(manifest, append(data, []byte("dep2 = { git = \"file://"+dep2+"\" }\n")...), 0o644)
			if _, stderr, code := w.Cargo(a.Worktree, env(), "build"); code != 0 {
				t.Errorf("cargo build with a new dependency: exit %d\n%s", code, stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(c.cargoHome, "git", "checkouts", "dep2-*")); len(m) > 0 {
				t.Errorf("the agent's new dependency reached the host's $CARGO_HOME: %v", m)
			}
			if m, _ := filepath.Glob(filepath.Join(store, "agents", "a", "private", "layers", "*", "*", "upper", ".cargo", "git", "checkouts", "dep2-*")); len(m) == 0 {
				t.Errorf("the agent's new dependency is not in its private $CARGO_HOME")
			}
		})
	}
}

// A main checkout adopted in place (a cloud agent's container) is an agent
// like any other: plain cargo through the shim there builds warm from the
// base, its builds write the checkout and its target, and a build script
// that plants hooks, through the checkout's own .git as much as through the
// repository's path, or repoints git's config, changes nothing: the git dir
// the checkout holds stays read-only in the sandbox. ferry rm undoes the
// adoption and never removes the checkout.
func TestInPlaceAdoptionKeepsTheGitDir(t *testing.T) {
	c := newConfined(t)
	w := c.w
	plant := filepath.Join(c.root, "plant")
	env := func(extra ...string) []string {
		return c.env("", append([]string{"PLANT=" + plant, "GIT_CONFIG_GLOBAL=" + filepath.Join(c.fakeHome, ".gitconfig")}, extra...)...)
	}
	if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "base"); err != nil {
		t.Fatalf("ferry base: %v\n%s", err, stderr)
	}
	if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "adopt"); err == nil || !strings.Contains(stderr, "--in-place") {
		t.Fatalf("ferry adopt of the main checkout without --in-place: %v\n%s", err, stderr)
	}
	out, stderr, err := w.Ferry(w.Repo.Dir, env(), "adopt", "--in-place", "--backend", "copy", "--name", "here", "--json")
	if err != nil {
		t.Fatalf("ferry adopt --in-place: %v\n%s", err, stderr)
	}
	var r agent.Record
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Adopted || r.Worktree != w.Repo.Dir {
		t.Fatalf("adopted %+v (%v), want the main checkout %s", r, err, w.Repo.Dir)
	}
	config, _ := os.ReadFile(filepath.Join(w.Repo.Dir, ".git", "config"))

	// The first build is warm: nothing of the repository's compiles.
	if _, stderr, code := w.Cargo(w.Repo.Dir, env(), "build"); code != 0 || strings.Contains(stderr, "Compiling probed") {
		t.Fatalf("the first build in the adopted checkout: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := w.Cargo(w.Repo.Dir, env("ATTACK=1", "PROBE_CONTEXT=inplace"), "build"); code != 0 {
		t.Fatalf("the attacking build: exit %d\n%s", code, stderr)
	}
	probed := c.probe(t, "inplace")
	for class, want := range map[string]string{"worktree": "wrote", "target": "wrote", "gitdir": "denied"} {
		if probed[class] != want {
			t.Errorf("%s: %s in the sandbox, want %s", class, probed[class], want)
		}
	}
	for _, h := range []string{"post-checkout", "post-commit", "pre-commit", "reference-transaction", "post-index-change", "pre-auto-gc"} {
		if exists(filepath.Join(w.Repo.Dir, ".git", "hooks", h)) {
			t.Errorf("hook %s was planted in the checkout's git dir", h)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(w.Repo.Dir, ".git", "config")); string(now) != string(config) {
		t.Errorf("the checkout's git config changed:\n%s", now)
	}

	if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "rm", "--worktree", "here"); err == nil || !strings.Contains(stderr, "main checkout") {
		t.Errorf("ferry rm --worktree of the checkout adopted in place: %v\n%s", err, stderr)
	}
	if _, stderr, err := w.Ferry(w.Repo.Dir, env(), "rm", "here"); err != nil {
		t.Fatalf("ferry rm: %v\n%s", err, stderr)
	}
	if !exists(filepath.Join(w.Repo.Dir, "Cargo.toml")) || !exists(filepath.Join(w.Repo.Dir, ".git", "HEAD")) {
		t.Errorf("ferry rm removed the checkout")
	}
}
