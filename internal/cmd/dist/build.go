package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// platform is one operating system and architecture the release is built
// for.
type platform struct{ goos, goarch string }

func (p platform) String() string { return p.goos + "/" + p.goarch }

var platforms = []platform{
	{"linux", "amd64"},
	{"linux", "arm64"},
	{"darwin", "amd64"},
	{"darwin", "arm64"},
}

// shim is the one binary built with cgo where there is a C compiler for
// it: on Linux it links the C constructor that enters an agent's sandbox
// before the Go runtime starts (pkg/sandbox/inplace), statically, so its
// execs on every cargo call never load the dynamic linker (as make build).
// Every other binary is pure Go, and so static, on every platform.
const shim = "ferry-shim"

// releaseVar is the variable make build stamps the version into.
const releaseVar = "github.com/ferrydev/ferry/pkg/cli.release"

// target is a platform with the C compiler its shim is built with ("" when
// the shim is pure Go there).
type target struct {
	platform
	cc        string
	ccVersion string
}

func (t target) dirName() string { return t.goos + "-" + t.goarch }

// target finds p's C compiler when the shim is built (withShim). Only
// Linux needs one: the shim's constructor is Linux-only (there are no
// namespaces to enter elsewhere), so elsewhere the shim is pure Go and
// loses nothing.
func (p platform) target(withShim bool) (target, error) {
	t := target{platform: p}
	if p.goos != "linux" || !withShim {
		return t, nil
	}
	t.cc = cCompiler(p)
	if _, err := exec.LookPath(t.cc); err != nil {
		return t, fmt.Errorf("%s: no C compiler %s for %s's sandbox constructor (pkg/sandbox/inplace): on Debian, apt-get install %s (or set CC_FOR_%s_%s)",
			p, t.cc, shim, cPackages(p), p.goos, p.goarch)
	}
	// gcc names a file it cannot find by its bare name: without a static C
	// library the shim's -static link would fail after minutes of building.
	lib, err := exec.Command(t.cc, "-print-file-name=libc.a").Output()
	if err != nil || !filepath.IsAbs(strings.TrimSpace(string(lib))) {
		return t, fmt.Errorf("%s: %s finds no static C library (libc.a) for %s's static link: on Debian, apt-get install %s",
			p, t.cc, shim, cPackages(p))
	}
	// The version goes into the SBOM only; a compiler that cannot say it
	// still builds.
	if v, err := exec.Command(t.cc, "-dumpfullversion", "-dumpversion").Output(); err == nil {
		t.ccVersion = strings.TrimSpace(string(v))
	}
	return t, nil
}

// cCompiler is the C compiler for Linux platform p: CC_FOR_<os>_<arch>
// when set (the name the Go distribution's own build reads), the host's
// gcc for the host's platform, else Debian's cross compiler's name.
func cCompiler(p platform) string {
	if cc := os.Getenv("CC_FOR_" + p.goos + "_" + p.goarch); cc != "" {
		return cc
	}
	if p.goos == runtime.GOOS && p.goarch == runtime.GOARCH {
		return "gcc"
	}
	return gnuArch(p.goarch) + "-linux-gnu-gcc"
}

// cPackages names the Debian packages that give Linux platform p a C
// compiler and a static C library.
func cPackages(p platform) string {
	if p.goos == runtime.GOOS && p.goarch == runtime.GOARCH {
		return "gcc libc6-dev"
	}
	a := strings.ReplaceAll(gnuArch(p.goarch), "_", "-")
	return "gcc-" + a + "-linux-gnu libc6-dev-" + p.goarch + "-cross"
}

func gnuArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch
}

// binary is one built executable and what the Go toolchain recorded in it.
type binary struct {
	name string // the command's name, e.g. ferry-shim
	platform
	path string // where it was built
	info *debug.BuildInfo
}

