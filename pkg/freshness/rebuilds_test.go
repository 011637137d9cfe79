package freshness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/internal/fixture"
)

// fakeTarget writes a legacy profile dir in target: for each unit, its
// fingerprint dir (<pkg>-<hash>/<name>, .json, dep-<name>) and, unless its
// inputs are nil, its rustc dep-info naming them (in deps/, or in its
// build dir for a build script).
type fakeUnit struct {
	pkg, hash, name string
	inputs          []string // nil: no rustc dep-info
}

func fakeTarget(t *testing.T, target string, us []fakeUnit) {
	t.Helper()
	fakeProfile(t, target, "debug", us)
}

// fakeProfile is fakeTarget for the profile dir profile (relative to target).
func fakeProfile(t *testing.T, target, profile string, us []fakeUnit) {
	t.Helper()
	write := func(rel, data string) {
		p := filepath.Join(target, filepath.FromSlash(rel))
		check(t, os.MkdirAll(filepath.Dir(p), 0o755))
		check(t, os.WriteFile(p, []byte(data), 0o644))
	}
	write(profile+"/.cargo-lock", "")
	for _, u := range us {
		dir := profile + "/.fingerprint/" + u.pkg + "-" + u.hash + "/"
		write(dir+u.name, "0123456789abcdef")
		write(dir+u.name+".json", "{}")
		write(dir+"dep-"+u.name, "\x01\x00\x00\x00\xff\x01\x00\x00\x00\x00\x00\x00\x00\x00")
		if u.inputs == nil {
			continue
		}
		var esc []string
		for _, in := range u.inputs {
			esc = append(esc, strings.ReplaceAll(in, " ", `\ `))
		}
		crate := strings.ReplaceAll(u.pkg, "-", "_")
		d := profile + "/deps/" + crate + "-" + u.hash + ".d"
		if strings.HasPrefix(u.name, "build-script-") {
			crate = "build_script_build"
			d = profile + "/build/" + u.pkg + "-" + u.hash + "/" + crate + "-" + u.hash + ".d"
		}
		write(d, filepath.Join(target, d)+": "+strings.Join(esc, " ")+"\n\n"+strings.Join(esc, ":\n")+":\n")
	}
}

