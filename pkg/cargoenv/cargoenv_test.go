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

func TestWithFreshnessReplacesInherited(t *testing.T) {
	env := []string{"PATH=/bin", "CARGO_UNSTABLE_CHECKSUM_FRESHNESS=false", "CARGO_BUILD_FINGERPRINT=mtime", "HOME=/h"}
	if got := WithFreshness(env, []string{"CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true"}); !slices.Equal(got, []string{"PATH=/bin", "HOME=/h", "CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true"}) {
		t.Errorf("checksum: %v", got)
	}
	if got := WithFreshness(env, nil); !slices.Equal(got, []string{"PATH=/bin", "HOME=/h"}) {
		t.Errorf("mtime: %v", got)
	}
}
