package events

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/pkg/store"
)

const (
	key = "repo-1a2b3c4d5e6f"
	c1  = "0123456789abcdef0123456789abcdef01234567"
	c2  = "89abcdef0123456789abcdef0123456789abcdef"
)

// samples returns one valid, stamped event of every kind.
func samples() []Event {
	return []Event{
		Stamp(&CommitSeen{Commit: c1, Ref: "HEAD", Previous: c2}, key),
		Stamp(&BaseBuilding{BaseID: c1 + "-fp", Commit: c1, Fingerprint: "fp"}, key),
		Stamp(&BaseReady{BaseID: c1 + "-fp", Commit: c1, Fingerprint: "fp", Current: true, Seconds: 1.5}, key),
		Stamp(&BaseFailed{BaseID: c1 + "-fp", Commit: c1, Error: "warm command failed", ExitKind: "build-failed", ExitCode: 5, Command: "cargo build"}, key),
		Stamp(&AgentSpawned{Name: "a", Branch: "ferry/a", Worktree: "/wt/a", BaseID: c1 + "-fp", Backend: "copy"}, key),
		Stamp(&AgentRemoved{Name: "a", Branch: "ferry/a", Forced: true}, key),
		Stamp(&GCCollected{DeletedBases: []string{c2 + "-fp"}}, key),
	}
}

func TestEveryKindHasATypeAndRoundTrips(t *testing.T) {
	ss := samples()
	if len(ss) != len(Kinds()) {
		t.Fatalf("%d samples for %d kinds", len(ss), len(Kinds()))
	}
	for _, e := range ss {
		h := e.EventHeader()
		if h.Type != "ferry."+string(e.Kind())+".v1" {
			t.Errorf("%T: type %q", e, h.Type)
		}
		data, err := Encode(e)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%T: decode %s: %v", e, data, err)
		}
		if got.Kind() != e.Kind() || *got.EventHeader() != *h {
			t.Errorf("%T: round trip gave %#v", e, got)
		}
	}
}

func TestStampGivesUniqueOrderedIDs(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 1000; i++ {
		id := Stamp(&AgentRemoved{Name: "x"}, key).ID
		if seen[id] || !ValidID(id) {
			t.Fatalf("id %q repeated or invalid", id)
		}
		if id[:16] < prev {
			t.Fatalf("id %q sorts before the previous time prefix %q", id, prev)
		}
		seen[id], prev = true, id[:16]
	}
}

