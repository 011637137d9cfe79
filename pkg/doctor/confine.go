package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/confine"
	"github.com/ferrydev/ferry/pkg/store"
)

// CheckConfine is what the sandbox makes of the rest of the host.
const CheckConfine = "confinement"

// checkConfine says what a new agent's sandbox would confine here
// (confine.Decide, the probes spawn runs), with scratch a directory on the
// store's filesystem, and which agents already made confine less (spawned
// before Ferry confined the host, or building at host paths). What is not
// confined is a warning: builds work, and could plant code that runs
// outside their sandbox later.
func checkConfine(s *store.Store, scratch string, hostPaths bool) Check {
	c := Check{Name: CheckConfine, Status: OK}
	var gaps []string
	if hostPaths {
		gaps = append(gaps, confine.Unconfined.String())
	} else {
		parent := s.Parent
		if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
			// No store yet: a stand-in on the same filesystem, as the
			// other checks probe.
			if tmp, err := os.MkdirTemp(scratch, "ferry-doctor-store-"); err == nil {
				defer os.RemoveAll(tmp)
				parent = tmp
			}
		}
		rec := confine.Decide(parent, scratch, os.Environ(), nil, nil)
		for _, g := range rec.Gaps {
			gaps = append(gaps, g.String())
		}
	}
	var legacy, host []string
	if list, err := agent.All(s); err == nil {
		for _, r := range list {
			switch {
			case r.HostPaths():
				host = append(host, r.Name)
			case r.Confinement == nil || !r.Confinement.World:
				legacy = append(legacy, r.Name)
			}
		}
	}
	sort.Strings(legacy)
	sort.Strings(host)
	if len(legacy) > 0 {
		gaps = append(gaps, fmt.Sprintf("agent(s) %s: %s", strings.Join(legacy, ", "), confine.Legacy))
	}
	if len(host) > 0 && !hostPaths {
		gaps = append(gaps, fmt.Sprintf("agent(s) %s: %s", strings.Join(host, ", "), confine.Unconfined))
	}
	if len(gaps) == 0 {
		c.Detail = "builds can write only the agent's worktree and target, private layers over $HOME and $CARGO_HOME, " +
			"and a /tmp of their own; the repository's git dirs, other agents, toolchains, Ferry's binaries and the rest of the host are read-only"
		return c
	}
	c.Status = Warning
	c.Detail = strings.Join(gaps, "; ")
	c.Hint = "see docs/store.md, What an agent can touch"
	return c
}