// TestLinkRebuilds: with link retargeted (data/a.txt to data/b.txt), the
// rule names the compile units whose rustc dep-info reads through link or
// link2 (relative, absolute at the base checkout, absolute at the store's
// mnt/src), and those without rustc dep-info; not rustdoc's, not a
// build-script run, not a unit reading only unchanged paths, not one
// reading through remap's .ferry-target (into the store in both); and it
// names nothing when no link differs. EmptyDepInfo then empties exactly
// those files, in a target and in an empty upper dir.
func TestLinkRebuilds(t *testing.T) {
	tr := newTestRepo(t)
	B := tr.commit(func(r *fixture.Repo) {
		check(t, os.Remove(r.Path("link")))
		check(t, os.Symlink("data/b.txt", r.Path("link")))
	})
	base := tr.base(tr.A)
	agent := tr.checkout("agent", B)
	same := tr.checkout("same", tr.A)
	store := filepath.Join(tr.tmp, "store")
	// remap mode's link, untracked, into each one's own target in the store.
	check(t, os.MkdirAll(filepath.Join(store, "agents/agent/target"), 0o755))
	check(t, os.MkdirAll(filepath.Join(store, "bases/b/target"), 0o755))
	check(t, os.Symlink(filepath.Join(store, "agents/agent/target"), filepath.Join(agent, ".ferry-target")))
	check(t, os.Symlink(filepath.Join(store, "bases/b/target"), filepath.Join(base, ".ferry-target")))

	target := filepath.Join(tr.tmp, "target")
	const (
		h1 = "1111111111111111"
		h2 = "2222222222222222"
		h3 = "3333333333333333"
		h4 = "4444444444444444"
		h5 = "5555555555555555"
		h6 = "6666666666666666"
		h7 = "7777777777777777"
		h8 = "8888888888888888"
		h9 = "9999999999999999"
	)
	fakeTarget(t, target, []fakeUnit{
		{"t", h1, "lib-t", []string{"src/lib.rs", "link"}},                                         // through link
		{"t", h2, "test-lib-t", []string{"src/lib.rs", "src/util.rs"}},                             // unchanged paths
		{"other", h3, "lib-other", nil},                                                            // no rustc dep-info
		{"t", h4, "doc-lib-t", nil},                                                                // rustdoc
		{"t", h5, "build-script-build-script-build", []string{"build.rs", "link2"}},                // link2 leads through link
		{"t", h6, "run-build-script-build-script-build", nil},                                      // a run
		{"abs-base", h7, "lib-abs_base", []string{filepath.Join(base, "link"), "src/lib.rs"}},      // absolute, base checkout
		{"abs-mnt", h8, "lib-abs_mnt", []string{filepath.Join(store, "mnt/src/link2")}},            // absolute, namespace mount
		{"remap", h9, "lib-remap", []string{".ferry-target/debug/build/x/out/gen.rs", "d1/x.txt"}}, // into the store in both
	})
	// A workspace nested at deep/: its inputs are relative to it.
	const ha, hb = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	check(t, os.MkdirAll(filepath.Join(target, "ferry-ws/deep"), 0o755))
	check(t, os.WriteFile(filepath.Join(target, "ferry-ws/deep/CACHEDIR.TAG"), []byte("Signature: 8a477f597d28d172789f06886806bc55\n"), 0o644))
	fakeProfile(t, target, "ferry-ws/deep/debug", []fakeUnit{
		{"n", ha, "lib-n", []string{"a/b/c.rs", "../link"}}, // deep/../link
		{"m", hb, "lib-m", []string{"a/b/c.rs", "link"}},    // deep/link: nothing there
	})

	got := linkRebuildsOf(t, input(t, agent, base, tr.A), target, store)
	want := []string{
		"debug/.fingerprint/abs-base-" + h7 + "/dep-lib-abs_base",
		"debug/.fingerprint/abs-mnt-" + h8 + "/dep-lib-abs_mnt",
		"debug/.fingerprint/other-" + h3 + "/dep-lib-other",
		"debug/.fingerprint/t-" + h1 + "/dep-lib-t",
		"debug/.fingerprint/t-" + h5 + "/dep-build-script-build-script-build",
		"ferry-ws/deep/debug/.fingerprint/n-" + ha + "/dep-lib-n",
	}
	if !slices.Equal(got, want) {
		t.Errorf("LinkRebuilds =\n%q\nwant\n%q", got, want)
	}
	// Without the store, .ferry-target leads to two places outside the
	// checkouts, and the namespace's mount is no checkout.
	noStore := linkRebuildsOf(t, input(t, agent, base, tr.A), target, "")
	if !slices.Contains(noStore, "debug/.fingerprint/remap-"+h9+"/dep-lib-remap") || slices.Contains(noStore, want[1]) {
		t.Errorf("without the store: LinkRebuilds = %q", noStore)
	}
	if none := linkRebuildsOf(t, input(t, same, base, tr.A), target, store); len(none) != 0 {
		t.Errorf("no link differs, yet LinkRebuilds = %q", none)
	}

	check(t, EmptyDepInfo(target, got))
	upper := filepath.Join(tr.tmp, "upper")
	check(t, os.Mkdir(upper, 0o755))
	check(t, EmptyDepInfo(upper, got))
	err := filepath.Walk(target, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !strings.HasPrefix(fi.Name(), "dep-") {
			return err
		}
		rel := filepath.ToSlash(try(filepath.Rel(target, p)).must(t))
		if emptied := fi.Size() == 0; emptied != slices.Contains(want, rel) {
			t.Errorf("%s: emptied %v", rel, emptied)
		}
		return nil
	})
	check(t, err)
	for _, rel := range want {
		fi, err := os.Lstat(filepath.Join(upper, filepath.FromSlash(rel)))
		if err != nil || fi.Size() != 0 {
			t.Errorf("upper %s: %v", rel, err)
		}
	}
}

// linkRebuildsOf is the link_rebuilds rule of in, as a refresh or a spawn
// asks it: from the plan Verify makes of in.
func linkRebuildsOf(t *testing.T, in Input, target, store string) []string {
	t.Helper()
	plan := try(Verify(in)).must(t)
	return try(plan.LinkRebuilds(target, store)).must(t)
}