func TestDecodeIgnoresUnknownFields(t *testing.T) {
	data := []byte(`{"type":"ferry.base.ready.v1","id":"abc","time":"2026-01-02T03:04:05Z",
		"repo_key":"` + key + `","host":"h","base_id":"b","commit":"` + c1 + `","fingerprint":"fp",
		"new_field":{"nested":[1,2]},"another":true}`)
	e, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := e.(*BaseReady)
	if !ok || r.BaseID != "b" || r.Time != time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) {
		t.Fatalf("decoded %#v", e)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := `"id":"abc","time":"2026-01-02T03:04:05Z","repo_key":"` + key + `","host":"h"`
	for _, tc := range []struct {
		name, data string
		unknown    bool   // want *UnknownTypeError, else *MalformedError
		mention    string // in the message
	}{
		{"not json", `{"type":`, false, "not a JSON event object"},
		{"array", `[1,2]`, false, "not a JSON event object"},
		{"no type", `{` + valid + `}`, false, "type is missing"},
		{"unknown kind", `{"type":"ferry.base.exploded.v1",` + valid + `}`, true, "not known"},
		{"unknown version", `{"type":"ferry.base.ready.v2",` + valid + `}`, true, "version 2 of base.ready"},
		{"not a ferry type", `{"type":"io.nats.jetstream.advisory.v1",` + valid + `}`, true, "not known"},
		{"bad version", `{"type":"ferry.base.ready.vx",` + valid + `}`, true, "not known"},
		{"wrong field type", `{"type":"ferry.base.ready.v1",` + valid + `,"seconds":"slow"}`, false, "seconds"},
		{"missing payload", `{"type":"ferry.base.ready.v1",` + valid + `}`, false, "base_id is missing"},
		{"short commit", `{"type":"ferry.commit.seen.v1",` + valid + `,"commit":"abc"}`, false, "not a full lower-case commit id"},
		{"no id", `{"type":"ferry.agent.removed.v1","time":"2026-01-02T03:04:05Z","repo_key":"k","host":"h","name":"a"}`, false, "id"},
		{"bad repo key", `{"type":"ferry.agent.removed.v1","id":"a","time":"2026-01-02T03:04:05Z","repo_key":"..","host":"h","name":"a"}`, false, "repo_key"},
		{"no time", `{"type":"ferry.agent.removed.v1","id":"a","repo_key":"k","host":"h","name":"a"}`, false, "time is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.data))
			if err == nil {
				t.Fatal("decoded")
			}
			var u *UnknownTypeError
			var m *MalformedError
			if tc.unknown && !errors.As(err, &u) || !tc.unknown && !errors.As(err, &m) {
				t.Fatalf("error %T %v", err, err)
			}
			if !Undecodable(err) {
				t.Errorf("Undecodable(%v) = false", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestEncodeValidates(t *testing.T) {
	if _, err := Encode(&BaseReady{BaseID: "b"}); err == nil || !strings.Contains(err.Error(), "id") {
		t.Fatalf("unstamped event encoded: %v", err)
	}
	e := Stamp(&BaseReady{BaseID: "b", Commit: c1, Fingerprint: "fp"}, key)
	e.Type = KindBaseFailed.Type()
	if _, err := Encode(e); err == nil || !strings.Contains(err.Error(), "does not match kind") {
		t.Fatalf("mismatched type encoded: %v", err)
	}
	if Undecodable(errors.New("x")) {
		t.Fatal("a plain error is undecodable")
	}
}

func TestParseType(t *testing.T) {
	for in, want := range map[string]struct {
		k  Kind
		v  int
		ok bool
	}{
		"ferry.base.ready.v1":     {KindBaseReady, 1, true},
		"ferry.future.thing.v12":  {"future.thing", 12, true},
		"ferry.base.ready":        {"", 0, false},
		"ferry.base.ready.v0":     {"", 0, false},
		"ferry.base.ready.v01":    {"", 0, false},
		"ferry..v1":               {"", 0, false},
		"ferry.Base.ready.v1":     {"", 0, false},
		"nats.base.ready.v1":      {"", 0, false},
		"ferry.base.ready.v1.v2x": {"", 0, false},
	} {
		k, v, ok := ParseType(in)
		if k != want.k || v != want.v || ok != want.ok {
			t.Errorf("ParseType(%q) = %q %d %v; want %v", in, k, v, ok, want)
		}
	}
}

func TestValidShapes(t *testing.T) {
	for _, dir := range []string{"/src/repo/.git", "/src/my.repo.git", "/x/_under/.git", "/x/-.weird.-/.git", "/x/ü/.git"} {
		if k := store.Key(dir); !ValidRepoKey(k) {
			t.Errorf("store.Key(%q) = %q is not a valid repo key", dir, k)
		}
	}
	for key, ok := range map[string]bool{
		"repo-1a2b": true, "my.repo-1": true, "_x": true,
		"": false, ".": false, "..": false, "-x": false, ".x": false, "a/b": false, "a b": false,
		strings.Repeat("a", 255): true, strings.Repeat("a", 256): false,
	} {
		if ValidRepoKey(key) != ok {
			t.Errorf("ValidRepoKey(%q) = %v", key, !ok)
		}
	}
	for id, ok := range map[string]bool{
		"abc": true, "A-b_c": true, "": false, "-a": false, "_a": false, "a.json": false, "a/b": false,
		strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
	} {
		if ValidID(id) != ok {
			t.Errorf("ValidID(%q) = %v", id, !ok)
		}
	}
}
