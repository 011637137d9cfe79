package suggest

import "testing"

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"warm", "warm", 0},
		{"wram", "warm", 1},
		{"backedn", "backend", 1},
		{"worktree_dir", "worktree-dir", 1},
		{"dir", "url", 3},
		{"dri", "dir", 1},
		{"", "mode", 4},
		{"lsit", "list", 1},
	}
	for _, tt := range tests {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	commands := []string{"base", "spawn", "list", "rm", "run", "adopt", "doctor", "stats"}
	for name, want := range map[string]string{
		"lsit":   "list",
		"spwan":  "spawn",
		"LIST":   "list",
		"docter": "doctor",
		"rn":     "rm", // one edit from rm and from run: the earlier
		"xyz":    "",
		"bsae":   "base",
		"stat":   "stats",
	} {
		if got := Closest(name, commands); got != want {
			t.Errorf("Closest(%q) = %q, want %q", name, got, want)
		}
	}
}
