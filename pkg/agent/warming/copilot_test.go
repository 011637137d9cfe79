package warming_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ferrydev/ferry/internal/agenttest"
	"github.com/ferrydev/ferry/internal/fixture"
	"github.com/ferrydev/ferry/internal/knobs"
	"github.com/ferrydev/ferry/pkg/hook"
)

// workflow is the part of a GitHub Actions workflow Ferry's Copilot setup
// writes.
type workflow struct {
	Name string                    `json:"name"`
	On   map[string]any            `json:"on"`
	Jobs map[string]map[string]any `json:"jobs"`
}

type step struct {
	Name            string            `json:"name"`
	ID              string            `json:"id"`
	If              string            `json:"if"`
	Uses            string            `json:"uses"`
	With            map[string]any    `json:"with"`
	Env             map[string]string `json:"env"`
	Run             string            `json:"run"`
	ContinueOnError bool              `json:"continue-on-error"`
}

// runner runs a workflow's steps as an Actions runner does, on this
// machine: each run: script under bash -e in the checkout, with the files
// GITHUB_OUTPUT, GITHUB_ENV and GITHUB_PATH read back after it, and the
// expressions Ferry's workflow uses (${{ steps.ID.outputs.NAME }},
// ${{ secrets.NAME }}, and if: conditions of == and != joined by &&)
// evaluated. actions/checkout is the checkout the runner was given;
// actions/cache/restore and save use a directory as the cache: an exact
// key is a hit, else the newest entry whose key begins with restore-keys
// is restored, and a saved key is never overwritten. Any other action or
// expression fails the test, so that the workflow cannot drift from what
// this runner checks.
type runner struct {
	t        *testing.T
	checkout string
	home     string
	cache    string // one directory per key, named by the key; order in saved
	env      []string
	secrets  map[string]string
	outputs  map[string]map[string]string
	log      strings.Builder
	saved    []string
}

var expr = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)

func (r *runner) value(e string) string {
	r.t.Helper()
	parts := strings.Split(e, ".")
	switch {
	case len(parts) == 4 && parts[0] == "steps" && parts[2] == "outputs":
		return r.outputs[parts[1]][parts[3]]
	case len(parts) == 2 && parts[0] == "secrets":
		return r.secrets[parts[1]]
	case len(e) >= 2 && e[0] == '\'' && e[len(e)-1] == '\'':
		return e[1 : len(e)-1]
	}
	r.t.Fatalf("the workflow uses an expression this runner does not know: %q", e)
	return ""
}

func (r *runner) expand(s string) string {
	return expr.ReplaceAllStringFunc(s, func(m string) string { return r.value(expr.FindStringSubmatch(m)[1]) })
}

func (r *runner) cond(c string) bool {
	r.t.Helper()
	if c == "" {
		return true
	}
	for _, term := range strings.Split(c, "&&") {
		op := "!="
		lhs, rhs, ok := strings.Cut(term, op)
		if !ok {
			op = "=="
			if lhs, rhs, ok = strings.Cut(term, op); !ok {
				r.t.Fatalf("the workflow's condition %q is not a comparison this runner knows", c)
			}
		}
		if eq := r.value(strings.TrimSpace(lhs)) == r.value(strings.TrimSpace(rhs)); eq != (op == "==") {
			return false
		}
	}
	return true
}

func (r *runner) path(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(r.home, rest)
	}
	return p
}

func (r *runner) with(s step, key string) string {
	v, _ := s.With[key].(string)
	return r.expand(v)
}

