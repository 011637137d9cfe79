package cargoenv

import (
	"os"
	"path/filepath"
	"testing"
)

// The CI rule's decision, one precedence source at a time: CI or TF_BUILD
// (set to anything, empty included) asks for the switch; a variable, a
// --config value (pair or file) or a configuration file Cargo reads that
// sets build.incremental takes it back; anything else leaves it.
func TestIncrementalUnderCI(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws", "crates", "a")
	os.MkdirAll(ws, 0o755)
	write := func(p, body string) string {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sets := write(filepath.Join(dir, "sets.toml"), "[build]\nincremental = false\n")
	other := write(filepath.Join(dir, "other.toml"), "[build]\njobs = 2\n")
	home := filepath.Join(dir, "home")
	ci := []string{"CI=true", "CARGO_HOME=" + home}
	for _, c := range []struct {
		name  string
		env   []string
		args  []string
		files map[string]string // configuration files to write (relative to dir)
		want  bool
	}{
		{"outside CI", []string{"CARGO_HOME=" + home}, nil, nil, false},
		{"CI", ci, []string{"build"}, nil, true},
		{"CI empty", []string{"CI=", "CARGO_HOME=" + home}, nil, nil, true},
		{"TF_BUILD", []string{"TF_BUILD=True", "CARGO_HOME=" + home}, nil, nil, true},
		{"CARGO_INCREMENTAL", append(ci, "CARGO_INCREMENTAL=0"), nil, nil, false},
		{"CARGO_INCREMENTAL empty", append(ci, "CARGO_INCREMENTAL="), nil, nil, false},
		{"CARGO_BUILD_INCREMENTAL", append(ci, "CARGO_BUILD_INCREMENTAL=true"), nil, nil, false},
		{"--config pair", ci, []string{"build", "--config", "build.incremental=false"}, nil, false},
		{"--config= pair", ci, []string{"--config=build.incremental = true", "build"}, nil, false},
		{"--config table pair", ci, []string{"--config", "build = { incremental = false }"}, nil, false},
		{"--config other key", ci, []string{"--config", "build.jobs=2"}, nil, true},
		{"--config file", ci, []string{"--config", sets}, nil, false},
		{"--config relative file", ci, []string{"--config", "../../../sets.toml"}, nil, false},
		{"--config other file", ci, []string{"--config", other}, nil, true},
		{"--config after --", ci, []string{"run", "--", "--config", "build.incremental=false"}, nil, true},
		{"ancestor config.toml", ci, nil, map[string]string{"ws/.cargo/config.toml": "[build]\nincremental = false\n"}, false},
		{"ancestor config", ci, nil, map[string]string{"ws/crates/.cargo/config": "build.incremental = true\n"}, false},
		{"ancestor other", ci, nil, map[string]string{"ws/.cargo/config.toml": "[build]\njobs = 1\n[profile.dev]\nincremental = false\n"}, true},
		{"Cargo home", ci, nil, map[string]string{"home/config.toml": "[build]\nincremental = false\n"}, false},
		{"unparsable", ci, nil, map[string]string{"ws/.cargo/config.toml": "[build\nincremental = false\n"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var written []string
			for rel, body := range c.files {
				written = append(written, write(filepath.Join(dir, rel), body))
			}
			defer func() {
				for _, p := range written {
					os.Remove(p)
				}
			}()
			if got := IncrementalUnderCI(c.env, c.args, ws, ConfigDirs(ws, c.env)); got != c.want {
				t.Fatalf("IncrementalUnderCI = %v, want %v", got, c.want)
			}
		})
	}
}

// Cargo reads the .cargo directory of the working directory and of every
// ancestor, then its home.
func TestConfigDirs(t *testing.T) {
	got := ConfigDirs("/a/b", []string{"HOME=/h"})
	want := []string{"/a/b/.cargo", "/a/.cargo", "/.cargo", "/h/.cargo"}
	if len(got) != len(want) {
		t.Fatalf("%q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%q, want %q", got, want)
		}
	}
	if got := ConfigDirs("/", []string{"HOME=/h", "CARGO_HOME=/c"}); got[len(got)-1] != "/c" {
		t.Fatalf("CARGO_HOME: %q", got)
	}
}
