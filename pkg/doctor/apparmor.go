package doctor

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/pkg/platform"
)

// Action is what `ferry setup apparmor` advises.
type Action string

const (
	// ActionNone: AppArmor does not stand in Ferry's way.
	ActionNone Action = "nothing"
	// ActionInstall: install (or reinstall) Ferry's profile; Script does it.
	ActionInstall Action = "install-profile"
	// ActionAmendProfile: Ferry runs under another program's profile, which
	// a profile of Ferry's own cannot override; that profile needs a userns
	// rule, which only its owner can add.
	ActionAmendProfile Action = "amend-profile"
)

// Decision is the advice and the one script that carries it out.
type Decision struct {
	Action Action `json:"action"`
	// Reason says why, in one or two sentences.
	Reason string `json:"reason"`
	// Script is a POSIX shell script to run as root (sudo sh), "" when
	// there is nothing to run. Ferry never runs it itself.
	Script string `json:"script,omitempty"`
}

// AppArmorSetup is the answer of `ferry setup apparmor`.
type AppArmorSetup struct {
	Facts    platform.AppArmor `json:"facts"`
	Decision Decision          `json:"decision"`
}

// SetupAppArmor reads the facts from h and decides.
func SetupAppArmor(h platform.Host) AppArmorSetup {
	f := h.AppArmor()
	return AppArmorSetup{Facts: f, Decision: DecideAppArmor(f)}
}

// DecideAppArmor decides from the facts alone, so every row of the decision
// table is tested without a host that has it:
//
//   - AppArmor disabled, or the restriction sysctl absent or 0: nothing to
//     do, user namespaces are not restricted by AppArmor;
//   - restricted, and this process already runs under Ferry's profile:
//     nothing to do;
//   - restricted, and this process runs under another profile: amend that
//     profile (a profile of Ferry's own would not apply);
//   - restricted, and Ferry's profile loaded while this process is
//     unconfined: the loaded profile attaches to another path (an older
//     install); reinstall it for this one;
//   - restricted, the profile loaded and this process's label unreadable:
//     nothing to do, since the profile is what a restricted host needs;
//   - restricted, the profile not loaded (or not known to be): install it.
func DecideAppArmor(f platform.AppArmor) Decision {
	const sysctl = platform.SettingAppArmorRestrict
	switch {
	case f.Enabled != nil && !*f.Enabled:
		return Decision{Action: ActionNone, Reason: "AppArmor is disabled on this kernel, so it restricts nothing Ferry does."}
	case f.Restrict == nil:
		return Decision{Action: ActionNone, Reason: "This kernel has no " + sysctl + ", so AppArmor does not restrict user namespaces here."}
	case *f.Restrict == 0:
		return Decision{Action: ActionNone, Reason: sysctl + " = 0: AppArmor lets every program create user namespaces. (With Ferry's profile installed, the restriction can be turned back on for the rest.)"}
	}
	confined := platform.ConfinedBy(f.Label)
	root := ""
	if f.Uid == 0 {
		root = " Root is exempt from the restriction, but Ferry run by any other user is not."
	}
	switch {
	case confined == f.Profile:
		return Decision{Action: ActionNone, Reason: fmt.Sprintf("AppArmor restricts user namespaces (%s = %d), and Ferry already runs under its profile %q, which allows them.", sysctl, *f.Restrict, f.Profile)}
	case confined != "":
		return Decision{Action: ActionAmendProfile, Reason: fmt.Sprintf(
			"AppArmor restricts user namespaces (%s = %d), and Ferry runs under the profile %q, which takes precedence over a profile of Ferry's own: add the rule `userns,` to %q (its file is under /etc/apparmor.d), or lift the restriction for every program with sysctl %s=0.",
			sysctl, *f.Restrict, confined, confined, sysctl)}
	case f.Loaded != nil && *f.Loaded && f.Label == "unconfined":
		return Decision{Action: ActionInstall, Script: installScript(f), Reason: fmt.Sprintf(
			"AppArmor restricts user namespaces (%s = %d), and the profile %q is loaded but does not attach to %s, which runs unconfined: reinstall it for this install.%s",
			sysctl, *f.Restrict, f.Profile, exeOrDefault(f.Exe), root)}
	case f.Loaded != nil && *f.Loaded:
		return Decision{Action: ActionNone, Reason: fmt.Sprintf("AppArmor restricts user namespaces (%s = %d), and Ferry's profile %q is loaded.", sysctl, *f.Restrict, f.Profile)}
	}
	state := "is not loaded"
	if f.Loaded == nil {
		state = "is not known to be loaded (the list of loaded profiles is unreadable without root)"
	}
	return Decision{Action: ActionInstall, Script: installScript(f), Reason: fmt.Sprintf(
		"AppArmor restricts user namespaces (%s = %d), so Ferry's sandbox cannot mount inside one, and Ferry's profile %q %s: install it, which keeps the restriction for every other program.%s",
		sysctl, *f.Restrict, f.Profile, state, root)}
}

// installScript writes the profile and loads it. The file is loaded again
// at every boot, so this is also the persistent form.
func installScript(f platform.AppArmor) string {
	var s strings.Builder
	s.WriteString("#!/bin/sh\n")
	s.WriteString("# Ferry's AppArmor profile: lets Ferry's binaries create user namespaces while\n")
	s.WriteString("# " + platform.SettingAppArmorRestrict + " restricts every other program.\n")
	s.WriteString("# Run it as root, for example: ferry setup apparmor --script | sudo sh\n")
	s.WriteString("set -eu\n")
	s.WriteString("mkdir -p " + shellQuote(filepath.Dir(f.Path)) + "\n")
	s.WriteString("cat >" + shellQuote(f.Path) + " <<'FERRY_PROFILE'\n")
	s.WriteString(f.Text)
	if !strings.HasSuffix(f.Text, "\n") {
		s.WriteString("\n")
	}
	s.WriteString("FERRY_PROFILE\n")
	s.WriteString("apparmor_parser -r " + shellQuote(f.Path) + "\n")
	s.WriteString("echo " + shellQuote("loaded "+f.Path+"; start Ferry again for it to apply") + "\n")
	return s.String()
}

func exeOrDefault(exe string) string {
	if exe == "" {
		return "Ferry"
	}
	return exe
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
