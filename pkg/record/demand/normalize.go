package demand

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Command is a cargo call as demand counts it: what decides the units it
// builds, and nothing else. Two calls that build the same units with the
// same options normalise to the same Command whatever their output
// options, test filters, program arguments or job counts.
type Command struct {
	// Dir is the directory of the package the call ran in, relative to
	// the worktree's top with forward slashes: "." at the top. cargo
	// build in a member's directory builds that member only.
	Dir string `json:"dir"`
	// Sub is the subcommand, with Cargo's aliases resolved (b is build).
	Sub string `json:"sub"`
	// Args are the options that select units, normalised: long names,
	// values attached with "=", lists sorted, in a fixed order.
	Args []string `json:"args,omitempty"`
	// Lints are clippy's lint options after "--" (-D warnings, ...):
	// clippy's driver tracks them, so they decide whether its units are
	// fresh.
	Lints []string `json:"lints,omitempty"`
	// Unlearnable says why a base cannot warm the call as it ran (another
	// toolchain, --config, an option the normaliser does not know); ""
	// when it can.
	Unlearnable string `json:"unlearnable,omitempty"`
}

// The subcommands that build units, with Cargo's built-in aliases.
var subcommands = map[string]string{
	"build": "build", "b": "build", "check": "check", "c": "check",
	"test": "test", "t": "test", "bench": "bench", "run": "run", "r": "run",
	"doc": "doc", "d": "doc", "clippy": "clippy", "rustc": "rustc",
	"rustdoc": "rustdoc", "fix": "fix",
}

// Options of the build subcommands that select units: flags, and options
// taking a value. Long names only; shortFlags maps the short ones.
var (
	unitFlags = map[string]bool{
		"--release": true, "--workspace": true, "--all-features": true, "--no-default-features": true,
		"--lib": true, "--bins": true, "--examples": true, "--tests": true, "--benches": true,
		"--all-targets": true, "--doc": true, "--no-run": true, "--no-deps": true, "--document-private-items": true,
	}
	unitValues = map[string]bool{
		"--profile": true, "--features": true, "--package": true, "--exclude": true,
		"--bin": true, "--example": true, "--test": true, "--bench": true, "--target": true,
	}
	// listValues may be given several times; their values are sorted.
	listValues = map[string]bool{
		"--features": true, "--package": true, "--exclude": true, "--bin": true,
		"--example": true, "--test": true, "--bench": true, "--target": true,
	}
	// Options that change nothing about the units built: dropped.
	quietFlags = map[string]bool{
		"--keep-going": true, "--frozen": true, "--locked": true, "--offline": true,
		"--no-fail-fast": true, "--ignore-rust-version": true, "--future-incompat-report": true,
		"--open": true, "--timings": true, "--quiet": true, "--verbose": true,
		"--broken-code": true, "--allow-dirty": true, "--allow-staged": true, "--allow-no-vcs": true,
		"--edition": true, "--edition-idioms": true, "--fix": true, "--allow-no-vcs-dirty": true,
	}
	quietValues = map[string]bool{
		"--jobs": true, "--message-format": true, "--color": true, "--lockfile-path": true,
		"--artifact-dir": true, "--out-dir": true,
	}
	// Options whose units a base cannot warm as given.
	foreignValues = map[string]string{
		"--config":        "it sets Cargo configuration with --config",
		"--target-dir":    "it builds in a target dir of its own",
		"--manifest-path": "",
	}
	shortNames = map[string]string{
		"-r": "--release", "-F": "--features", "-p": "--package", "-j": "--jobs",
		"-q": "--quiet", "-v": "--verbose",
	}
)

