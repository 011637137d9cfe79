package ferrycmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/doctor"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/hook"
	"github.com/ferrydev/ferry/pkg/platform"
	"github.com/ferrydev/ferry/pkg/store"
)

type doctorCmd struct {
	JSON            bool `name:"json" help:"Print the report (or, with --apparmor-profile, the profile) as JSON."`
	AppArmorProfile bool `name:"apparmor-profile" help:"Print the AppArmor profile that lets Ferry's binaries create user namespaces, instead of diagnosing."`
}

// runDoctor is `ferry doctor`. Its answer is the report, on stdout, and its
// exit code is the report's: 0 when spawn can work here, 4 when the sandbox
// is blocked, or the code of whatever else spawn would fail with.
func runDoctor(args []string, io cli.IO) int {
	var c doctorCmd
	_, code, done := cli.Parse("ferry doctor",
		"Diagnose this host for Ferry: every check with its result and fix, and what spawn would do in the repository of the working directory (fork backend, isolation, and why).",
		[]string{"ferry doctor", "ferry doctor --json", "ferry doctor --apparmor-profile"}, &c, args, io)
	if done {
		return code
	}
	h := platform.Real()
	if c.AppArmorProfile {
		path, text := h.AppArmorProfile()
		if c.JSON {
			writeJSONText(io.Stdout, map[string]string{"path": path, "profile": text})
		} else {
			fmt.Fprint(io.Stdout, text)
		}
		return 0
	}
	r := doctor.Run(doctorOptions(h))
	if c.JSON {
		writeJSONText(io.Stdout, r)
	} else {
		printDoctor(io.Stdout, r)
	}
	return r.ExitCode
}

// doctorOptions finds the repository of the working directory, its settings
// and its store, without creating anything. Not being in a repository is an
// answer (host checks only), as is a broken configuration.
func doctorOptions(h platform.Host) doctor.Options {
	o := doctor.Options{Host: h}
	repo, err := git.Open(".")
	if err != nil {
		o.NotRepo = err
		return o
	}
	o.Repo, o.Git = repo.Top, repo
	settings, note, err := cli.Settings(repo)
	if err != nil {
		o.ConfigErr = err
		return o
	}
	o.ConfigNote = note
	common, err := repo.CommonDir()
	if err != nil {
		o.ConfigErr = err
		return o
	}
	s, err := store.Open(settings.StoreParent, common, repo.Top)
	if err != nil {
		o.ConfigErr = err
		return o
	}
	o.Settings, o.Store = settings, s
	o.PATH = os.Getenv("PATH")
	gh := &doctor.GitHook{}
	if dir, err := hook.GitHooksDir(repo); err != nil {
		gh.Err = err
	} else {
		gh.Path = filepath.Join(dir, hook.GitHook)
		gh.Installed = hook.GitInstalled(dir)
	}
	o.GitHook = gh
	o.Claude = claudeCode(repo.Top)
	return o
}

// claudeCode reads the claude on PATH and the settings files (local and
// project of the checkout at top, the user's) that hold Ferry's hooks;
// nil when there is neither.
func claudeCode(top string) *doctor.ClaudeCode {
	c := &doctor.ClaudeCode{Hooks: map[string][]string{}}
	configDir := os.Getenv("CLAUDE_CONFIG_DIR")
	if configDir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			configDir = filepath.Join(home, ".claude")
		}
	}
	for _, scope := range hook.Scopes {
		path, err := hook.SettingsPath(scope, top, configDir)
		if err != nil || (scope == hook.ScopeUser && configDir == "") {
			continue
		}
		if evs, err := hook.InstalledEvents(path); err == nil && len(evs) > 0 {
			c.Hooks[path] = evs
		}
	}
	v, bin, known := hook.InstalledClaude()
	if bin == "" && len(c.Hooks) == 0 {
		return nil
	}
	c.Bin = bin
	if known {
		c.Version, c.Gaps = v.String(), hook.ClaudeGaps(v)
		want := hook.ClaudeEvents(v, true)
		for path, evs := range c.Hooks {
			for _, ev := range evs {
				if !slices.Contains(want, ev) {
					c.Dropped = append(c.Dropped, path)
					break
				}
			}
		}
		slices.Sort(c.Dropped)
	}
	return c
}

