package base_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// current is the newest commit any finished base covers, whatever order
// the builds finish in: a base of an older commit of the same history,
// built or reused after a newer one's, leaves current where it is; a
// commit of another history (a branch switched to) takes it.
func TestCurrentIsTheNewestCommit(t *testing.T) {
	e := setupLight(t, "true")
	commit := func(msg string) string {
		t.Helper()
		c, err := e.repo.Commit(msg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	current := func() string {
		t.Helper()
		id, err := e.store.Current()
		if err != nil {
			t.Fatal(err)
		}
		c, _, _ := strings.Cut(id, "-")
		return c
	}
	older := e.repo.Head
	newer := commit("newer")

	// The newer commit's base finishes first.
	if _, err := e.build(t, newer); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"built", "reused"} {
		res, err := e.build(t, older)
		if err != nil {
			t.Fatal(err)
		}
		if got := current(); got != newer || !res.NotCurrent {
			t.Fatalf("older base %s after the newer one: current is %.12s (NotCurrent %v), want the newer %.12s", what, got, res.NotCurrent, newer)
		}
	}

	// Two builds at once, an ancestor and its descendant, three times:
	// whichever finishes last, current ends at the descendant.
	for i := range 3 {
		a := commit(fmt.Sprintf("a%d", i))
		b := commit(fmt.Sprintf("b%d", i))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, rev := range []string{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var stderr bytes.Buffer
				c := e.command("--rev", rev, "--json")
				c.Stderr = &stderr
				out, err := c.Output()
				var res struct {
					Current bool `json:"current"`
				}
				if err == nil {
					err = json.Unmarshal(out, &res)
				}
				// The descendant is current when it finishes; the
				// ancestor is when it finishes first.
				if err == nil && rev == b && !res.Current {
					err = fmt.Errorf("--json says it is not current")
				}
				if err != nil {
					errs[j] = fmt.Errorf("ferry base --rev %.12s: %v\n%s", rev, err, stderr.String())
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := current(); got != b {
			t.Fatalf("round %d: current is %.12s, want the descendant %.12s (the ancestor is %.12s)", i, got, b, a)
		}
	}

	// Another history: a branch from the first commit.
	if _, err := e.repo.Git("checkout", "-q", "-b", "side", older); err != nil {
		t.Fatal(err)
	}
	side := commit("side")
	if _, err := e.build(t, side); err != nil {
		t.Fatal(err)
	}
	if got := current(); got != side {
		t.Fatalf("a base of another history: current is %.12s, want %.12s", got, side)
	}
}