// Normalize returns the Command of a cargo call with arguments args (as
// cargo gets them, without the program name), run in dir (relative to the
// worktree's top: the directory of the package cargo finds there, or of
// the manifest --manifest-path names). ok is false for a call that builds
// no unit (cargo -V, cargo metadata, cargo fmt, an alias Ferry does not
// know): demand does not count it.
//
// It reads the call in four steps: the global options before the
// subcommand (globalOptions), the subcommand, the subcommand's options
// (readOptions), and what those mean for the units built (settle).
func Normalize(args []string, dir string) (Command, bool) {
	c := Command{Dir: dir}
	if c.Dir == "" {
		c.Dir = "."
	}
	i, ok := c.globalOptions(args)
	if !ok || i >= len(args) {
		return Command{}, false
	}
	if c.Sub, ok = subcommands[args[i]]; !ok {
		return Command{}, false
	}
	rest := args[i+1:]
	var after []string
	if j := slices.Index(rest, "--"); j >= 0 {
		rest, after = rest[:j], rest[j+1:]
	}
	o := options{flags: map[string]bool{}, values: map[string][]string{}}
	c.readOptions(rest, &o)
	c.settle(&o, after)
	c.Args = o.ordered()
	return c, true
}

// globalOptions reads the toolchain (+name) and Cargo's global options
// before the subcommand, and returns where the subcommand is; false for a
// call that runs none (--version, --list, --help, --explain).
func (c *Command) globalOptions(args []string) (int, bool) {
	i := 0
	if i < len(args) && strings.HasPrefix(args[i], "+") {
		c.Unlearnable = "it picks another toolchain (" + args[i] + ")"
		i++
	}
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		name, _, attached := strings.Cut(args[i], "=")
		if long, ok := shortNames[name]; ok && len(name) == 2 {
			name = long
		}
		switch {
		case name == "-Z" || strings.HasPrefix(args[i], "-Z"):
			c.setUnlearnable("it sets unstable options (-Z)")
			if args[i] == "-Z" {
				i++
			}
		case name == "--config":
			c.setUnlearnable(foreignValues["--config"])
			if !attached {
				i++
			}
		case name == "-C":
			c.setUnlearnable("it changes directory with -C")
			i++
		case name == "--color":
			if !attached {
				i++
			}
		case quietFlags[name] || isVerbosity(args[i]):
		default:
			return i, false
		}
	}
	return i, true
}

// options are the unit-selecting options of a call as readOptions found
// them: flags set, and the values of options taking one, in call order.
type options struct {
	flags  map[string]bool
	values map[string][]string
}

// readOptions reads the subcommand's options (before any "--"): those that
// select units into o, those that change nothing dropped, and what a base
// cannot warm as given into c.Unlearnable.
func (c *Command) readOptions(rest []string, o *options) {
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a test name filter, a positional argument
		}
		name, value, attached := strings.Cut(a, "=")
		if long, ok := shortNames[name]; ok {
			name = long
		} else if len(name) > 2 && name[1] != '-' {
			// A short option with its value attached: -pfoo, -Ffeat.
			if long, ok := shortNames[name[:2]]; ok && (unitValues[long] || quietValues[long]) {
				name, value, attached = long, a[2:], true
			} else if isVerbosity(a) {
				continue
			}
		}
		takeValue := func() (string, bool) {
			if attached {
				return value, true
			}
			if j+1 < len(rest) {
				j++
				return rest[j], true
			}
			return "", false
		}
		switch {
		case unitFlags[name]:
			o.flags[name] = true
		case name == "--all":
			o.flags["--workspace"] = true // cargo's old name for it
		case unitValues[name]:
			if v, ok := takeValue(); ok {
				c.addValue(o, name, v)
			}
		case quietFlags[name] || isVerbosity(a):
		case quietValues[name]:
			takeValue()
		case name == "--manifest-path":
			takeValue() // the caller gave its directory as dir
		case foreignValues[name] != "":
			takeValue()
			c.setUnlearnable(foreignValues[name])
		case strings.HasPrefix(a, "-Z"):
			c.setUnlearnable("it sets unstable options (-Z)")
			if a == "-Z" {
				j++
			}
		default:
			c.setUnlearnable("it has an option demand does not know (" + name + ")")
		}
	}
}

