package sandbox_test

import (
	"bytes"
	"testing"

	"github.com/ferrydev/ferry/internal/confinetest"
	"github.com/ferrydev/ferry/pkg/sandbox"
)

// A confined sandbox child: the host is read-only but for the worktree,
// the fork, the private layer over $HOME and the agent's own /tmp, whose
// writes stay in the agent's store dir; the store, the worktree's git link,
// a toolchain and another agent's worktree are read-only, the keys hidden,
// and the command cannot mount.
func TestConfinedWorld(t *testing.T) {
	for _, inHome := range []bool{true, false} {
		t.Run(map[bool]string{true: "store in home", false: "store in tmp"}[inHome], func(t *testing.T) {
			w := confinetest.New(t, inHome)
			c, err := sandbox.Command(w.Plan)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			err = c.Run()
			w.Check(t, out.String(), err)
		})
	}
}
