package oracle

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/internal/fixture"
)

// Reference builds copies of an agent's tree with plain cargo, outside
// Ferry, in a directory of its own: Root/src is the copy (made anew for every
// build), Root/target its CARGO_TARGET_DIR (kept, so the registry crates are
// built once; see the package documentation for why that is a cold build of
// the code under test).
type Reference struct {
	Root  string
	Cargo string   // the real cargo
	Env   []string // environment for cargo; CARGO_TARGET_DIR is set here
}

// RefResult is what the reference build produced.
type RefResult struct {
	App  string // the app binary's output
	Test string // cargo test -p app's standard output
	// ManifestDir is the app's output with fixture.ManifestDirFlag: a
	// path in Src.
	ManifestDir string
}

// NewReference makes a reference dir at root, seeding its target from
// template (a target dir built cold from the fixture) with mtimes kept.
// The environment must not redirect cargo (see fixture.CargoEnv).
func NewReference(root, template, cargo string, env []string) (*Reference, error) {
	r := &Reference{Root: root, Cargo: cargo}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	if template != "" {
		if err := copyTree(template, r.target(), true, nil); err != nil {
			return nil, fmt.Errorf("oracle: seed the reference target: %w", err)
		}
	}
	r.Env = append(DropEnv(env, "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "CARGO_BUILD_BUILD_DIR"), "CARGO_TARGET_DIR="+r.target())
	return r, nil
}

// Src is the copy of the tree the last Build built.
func (r *Reference) Src() string    { return filepath.Join(r.Root, "src") }
func (r *Reference) target() string { return filepath.Join(r.Root, "target") }

// Build copies tree (everything but .git and the top-level target) to Src,
// every file written anew, then runs cargo test -p app there and the app
// binary it built.
func (r *Reference) Build(ctx context.Context, tree string) (*RefResult, error) {
	if err := os.RemoveAll(r.Src()); err != nil {
		return nil, err
	}
	if err := copyTree(tree, r.Src(), false, skipGitAndTarget); err != nil {
		return nil, fmt.Errorf("oracle: copy %s: %w", tree, err)
	}
	test, err := command(ctx, r.Src(), r.Env, r.Cargo, "test", "-p", fixture.AppCrate)
	if err != nil {
		return nil, err
	}
	app, err := command(ctx, r.Src(), r.Env, filepath.Join(r.target(), "debug", fixture.BinName))
	if err != nil {
		return nil, err
	}
	md, err := command(ctx, r.Src(), r.Env, filepath.Join(r.target(), "debug", fixture.BinName), fixture.ManifestDirFlag)
	if err != nil {
		return nil, err
	}
	return &RefResult{App: strings.TrimRight(app, "\n"), Test: test, ManifestDir: strings.TrimRight(md, "\n")}, nil
}

// skipGitAndTarget leaves out what is not the tree's source: git's metadata
// anywhere and the workspace's own target dir.
func skipGitAndTarget(rel string, d fs.DirEntry) bool {
	return d.Name() == ".git" || rel == "target"
}

// copyTree copies the tree at src to dst (created; its parent must exist):
// directories, regular files (bytes and permission bits) and symlinks as
// links. With keepTimes, files and directories get src's mtimes; otherwise
// everything is written now. skip, when set, leaves out entries (and what is
// below them) by slash-separated path relative to src.
func copyTree(src, dst string, keepTimes bool, skip func(rel string, d fs.DirEntry) bool) error {
	type stamp struct {
		path  string
		mtime time.Time
	}
	var stamps []stamp
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && skip != nil && skip(filepath.ToSlash(rel), d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		out := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(out, info.Mode().Perm()|0o700); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			text, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(text, out)
		case d.Type().IsRegular():
			if err := copyFile(p, out, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: not a file, directory or symlink", p)
		}
		if keepTimes {
			stamps = append(stamps, stamp{out, info.ModTime()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Children come after their directory in walk order: set times in
	// reverse, so making a child does not move its directory's mtime.
	for i := len(stamps) - 1; i >= 0; i-- {
		if err := os.Chtimes(stamps[i].path, time.Time{}, stamps[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