// build builds binaries for t into dir and reads their build info.
func (t target) build(dir, version string, binaries []string) ([]binary, error) {
	var others, shims []string
	for _, b := range binaries {
		if b == shim {
			shims = append(shims, "./cmd/"+b)
		} else {
			others = append(others, "./cmd/"+b)
		}
	}
	if len(others) > 0 {
		if err := t.goBuild(dir, version, false, others); err != nil {
			return nil, err
		}
	}
	if len(shims) > 0 {
		if err := t.goBuild(dir, version, t.cc != "", shims); err != nil {
			return nil, err
		}
	}
	var bins []binary
	for _, b := range binaries {
		path := filepath.Join(dir, b)
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s's build info: %v", t.platform, b, err)
		}
		bins = append(bins, binary{name: b, platform: t.platform, path: path, info: info})
	}
	return bins, nil
}

// goBuild runs one go build of pkgs into dir, with cgo and a static link
// or without.
func (t target) goBuild(dir, version string, cgo bool, pkgs []string) error {
	// -trimpath drops the checkout's and the toolchain's paths. An empty
	// -buildid leaves out the Go build ID, a hash of the build's inputs that
	// serves the build cache, not the release: only the code decides the
	// bytes. -buildvcs=true records the commit (the machine's GOFLAGS may
	// turn that off) and fails loudly where it cannot, rather than leave it
	// out of one run only.
	ldflags := "-X " + releaseVar + "=" + version + " -buildid="
	if cgo {
		ldflags += " -extldflags=-static"
	}
	args := append([]string{"build", "-trimpath", "-buildvcs=true", "-ldflags", ldflags, "-o", dir + string(filepath.Separator)}, pkgs...)
	c := exec.Command(goTool(), args...)
	c.Env = t.env(cgo)
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = os.Stderr, &stderr
	if err := c.Run(); err != nil {
		msg := fmt.Sprintf("%s: go build %s: %v\n%s", t.platform, strings.Join(pkgs, " "), err, stderr.String())
		if cgo {
			msg += fmt.Sprintf("(the shim links statically with %s: on Debian, apt-get install %s)", t.cc, cPackages(t.platform))
		}
		return fmt.Errorf("%s", strings.TrimRight(msg, "\n"))
	}
	return nil
}

// env is the build's environment: the caller's, with everything that
// changes what the toolchain writes set here, so that the machine's
// settings (GOFLAGS here holds -buildvcs=false, say) do not reach the
// release.
func (t target) env(cgo bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !fixedEnv(k) {
			env = append(env, kv)
		}
	}
	env = append(env,
		"GOOS="+t.goos, "GOARCH="+t.goarch,
		"GOAMD64=v1", "GOARM64=v8.0", // the defaults, the widest reach
		"GOFLAGS=-mod=readonly", // not empty: an empty one would let go env -w's apply
		"GOEXPERIMENT=",         // the toolchain's default experiments
	)
	if cgo {
		return append(env, "CGO_ENABLED=1", "CC="+t.cc, "CGO_CFLAGS=-O2 -g", "CGO_CPPFLAGS=", "CGO_LDFLAGS=-O2 -g")
	}
	return append(env, "CGO_ENABLED=0")
}

// fixedEnv reports whether the build's environment sets variable k itself.
func fixedEnv(k string) bool {
	switch k {
	case "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOFLAGS", "GOEXPERIMENT", "CC", "CXX":
		return true
	}
	return strings.HasPrefix(k, "CGO_")
}

// goTool is the go command make runs (GO=...), else the one on PATH.
func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// toolchains are the compilers the release was built with, for the SBOM:
// rebuilding the same bytes needs the same ones.
func toolchains(targets []target) []tool {
	seen := map[string]bool{}
	var tools []tool
	for _, t := range targets {
		if t.cc != "" && !seen[t.cc] {
			seen[t.cc] = true
			tools = append(tools, tool{name: t.cc, version: t.ccVersion})
		}
	}
	return tools
}
