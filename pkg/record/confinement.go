package record

// Confinement is what an agent or a base records of its confinement when
// it is made, and every session of it follows (package confine decides it
// and applies it).
type Confinement struct {
	// World: the host is read-only in the sandbox but for the writable
	// roots and the private ones.
	World bool `json:"world"`
	// Layers: $HOME and $CARGO_HOME are private layers. Without it (and
	// with World) they stay writable.
	Layers bool `json:"layers"`
	// Writable are the roots [sandbox] writable added, as they were
	// configured when the agent was made.
	Writable []string `json:"writable,omitempty"`
	// ReadOnly are paths of the repository kept the host's, read-only,
	// inside the private roots: the main checkout (or the common git dir)
	// and the directory of the agents' worktrees.
	ReadOnly []string `json:"read_only,omitempty"`
	// Gaps say what the sandbox leaves unconfined on this host, and why.
	Gaps []Gap `json:"gaps,omitempty"`
}

// Gap is one thing a sandbox leaves unconfined.
type Gap struct {
	What string `json:"what"` // what a build can still write
	Why  string `json:"why"`  // what on the host prevents more
	Fix  string `json:"fix,omitempty"`
}

func (g Gap) String() string {
	s := g.What + ": " + g.Why
	if g.Fix != "" {
		s += " (" + g.Fix + ")"
	}
	return s
}
