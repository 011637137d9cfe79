// Command demo shows Ferry end to end on an embedded default: it generates a
// sample Cargo workspace, starts the pipeline (`ferry up`: the watcher
// hosting the bus, the builder, gc), lets it build the base of HEAD and of
// a new commit, spawns three agents, edits one, builds all three through the
// cargo shim, prints the event log, and stops everything. `make demo` runs it.
//
// The sample workspace has registry crates (fixture.RegistryDeps) from Debian's
// crate packages, which script/bootstrap installs. Where they cannot be had
// (no root, not Debian) the demo generates the workspace without them and
// says so, rather than failing: what it shows does not depend on them.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding Ferry's binaries")
	dir := flag.String("dir", "", "work directory (default: a new temporary directory)")
	keep := flag.Bool("keep", false, "keep the work directory")
	flag.Parse()
	if err := run(*bin, *dir, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo: error:", err)
		os.Exit(1)
	}
}

type demo struct {
	bin, repoDir, home string
}

func (d *demo) ferry(args ...string) ([]byte, time.Duration, error) {
	c := exec.Command(filepath.Join(d.bin, "ferry"), args...)
	c.Dir = d.repoDir
	c.Env = append(os.Environ(), "FERRY_HOME="+d.home)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	t := time.Now()
	out, err := c.Output()
	dt := time.Since(t)
	if err != nil {
		return out, dt, fmt.Errorf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), out)
	}
	return out, dt, nil
}

type baseEntry struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Current bool   `json:"current"`
	Record  *struct {
		Commit  string
		Target  string
		MntSrc  string `json:"mnt_src"`
		Timings struct{ Warm, Total float64 }
	} `json:"record"`
}

