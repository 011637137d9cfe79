package failure

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// TestKinds checks that every kind has a name and an exit code of its own
// (a kind missing from String or ExitCode would take Internal's), and that
// ExitCodes, the --help text, lists exactly those codes and success.
func TestKinds(t *testing.T) {
	names := map[string]Kind{}
	codes := map[int]Kind{}
	for _, k := range Kinds() {
		if other, ok := names[k.String()]; ok {
			t.Errorf("kinds %d and %d are both named %q", other, k, k.String())
		}
		names[k.String()] = k
		if other, ok := codes[k.ExitCode()]; ok {
			t.Errorf("kinds %s and %s both exit %d", other, k, k.ExitCode())
		}
		codes[k.ExitCode()] = k
	}
	if !slices.Contains(Kinds(), Internal) || !slices.Contains(Kinds(), NoSpace) {
		t.Errorf("Kinds() = %v, want every kind from Internal to NoSpace", Kinds())
	}

	want := []int{0}
	for c := range codes {
		want = append(want, c)
	}
	slices.Sort(want)
	var listed []int
	for _, m := range regexp.MustCompile(`(?m)^  (\d+) `).FindAllStringSubmatch(ExitCodes, -1) {
		n, _ := strconv.Atoi(m[1])
		listed = append(listed, n)
	}
	if !slices.Equal(listed, want) {
		t.Errorf("ExitCodes lists %v, want %v (success and each kind's code)", listed, want)
	}
}
