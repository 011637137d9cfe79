package fork

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoBackendNameCompared fails when code outside this package compares a
// fork backend's name (NameOverlay, NameReflink, NameCopy, or the literals
// "overlay", "reflink", "copy") with ==, != or a switch case: what differs
// between backends is asked of the backend (Backend, its lifecycle, Needs), so
// that a backend's behaviour lives in one place. Showing or recording a name
// is fine. Tests and internal/ (test, benchmark and demo code) are not
// checked, nor is this package, which maps names to backends.
func TestNoBackendNameCompared(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	self := filepath.Join(root, "pkg", "fork")
	checked := 0
	for _, top := range []string{"cmd", "pkg", "events"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (p == self || strings.HasPrefix(p, self+string(filepath.Separator))) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			found, err := backendNameComparisons(rel, src)
			if err != nil {
				return err
			}
			for _, f := range found {
				t.Errorf("%s: ask the backend (fork.ByName(name) and its methods) instead of comparing its name", f)
			}
			checked++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the module root %s?", checked, root)
	}
}

// TestBackendNameScanCatches shows the scan finds each form of comparison,
// and leaves alone what is not one (a name shown, a filesystem type).
func TestBackendNameScanCatches(t *testing.T) {
	src := `package p

import (
	"fmt"

	"github.com/ferrydev/ferry/pkg/fork"
	"github.com/ferrydev/ferry/pkg/platform"
)

func f(backend, fsType string) {
	if backend == "overlay" {}               // 1
	if fork.NameReflink != backend {}        // 2
	if (backend) == ("copy") {}              // 3
	switch backend {
	case fork.NameCopy, "x":                 // 4
	case "reflink":                          // 5
	}
	switch {
	case backend == fork.NameOverlay:        // 6
	}
	if strings.EqualFold(backend, "copy") {} // 7
	fmt.Println("overlay", backend)
	if fsType == platform.FSOverlay {}
	if backend == fork.NameAuto {}
	_ = map[string]bool{"copy": true}
}
`
	found, err := backendNameComparisons("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range found {
		lines = append(lines, strings.SplitN(f, ":", 3)[1])
	}
	if got, want := strings.Join(lines, " "), "11 12 13 15 16 19 21"; got != want {
		t.Errorf("comparisons found on lines %s, want %s:\n%s", got, want, strings.Join(found, "\n"))
	}
}

// The names TestNoBackendNameCompared looks for: literals spelling a
// backend's name, and this package's constants naming one.
var (
	backendLiterals = map[string]bool{NameOverlay: true, NameReflink: true, NameCopy: true}
	backendConsts   = map[string]bool{"NameOverlay": true, "NameReflink": true, "NameCopy": true}
)

// backendNameComparisons returns "file:line: what" for each comparison of
// a backend name in src.
func backendNameComparisons(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	report := func(n ast.Node, what string) {
		pos := fset.Position(n.Pos())
		out = append(out, pos.Filename+":"+strconv.Itoa(pos.Line)+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isBackendName(n.X) || isBackendName(n.Y)) {
				report(n, "a backend name compared with "+n.Op.String())
			}
		case *ast.SwitchStmt:
			if n.Tag == nil {
				return true // its cases are boolean expressions, seen as such
			}
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					if isBackendName(e) {
						report(e, "a backend name as a switch case")
					}
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "EqualFold" {
				for _, a := range n.Args {
					if isBackendName(a) {
						report(n, "a backend name compared with EqualFold")
					}
				}
			}
		}
		return true
	})
	return out, nil
}

// isBackendName reports whether e is a backend name: a string literal
// spelling one, or one of this package's Name constants.
func isBackendName(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return isBackendName(e.X)
	case *ast.BasicLit:
		v, err := strconv.Unquote(e.Value)
		return e.Kind == token.STRING && err == nil && backendLiterals[v]
	case *ast.SelectorExpr:
		return backendConsts[e.Sel.Name]
	case *ast.Ident:
		return backendConsts[e.Name]
	}
	return false
}
