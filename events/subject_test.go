package events

import (
	"strings"
	"testing"
)

func TestRepoTokenMapping(t *testing.T) {
	for key, want := range map[string]string{
		"repo-1a2b3c4d5e6f":      "repo-1a2b3c4d5e6f",
		"my.repo-1a2b3c4d5e6f":   "my_2erepo-1a2b3c4d5e6f",
		"my_crate-1a2b3c4d5e6f":  "my_5fcrate-1a2b3c4d5e6f",
		"a._-b":                  "a_2e_5f-b",
		"v1.2.3":                 "v1_2e2_2e3",
		"_2e":                    "_5f2e", // an escape-looking key stays distinct
		"UPPER-lower-0123456789": "UPPER-lower-0123456789",
	} {
		got := RepoToken(key)
		if got != want {
			t.Errorf("RepoToken(%q) = %q, want %q", key, got, want)
		}
		if strings.ContainsAny(got, ".*> \t\r\n") {
			t.Errorf("token %q is not a single subject token", got)
		}
		back, err := RepoKeyOfToken(got)
		if err != nil || back != key {
			t.Errorf("RepoKeyOfToken(%q) = %q, %v; want %q", got, back, err, key)
		}
	}
}

func TestRepoTokenIsInjective(t *testing.T) {
	// Every key over a small alphabet up to length 4: distinct keys give
	// distinct tokens, and every token reverses.
	alphabet := []string{"a", "-", ".", "_", "2", "e"}
	keys := []string{""}
	seen := map[string]string{}
	for n := 0; n < 4; n++ {
		var next []string
		for _, k := range keys {
			for _, c := range alphabet {
				next = append(next, k+c)
			}
		}
		keys = next
		for _, k := range keys {
			tok := RepoToken(k)
			if other, dup := seen[tok]; dup {
				t.Fatalf("keys %q and %q both map to %q", k, other, tok)
			}
			seen[tok] = k
			if back, err := RepoKeyOfToken(tok); err != nil || back != k {
				t.Fatalf("RepoKeyOfToken(%q) = %q, %v; want %q", tok, back, err, k)
			}
		}
	}
}

func TestRepoKeyOfTokenRejects(t *testing.T) {
	for _, tok := range []string{"", "a.b", "a_2", "a_zz", "a_2E", "a*", "a>", "a b"} {
		if k, err := RepoKeyOfToken(tok); err == nil {
			t.Errorf("RepoKeyOfToken(%q) = %q, want an error", tok, k)
		}
	}
}

func TestSubjects(t *testing.T) {
	e := Stamp(&BaseReady{BaseID: "b", Commit: c1, Fingerprint: "fp"}, "my.repo-1a2b3c4d5e6f")
	if got := Subject(e); got != "ferry.my_2erepo-1a2b3c4d5e6f.base.ready" {
		t.Fatalf("Subject = %q", got)
	}
	if got := SubjectAll(KindCommitSeen); got != "ferry.*.commit.seen" {
		t.Fatalf("SubjectAll = %q", got)
	}
	if got := SubjectRepo("my.repo-1"); got != "ferry.my_2erepo-1.>" {
		t.Fatalf("SubjectRepo = %q", got)
	}
	for _, k := range Kinds() {
		s := SubjectFor("my.repo-1a2b3c4d5e6f", k)
		if n := strings.Count(s, "."); n != 3 {
			t.Errorf("subject %q has %d dots, want ferry.<repo>.<noun>.<verb>", s, n)
		}
		key, kind, err := ParseSubject(s)
		if err != nil || key != "my.repo-1a2b3c4d5e6f" || kind != k {
			t.Errorf("ParseSubject(%q) = %q %q %v", s, key, kind, err)
		}
	}
	for _, bad := range []string{"ferry.x", "nats.x.base.ready", "ferry.a.b.Base", "ferry.a_zz.base.ready"} {
		if _, _, err := ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q) succeeded", bad)
		}
	}
}
