package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the repository root, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	return root
}

// TestNoStorePathJoinedElsewhere fails when code outside this package joins
// a name of the store's layout into a path: every path under the store
// parent is named here. A join that means something else (git's own
// worktrees/, a PATH entry's cargo) says so on its line with the comment
// "not a store path". Tests and internal/ (test and benchmark code) are
// not checked.
func TestNoStorePathJoinedElsewhere(t *testing.T) {
	root := moduleRoot(t)
	names := map[string]bool{}
	for _, n := range Names {
		names[n] = true
	}
	var found []string
	for _, top := range []string{"cmd", "pkg", "events"} {
		filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			if rel, _ := filepath.Rel(root, p); strings.HasPrefix(rel, filepath.Join("pkg", "store")+"/") {
				return nil
			}
			found = append(found, joinsOfStoreNames(t, p, names)...)
			return nil
		})
	}
	for _, f := range found {
		t.Errorf("%s: name the path in package store (or mark the line \"not a store path\")", f)
	}
}

func joinsOfStoreNames(t *testing.T, path string, names map[string]bool) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Join" {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "filepath" && pkg.Name != "path") {
			return true
		}
		for _, a := range call.Args {
			lit, ok := a.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			if !names[v] {
				continue
			}
			pos := fset.Position(call.Pos())
			if strings.Contains(lines[pos.Line-1], "not a store path") {
				continue
			}
			out = append(out, pos.String()+": filepath.Join(…, "+lit.Value+")")
		}
		return true
	})
	return out
}

// TestReadmeShowsTheLayout holds the store tree of docs/store.md against
// Names: every name of the layout appears in it, and every file or
// directory name it shows is one of the layout's.
func TestReadmeShowsTheLayout(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "store.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n## Layout\n")
	if !ok {
		t.Fatal(`docs/store.md has no "## Layout" section`)
	}
	_, block, ok := strings.Cut(after, "```\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the store section has no code block")
	}
	// The tree is the part of each line before its comment, which is set
	// off by three spaces or more (entries are two apart).
	word := regexp.MustCompile(`[A-Za-z][A-Za-z0-9._-]*`)
	comment := regexp.MustCompile(`\S(\s{3,})\S`)
	shown := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		tree := line
		if m := comment.FindStringSubmatchIndex(line); m != nil {
			tree = line[:m[2]]
		}
		// Placeholders (<repo-name>, <name>, ...) and what a link points
		// to (-> ferry-shim) are not names of the layout.
		tree = regexp.MustCompile(`<[^>]*>|->.*`).ReplaceAllString(tree, "")
		for _, w := range word.FindAllString(tree, -1) {
			shown[w] = true
		}
	}
	for _, n := range Names {
		if !shown[n] {
			t.Errorf("docs/store.md's store tree does not show %q", n)
		}
	}
	for w := range shown {
		if !slices.Contains(Names, w) {
			t.Errorf("docs/store.md's store tree shows %q, which is not in the layout (store.Names)", w)
		}
	}
}

func TestRecordedTarget(t *testing.T) {
	for _, c := range []struct{ rel, root, inner string }{
		{"bases/abc-1/target/debug/app", "bases/abc-1/target", "debug/app"},
		{"bases/abc-1/src/.ferry-target/debug/build/x-0/out", "bases/abc-1/target", "debug/build/x-0/out"},
		{"mnt/target/debug", "mnt/target", "debug"},
		{"mnt/src/.ferry-target", "mnt/target", ""},
		{"agents/a/target/ferry-ws/tools/debug", "agents/a/target", "ferry-ws/tools/debug"},
		{"bases/abc-1/src/crates/x", "", ""},
		{"mnt/src", "", ""},
		{"tmp/x", "", ""},
	} {
		root, inner, ok := RecordedTarget(c.rel)
		if root != c.root || inner != c.inner || ok != (c.root != "") {
			t.Errorf("RecordedTarget(%q) = %q, %q, %v; want %q, %q", c.rel, root, inner, ok, c.root, c.inner)
		}
	}
}
