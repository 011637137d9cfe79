package docs_test

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/tools/go/callgraph"
	"golang.org/x/tools/go/callgraph/static"
	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// The walk section of internals.md lies between these lines.
const (
	walkBegin = "<!-- walk: go test ./docs -run TestBaseBuildWalk -->"
	walkEnd   = "<!-- /walk -->"
)

// walkEntry is where `ferry base` (ferry-base build) starts.
const walkEntry = "(*" + module + "pkg/cli/basecmd.buildCmd).run"

// TestBaseBuildWalk holds internals.md's walk of a base build to the code:
// the repository's packages in the order a depth-first walk of the static
// calls from `ferry base` first reaches them, each with its floor and the
// function it is entered through. Calls through an interface or a
// function value are not followed: the walk is what a reader following
// the calls in an editor would read. With FERRY_UPDATE_LISTS=1 it rewrites
// the section.
func TestBaseBuildWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and builds SSA for ferry-base")
	}
	r := root(t)
	cfg := &packages.Config{Mode: packages.LoadAllSyntax, Dir: r, Tests: false}
	pkgs, err := packages.Load(cfg, "./cmd/ferry-base")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("loading ./cmd/ferry-base failed")
	}
	prog, _ := ssautil.AllPackages(pkgs, ssa.InstantiateGenerics)
	prog.Build()
	cg := static.CallGraph(prog)
	var entry *callgraph.Node
	for fn, n := range cg.Nodes {
		if fn != nil && fn.String() == walkEntry {
			entry = n
		}
	}
	if entry == nil {
		t.Fatalf("no function %s: the walk's entry moved", walkEntry)
	}

	fl := floors(t, packageImports(t, r))
	type step struct {
		pkg, via string
	}
	var steps []step
	seenPkg := map[string]bool{}
	seen := map[*callgraph.Node]bool{}
	climbs := 0
	last := ""
	var visit func(n *callgraph.Node)
	visit = func(n *callgraph.Node) {
		if seen[n] || n.Func == nil || n.Func.Pkg == nil {
			return
		}
		seen[n] = true
		pkg, ok := strings.CutPrefix(n.Func.Pkg.Pkg.Path(), module)
		if !ok {
			return // the standard library's and other modules' calls are not followed
		}
		if last != "" && pkg != last && fl[pkg] > fl[last] {
			climbs++
		}
		last = pkg
		if !seenPkg[pkg] {
			seenPkg[pkg] = true
			steps = append(steps, step{pkg, strings.ReplaceAll(n.Func.RelString(n.Func.Pkg.Pkg), module, "")})
		}
		for _, e := range n.Out {
			visit(e.Callee)
		}
	}
	visit(entry)

	var b strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&b, "%d. `%s` (floor %d), through `%s`\n", i+1, s.pkg, fl[s.pkg], s.via)
	}
	fmt.Fprintf(&b, "\n%d packages; the walk climbs back to a higher floor %d times.\n", len(steps), climbs)
	want := b.String()

	holdSection(t, "docs/internals.md", walkBegin, walkEnd, want, "walk of a base build", "TestBaseBuildWalk")
}
