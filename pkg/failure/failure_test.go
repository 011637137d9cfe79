package failure

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// A damaged state file is a refusal wherever it surfaces, whatever wraps
// it, with its fix as the hint; an outer *Error's hint and kind win.
func TestDamaged(t *testing.T) {
	d := Damaged("/s/bases/x/base.json", errors.New("unexpected end of JSON input"), "ferry base --rebuild --rev x")
	wrapped := fmt.Errorf("spawn: %w", d)
	if KindOf(wrapped) != Refused || HintOf(wrapped) != "ferry base --rebuild --rev x" {
		t.Errorf("wrapped: kind %v, hint %q", KindOf(wrapped), HintOf(wrapped))
	}
	if !strings.Contains(wrapped.Error(), "/s/bases/x/base.json is damaged") {
		t.Errorf("message does not name the file: %v", wrapped)
	}
	if AsDamaged(wrapped) != d {
		t.Error("AsDamaged does not find it")
	}
	bare := Damaged("/s/current", errors.New("x"), "")
	if h := HintOf(bare); !strings.Contains(h, "mv /s/current /s/current.damaged") {
		t.Errorf("no fix: hint %q", h)
	}
	outer := Wrap(Usage, d, "outer hint", "outer")
	if KindOf(outer) != Usage || HintOf(outer) != "outer hint" {
		t.Errorf("outer: kind %v, hint %q", KindOf(outer), HintOf(outer))
	}
	if KindOf(Wrap(Refused, d, "", "x")) != Refused || HintOf(Wrap(Refused, d, "", "x")) != "ferry base --rebuild --rev x" {
		t.Error("an outer error without a hint hides the fix")
	}
}
