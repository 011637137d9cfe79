package docs_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/knobs"
)

// module is the import path prefix of this repository's packages.
const module = "github.com/ferrydev/ferry/"

// The floors section of internals.md lies between these lines.
const (
	floorsBegin = "<!-- floors: go test ./docs -run TestPackageFloors -->"
	floorsEnd   = "<!-- /floors -->"
)

// TestPackageFloors holds internals.md's "Packages by floor" to the code:
// a package's floor is one above the highest floor among the repository's
// packages it imports (0 when it imports none of them), so every import
// points down and a package's floor says how much of Ferry it stands on.
// With FERRY_UPDATE_LISTS=1 (knobs.UpdateLists) it rewrites the section.
func TestPackageFloors(t *testing.T) {
	want := renderFloors(floors(t, packageImports(t, root(t))))
	holdSection(t, "docs/internals.md", floorsBegin, floorsEnd, want, "packages by floor", "TestPackageFloors")
}

// holdSection holds the generated section of page (relative to the
// repository's root) between the lines begin and end to want, and with
// FERRY_UPDATE_LISTS=1 (knobs.UpdateLists) rewrites it; what names the
// section in the failure, and test the test that writes it.
func holdSection(t *testing.T, page, begin, end, want, what, test string) {
	t.Helper()
	text := read(t, page)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section", page, begin, end)
	}
	got := text[i+len(begin)+1 : j]
	if got == want {
		return
	}
	if os.Getenv(knobs.UpdateLists) == "1" {
		text = text[:i+len(begin)+1] + want + text[j:]
		if err := os.WriteFile(filepath.Join(root(t), filepath.FromSlash(page)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's %s is not the code's; rewrite it with %s=1 go test ./docs -run %s\nwant:\n%s\ngot:\n%s",
		page, what, knobs.UpdateLists, test, want, got)
}

// packageImports maps each package of the repository (its directory,
// relative to the root, with forward slashes) to the repository's packages
// its non-test files import, whatever their build constraints.
func packageImports(t *testing.T, r string) map[string][]string {
	t.Helper()
	imports := map[string][]string{}
	err := walkGoFiles(r, func(path string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(p, module); ok && !slices.Contains(imports[pkg], dep) {
				imports[pkg] = append(imports[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return imports
}

// walkGoFiles calls fn with the path of every Go file below r, as go
// build sees the module: directories whose names start with "." or "_",
// and testdata, are left out.
func walkGoFiles(r string, fn func(path string) error) error {
	return filepath.WalkDir(r, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != r && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return fn(path)
	})
}

// floors gives each package its floor; an import cycle fails the test.
func floors(t *testing.T, imports map[string][]string) map[string]int {
	t.Helper()
	floor := map[string]int{}
	visiting := map[string]bool{}
	var visit func(p string) int
	visit = func(p string) int {
		if f, ok := floor[p]; ok {
			return f
		}
		if visiting[p] {
			t.Fatalf("import cycle through %s", p)
		}
		visiting[p] = true
		f := 0
		for _, dep := range imports[p] {
			f = max(f, visit(dep)+1)
		}
		floor[p] = f
		return f
	}
	for _, p := range slices.Sorted(maps.Keys(imports)) {
		visit(p)
	}
	return floor
}

// renderFloors is the section's text: a line per floor, lowest first, its
// packages sorted.
func renderFloors(floor map[string]int) string {
	byFloor := map[int][]string{}
	for p, f := range floor {
		byFloor[f] = append(byFloor[f], "`"+p+"`")
	}
	var b strings.Builder
	for _, f := range slices.Sorted(maps.Keys(byFloor)) {
		slices.Sort(byFloor[f])
		fmt.Fprintf(&b, "- %d: %s\n", f, strings.Join(byFloor[f], ", "))
	}
	return b.String()
}
