package doctor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/platform"
)

func ptr[T any](v T) *T { return &v }

// facts are the AppArmor facts of a Ferry installed in /opt/ferry/bin on an
// Ubuntu 24.04 host without its profile; each row of the table changes some.
func facts(change func(*platform.AppArmor)) platform.AppArmor {
	h := platform.Host{Exe: "/opt/ferry/bin/ferry", Uid: 1000}
	path, text := h.AppArmorProfile()
	f := platform.AppArmor{
		Enabled: ptr(true), Restrict: ptr(1), Profile: "ferry", Path: path, Text: text,
		Loaded: ptr(false), Label: "unconfined", Uid: 1000, Exe: h.Exe,
	}
	if change != nil {
		change(&f)
	}
	return f
}

func TestDecideAppArmor(t *testing.T) {
	cases := []struct {
		name   string
		facts  platform.AppArmor
		action Action
		reason []string // substrings of the reason
	}{
		{"Ubuntu 24.04 without the profile", facts(nil), ActionInstall,
			[]string{"= 1", `profile "ferry" is not loaded`, "keeps the restriction for every other program"}},
		{"profiles unreadable without root", facts(func(f *platform.AppArmor) { f.Loaded = nil }), ActionInstall,
			[]string{"not known to be loaded"}},
		{"label unreadable, profile not loaded", facts(func(f *platform.AppArmor) { f.Label = "" }), ActionInstall, nil},
		{"as root: still install, for everyone else", facts(func(f *platform.AppArmor) { f.Uid = 0 }), ActionInstall,
			[]string{"Root is exempt"}},
		{"running under Ferry's profile", facts(func(f *platform.AppArmor) { f.Loaded, f.Label = ptr(true), "ferry (unconfined)" }), ActionNone,
			[]string{"already runs under its profile"}},
		{"running under Ferry's profile, list unreadable", facts(func(f *platform.AppArmor) { f.Loaded, f.Label = nil, "ferry (unconfined)" }), ActionNone, nil},
		{"profile loaded but attached elsewhere", facts(func(f *platform.AppArmor) { f.Loaded = ptr(true) }), ActionInstall,
			[]string{"does not attach to /opt/ferry/bin/ferry", "reinstall"}},
		{"profile loaded, label unreadable", facts(func(f *platform.AppArmor) { f.Loaded, f.Label = ptr(true), "" }), ActionNone,
			[]string{"is loaded"}},
		{"confined by another program's profile", facts(func(f *platform.AppArmor) { f.Label = "snap.tool.ferry (enforce)" }), ActionAmendProfile,
			[]string{`"snap.tool.ferry"`, "userns,", "sysctl kernel.apparmor_restrict_unprivileged_userns=0"}},
		{"restriction off", facts(func(f *platform.AppArmor) { f.Restrict = ptr(0) }), ActionNone,
			[]string{"= 0"}},
		{"no restriction sysctl", facts(func(f *platform.AppArmor) { f.Restrict = nil }), ActionNone,
			[]string{"has no kernel.apparmor_restrict_unprivileged_userns"}},
		{"AppArmor disabled", facts(func(f *platform.AppArmor) { f.Enabled = ptr(false) }), ActionNone,
			[]string{"disabled"}},
		{"no AppArmor in the kernel", facts(func(f *platform.AppArmor) { f.Enabled, f.Restrict, f.Loaded, f.Label = nil, nil, nil, "" }), ActionNone, nil},
		{"module state unknown, restriction on", facts(func(f *platform.AppArmor) { f.Enabled = nil }), ActionInstall, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := DecideAppArmor(c.facts)
			if d.Action != c.action {
				t.Errorf("action %s, want %s (%s)", d.Action, c.action, d.Reason)
			}
			if d.Reason == "" || !strings.HasSuffix(d.Reason, ".") && !strings.HasSuffix(d.Reason, ".)") {
				t.Errorf("reason %q", d.Reason)
			}
			for _, w := range c.reason {
				if !strings.Contains(d.Reason, w) {
					t.Errorf("reason lacks %q: %s", w, d.Reason)
				}
			}
			if (d.Script != "") != (d.Action == ActionInstall) {
				t.Errorf("action %s with script %q", d.Action, d.Script)
			}
			for line := range strings.SplitSeq(d.Script, "\n") {
				if !strings.HasPrefix(line, "#") && strings.Contains(line, "sudo") {
					t.Errorf("the script runs sudo itself: %s", line)
				}
			}
		})
	}
}

// TestInstallScriptRuns runs the install script with the profile's path
// moved under a temp dir and apparmor_parser stubbed: it must write the
// profile byte for byte and load it.
func TestInstallScriptRuns(t *testing.T) {
	root := t.TempDir()
	f := facts(func(f *platform.AppArmor) { f.Path = filepath.Join(root, "etc", "apparmor.d", "ferry") })
	d := DecideAppArmor(f)
	if d.Action != ActionInstall {
		t.Fatalf("action %s", d.Action)
	}
	bin := filepath.Join(root, "bin")
	os.Mkdir(bin, 0o755)
	stub := "#!/bin/sh\necho \"$*\" >>" + shellQuote(filepath.Join(root, "calls")) + "\n"
	if err := os.WriteFile(filepath.Join(bin, "apparmor_parser"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh")
	sh.Stdin = strings.NewReader(d.Script)
	sh.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("script failed: %v\n%s\nscript:\n%s", err, out, d.Script)
	}
	got, err := os.ReadFile(f.Path)
	if err != nil || string(got) != f.Text {
		t.Errorf("profile written:\n%q, %v\nwant:\n%q", got, err, f.Text)
	}
	if !strings.Contains(f.Text, "profile ferry /opt/ferry/bin/ferry{,-*} flags=(unconfined) {\n  userns,\n}") {
		t.Errorf("profile text:\n%s", f.Text)
	}
	calls, _ := os.ReadFile(filepath.Join(root, "calls"))
	if string(calls) != "-r "+f.Path+"\n" {
		t.Errorf("apparmor_parser calls: %q", calls)
	}
}

// TestSetupAppArmorPrepared reads facts from prepared roots end to end.
func TestSetupAppArmorPrepared(t *testing.T) {
	h := preparedHost(t, 1000, map[string]string{apparmorFile: "1\n", labelFile: "unconfined\n"})
	h.Sys = t.TempDir()
	for rel, content := range map[string]string{
		"module/apparmor/parameters/enabled": "Y\n",
		"kernel/security/apparmor/profiles":  "/usr/bin/man (enforce)\n",
	} {
		p := filepath.Join(h.Sys, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	s := SetupAppArmor(h)
	if s.Decision.Action != ActionInstall || s.Facts.Loaded == nil || *s.Facts.Loaded || s.Facts.Path != "/etc/apparmor.d/ferry" {
		t.Errorf("setup %+v", s)
	}
	os.WriteFile(filepath.Join(h.Sys, "kernel/security/apparmor/profiles"), []byte("ferry (unconfined)\n"), 0o644)
	os.WriteFile(filepath.Join(h.ProcSys, "..", "self/attr/apparmor/current"), []byte("ferry (unconfined)\n"), 0o644)
	if s := SetupAppArmor(h); s.Decision.Action != ActionNone {
		t.Errorf("with the profile loaded and in use: %+v", s.Decision)
	}
}