// waitCurrent waits until the current base is ready at commit.
func (d *demo) waitCurrent(commit string, timeout time.Duration) (*baseEntry, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, _, err := d.ferry("base", "list", "--json")
		if err == nil {
			var list []baseEntry
			json.Unmarshal(out, &list)
			for _, e := range list {
				if e.Current && e.State == "ready" && e.Record != nil && e.Record.Commit == commit {
					return &e, nil
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("no ready base for %s after %v", commit[:12], timeout)
}

func run(bin, dir string, keep bool) error {
	if err := fixture.CheckCommands(); err != nil {
		return fmt.Errorf("%w\n  hint: run script/bootstrap", err)
	}
	opts, what := fixture.Options{}, "path deps, proc macro, build script, "+strings.Join(fixture.RegistryDeps, ", ")
	var noRegistry *fixture.RegistryError
	if errors.As(fixture.CheckRegistry(""), &noRegistry) {
		opts.NoRegistry, what = true, "path deps, proc macro, build script; no registry crates"
	}
	bin, _ = filepath.Abs(bin)
	if dir == "" {
		tmp, err := os.MkdirTemp("", "ferry-demo-")
		if err != nil {
			return err
		}
		dir = tmp
		if !keep {
			defer os.RemoveAll(dir)
		}
	}
	d := &demo{bin: bin, repoDir: filepath.Join(dir, "workspace"), home: filepath.Join(dir, "ferry-home")}

	step("1. generate a sample Cargo workspace (" + what + ")")
	if noRegistry != nil {
		note := noRegistry.Dir + " lacks the crate sources " + strings.Join(noRegistry.Missing, ", ")
		if noRegistry.Err != nil {
			note = "no crate sources (" + noRegistry.Err.Error() + ")"
		}
		fmt.Printf("   note: %s;\n", note)
		fmt.Printf("   the workspace leaves out %s; the rest of the demo is the same with them\n", strings.Join(fixture.RegistryDeps, " and "))
		fmt.Printf("   hint: %s\n", noRegistry.Hint())
	}
	t := time.Now()
	repo, err := fixture.Generate(d.repoDir, opts)
	if err != nil {
		return err
	}
	fmt.Printf("   %s at commit %s (%.1fs)\n", d.repoDir, repo.Head[:12], time.Since(t).Seconds())

	step("2. ferry up: the watcher (hosting the embedded bus), the base builder and gc")
	upLog, err := os.Create(filepath.Join(dir, "ferry-up.log"))
	if err != nil {
		return err
	}
	up := exec.Command(filepath.Join(bin, "ferry"), "up", "--interval", "0.5")
	up.Dir = d.repoDir
	up.Env = append(os.Environ(), "FERRY_HOME="+d.home)
	up.Stdout, up.Stderr = upLog, upLog
	if err := up.Start(); err != nil {
		return err
	}
	stopped := false
	stopUp := func() error {
		if stopped {
			return nil
		}
		stopped = true
		up.Process.Signal(syscall.SIGTERM)
		return up.Wait()
	}
	defer stopUp()
	fmt.Printf("   started (log: %s)\n", upLog.Name())

	step("3. the pipeline builds the base of HEAD: checkout in the store, stamped, warm build in the namespace sandbox")
	t = time.Now()
	b, err := d.waitCurrent(repo.Head, 10*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("   base %s ready %.1fs after start (warm build %.1fs)\n", b.ID, time.Since(t).Seconds(), b.Record.Timings.Warm)
	md, err := exec.Command(filepath.Join(b.Record.Target, "debug", fixture.BinName), fixture.ManifestDirFlag).Output()
	if err != nil {
		return err
	}
	fmt.Printf("   app --manifest-dir -> %s  (the canonical path, the same for every base and agent)\n", strings.TrimSpace(string(md)))
	coldWarm := b.Record.Timings.Warm

	step("4. a new commit: the watcher sees it, the builder builds its base, gc deletes the old one")
	if err := repo.Write("README.md", "A new commit for the demo.\n"); err != nil {
		return err
	}
	next, err := repo.Commit("demo: a new commit")
	if err != nil {
		return err
	}
	t = time.Now()
	b, err = d.waitCurrent(next, 10*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("   base %s ready %.1fs after the commit\n", b.ID, time.Since(t).Seconds())

	step("5. ferry spawn three agents from the base (worktree, verified stamping, fork of the target)")
	worktrees := map[string]string{}
	names := []string{"alice", "bob", "carol"}
	for _, name := range names {
		out, dt, err := d.ferry("spawn", name, "--json")
		if err != nil {
			return err
		}
		var a struct {
			Worktree string
			Backend  string
			Stamp    struct{ Files, Dirs int }
			Fork     struct{ Files int }
		}
		json.Unmarshal(out, &a)
		worktrees[name] = a.Worktree
		fork := fmt.Sprintf("%s fork of %d files", a.Backend, a.Fork.Files)
		if a.Fork.Files == 0 {
			fork = a.Backend + " fork on the base's target (nothing copied)"
		}
		fmt.Printf("   %-6s %.2fs  %s, %d files + %d dirs stamped\n", name, dt.Seconds(), fork, a.Stamp.Files, a.Stamp.Dirs)
	}

	step("6. bob edits one file; all three build through the shim (the cargo on their PATH is Ferry's)")
	lib := filepath.Join(worktrees["bob"], fixture.LibPath(fixture.ChainC))
	f, err := os.OpenFile(lib, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	f.WriteString("\n// bob was here\n")
	f.Close()
	for _, name := range names {
		// As an agent would run it: `cargo` resolved through PATH is the shim.
		c := exec.Command(filepath.Join(d.home, "bin", "cargo"), "build", "--workspace", "--all-targets")
		c.Dir = worktrees[name]
		c.Env = append(os.Environ(), "FERRY_HOME="+d.home, "PATH="+filepath.Join(d.home, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
		t := time.Now()
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("cargo build in %s: %v\n%s", name, err, out)
		}
		fmt.Printf("   %-6s cargo build %5.2fs, %d crate(s) compiled\n", name, time.Since(t).Seconds(), strings.Count(string(out), "Compiling"))
	}
	fmt.Printf("   (a cold build of the same commands took %.1fs in the first base)\n", coldWarm)

	step("7. ferry list")
	out, _, err := d.ferry("list")
	if err != nil {
		return err
	}
	fmt.Print(indent(string(out)))

	step("8. ferry stats: how warm the agents' first builds were; ferry why bob: what his build compiled, and why")
	if out, _, err = d.ferry("stats"); err != nil {
		return err
	}
	fmt.Print(indent(string(out)))
	if out, _, err = d.ferry("why", "bob"); err != nil {
		return err
	}
	fmt.Print(indent(string(out)))

	for _, name := range names {
		if _, _, err := d.ferry("rm", "--force", name); err != nil {
			return err
		}
	}

	step("9. ferry events: what the pipeline said")
	time.Sleep(time.Second) // let gc react to the last removals
	out, _, err = d.ferry("events")
	if err != nil {
		return err
	}
	fmt.Print(indent(string(out)))

	step("10. stop: SIGTERM to ferry up stops the watcher, the builder and gc")
	t = time.Now()
	if err := stopUp(); err != nil {
		return fmt.Errorf("ferry up: %v", err)
	}
	fmt.Printf("   stopped in %.2fs\n", time.Since(t).Seconds())

	step("11. bad input gets a clear error, a hint and a documented exit code")
	_, _, err = d.ferry("base", "--rev", "no-such-branch")
	fmt.Print(indent(fmt.Sprint(err)))
	fmt.Println("\ndone.")
	return nil
}

func step(s string) { fmt.Printf("\n%s\n", s) }

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("   " + l + "\n")
	}
	return b.String()
}
