package ferrycmd

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/ferrydev/ferry/pkg/agent"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/diskuse"
	"github.com/ferrydev/ferry/pkg/store"
)

// diskJSON is ferry stats --disk --json: what the store takes on disk.
// Physical bytes are what the disk lost to each part, counting every
// block once, in the order listed: bases oldest first (a refreshed base
// shows what its refresh added to its seed), then agents (what each
// wrote), then the rest of the store (records, logs, keys).
type diskJSON struct {
	Store string `json:"store"`
	diskuse.Usage
	Bases  []diskPart `json:"bases"`
	Agents []diskPart `json:"agents"`
	Other  diskPart   `json:"other"`
	// PlainWorktrees is what the agents would take as plain worktrees,
	// each with its own cold target of its base's size.
	PlainWorktrees int64 `json:"plain_worktrees_bytes"`
}

// diskPart is one base or agent.
type diskPart struct {
	Name string `json:"name"`
	Base string `json:"base,omitempty"` // an agent's base
	diskuse.Usage
}

// diskUse counts the store s: bases oldest first, agents, the rest.
func diskUse(s *store.Store) (*diskJSON, error) {
	out := &diskJSON{Store: s.Dir, Bases: []diskPart{}, Agents: []diskPart{}}
	n := diskuse.New()
	bases, err := base.List(s)
	if err != nil {
		return nil, err
	}
	slices.Reverse(bases) // oldest first
	targets := map[string]int64{}
	for _, b := range bases {
		u, err := n.Add(s.Base(b.ID).Dir)
		if err != nil {
			return nil, err
		}
		out.Bases = append(out.Bases, diskPart{Name: b.ID, Usage: u})
		out.Usage = out.Usage.Add(u)
		if t, err := diskuse.New().Add(s.Base(b.ID).Target); err == nil {
			targets[b.ID] = t.Apparent
		}
	}
	agents, _, err := agent.Scan(s)
	if err != nil {
		return nil, err
	}
	for _, r := range agents {
		u, err := n.Add(s.Agent(r.Name).Dir)
		if err != nil {
			return nil, err
		}
		out.Agents = append(out.Agents, diskPart{Name: r.Name, Base: r.Base, Usage: u})
		out.Usage = out.Usage.Add(u)
		out.PlainWorktrees += targets[r.Base]
	}
	rest, err := n.Add(s.Dir)
	if err != nil {
		return nil, err
	}
	out.Other = diskPart{Name: "other", Usage: rest}
	// The store's apparent bytes are its trees' (each as if alone); the
	// walk of the whole store adds only what no base or agent holds.
	out.Usage = out.Usage.Add(diskuse.Usage{Physical: rest.Physical})
	return out, nil
}

func printDisk(w io.Writer, d *diskJSON) error {
	fmt.Fprintf(w, "store %s: %s on disk, %s apparent\n\n", d.Store, cli.Bytes(d.Physical), cli.Bytes(d.Apparent))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tNAME\tBASE\tON DISK\tAPPARENT\tFILES")
	for _, b := range d.Bases {
		fmt.Fprintf(tw, "base\t%s\t-\t%s\t%s\t%d\n", baseWords(b.Name), cli.Bytes(b.Physical), cli.Bytes(b.Apparent), b.Files)
	}
	for _, a := range d.Agents {
		fmt.Fprintf(tw, "agent\t%s\t%s\t%s\t%s\t%d\n", a.Name, baseWords(a.Base), cli.Bytes(a.Physical), cli.Bytes(a.Apparent), a.Files)
	}
	fmt.Fprintf(tw, "other\t-\t-\t%s\t-\t-\n", cli.Bytes(d.Other.Physical))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Agents) > 0 {
		fmt.Fprintf(w, "\n%d agent(s) as plain worktrees, each with its own cold target, would take %s for their targets alone.\n",
			len(d.Agents), cli.Bytes(d.PlainWorktrees))
	}
	fmt.Fprintln(w, "On disk counts each block once, in this order: what a base shares with an older one, or an agent with its base, shows only under the older.")
	return nil
}
