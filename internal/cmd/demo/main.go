// Command demo shows Ferry on an embedded default: it generates a sample
// Cargo workspace, builds its base with the real binaries, reuses it, and
// prints what happened with timings. `make demo` runs it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/pkg/fixture"
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

func run(bin, dir string, keep bool) error {
	if err := fixture.CheckTools(fixture.DebianRegistry); err != nil {
		return fmt.Errorf("%w\n  hint: apt-get install librust-serde-dev librust-serde-derive-dev librust-regex-dev", err)
	}
	bin, _ = filepath.Abs(bin)
	if dir == "" {
		d, err := os.MkdirTemp("", "ferry-demo-")
		if err != nil {
			return err
		}
		dir = d
		if !keep {
			defer func() {
				cleanup(dir)
			}()
		}
	}
	repoDir := filepath.Join(dir, "workspace")
	home := filepath.Join(dir, "ferry-home")
	step("1. generate a sample Cargo workspace (path deps, proc macro, build script, serde, regex)")
	t := time.Now()
	repo, err := fixture.Generate(repoDir, fixture.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("   %s at commit %s (%.1fs)\n", repoDir, repo.Head[:12], time.Since(t).Seconds())

	ferry := func(args ...string) ([]byte, time.Duration, error) {
		c := exec.Command(filepath.Join(bin, "ferry"), args...)
		c.Dir = repoDir
		c.Env = append(os.Environ(), "FERRY_HOME="+home)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		t := time.Now()
		out, err := c.Output()
		d := time.Since(t)
		if err != nil {
			return out, d, fmt.Errorf("ferry %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), out)
		}
		return out, d, nil
	}

	step("2. ferry base: check out the commit in the store, stamp it, warm-build it in the namespace sandbox")
	out, d, err := ferry("base", "--json")
	if err != nil {
		return err
	}
	var rec struct {
		ID      string `json:"id"`
		Target  string `json:"target"`
		MntSrc  string `json:"mnt_src"`
		Stamped struct{ Files, Dirs int }
		Warm    []struct {
			Command string
			Seconds float64
		}
		Timings struct{ Worktree, Stamp, Warm, Finish, Total float64 }
		Reused  bool `json:"reused"`
	}
	if err := json.Unmarshal(out, &rec); err != nil {
		return err
	}
	fmt.Printf("   base %s built in %.1fs\n", rec.ID, d.Seconds())
	fmt.Printf("   worktree %.2fs, stamp %.3fs (%d files, %d dirs), finish %.2fs\n",
		rec.Timings.Worktree, rec.Timings.Stamp, rec.Stamped.Files, rec.Stamped.Dirs, rec.Timings.Finish)
	for _, w := range rec.Warm {
		fmt.Printf("   warm  %-45s %6.1fs\n", w.Command, w.Seconds)
	}

	step("3. the binary was built at the canonical path, the same for every base and agent")
	md, err := exec.Command(filepath.Join(rec.Target, "debug", fixture.BinName), fixture.ManifestDirFlag).Output()
	if err != nil {
		return err
	}
	fmt.Printf("   app --manifest-dir -> %s   (canonical src: %s)\n", strings.TrimSpace(string(md)), rec.MntSrc)

	step("4. ferry base again: the ready base is reused, nothing is built")
	out, d, err = ferry("base", "--json")
	if err != nil {
		return err
	}
	json.Unmarshal(out, &rec)
	fmt.Printf("   reused=%v in %.0fms\n", rec.Reused, float64(d.Microseconds())/1000)

	step("5. ferry base list")
	out, _, err = ferry("base", "list")
	if err != nil {
		return err
	}
	fmt.Print(indent(string(out)))

	step("6. ferry spawn three agents from the base (worktree, verified stamping, fork of the target)")
	worktrees := map[string]string{}
	for _, name := range []string{"alice", "bob", "carol"} {
		out, d, err := ferry("spawn", name, "--json")
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
		fmt.Printf("   %-6s %s  (%s fork of %d files, %d files + %d dirs stamped) %.2fs\n",
			name, a.Worktree, a.Backend, a.Fork.Files, a.Stamp.Files, a.Stamp.Dirs, d.Seconds())
	}

	step("7. bob edits one file; all three build through the shim (cargo on PATH is Ferry's)")
	lib := filepath.Join(worktrees["bob"], fixture.LibPath(fixture.ChainC))
	f, err := os.OpenFile(lib, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	f.WriteString("\n// bob was here\n")
	f.Close()
	shimPath := filepath.Join(home, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, name := range []string{"alice", "bob", "carol"} {
		// As an agent would: `cargo` resolved through PATH finds the shim.
		c := exec.Command(filepath.Join(home, "bin", "cargo"), "build", "--workspace", "--all-targets")
		c.Dir = worktrees[name]
		c.Env = append(os.Environ(), "FERRY_HOME="+home, "PATH="+shimPath)
		t := time.Now()
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("cargo build in %s: %v\n%s", name, err, out)
		}
		compiled := strings.Count(string(out), "Compiling")
		fmt.Printf("   %-6s cargo build: %.2fs, %d crate(s) compiled\n", name, time.Since(t).Seconds(), compiled)
	}
	fmt.Printf("   (the base's own cold warm build took %.1fs)\n", rec.Timings.Warm)

	step("8. ferry list")
	out, _, err = ferry("list")
	if err != nil {
		return err
	}
	fmt.Print(indent(string(out)))

	step("9. a bad revision gets a clear error, a hint and exit code 2")
	_, _, err = ferry("base", "--rev", "no-such-branch")
	fmt.Print(indent(fmt.Sprint(err)))

	for _, name := range []string{"alice", "bob", "carol"} {
		ferry("rm", "--force", name)
	}
	fmt.Println("\ndone. The event pipeline (ferry up) comes next; see the README.")
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

// cleanup removes the demo's directory, unregistering the base worktrees
// with the repository that is removed alongside.
func cleanup(dir string) {
	os.RemoveAll(dir)
}
