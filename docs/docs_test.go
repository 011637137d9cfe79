// Package docs_test holds the documentation against the code: the exit
// codes in exit-codes.md against package failure, the keys and variables in
// configuration.md against package config, every relative link in
// README.md and docs/*.md against the files and headings it names, and
// README.md's length. pkg/store's TestReadmeShowsTheLayout does the same
// for the store's tree in store.md.
package docs_test

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/pelletier/go-toml/v2"
)

// maxReadmeLines is how long README.md may be: what Ferry is, install, a
// quick start, Claude Code and other tools, and links; the rest is here.
const maxReadmeLines = 200

// root is the module's root: the tests run in docs/.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("the module root %s has no go.mod: %v", r, err)
	}
	return r
}

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// pages returns README.md and every docs/*.md, relative to the root with
// forward slashes.
func pages(t *testing.T) []string {
	t.Helper()
	md, err := filepath.Glob(filepath.Join(root(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range md {
		out = append(out, "docs/"+filepath.Base(p))
	}
	return out
}

// prose returns text without its fenced code blocks (their lines are kept
// empty, so line numbers stay right).
func prose(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// fenced returns the body of the first code block of text opened with
// "```"+lang.
func fenced(t *testing.T, text, lang, page string) string {
	t.Helper()
	_, after, ok := strings.Cut(text, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("%s has no ```%s block", page, lang)
	}
	body, _, ok := strings.Cut(after, "\n```")
	if !ok {
		t.Fatalf("%s: the ```%s block does not end", page, lang)
	}
	return body
}

// TestExitCodes holds the table in exit-codes.md and the --help text
// (failure.ExitCodes) against the codes a command can exit with: success
// and each failure kind's.
func TestExitCodes(t *testing.T) {
	want := map[int]string{0: "success"}
	for _, k := range failure.Kinds() {
		if other, ok := want[k.ExitCode()]; ok {
			t.Errorf("kinds %s and %s both exit %d", other, k, k.ExitCode())
		}
		want[k.ExitCode()] = "kind " + k.String()
	}

	const page = "docs/exit-codes.md"
	row := regexp.MustCompile(`(?m)^\|\s*(\d+)\s*\|`)
	documented := map[int]bool{}
	for _, m := range row.FindAllStringSubmatch(read(t, page), -1) {
		n, _ := strconv.Atoi(m[1])
		if documented[n] {
			t.Errorf("%s lists exit code %d twice", page, n)
		}
		documented[n] = true
	}
	help := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\d+)\s`).FindAllStringSubmatch(failure.ExitCodes, -1) {
		n, _ := strconv.Atoi(m[1])
		help[n] = true
	}

	for _, c := range sortedKeys(want) {
		if !documented[c] {
			t.Errorf("%s does not list exit code %d (%s)", page, c, want[c])
		}
		if !help[c] {
			t.Errorf("failure.ExitCodes (ferry --help) does not list exit code %d (%s)", c, want[c])
		}
	}
	for _, c := range sortedKeys(documented) {
		if _, ok := want[c]; !ok {
			t.Errorf("%s lists exit code %d, which no failure kind exits with (pkg/failure)", page, c)
		}
	}
	for _, c := range sortedKeys(help) {
		if _, ok := want[c]; !ok {
			t.Errorf("failure.ExitCodes (ferry --help) lists exit code %d, which no failure kind exits with", c)
		}
	}
}

// configSource parses package config's non-test files.
func configSource(t *testing.T) []*ast.File {
	t.Helper()
	return parseDir(t, filepath.Join(root(t), "pkg", "config"))
}

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// codeKeys returns every dotted key ferry.toml takes, read from the toml
// tags of package config's schema (the struct go-toml decodes the file
// into, strictly): a field whose type is a struct of the package is a
// table, an embedded one is flattened, every other field is a key.
func codeKeys(t *testing.T) []string {
	t.Helper()
	structs := map[string]*ast.StructType{}
	for _, f := range configSource(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	if structs["schema"] == nil {
		t.Fatal("package config has no type schema: this test reads the keys of ferry.toml from it")
	}
	var keys []string
	var walk func(st *ast.StructType, prefix string)
	walk = func(st *ast.StructType, prefix string) {
		for _, f := range st.Fields.List {
			typ := f.Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			var sub *ast.StructType
			if id, ok := typ.(*ast.Ident); ok {
				sub = structs[id.Name]
			}
			if len(f.Names) == 0 { // embedded: go-toml flattens it
				if sub == nil {
					t.Fatalf("package config: embedded field %v in the schema is not a struct of the package", typ)
				}
				walk(sub, prefix)
				continue
			}
			if f.Tag == nil {
				t.Fatalf("package config: field %s of the schema has no toml tag", f.Names[0].Name)
			}
			tag, _ := strconv.Unquote(f.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("toml"), ",")
			if name == "" || name == "-" {
				t.Fatalf("package config: field %s of the schema has no toml name", f.Names[0].Name)
			}
			if sub != nil {
				walk(sub, prefix+name+".")
				continue
			}
			keys = append(keys, prefix+name)
		}
	}
	walk(structs["schema"], "")
	return keys
}

// leaves returns the dotted keys of the values in a decoded TOML document.
func leaves(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out = append(out, leaves(sub, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	slices.Sort(out)
	return out
}

// spell writes a dotted key as the docs do: [base] layered.
func spell(key string) string {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return key
	}
	return "[" + key[:i] + "] " + key[i+1:]
}

// TestConfigurationKeys holds the ferry.toml block of configuration.md
// against the keys package config decodes: it shows every one, and no
// other, and package config loads it as it stands. The [platform.*] tables
// take the same keys again.
func TestConfigurationKeys(t *testing.T) {
	const page = "docs/configuration.md"
	text := read(t, page)
	block := fenced(t, text, "toml", page)

	var doc map[string]any
	if err := toml.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("%s: the ferry.toml block is not TOML: %v", page, err)
	}

	all := codeKeys(t)
	var keys []string
	platforms := map[string]bool{}
	for _, k := range all {
		if rest, ok := strings.CutPrefix(k, "platform."); ok {
			p, _, _ := strings.Cut(rest, ".")
			platforms[p] = true
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) < 20 {
		t.Fatalf("read only %d keys from package config (%v): the test no longer finds the schema", len(keys), keys)
	}

	shown := map[string]bool{}
	for _, k := range leaves(doc, "") {
		if rest, ok := strings.CutPrefix(k, "platform."); ok {
			p, key, _ := strings.Cut(rest, ".")
			if !platforms[p] {
				t.Errorf("%s shows [platform.%s], which ferry.toml does not take (it takes %v)", page, p, sortedKeys(platforms))
			}
			if !slices.Contains(keys, key) {
				t.Errorf("%s shows %s, and %s is not a key of ferry.toml", page, spell(k), spell(key))
			}
			continue
		}
		shown[k] = true
		if !slices.Contains(keys, k) {
			t.Errorf("%s shows %s, which is not a key of ferry.toml (package config)", page, spell(k))
		}
	}
	for _, k := range keys {
		if !shown[k] {
			t.Errorf("%s does not show %s in its ferry.toml block", page, spell(k))
		}
	}
	for p := range platforms {
		if !strings.Contains(text, "[platform."+p) {
			t.Errorf("%s does not mention the [platform.%s] table", page, p)
		}
	}

	// The block is a ferry.toml that package config loads as it stands.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, config.FileName), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(dir, emptyEnv{home: t.TempDir(), cwd: dir}); err != nil {
		t.Errorf("%s: package config refuses the ferry.toml block: %v", page, err)
	}

	// Wherever the pages name a key as [table] key, it is one.
	tables := map[string]bool{}
	for _, k := range keys {
		tables[k[:strings.IndexByte(k, '.')]] = true
	}
	mention := regexp.MustCompile(`\[([a-z]+)\]\s+([a-z][a-z0-9-]*)`)
	for _, p := range pages(t) {
		for _, m := range mention.FindAllStringSubmatch(prose(read(t, p)), -1) {
			if tables[m[1]] && !slices.Contains(keys, m[1]+"."+m[2]) {
				t.Errorf("%s names %s, which is not a key of ferry.toml", p, spell(m[1]+"."+m[2]))
			}
		}
	}
}

// emptyEnv is an environment without variables.
type emptyEnv struct{ home, cwd string }

func (emptyEnv) Getenv(string) string       { return "" }
func (e emptyEnv) HomeDir() (string, error) { return e.home, nil }
func (e emptyEnv) Getwd() (string, error)   { return e.cwd, nil }

var ferryName = regexp.MustCompile(`^FERRY_[A-Z0-9_]+$`)

// settingVariables returns the FERRY_* variables package config reads: the
// names it passes to Getenv, and those of its table of keys.
func settingVariables(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range configSource(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Getenv" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, _ := strconv.Unquote(lit.Value)
			if ferryName.MatchString(v) && !slices.Contains(out, v) {
				out = append(out, v)
			}
			return true
		})
	}
	// The variables of ferry.toml's keys, which package config declares
	// with their keys rather than reading one by one.
	for _, v := range config.Variables() {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// literals returns the FERRY_* names that begin a string literal in the
// non-test Go files below dir ("FERRY_AGENT=" + name counts).
func literals(t *testing.T, dir string) map[string]bool {
	t.Helper()
	begins := regexp.MustCompile(`^(FERRY_[A-Z0-9_]*[A-Z0-9])`)
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				if m := begins.FindStringSubmatch(v); m != nil {
					out[m[1]] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// named returns the FERRY_* names in text; a name written with a trailing
// * (FERRY_ORACLE_*) is returned with it.
func named(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`FERRY_[A-Z0-9_]*[A-Z0-9*]`).FindAllString(text, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// matches reports whether name, or a prefix written as FERRY_X_*, names
// one of set.
func matches(name string, set map[string]bool) bool {
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		for n := range set {
			if strings.HasPrefix(n, prefix) {
				return true
			}
		}
		return false
	}
	return set[name]
}

// TestConfigurationVariables holds the FERRY_* variables of
// configuration.md against the code: every variable package config reads
// is there, and every one it names is a setting or a test knob
// (internal/knobs). Elsewhere in the pages a FERRY_* name must at least be
// one the code uses.
func TestConfigurationVariables(t *testing.T) {
	const page = "docs/configuration.md"
	settings := settingVariables(t)
	if len(settings) < 10 {
		t.Fatalf("read only %d variables from package config (%v): the test no longer finds its Getenv calls", len(settings), settings)
	}
	text := read(t, page)
	documented := named(text)
	for _, v := range settings {
		if !slices.Contains(documented, v) {
			t.Errorf("%s does not document %s, which package config reads", page, v)
		}
	}

	r := root(t)
	allowed := literals(t, filepath.Join(r, "internal", "knobs"))
	for _, v := range settings {
		allowed[v] = true
	}
	for _, v := range documented {
		if !matches(v, allowed) {
			t.Errorf("%s documents %s, which is neither a setting package config reads nor a test knob (internal/knobs)", page, v)
		}
	}

	used := map[string]bool{}
	for _, dir := range []string{"cmd", "pkg", "events", "internal"} {
		for n := range literals(t, filepath.Join(r, dir)) {
			used[n] = true
		}
	}
	for _, p := range pages(t) {
		for _, v := range named(read(t, p)) {
			if !matches(v, used) {
				t.Errorf("%s names %s, which no Go code of Ferry uses", p, v)
			}
		}
	}
}

// slug is the anchor a heading gets: lower case, spaces made hyphens,
// punctuation dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of a Markdown text.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*$`).FindAllStringSubmatch(prose(text), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var (
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	scheme   = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// TestLinks checks every relative link of README.md and docs/*.md: the
// file it names exists, and so does the heading its #anchor names.
func TestLinks(t *testing.T) {
	r := root(t)
	for _, p := range pages(t) {
		text := codeSpan.ReplaceAllString(prose(read(t, p)), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if scheme.MatchString(target) {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			rel := p
			if file != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(p), file))
			}
			data, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(rel)))
			if err != nil {
				if st, serr := os.Stat(filepath.Join(r, filepath.FromSlash(rel))); serr == nil && st.IsDir() && anchor == "" {
					continue
				}
				t.Errorf("%s links %q: %s does not exist", p, target, rel)
				continue
			}
			if anchor != "" && strings.HasSuffix(rel, ".md") && !anchors(string(data))[anchor] {
				t.Errorf("%s links %q: %s has no heading with anchor #%s", p, target, rel, anchor)
			}
		}
	}
}

// TestReadme checks that README.md stays a first page: short, linking
// every page of docs/, and giving contributors their two commands.
func TestReadme(t *testing.T) {
	text := read(t, "README.md")
	if n := strings.Count(strings.TrimSuffix(text, "\n"), "\n") + 1; n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into docs/", n, maxReadmeLines)
	}
	for _, p := range pages(t) {
		if p == "README.md" || p == "docs/README.md" {
			continue
		}
		if !strings.Contains(text, "("+p+")") && !strings.Contains(text, "("+p+"#") {
			t.Errorf("README.md does not link %s", p)
		}
		if !strings.Contains(read(t, "docs/README.md"), "("+strings.TrimPrefix(p, "docs/")+")") {
			t.Errorf("docs/README.md does not list %s", p)
		}
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(text, cmd) {
			t.Errorf("README.md does not give contributors %q", cmd)
		}
	}
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
