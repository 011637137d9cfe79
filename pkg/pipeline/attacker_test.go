package pipeline_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/internal/eventstest"
	"github.com/ferrydev/ferry/internal/testenv"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/store"
)

// The attacker is this test binary run with FERRY_TEST_RUN_AS=attacker by a
// build script or an agent's command: it looks for the bus's token, its
// address and the signing keys where Ferry keeps them and in its
// environment, and tries to publish on the bus with whatever it found (and
// without, at the address the test tells it, as a port scan would find it).
// It writes what it found and did to the report file the test names.
const (
	attackBin    = "ATTACK_BIN"    // this binary, for the build script
	attackHome   = "ATTACK_HOME"   // the store parent
	attackURL    = "ATTACK_URL"    // the bus's address, without credentials
	attackReport = "ATTACK_REPORT" // where the report goes
)

// attackReport is what the attacker found and did.
type attackFindings struct {
	Ran       bool     `json:"ran"`
	Token     string   `json:"token,omitempty"`
	BusInfo   string   `json:"bus_info,omitempty"`
	Keys      []string `json:"keys,omitempty"`
	EnvBus    []string `json:"env_bus,omitempty"` // bus variables in its environment
	Published bool     `json:"published"`
	Errors    []string `json:"errors,omitempty"`
}

