package shim_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/units"
)

// warmPkg is a package built the way a base's warm build builds: through
// the shim, with FERRY_WARM_* naming its checkout, target and the
// warm-units directory the shim records calls in.
type warmPkg struct {
	l                  *layout
	dir, target, units string
}

func newWarmPkg(t *testing.T) *warmPkg {
	t.Helper()
	l := newLayout(t)
	p := &warmPkg{l: l, dir: filepath.Join(l.work, "pkg"), target: filepath.Join(l.work, "target"), units: filepath.Join(l.work, "warm-units")}
	files := map[string]string{
		"Cargo.toml": "[package]\nname = \"warm\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/lib.rs": "pub fn hello() -> &'static str { \"hello\" }\n",
		// It prints a line that looks like one of Cargo's messages: after
		// the build it is the program's, and passes through untouched.
		"src/main.rs": `fn main() {
    println!("{}", warm::hello());
    println!("{{\"reason\":\"compiler-artifact\",\"package_id\":\"not cargo\"}}");
    if std::env::args().any(|a| a == "sleep") {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}
`,
	}
	for name, body := range files {
		f := filepath.Join(p.dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{p.target, p.units} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *warmPkg) command(ctx context.Context, args ...string) (*exec.Cmd, *testenv.Buffer, *testenv.Buffer) {
	c := exec.CommandContext(ctx, filepath.Join(p.l.bin, "cargo"), args...)
	c.Dir = p.dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "FERRY_") && !strings.HasPrefix(kv, "CARGO_TARGET_DIR=") {
			env = append(env, kv)
		}
	}
	c.Env = append(env, "PATH="+p.l.bin+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"FERRY_WARM_SRC="+p.dir, "FERRY_WARM_TARGET="+p.target, "FERRY_WARM_UNITS="+p.units)
	var out, errb testenv.Buffer
	c.Stdout, c.Stderr = &out, &errb
	return c, &out, &errb
}

// run runs cargo args through the shim and returns its stdout, stderr and
// exit status.
func (p *warmPkg) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, out, errb := p.command(ctx, args...)
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// records reads the records the calls so far left, and forgets them.
func (p *warmPkg) records(t *testing.T) []*units.Record {
	t.Helper()
	recs, err := units.ReadRecords(p.units)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		os.Remove(r.File)
	}
	return recs
}

// Inside a warm build the shim records each build-type call: cargo's
// artifact messages with the files they name stat'ed, and how the call
// ended. The caller's stdout gets what it would without the shim: the
// program's output, and Cargo's JSON messages only when it asked for them.
func TestWarmCallsAreRecorded(t *testing.T) {
	p := newWarmPkg(t)

	stdout, stderr, code := p.run(t, "run")
	if code != 0 {
		t.Fatalf("cargo run: exit %d\n%s", code, tail(stderr))
	}
	if want := "hello\n{\"reason\":\"compiler-artifact\",\"package_id\":\"not cargo\"}\n"; stdout != want {
		t.Errorf("cargo run's stdout is %q, want the program's output %q", stdout, want)
	}
	if !strings.Contains(stderr, "Compiling warm") {
		t.Errorf("cargo's progress is not on stderr:\n%s", stderr)
	}
	recs := p.records(t)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if !r.Finished || r.Exit.Code != 0 || r.Damaged != "" || r.JSON || r.Target != p.target || r.CargoTarget != p.target {
		t.Fatalf("record %+v", r)
	}
	if want := []string{"run", "--message-format=json-render-diagnostics"}; strings.Join(r.Ran, " ") != strings.Join(want, " ") {
		t.Errorf("cargo ran with %q, want %q", r.Ran, want)
	}
	reasons := map[string]int{}
	for _, m := range r.Messages {
		reasons[m.Reason()]++
		if m.Reason() != units.ReasonArtifact {
			continue
		}
		if len(m.Files) == 0 {
			t.Errorf("an artifact message names no file: %s", m.Raw)
		}
		for _, f := range m.Files {
			if f.Err != "" || f.Ino == 0 || f.Size == 0 || f.MtimeNs == 0 || !strings.HasPrefix(f.Path, p.target+"/") {
				t.Errorf("file %+v of %s", f, m.Raw)
			}
		}
	}
	if reasons[units.ReasonArtifact] != 2 || reasons[units.ReasonBuildFinished] != 1 || len(reasons) != 2 {
		t.Errorf("recorded messages: %v, want 2 artifacts (lib, bin) and build-finished (and not the program's line)", reasons)
	}

	// Asking for JSON: the messages pass through, and are recorded too.
	stdout, stderr, code = p.run(t, "build", "--message-format=json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, tail(stderr))
	}
	if n := strings.Count(stdout, `{"reason":"compiler-artifact"`); n != 2 || !strings.Contains(stdout, `"fresh":true`) || !strings.Contains(stdout, `{"reason":"build-finished","success":true}`) {
		t.Errorf("cargo build --message-format=json printed:\n%s", stdout)
	}
	recs = p.records(t)
	if len(recs) != 1 || !recs[0].JSON || len(recs[0].Messages) != 3 || strings.Join(recs[0].Ran, " ") != "build --message-format=json" {
		t.Errorf("records %+v", recs)
	}

	// A call that builds nothing is not recorded.
	if _, stderr, code := p.run(t, "metadata", "--format-version", "1", "--no-deps"); code != 0 {
		t.Fatalf("cargo metadata: exit %d\n%s", code, stderr)
	}
	if recs := p.records(t); len(recs) != 0 {
		t.Errorf("cargo metadata left %d records", len(recs))
	}

	// Short messages: unobservable, and run unchanged.
	stdout, stderr, code = p.run(t, "build", "--message-format=short")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "Finished") {
		t.Errorf("cargo build --message-format=short: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if recs := p.records(t); len(recs) != 1 || !strings.Contains(recs[0].Unobservable, "short") || recs[0].Finished {
		t.Errorf("records %+v", recs)
	}

	// A failing call: its status is recorded and passed on.
	_, _, code = p.run(t, "build", "--bin", "no-such-bin")
	recs = p.records(t)
	if code == 0 || len(recs) != 1 || !recs[0].Finished || recs[0].Exit.Code != code || !recs[0].Failed() {
		t.Errorf("exit %d, records %+v", code, recs)
	}
}

// A signal sent to the shim goes to cargo; the shim records that cargo
// was killed and passes on 128+signal.
func TestWarmCallSignalled(t *testing.T) {
	p := newWarmPkg(t)
	if _, stderr, code := p.run(t, "build"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	p.records(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, out, _ := p.command(ctx, "run", "-q", "--", "sleep")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "hello") && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := c.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("the shim ended with %v, want exit status %d", err, 128+int(syscall.SIGTERM))
	}
	recs := p.records(t)
	if len(recs) != 1 || !recs[0].Finished || recs[0].Exit.Signal == "" || recs[0].Exit.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("records %+v", recs)
	}
}