// addValue records value v of unit-selecting option name: each feature of
// a --features list on its own.
func (c *Command) addValue(o *options, name, v string) {
	if name == "--target" && (strings.HasSuffix(v, ".json") || strings.Contains(v, "/")) {
		c.setUnlearnable("its --target is a file of its own")
	}
	if name == "--features" {
		o.values[name] = append(o.values[name], strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })...)
		return
	}
	o.values[name] = append(o.values[name], v)
}

// settle applies what the options mean for the units the subcommand
// builds: --profile release is --release and --profile dev the default,
// test and bench are warmed without running them, clippy's lint options
// after "--" count, and what a base cannot warm as given is said.
func (c *Command) settle(o *options, after []string) {
	if p := o.values["--profile"]; len(p) > 0 {
		switch last := p[len(p)-1]; {
		case last == "release":
			o.flags["--release"] = true
			delete(o.values, "--profile")
		case last == "dev" && (c.Sub == "build" || c.Sub == "check" || c.Sub == "run" || c.Sub == "clippy" || c.Sub == "doc" || c.Sub == "rustc"):
			delete(o.values, "--profile")
		default:
			o.values["--profile"] = []string{last}
		}
	}
	switch c.Sub {
	case "test", "bench":
		delete(o.flags, "--no-run") // they are warmed without running
	case "clippy":
		c.Lints = lintArgs(after)
	case "rustc", "rustdoc":
		if len(after) > 0 {
			c.setUnlearnable("it passes " + c.Sub + " arguments of its own")
		}
	case "fix":
		c.setUnlearnable("cargo fix changes the sources")
	}
}

// ordered is the options as Command.Args holds them: the flags, then each
// option with its values (lists sorted, without repeats), in a fixed order.
func (o *options) ordered() []string {
	var args []string
	for _, f := range []string{"--release", "--workspace", "--all-features", "--no-default-features",
		"--lib", "--bins", "--examples", "--tests", "--benches", "--all-targets", "--doc", "--no-deps", "--document-private-items"} {
		if o.flags[f] {
			args = append(args, f)
		}
	}
	for _, v := range []string{"--profile", "--package", "--exclude", "--features", "--bin", "--example", "--test", "--bench", "--target"} {
		vals := o.values[v]
		if len(vals) == 0 {
			continue
		}
		if listValues[v] {
			vals = slices.Compact(slices.Sorted(slices.Values(vals)))
		}
		args = append(args, v+"="+strings.Join(vals, ","))
	}
	return args
}

// lintArgs keeps the lint level options of clippy's arguments after "--"
// (-D warnings, -Wclippy::pedantic, --cap-lints …), each as one word;
// anything else there is dropped.
func lintArgs(after []string) []string {
	var out []string
	for j := 0; j < len(after); j++ {
		a := after[j]
		switch {
		case a == "-D" || a == "-W" || a == "-A" || a == "-F" || a == "--deny" || a == "--warn" || a == "--allow" || a == "--forbid" || a == "--cap-lints":
			if j+1 < len(after) {
				out = append(out, a+" "+after[j+1])
				j++
			}
		case len(a) > 2 && (strings.HasPrefix(a, "-D") || strings.HasPrefix(a, "-W") || strings.HasPrefix(a, "-A") || strings.HasPrefix(a, "-F")):
			out = append(out, a[:2]+" "+a[2:])
		}
	}
	return out
}

func (c *Command) setUnlearnable(why string) {
	if c.Unlearnable == "" {
		c.Unlearnable = why
	}
}

// isVerbosity reports whether a is -v, -vv, …, -q, -qq, ….
func isVerbosity(a string) bool {
	if len(a) < 2 || a[0] != '-' || a[1] == '-' {
		return false
	}
	return strings.Trim(a[1:], "v") == "" || strings.Trim(a[1:], "q") == ""
}

