package cargoenv

import (
	"slices"
	"testing"
)

func TestWithoutDropsRedirectsAndNamed(t *testing.T) {
	env := []string{"PATH=/bin", "CARGO_TARGET_DIR=/evil", "CARGO_BUILD_BUILD_DIR=/evil", "CARGO_BUILD_TARGET_DIR=/evil", "FERRY_AGENT=x", "HOME=/h"}
	got := Without(env, "FERRY_AGENT")
	if !slices.Equal(got, []string{"PATH=/bin", "HOME=/h"}) {
		t.Fatalf("Without = %v", got)
	}
	got = append(got, Target("/t")...)
	if Get(got, "CARGO_TARGET_DIR") != "/t" || Get(got, "CARGO_BUILD_BUILD_DIR") != "/t" || Get(got, "NOPE") != "" {
		t.Fatalf("Target/Get: %v", got)
	}
}
