package platform

import (
	"os"
	"path/filepath"
	"strings"
)

// AppArmor is what the host shows about AppArmor and Ferry's profile: the
// facts `ferry setup apparmor` decides from. A nil pointer is a fact that
// could not be read.
type AppArmor struct {
	// Enabled is /sys/module/apparmor/parameters/enabled (Y or N); nil when
	// absent, a kernel without AppArmor.
	Enabled *bool `json:"enabled"`
	// Restrict is kernel.apparmor_restrict_unprivileged_userns; nil when
	// absent, a kernel without the restriction.
	Restrict *int `json:"restrict_unprivileged_userns"`
	// Profile is the name of Ferry's profile (see AppArmorProfile), Path its
	// file and Text its content.
	Profile string `json:"profile"`
	Path    string `json:"path"`
	Text    string `json:"text"`
	// Loaded says whether Profile is among the loaded profiles
	// (/sys/kernel/security/apparmor/profiles); nil when that list cannot
	// be read, which usually takes root, and LoadedError says why.
	Loaded      *bool  `json:"loaded"`
	LoadedError string `json:"loaded_error,omitempty"`
	// Label is this process's AppArmor label ("unconfined", "ferry
	// (unconfined)"); "" when it cannot be read.
	Label string `json:"label"`
	// Uid is the caller's uid: root is exempt from the restriction.
	Uid int `json:"uid"`
	// Exe is the Ferry binary the profile is made for.
	Exe string `json:"exe"`
}

// AppArmor reads AppArmor's state under the Host's roots.
func (h Host) AppArmor() AppArmor {
	a := AppArmor{Label: h.apparmorLabel(), Uid: h.Uid, Exe: h.Exe}
	a.Profile, _ = h.apparmorTarget()
	a.Path, a.Text = h.AppArmorProfile()
	if data, err := os.ReadFile(filepath.Join(h.sys(), "module", "apparmor", "parameters", "enabled")); err == nil {
		v := strings.TrimSpace(string(data))
		on := v == "Y" || v == "y" || v == "1"
		a.Enabled = &on
	}
	if v, ok := h.readInt(SettingAppArmorRestrict); ok {
		a.Restrict = &v
	}
	data, err := os.ReadFile(filepath.Join(h.sys(), "kernel", "security", "apparmor", "profiles"))
	if err != nil {
		a.LoadedError = err.Error()
		return a
	}
	loaded := false
	for line := range strings.SplitSeq(string(data), "\n") {
		name := line
		if i := strings.LastIndex(line, " ("); i >= 0 {
			name = line[:i]
		}
		if name == a.Profile {
			loaded = true
			break
		}
	}
	a.Loaded = &loaded
	return a
}

// ConfinedBy returns the name of the profile in a label ("ferry" for
// "ferry (unconfined)"), or "" for an unconfined or unknown label.
func ConfinedBy(label string) string {
	if label == "" || label == "unconfined" {
		return ""
	}
	name, _, _ := strings.Cut(label, " (")
	return name
}
