package eventstest

import "testing"

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"ferry.>", "ferry.a.base.ready", true},
		{"ferry.>", "ferry", false},
		{"ferry.*.base.*", "ferry.a.base.ready", true},
		{"ferry.*.base.*", "ferry.a.agent.spawned", false},
		{"ferry.a.>", "ferry.b.base.ready", false},
		{"ferry.a.base.ready", "ferry.a.base.ready", true},
		{"ferry.a.base", "ferry.a.base.ready", false},
	} {
		if got := Matches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v", tc.filter, tc.subject, got)
		}
	}
}

func TestCollides(t *testing.T) {
	for _, tc := range []struct {
		filter   string
		subjects []string
		want     bool
	}{
		{"ferry.>", []string{"ferry.*.commit.seen"}, true},
		{"ferry.a.>", []string{"ferry.*.base.*"}, true},
		{"ferry.a.base.ready", []string{"ferry.*.commit.seen"}, false},
		{"ferry.*.agent.*", []string{"ferry.*.base.*", "ferry.*.agent.*"}, true},
		{"other.>", []string{"ferry.*.base.*"}, false},
		{"ferry.a", []string{"ferry.*.base.*"}, false},
	} {
		if got := collides(tc.filter, tc.subjects); got != tc.want {
			t.Errorf("collides(%q, %v) = %v", tc.filter, tc.subjects, got)
		}
	}
}
