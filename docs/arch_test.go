package docs_test

import (
	"go/build"
	"path/filepath"
	"testing"
)

// make test checks macOS on darwin/arm64 alone (the Makefile's test
// recipe), which holds only while every Go file of the repository is
// built, or left out, alike for darwin/amd64 and darwin/arm64: no file
// name or build constraint names either architecture.
func TestDarwinArchitecturesBuildTheSameFiles(t *testing.T) {
	r := root(t)
	ctx := func(arch string) build.Context {
		c := build.Default
		c.GOOS, c.GOARCH, c.CgoEnabled = "darwin", arch, false
		return c
	}
	amd64, arm64 := ctx("amd64"), ctx("arm64")
	files := 0
	err := walkGoFiles(r, func(path string) error {
		files++
		dir, name := filepath.Split(path)
		a, err := amd64.MatchFile(dir, name)
		if err != nil {
			return err
		}
		b, err := arm64.MatchFile(dir, name)
		if err != nil {
			return err
		}
		if a != b {
			rel, _ := filepath.Rel(r, path)
			t.Errorf("%s is built for darwin/amd64 %v, for darwin/arm64 %v: make test checks darwin/arm64 alone, so add darwin/amd64 to its cross step (Makefile)", rel, a, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files found under %s: the walk missed the repository", files, r)
	}
}