// printDoctor renders a report for a terminal: where, a table of checks,
// what spawn would do, then each blocker's problem and fix.
func printDoctor(w io.Writer, r *doctor.Report) {
	fmt.Fprintf(w, "host        Linux %s, uid %d\n", orUnknown(r.Host.Kernel), r.Host.Uid)
	if r.Repository != "" {
		fmt.Fprintf(w, "repository  %s\n", r.Repository)
	}
	if r.Store != "" {
		probed := ""
		for _, c := range r.Checks {
			if c.Path != "" && c.Path != r.Store {
				probed = "; probed in " + c.Path + ", on the same filesystem"
				break
			}
		}
		if _, err := os.Stat(r.Store); err != nil {
			fmt.Fprintf(w, "store       %s (not created yet%s)\n", r.Store, probed)
		} else {
			fmt.Fprintf(w, "store       %s\n", r.Store)
		}
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note        %s\n", r.Note)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
	}
	tw.Flush()

	if sp := r.Spawn; sp != nil {
		fmt.Fprintln(w, "\nspawn here:")
		backend := sp.Backend
		if backend == "" {
			backend = "refused"
		}
		fmt.Fprintf(w, "  backend    %s: %s\n", backend, sp.BackendReason)
		fmt.Fprintf(w, "  isolation  %s: %s\n", sp.Isolation, sp.IsolationReason)
	}
	fmt.Fprintln(w)
	switch {
	case r.Err() == nil && r.Spawn != nil:
		fmt.Fprintln(w, "spawn can work here.")
	case r.Err() == nil:
		fmt.Fprintln(w, "the sandbox works on this host; run `ferry doctor` in a repository for its store.")
	default:
		fmt.Fprintf(w, "spawn would fail here (exit %d): %s\n", r.ExitCode, cli.Messages(r.Err())[0])
	}

	shown := map[platform.Blocker]string{} // a blocker, without its cause, and the check it was shown under
	for _, c := range r.Checks {
		if c.Status == doctor.OK {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s):\n", c.Name, c.Status)
		if b := c.Blocker; b != nil {
			key := platform.Blocker{Check: b.Check, Setting: b.Setting, Value: b.Value, Problem: b.Problem, Remedy: b.Remedy}
			if first, ok := shown[key]; ok {
				fmt.Fprintf(w, "  blocked by the same setting as %s, above.\n", first)
				continue
			}
			shown[key] = c.Name
			fmt.Fprintf(w, "  %s\n", b.Problem)
			writeIndented(w, "  fix: ", b.Remedy)
		} else {
			fmt.Fprintf(w, "  %s\n", c.Detail)
			if c.Hint != "" {
				writeIndented(w, "  fix: ", c.Hint)
			}
		}
	}
}

// writeIndented writes text with prefix before its first line and the
// prefix's width of spaces before the others.
func writeIndented(w io.Writer, prefix, text string) {
	pad := strings.Repeat(" ", len(prefix))
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if i == 0 {
			fmt.Fprintf(w, "%s%s\n", prefix, line)
		} else {
			fmt.Fprintf(w, "%s%s\n", pad, line)
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "(release unknown)"
	}
	return s
}

type setupCmd struct {
	AppArmor setupAppArmorCmd `cmd:"" name:"apparmor" help:"Say whether AppArmor stands in Ferry's way and print the one script, to run with sudo, that fixes it."`
}

type setupAppArmorCmd struct {
	JSON   bool `name:"json" help:"Print the facts and the decision as JSON."`
	Script bool `name:"script" help:"Print only the script (nothing when there is nothing to do), for: ferry setup apparmor --script | sudo sh"`
}

// runSetup is `ferry setup apparmor`. It reads and advises; it never runs
// sudo or changes the host.
func runSetup(args []string, io cli.IO) int {
	var c setupCmd
	_, code, done := cli.Parse("ferry setup",
		"Print what the host needs for Ferry and the script that does it; Ferry never runs it or sudo itself.",
		[]string{"ferry setup apparmor", "ferry setup apparmor --script | sudo sh"}, &c, args, io)
	if done {
		return code
	}
	a := c.AppArmor
	s := doctor.SetupAppArmor(platform.Real())
	switch {
	case a.JSON:
		writeJSONText(io.Stdout, s)
	case a.Script:
		fmt.Fprint(io.Stdout, s.Decision.Script)
	default:
		printAppArmorSetup(io.Stdout, s)
	}
	return 0
}

func printAppArmorSetup(w io.Writer, s doctor.AppArmorSetup) {
	f := s.Facts
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	enabled := "no AppArmor in this kernel (no /sys/module/apparmor)"
	if f.Enabled != nil {
		enabled = yesNo(*f.Enabled)
	}
	restrict := "absent"
	if f.Restrict != nil {
		restrict = fmt.Sprint(*f.Restrict)
	}
	loaded := "unknown: " + f.LoadedError
	if f.Loaded != nil {
		loaded = yesNo(*f.Loaded)
	}
	fmt.Fprintf(tw, "AppArmor enabled\t%s\n", enabled)
	fmt.Fprintf(tw, "%s\t%s\n", platform.SettingAppArmorRestrict, restrict)
	fmt.Fprintf(tw, "profile %q loaded\t%s\n", f.Profile, loaded)
	fmt.Fprintf(tw, "this process\t%s\n", orUnknownLabel(f.Label))
	fmt.Fprintf(tw, "profile file\t%s\n", f.Path)
	tw.Flush()
	fmt.Fprintf(w, "\ndecision: %s\n", s.Decision.Action)
	writeIndented(w, "  ", s.Decision.Reason)
	if s.Decision.Script != "" {
		fmt.Fprintf(w, "\nRun this script as root (ferry setup apparmor --script | sudo sh):\n\n%s", s.Decision.Script)
	}
}

// writeJSONText is writeJSON without HTML escaping: profiles, scripts and
// remedies hold <, > and &, which should read as themselves.
func writeJSONText(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orUnknownLabel(label string) string {
	if label == "" {
		return "label unknown"
	}
	return label
}