func (r *runner) run(steps []step) {
	r.t.Helper()
	for _, s := range steps {
		if !r.cond(s.If) {
			r.log.WriteString("## skipped: " + s.Name + "\n")
			continue
		}
		r.log.WriteString("## " + s.Name + "\n")
		out := map[string]string{}
		switch action, _, _ := strings.Cut(s.Uses, "@"); action {
		case "actions/checkout":
			if d, _ := s.With["fetch-depth"].(float64); s.With["fetch-depth"] == nil || d != 0 {
				r.t.Errorf("the checkout is not of the whole history (fetch-depth %v): an older commit's base cannot seed this one's", s.With["fetch-depth"])
			}
		case "actions/cache/restore":
			dst, key := r.path(r.with(s, "path")), r.with(s, "key")
			hit := key
			if _, err := os.Stat(filepath.Join(r.cache, key)); err != nil {
				hit = ""
				prefix := r.with(s, "restore-keys")
				for _, k := range slices.Backward(r.savedKeys()) {
					if prefix != "" && strings.HasPrefix(k, prefix) {
						hit = k
						break
					}
				}
			}
			out["cache-hit"] = map[bool]string{true: "true", false: "false"}[hit == key && hit != ""]
			if hit != "" {
				out["cache-matched-key"] = hit
				r.copy(filepath.Join(r.cache, hit), dst)
			}
			r.log.WriteString("restored " + hit + "\n")
		case "actions/cache/save":
			src, key := r.path(r.with(s, "path")), r.with(s, "key")
			if _, err := os.Stat(filepath.Join(r.cache, key)); err == nil {
				r.log.WriteString("cache entry " + key + " exists; not saved\n")
				break
			}
			r.copy(src, filepath.Join(r.cache, key))
			r.saved = append(r.saved, key)
			r.appendKey(key)
		case "":
			out = r.script(s)
		default:
			r.t.Fatalf("step %q uses %s, which this runner does not know", s.Name, s.Uses)
		}
		if s.ID != "" {
			r.outputs[s.ID] = out
		}
	}
}