// attack is the attacker's main.
func attack() int {
	f := attackFindings{Ran: true}
	home := os.Getenv(attackHome)
	bus := store.BusFiles(store.BusDir(home))
	if b, err := os.ReadFile(bus.Token); err == nil {
		f.Token = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(bus.Info); err == nil {
		f.BusInfo = string(b)
	}
	if ents, err := os.ReadDir(store.KeysDir(home)); err == nil {
		for _, e := range ents {
			f.Keys = append(f.Keys, e.Name())
		}
	}
	urls := []string{os.Getenv(attackURL)}
	for _, name := range config.BusVariables {
		if v, ok := os.LookupEnv(name); ok {
			f.EnvBus = append(f.EnvBus, name+"="+v)
			if name == "FERRY_NATS_URL" {
				urls = append(urls, v)
			}
		}
	}
	var info struct{ URL string }
	if json.Unmarshal([]byte(f.BusInfo), &info) == nil && info.URL != "" {
		urls = append(urls, info.URL)
	}
	for _, u := range urls {
		opts := []nats.Option{nats.Timeout(3 * time.Second), nats.NoReconnect()}
		if f.Token != "" {
			opts = append(opts, nats.Token(f.Token))
		}
		nc, err := nats.Connect(u, opts...)
		if err == nil {
			err = nc.Publish("ferry.forged.base.ready", []byte(`{"base_id":"forged"}`))
			if err == nil {
				err = nc.FlushTimeout(3 * time.Second)
			}
			if err == nil {
				err = nc.LastError()
			}
			nc.Close()
		}
		if err == nil {
			f.Published = true
		} else {
			f.Errors = append(f.Errors, u+": "+err.Error())
		}
	}
	data, _ := json.MarshalIndent(f, "", "  ")
	if err := os.WriteFile(os.Getenv(attackReport), data, 0o644); err != nil {
		os.Stderr.WriteString("attacker: " + err.Error() + "\n")
		return 1
	}
	return 0
}

// probeCrate is a workspace member whose build script runs the attacker,
// when the build's environment names it.
var probeCrate = map[string]string{
	"crates/probe/Cargo.toml": "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
	"crates/probe/src/lib.rs": "pub fn probe() {}\n",
	"crates/probe/build.rs": `use std::process::Command;

fn main() {
    if let Ok(bin) = std::env::var("` + attackBin + `") {
        let status = Command::new(bin)
            .env("FERRY_TEST_RUN_AS", "attacker")
            .status()
            .expect("run the attacker");
        assert!(status.success(), "the attacker failed");
    }
}
`,
}

// Nothing an agent or a build runs reaches the bus. A build script in a
// warm command, a command an agent runs (ferry run) and a build script in
// an agent's cargo call (through the shim) each look for the bus's token
// and address where Ferry keeps them and in their environment (the
// builder and the agent's tool both have FERRY_NATS_URL, with the token in
// it), and try to publish with what they found: each finds nothing and
// publishes nothing. Ferry's own stages keep working: the base is built
// and announced. The same attacker on the host finds the token and
// publishes, so the test can fail.
func TestNothingInASandboxReachesTheBus(t *testing.T) {
	w := newWorld(t)
	for name, body := range probeCrate {
		if err := w.repo.Write(name, body); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := os.ReadFile(w.repo.Path("Cargo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	withProbe := strings.Replace(string(manifest), "members = [\n", "members = [\n    \"crates/probe\",\n", 1)
	if withProbe == string(manifest) {
		t.Fatalf("no members list in the fixture's Cargo.toml:\n%s", manifest)
	}
	w.repo.Write("Cargo.toml", withProbe)
	if _, err := w.repo.Commit("a crate whose build script runs the attacker"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(w.repo.Path(config.FileName), []byte("[base]\nwarm = [\"cargo build -p probe\"]\n"), 0o644)
	// ferry-watch hosts the bus under the store parent; the keys dir
	// holds a key, as on a host that signs what it publishes.
	w.start(nil, "ferry-watch", "--interval", "0.1")
	conn := dialHosted(t, w.home)
	os.MkdirAll(store.KeysDir(w.home), 0o700)
	os.WriteFile(filepath.Join(store.KeysDir(w.home), "signing.key"), []byte("secret key\n"), 0o600)
	info, err := bus.ReadInfo(store.BusDir(w.home))
	if err != nil {
		t.Fatal(err)
	}
	token, err := bus.ReadToken(store.BusFiles(store.BusDir(w.home)).Token)
	if err != nil {
		t.Fatal(err)
	}
	withToken := strings.Replace(info.URL, "://", "://"+token+"@", 1)
	reports := t.TempDir()
	attackVars := func(report string) []string {
		return []string{attackBin + "=" + os.Args[0], attackHome + "=" + w.home, attackURL + "=" + info.URL,
			attackReport + "=" + filepath.Join(reports, report), "FERRY_NATS_URL=" + withToken}
	}
	check := func(where, report string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(reports, report))
		if err != nil {
			t.Fatalf("%s: the attacker left no report (did it run?): %v", where, err)
		}
		var f attackFindings
		if err := json.Unmarshal(data, &f); err != nil || !f.Ran {
			t.Fatalf("%s: report %s: %v", where, data, err)
		}
		if f.Token != "" || f.BusInfo != "" || len(f.Keys) > 0 || len(f.EnvBus) > 0 || f.Published {
			t.Errorf("%s: the attacker reached the bus or its secrets:\n%s", where, data)
		}
		if len(f.Errors) == 0 {
			t.Errorf("%s: the attacker tried nothing:\n%s", where, data)
		}
	}
	ev := eventstest.Watch(t, conn.JS, events.SubjectRepo(w.store.Key))

	// A build script in a warm command.
	c := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "base", "--json")
	c.Dir, c.Env = w.repo.Dir, childEnv(append(w.baseVars(), attackVars("warm.json")...)...)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("ferry base: %v\n%s", err, out)
	}
	check("a build script in a warm command", "warm.json")
	eventstest.For(ev, wait, func(r *events.BaseReady) bool { return r.Commit == w.repo.Head })

	// A command an agent runs, and a build script in its cargo call.
	spawn := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "spawn", "a1", "--json")
	spawn.Dir, spawn.Env = w.repo.Dir, childEnv(append(w.baseVars(), attackVars("spawn.json")...)...)
	out, err := spawn.Output()
	if err != nil {
		t.Fatalf("ferry spawn: %v", err)
	}
	var rec struct{ Worktree string }
	json.Unmarshal(out, &rec)
	run := exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "run", "a1", "--", os.Args[0])
	run.Dir, run.Env = rec.Worktree, childEnv(append(w.baseVars(), append(attackVars("run.json"), "FERRY_TEST_RUN_AS=attacker")...)...)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("ferry run: %v\n%s", err, out)
	}
	check("a command in an agent", "run.json")
	os.WriteFile(filepath.Join(rec.Worktree, "crates/probe/src/lib.rs"), []byte("pub fn probe() { let _ = 1; }\n"), 0o644)
	shimmed := append(childEnv(append(w.baseVars(), attackVars("shim.json")...)...), "PATH="+filepath.Join(w.home, "bin")+":"+os.Getenv("PATH"))
	cargo := exec.Command(filepath.Join(w.home, "bin", "cargo"), "build", "-p", "probe") // the shim
	cargo.Dir, cargo.Env = rec.Worktree, shimmed
	if out, err := cargo.CombinedOutput(); err != nil {
		t.Fatalf("cargo build in the agent: %v\n%s", err, out)
	}
	check("a build script in an agent's cargo call", "shim.json")
	// A copy agent's cargo calls enter their sandbox in place (package
	// inplace), not through the overlay's namespace.
	spawn = exec.Command(filepath.Join(testenv.Binaries(t), "ferry"), "spawn", "a2", "--backend", "copy", "--json")
	spawn.Dir, spawn.Env = w.repo.Dir, childEnv(w.baseVars()...)
	if out, err = spawn.Output(); err != nil {
		t.Fatalf("ferry spawn --backend copy: %v", err)
	}
	json.Unmarshal(out, &rec)
	os.WriteFile(filepath.Join(rec.Worktree, "crates/probe/src/lib.rs"), []byte("pub fn probe() { let _ = 2; }\n"), 0o644)
	cargo = exec.Command(filepath.Join(w.home, "bin", "cargo"), "build", "-p", "probe")
	cargo.Dir, cargo.Env = rec.Worktree, append(childEnv(append(w.baseVars(), attackVars("copy.json")...)...), "PATH="+filepath.Join(w.home, "bin")+":"+os.Getenv("PATH"))
	if out, err := cargo.CombinedOutput(); err != nil {
		t.Fatalf("cargo build in the copy agent: %v\n%s", err, out)
	}
	check("a build script in a copy agent's cargo call", "copy.json")

	// The same attacker on the host, outside every sandbox, reaches the bus.
	host := exec.Command(os.Args[0])
	host.Env = append(childEnv(attackVars("host.json")...), "FERRY_TEST_RUN_AS=attacker")
	if out, err := host.CombinedOutput(); err != nil {
		t.Fatalf("the attacker on the host: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(filepath.Join(reports, "host.json"))
	var f attackFindings
	if json.Unmarshal(data, &f); f.Token == "" || !f.Published || len(f.EnvBus) == 0 {
		t.Fatalf("on the host the attacker should find the token and publish, so the checks above can fail:\n%s", data)
	}
	if _, err := os.Stat(filepath.Join(w.home, "bus")); errors.Is(err, fs.ErrNotExist) {
		t.Fatal("no bus dir")
	}
}