// String is the command as people read it and demand keys it: cargo, the
// subcommand and its normalised options, the lint options after "--" for
// clippy, and the directory when it is not the top ("cargo build
// --release (in crates/app)").
func (c Command) String() string {
	var b strings.Builder
	b.WriteString("cargo ")
	b.WriteString(c.Sub)
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	if len(c.Lints) > 0 {
		b.WriteString(" --")
		for _, l := range c.Lints {
			b.WriteByte(' ')
			b.WriteString(l)
		}
	}
	if c.Dir != "." && c.Dir != "" {
		b.WriteString(" (in " + c.Dir + ")")
	}
	return b.String()
}

// Warm is the shell command a base runs to warm what c builds, with
// cargo's --keep-going where the subcommand takes it, or "" when c is
// Unlearnable. cargo test and bench are warmed without running (--no-run),
// cargo run as the build of what it runs, cargo doc without opening.
//
// The log a base learns from is a file, not the calls themselves, so Warm
// checks what it builds the command from: a command read back from it
// that Normalize could not have made (an option it does not keep, a value
// or directory with characters it would not write, a directory leaving
// the checkout) is not warmed.
func (c Command) Warm() string {
	if c.Unlearnable != "" || c.Sub == "" || !c.valid() {
		return ""
	}
	sub := c.Sub
	var extra []string
	switch c.Sub {
	case "run":
		sub = "build"
	case "test", "bench":
		extra = append(extra, "--no-run")
	case "rustc", "rustdoc", "fix":
		return ""
	}
	words := []string{"cargo", sub}
	for _, a := range c.Args {
		words = append(words, quote(a))
	}
	words = append(words, extra...)
	if sub != "test" && sub != "bench" {
		words = append(words, "--keep-going")
	}
	if len(c.Lints) > 0 {
		words = append(words, "--")
		for _, l := range c.Lints {
			for _, w := range strings.Fields(l) {
				words = append(words, quote(w))
			}
		}
	}
	cmd := strings.Join(words, " ")
	if c.Dir != "." && c.Dir != "" {
		cmd = "cd " + quote(c.Dir) + " && " + cmd
	}
	return cmd
}

// quote makes w one word for sh, quoting it only when it needs it.
func quote(w string) string {
	safe := w != ""
	for _, r := range w {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=.,/:+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

var (
	argForm  = lazyRegexp(`^(--[a-z-]+)(?:=([A-Za-z0-9_.,:/+@%-]+))?$`)
	lintForm = lazyRegexp(`^(?:-[DWAF]|--cap-lints) [A-Za-z0-9_:-]+$`)
	dirForm  = lazyRegexp(`^[A-Za-z0-9_.+@%-]+(?:/[A-Za-z0-9_.+@%-]+)*$`)
)

// lazyRegexp returns expr compiled on the first call, and the same
// regexp on every later one.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// valid reports whether c is a command Normalize makes: known options with
// plain values, lint options, and a directory inside the checkout.
func (c Command) valid() bool {
	if _, ok := subcommands[c.Sub]; !ok || subcommands[c.Sub] != c.Sub {
		return false
	}
	if c.Dir != "." && (!dirForm().MatchString(c.Dir) || path.Clean(c.Dir) != c.Dir || c.Dir == ".." || strings.HasPrefix(c.Dir, "../")) {
		return false
	}
	for _, a := range c.Args {
		m := argForm().FindStringSubmatch(a)
		if m == nil || !(m[2] == "" && unitFlags[m[1]] || m[2] != "" && unitValues[m[1]]) {
			return false
		}
	}
	for _, l := range c.Lints {
		if !lintForm().MatchString(l) {
			return false
		}
	}
	return true
}

// KeyOf normalises a warm command written as a plain cargo call ("cargo
// build --workspace --keep-going") to the key demand counts it under;
// ok is false for a shell command that is not one plain cargo call.
func KeyOf(warm string) (string, bool) {
	if strings.ContainsAny(warm, "&|;()`$<>\"'\\") {
		return "", false
	}
	f := strings.Fields(warm)
	if len(f) < 2 || f[0] != "cargo" {
		return "", false
	}
	c, ok := Normalize(f[1:], ".")
	if !ok {
		return "", false
	}
	return c.String(), true
}