// script runs a run: step and returns its outputs.
func (r *runner) script(s step) map[string]string {
	r.t.Helper()
	// Where a GitHub-hosted runner keeps them: under the work dir in its
	// home, beside the checkout (a directory of /tmp would be one every
	// build may write: docs/store.md's table).
	dir, err := os.MkdirTemp(filepath.Join(filepath.Dir(filepath.Dir(r.checkout)), "_temp"), "_runner_file_commands-")
	if err != nil {
		r.t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range []string{"GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH"} {
		files[f] = filepath.Join(dir, f)
		if err := os.WriteFile(files[f], nil, 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	c := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", r.expand(s.Run))
	c.Dir = r.checkout
	c.Env = append(slices.Clone(r.env), "GITHUB_OUTPUT="+files["GITHUB_OUTPUT"], "GITHUB_ENV="+files["GITHUB_ENV"],
		"GITHUB_PATH="+files["GITHUB_PATH"], "GITHUB_WORKSPACE="+r.checkout)
	for k, v := range s.Env {
		c.Env = append(c.Env, k+"="+r.expand(v))
	}
	b, err := c.CombinedOutput()
	r.log.Write(b)
	if err != nil && !s.ContinueOnError {
		r.t.Fatalf("step %q failed (%v); the steps after it would not run:\n%s", s.Name, err, r.log.String())
	}
	read := func(f string) []string {
		data, err := os.ReadFile(files[f])
		if err != nil {
			r.t.Fatal(err)
		}
		return strings.Fields(string(data))
	}
	out := map[string]string{}
	for _, kv := range read("GITHUB_OUTPUT") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	r.env = append(r.env, read("GITHUB_ENV")...)
	for _, p := range read("GITHUB_PATH") {
		r.setPath(p + string(os.PathListSeparator) + r.getenv("PATH"))
	}
	return out
}

func (r *runner) getenv(k string) string {
	v := ""
	for _, kv := range r.env {
		if rest, ok := strings.CutPrefix(kv, k+"="); ok {
			v = rest
		}
	}
	return v
}

func (r *runner) setPath(p string) { r.env = append(r.env, "PATH="+p) }

func (r *runner) copy(src, dst string) {
	r.t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		r.t.Fatalf("cp %s %s: %v\n%s", src, dst, err, out)
	}
}

// savedKeys are the cache's keys, oldest first.
func (r *runner) savedKeys() []string {
	data, _ := os.ReadFile(filepath.Join(r.cache, ".order"))
	return strings.Fields(string(data))
}

func (r *runner) appendKey(k string) {
	f, err := os.OpenFile(filepath.Join(r.cache, ".order"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(k + "\n")
}

// Copilot's setup workflow, as `ferry hook copilot install` writes it: it
// parses as a workflow whose job sets only the keys Copilot allows, and its
// steps, run in order on this machine with a directory standing in for the
// Actions cache, first miss, build the base and save it, then, on a new
// runner (another checkout path, another home and store), hit, import the
// base relocated and make the checkout an agent whose first build compiles
// only the relocated crates and runs its own code. Uninstall removes the
// file; a workflow of the repository's own is refused and kept.
func TestCopilotWorkflow(t *testing.T) {
	w := agenttest.NewWorld(t, false)
	file := hook.CopilotFile(w.Repo.Dir)
	var ed struct {
		Path  string   `json:"path"`
		Added []string `json:"added"`
	}
	if err := json.Unmarshal([]byte(w.MustFerry(t, "hook", "copilot", "install", "--json")), &ed); err != nil {
		t.Fatal(err)
	}
	if ed.Path != file || !slices.Equal(ed.Added, []string{hook.CopilotJob}) {
		t.Fatalf("ferry hook copilot install --json: %+v, want %s added to %s", ed, hook.CopilotJob, file)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if again := w.MustFerry(t, "hook", "copilot", "install", "--dry-run"); again != string(data) {
		t.Errorf("install --dry-run over Ferry's own workflow prints another file:\n%s", again)
	}

	var wf workflow
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatalf("the workflow is not YAML: %v\n%s", err, data)
	}
	var top map[string]any
	yaml.Unmarshal(data, &top)
	for k := range top { // "on" quoted: YAML 1.1 readers take a bare on for true
		if !slices.Contains([]string{"name", "on", "jobs"}, k) {
			t.Errorf("the workflow sets %q at its top", k)
		}
	}
	job, ok := wf.Jobs[hook.CopilotJob]
	if len(wf.Jobs) != 1 || !ok {
		t.Fatalf("the workflow's jobs are %v, want only %s", wf.Jobs, hook.CopilotJob)
	}
	var keys []string
	for k := range job {
		keys = append(keys, k)
		if !slices.Contains(hook.CopilotJobKeys, k) {
			t.Errorf("the job sets %q, which Copilot does not allow (only %v)", k, hook.CopilotJobKeys)
		}
	}
	sort.Strings(keys)
	if m, _ := job["timeout-minutes"].(float64); m < 1 || m > 59 {
		t.Errorf("timeout-minutes %v, want 1 to 59", job["timeout-minutes"])
	}
	raw, _ := json.Marshal(job["steps"])
	var steps []step
	if err := json.Unmarshal(raw, &steps); err != nil || len(steps) == 0 {
		t.Fatalf("the job's steps (%v): %s", err, raw)
	}
	t.Logf("job keys %v, %d steps", keys, len(steps))

	// A hostile build script: the base's warm build runs it on the
	// runner, where it tries to steer the steps after it (a directory put
	// first on their PATH, a variable set for them, through the files the
	// runner reads back) and to rewrite the workflow itself. The sandbox
	// keeps every write from landing.
	script := fixture.CrateDir(fixture.BuildScriptCrate) + "/build.rs"
	src, err := os.ReadFile(filepath.Join(w.Repo.Dir, script))
	if err != nil {
		t.Fatal(err)
	}
	hostile := strings.Replace(string(src), "fn main() {", "fn main() {\n    steer();", 1) + `
fn steer() {
    use std::io::Write;
    for (var, line) in [("GITHUB_PATH", "/tmp/ferry-planted-bin"), ("GITHUB_ENV", "FERRY_PLANTED=1")] {
        if let Ok(p) = std::env::var(var) {
            if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(p) {
                let _ = writeln!(f, "{}", line);
            }
        }
    }
    if let Ok(p) = std::env::var("STEER_PROOF") {
        let _ = std::fs::write(p, format!("{:?}", std::env::var("GITHUB_PATH")));
    }
    if let Ok(w) = std::env::var("GITHUB_WORKSPACE") {
        let _ = std::fs::write(format!("{}/.github/workflows/copilot-setup-steps.yml", w), "planted");
    }
}
`
	if err := w.Repo.Write(script, hostile); err != nil {
		t.Fatal(err)
	}
	// The repository as Copilot's runner checks it out: the workflow and
	// ferry.toml committed.
	if _, err := w.Repo.Git("add", "-A"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Repo.Commit("ferry: copilot setup"); err != nil {
		t.Fatal(err)
	}
	// The secret: a signing key made on another host.
	keyHome := t.TempDir()
	var key struct {
		Path string `json:"path"`
	}
	if out, _, err := w.Ferry(t.TempDir(), []string{"FERRY_HOME=" + keyHome}, "key", "--json"); err != nil || json.Unmarshal([]byte(out), &key) != nil {
		t.Fatalf("ferry key --json: %v: %s", err, out)
	}
	pem, err := os.ReadFile(key.Path)
	if err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	proof := filepath.Join(t.TempDir(), "steer-proof")
	newRunner := func(name string) *runner {
		// A GitHub-hosted runner's layout: the checkout and the runner's
		// files under work/ in its home.
		home := filepath.Join(t.TempDir(), name, "runner")
		r := &runner{t: t, checkout: filepath.Join(home, "work", "repo", "repo"), home: home, cache: cache,
			secrets: map[string]string{hook.SigningKeySecret: string(pem)}, outputs: map[string]map[string]string{}}
		if out, err := exec.Command("git", "clone", "-q", w.Repo.Dir, r.checkout).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		if err := os.MkdirAll(filepath.Join(home, "work", "_temp"), 0o755); err != nil {
			t.Fatal(err)
		}
		realHome, _ := os.UserHomeDir()
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "FERRY_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PATH=") {
				r.env = append(r.env, kv)
			}
		}
		for name, dflt := range map[string]string{"CARGO_HOME": ".cargo", "RUSTUP_HOME": ".rustup"} {
			if os.Getenv(name) == "" {
				r.env = append(r.env, name+"="+filepath.Join(realHome, dflt)) // the image's toolchain, whatever $HOME is
			}
		}
		// The image has ferry on its PATH: the install step keeps it.
		// /tmp is writable to builds (docs/store.md): where the build
		// script proves it ran, and with the runner's files named.
		r.env = append(r.env, "HOME="+r.home, knobs.OverlayHold+"=0", "STEER_PROOF="+proof)
		r.setPath(w.Bin + string(os.PathListSeparator) + os.Getenv("PATH"))
		return r
	}

	first := newRunner("first")
	first.run(steps)
	if len(first.saved) != 1 || first.outputs["ferry-cache"]["cache-hit"] == "true" {
		t.Fatalf("the first run (an empty cache) saved %v, cache hit %q; want a miss that saves the base:\n%s",
			first.saved, first.outputs["ferry-cache"]["cache-hit"], first.log.String())
	}
	if p, err := os.ReadFile(proof); err != nil || !strings.Contains(string(p), "_runner_file_commands") {
		t.Errorf("the hostile build script did not run with the runner's files named (%v): %s", err, p)
	}
	for _, kv := range first.env {
		if strings.Contains(kv, "ferry-planted") || strings.Contains(kv, "FERRY_PLANTED") {
			t.Errorf("the build script steered the steps after the setup: %s", kv)
		}
	}
	if wf, err := os.ReadFile(hook.CopilotFile(first.checkout)); err != nil || string(wf) != string(data) {
		t.Errorf("the build script rewrote the runner's workflow (%v):\n%s", err, wf)
	}
	if k := first.outputs["ferry-key"]["key"]; first.saved[0] != k || !strings.HasPrefix(k, first.outputs["ferry-key"]["prefix"]) {
		t.Errorf("the first run saved under %q; its key is %q, prefix %q", first.saved[0], k, first.outputs["ferry-key"]["prefix"])
	}

	second := newRunner("second")
	second.run(steps)
	if second.outputs["ferry-cache"]["cache-hit"] != "true" || len(second.saved) != 0 {
		t.Fatalf("the second run (same commit) hit %q and saved %v; want an exact hit that saves nothing:\n%s",
			second.outputs["ferry-cache"]["cache-hit"], second.saved, second.log.String())
	}
	if strings.Count(second.log.String(), "Compiling") > 0 {
		t.Errorf("the second run built the base instead of importing it:\n%s", second.log.String())
	}
	// The agent's shell: the steps' environment, in the checkout.
	c := exec.Command("bash", "--noprofile", "--norc", "-c", "command -v cargo && cargo build --workspace 2>&1 && cargo run -q --bin "+fixture.BinName)
	c.Dir, c.Env = second.checkout, second.env
	outb, err := c.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("the agent's first build after the setup: %v\n%s\nthe setup said:\n%s", err, out, second.log.String())
	}
	if cargo, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(cargo, second.home+"/") {
		t.Errorf("cargo in the agent's shell is %s, not the shim in the runner's store", cargo)
	}
	// It compiles the crates whose units recorded the first runner's
	// paths, which the import named, and nothing else.
	m := regexp.MustCompile(`the first build rebuilds \d+ unit\(s\) of ([^\n]*)`).FindStringSubmatch(second.log.String())
	if m == nil {
		t.Fatalf("the import did not say what the first build rebuilds:\n%s", second.log.String())
	}
	relocated := strings.Split(m[1], ", ")
	var compiled []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Compiling" {
			compiled = append(compiled, f[1])
			if !slices.Contains(relocated, f[1]) {
				t.Errorf("the first build on the second runner compiled %s, which the import did not relocate (%s):\n%s", f[1], m[1], out)
			}
		}
	}
	t.Logf("the second runner's first build compiled %d crate(s) of the %d relocated: %v", len(compiled), len(relocated), compiled)
	want, err := fixture.ExpectedMarker(second.checkout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, strings.TrimSpace(want)) {
		t.Errorf("the runner's build does not run its own code; want %q in:\n%s", want, out)
	}

	// A cache entry cut short (or changed, or signed by another key) is
	// refused by the import; the setup builds the base instead, and the
	// agent builds its own code.
	cached := filepath.Join(cache, first.saved[0], "base.ferrybase")
	fi, err := os.Stat(cached)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cached, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	third := newRunner("third")
	third.run(steps)
	if !strings.Contains(third.log.String(), "Compiling") || !strings.Contains(third.log.String(), "error:") {
		t.Errorf("the run over a truncated cache entry did not refuse it and build the base:\n%s", third.log.String())
	}
	c = exec.Command("bash", "--noprofile", "--norc", "-c", "cargo run -q --bin "+fixture.BinName)
	c.Dir, c.Env = third.checkout, third.env
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), strings.TrimSpace(want)) {
		t.Errorf("after a refused import the agent does not run its own code (%v); want %q in:\n%s", err, want, out)
	}

	// Uninstall removes Ferry's file; a workflow of the repository's own is
	// refused by install and left alone by uninstall.
	w.MustFerry(t, "hook", "copilot", "uninstall")
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("uninstall left %s (%v)", file, err)
	}
	own := []byte("name: ours\non: workflow_dispatch\njobs:\n  copilot-setup-steps:\n    runs-on: ubuntu-latest\n    steps: []\n")
	if err := os.WriteFile(file, own, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := w.Ferry(w.Repo.Dir, nil, "hook", "copilot", "install")
	agenttest.ExpectRefusal(t, stderr, err, "not Ferry's")
	w.MustFerry(t, "hook", "copilot", "uninstall")
	if now, _ := os.ReadFile(file); string(now) != string(own) {
		t.Errorf("the repository's own workflow changed:\n%s", now)
	}
}
