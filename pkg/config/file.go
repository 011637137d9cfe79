package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/suggest"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The schema of ferry.toml. Every value is a pointer so that "not set" can
// be told from a zero value: a platform table overrides only what it sets,
// and WarmIsDefault means no warm key at all, not an empty one.

// tables are the tables that may appear at the top level and again under
// [platform.linux] and [platform.macos].
type tables struct {
	Store   storeTable   `toml:"store"`
	Base    baseTable    `toml:"base"`
	Agent   agentTable   `toml:"agent"`
	Sandbox sandboxTable `toml:"sandbox"`
	Bus     busTable     `toml:"bus"`
	GC      gcTable      `toml:"gc"`
	Metrics metricsTable `toml:"metrics"`
	Paths   pathsTable   `toml:"paths"`
	Share   shareTable   `toml:"share"`
}

type shareTable struct {
	// TrustedKeys are the publishers' public keys a runner installs
	// bases from (package share's signing).
	TrustedKeys *[]string `toml:"trusted-keys"`
}

type pathsTable struct {
	// Worktrees is where spawn and hooks put agent worktrees:
	// WorktreesParent or WorktreesRepo.
	Worktrees *string `toml:"worktrees"`
}

type storeTable struct {
	Dir *string `toml:"dir"`
}

type baseTable struct {
	// Warm is WarmAuto ("auto") or a list of commands; checkTables
	// checks which (go-toml decodes a string or a []any into it).
	Warm        *any    `toml:"warm"`
	KeepGoing   *bool   `toml:"keep-going"`
	Prune       *bool   `toml:"prune"`
	Layered     *bool   `toml:"layered"`
	Progressive *bool   `toml:"progressive"`
	Freshness   *string `toml:"freshness"`
	// Learning from what agents build (package demand).
	Demand       *bool    `toml:"demand"`
	DemandMin    *int     `toml:"demand-min"`
	DemandWindow *string  `toml:"demand-window"`
	DemandBudget *float64 `toml:"demand-budget"`
}

type agentTable struct {
	WorktreeDir  *string `toml:"worktree-dir"`
	BranchPrefix *string `toml:"branch-prefix"`
	Backend      *string `toml:"backend"`
}

type sandboxTable struct {
	Mode       *string `toml:"mode"`
	RemapPaths *bool   `toml:"remap-paths"`
	// Writable are directories the sandbox keeps writable, beside the
	// agent's worktree and target (package confine).
	Writable *[]string `toml:"writable"`
}

type busTable struct {
	URL      *string `toml:"url"`
	Replicas *int    `toml:"replicas"`
	AckWait  *string `toml:"ack-wait"`
	// Sharing bases between hosts (package share).
	ShareBases    *bool   `toml:"share-bases"`
	BasesBucket   *string `toml:"bases-bucket"`
	BasesMaxBytes *int64  `toml:"bases-max-bytes"`
	RunnerBuilds  *bool   `toml:"runner-builds"`
	// Operating it: NATS monitoring on loopback.
	MonitorPort *int `toml:"monitor-port"`
}

type metricsTable struct {
	Port *int `toml:"port"`
}

type gcTable struct {
	ReapAfter *string `toml:"reap-after"`
	MinFree   *string `toml:"min-free"`
}

type platformTables struct {
	Linux tables `toml:"linux"`
	MacOS tables `toml:"macos"`
}

type schema struct {
	tables
	Platform platformTables `toml:"platform"`
}

// override replaces the values of t that o sets.
func (t *tables) override(o *tables) {
	for _, k := range settings {
		k.override(t, o)
	}
}

// document is a decoded ferry.toml, or an empty one when there is none.
type document struct {
	path   string          // where ferry.toml is or would be
	file   string          // path when the file exists, else ""
	schema schema          // the decoded values
	sites  map[string]site // where each dotted key was written
}

// site is where a key was written and what kind of value it was given.
type site struct {
	key   []string
	line  int
	found string // the value's TOML type, worded like describe: "a string"
}

func readDocument(path string) (*document, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &document{path: path}, nil
	}
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "make "+FileName+" a readable file, or remove it", "read %s", path)
	}
	return parseDocument(path, data)
}

// parseDocument decodes data, ferry.toml as read from path (a file's path,
// or git's name of a blob, such as HEAD:ferry.toml).
func parseDocument(path string, data []byte) (*document, error) {
	d := &document{path: path, file: path}
	d.sites = locate(data)
	if err := d.decode(data); err != nil {
		return nil, err
	}
	return d, nil
}

// decode fills d.schema, turning go-toml's errors into ones that name the
// file, the line and the key.
func (d *document) decode(data []byte) error {
	err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&d.schema)
	if err == nil {
		return d.checkKeyCase()
	}
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		first := &strict.Errors[0]
		line, _ := first.Position()
		return d.unknownKey(line, first.Key(), len(strict.Errors)-1)
	}
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return failure.Wrap(failure.Usage, err, "check the TOML syntax", "%s: decode", d.path)
	}
	line, _ := de.Position()
	if key := de.Key(); len(key) > 0 {
		if t, ok := schemaType(key); ok {
			want := describe(t)
			if found := d.sites[strings.Join(key, ".")].found; found != "" && found != want {
				return failure.New(failure.Usage, typeHint(key, t),
					"%s:%d: %s must be %s, not %s", d.path, line, strings.Join(key, "."), want, found)
			}
		}
	}
	return failure.Wrap(failure.Usage, de, "fix the TOML at that line", "%s:%d: invalid TOML", d.path, line)
}

// checkKeyCase rejects keys that go-toml matched only by ignoring case: TOML
// keys are case-sensitive, so "Backend" is not "backend".
func (d *document) checkKeyCase() error {
	// In document order, so the first bad key is the one reported.
	sites := slices.SortedFunc(maps.Values(d.sites), func(a, b site) int {
		return cmp.Or(cmp.Compare(a.line, b.line), slices.Compare(a.key, b.key))
	})
	for _, s := range sites {
		if _, ok := schemaType(s.key); !ok {
			return d.unknownKey(s.line, s.key, 0)
		}
	}
	return nil
}

// unknownKey reports key, written at line, as unknown; more is how many
// other unknown keys the file has.
func (d *document) unknownKey(line int, key []string, more int) error {
	if len(key) == 0 {
		return failure.New(failure.Usage, keysHint(nil, ""), "%s:%d: unknown key", d.path, line)
	}
	// The first part of key the schema does not know is the unknown one;
	// the parts before it name the table it was written in.
	n := 0
	for n < len(key)-1 {
		if _, ok := schemaType(key[:n+1]); !ok {
			break
		}
		n++
	}
	table, name := key[:n], key[n]
	msg := fmt.Sprintf("%s:%d: unknown key %q", d.path, line, strings.Join(key[:n+1], "."))
	if more > 0 {
		msg += fmt.Sprintf(" (and %d more)", more)
	}
	return failure.New(failure.Usage, keysHint(table, name), "%s", msg)
}

// errorAt reports an invalid value of key, naming the line it is on.
func (d *document) errorAt(key, hint, msg string) error {
	if s, ok := d.sites[key]; ok {
		return failure.New(failure.Usage, hint, "%s:%d: %s", d.path, s.line, msg)
	}
	return failure.New(failure.Usage, hint, "%s: %s", d.path, msg)
}

// check validates the values of the top-level tables and of both platform
// tables, whichever platform this is.
func (d *document) check() error {
	if err := d.checkTables(&d.schema.tables, ""); err != nil {
		return err
	}
	if err := d.checkTables(&d.schema.Platform.Linux, "platform.linux."); err != nil {
		return err
	}
	return d.checkTables(&d.schema.Platform.MacOS, "platform.macos.")
}

func (d *document) checkTables(t *tables, prefix string) error {
	for _, k := range settings {
		if err := k.checkIn(d, t, prefix); err != nil {
			return err
		}
	}
	return nil
}

// effective returns the top-level tables with the platform's table (a
// platformName) laid over them.
func (d *document) effective(platform string) tables {
	t := d.schema.tables
	switch platform {
	case "linux":
		t.override(&d.schema.Platform.Linux)
	case "macos":
		t.override(&d.schema.Platform.MacOS)
	}
	return t
}

// locate records the line and value type of every key in data. go-toml's
// decoder gives positions only for its own errors; these let errors about
// values (a bad backend, an empty warm list) name their line too. On a
// syntax error it returns the keys before it, and decode reports the error.
func locate(data []byte) map[string]site {
	sites := map[string]site{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyParts(e)
			found := "a table"
			if e.Kind == unstable.ArrayTable {
				found = "an array of tables"
			}
			addSite(sites, table, keyLine(&p, e), found)
		case unstable.KeyValue:
			addKeyValue(&p, sites, table, e)
		}
	}
	return sites
}

func addKeyValue(p *unstable.Parser, sites map[string]site, table []string, kv *unstable.Node) {
	key := append(slices.Clone(table), keyParts(kv)...)
	v := kv.Value()
	addSite(sites, key, keyLine(p, kv), valueKind(v))
	if v.Kind == unstable.InlineTable {
		it := v.Children()
		for it.Next() {
			if it.Node().Kind == unstable.KeyValue {
				addKeyValue(p, sites, key, it.Node())
			}
		}
	}
}

func addSite(sites map[string]site, key []string, line int, found string) {
	k := strings.Join(key, ".")
	if _, ok := sites[k]; !ok {
		sites[k] = site{key: key, line: line, found: found}
	}
}

func keyParts(n *unstable.Node) []string {
	var parts []string
	it := n.Key()
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

// keyLine returns the line of the first part of n's key.
func keyLine(p *unstable.Parser, n *unstable.Node) int {
	it := n.Key()
	if !it.Next() {
		return 0
	}
	return p.Shape(it.Node().Raw).Start.Line
}

// valueKind words the TOML type of v the way describe words a Go type, so
// the two can be compared.
func valueKind(v *unstable.Node) string {
	switch v.Kind {
	case unstable.String:
		return "a string"
	case unstable.Bool:
		return "a boolean"
	case unstable.Integer:
		return "an integer"
	case unstable.Float:
		return "a float"
	case unstable.InlineTable:
		return "a table"
	case unstable.Array:
		it := v.Children()
		for it.Next() {
			if it.Node().Kind != unstable.String {
				return "an array holding " + valueKind(it.Node())
			}
		}
		return "an array of strings"
	}
	return "a date or time"
}

// The schema is read by reflection from the struct tags, so the keys errors
// list cannot drift from the keys the decoder accepts.

// schemaType returns the type of the value at key, matching key parts
// exactly (TOML keys are case-sensitive).
func schemaType(key []string) (reflect.Type, bool) {
	t := reflect.TypeFor[schema]()
	for _, part := range key {
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		f, ok := fieldsOf(t)[part]
		if !ok {
			return nil, false
		}
		t = f
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	return t, true
}

// fieldsOf returns the TOML keys of struct type t and their types,
// flattening embedded structs as go-toml does.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	if t == nil || t.Kind() != reflect.Struct {
		return fields
	}
	for f := range t.Fields() {
		if f.Anonymous {
			maps.Copy(fields, fieldsOf(f.Type))
			continue
		}
		fields[f.Tag.Get("toml")] = f.Type
	}
	return fields
}

// keyNames returns the TOML keys of struct type t in declaration order.
func keyNames(t reflect.Type) []string {
	var names []string
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for f := range t.Fields() {
		if f.Anonymous {
			names = append(names, keyNames(f.Type)...)
			continue
		}
		names = append(names, f.Tag.Get("toml"))
	}
	return names
}

// describe words the TOML type a Go field of type t accepts.
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int:
		return "an integer"
	case reflect.Slice:
		return "an array of strings"
	case reflect.Float64:
		return "a number"
	case reflect.Interface:
		return `"auto" or an array of strings`
	}
	return "a table"
}

func typeHint(key []string, t reflect.Type) string {
	name := key[len(key)-1]
	switch describe(t) {
	case "a string":
		return fmt.Sprintf(`quote the value: %s = "…"`, name)
	case "an array of strings":
		return fmt.Sprintf(`write a list of quoted commands: %s = ["%s"]`, name, generatedBuild)
	case "a boolean":
		return fmt.Sprintf("write true or false, unquoted: %s = true", name)
	case "an integer":
		return fmt.Sprintf("write a whole number, unquoted: %s = 3", name)
	}
	return fmt.Sprintf("[%s] is a table; it takes: %s", strings.Join(key, "."), strings.Join(keyNames(t), ", "))
}

// keysHint lists the keys table takes, with a guess at the one meant when
// name is close to a known key.
func keysHint(table []string, name string) string {
	t, _ := schemaType(table)
	where := FileName
	if len(table) > 0 {
		where = "[" + strings.Join(table, ".") + "]"
	}
	list := fmt.Sprintf("%s takes: %s", where, strings.Join(keyNames(t), ", "))
	if guess := meant(table, name); guess != "" {
		return fmt.Sprintf("did you mean %q? %s", guess, list)
	}
	return list
}

// meant returns the dotted key name was probably meant to be: a close key
// of the same table, else a key of that name or close to it in another
// table at the same level (warm at the top level means base.warm).
func meant(table []string, name string) string {
	t, _ := schemaType(table)
	if k := closest(keyNames(t), name); k != "" {
		return strings.Join(append(slices.Clone(table), k), ".")
	}
	// The tables a misplaced key may belong to: the top-level ones, or those
	// of the same [platform.*] table.
	var scope []string
	if len(table) >= 2 && table[0] == "platform" {
		scope = table[:2]
	}
	var candidates []string
	for _, tname := range keyNames(reflect.TypeFor[tables]()) {
		tt, _ := schemaType([]string{tname})
		for _, k := range keyNames(tt) {
			candidates = append(candidates, tname+"."+k)
		}
	}
	best := closest(candidates, name)
	if best == "" {
		return ""
	}
	return strings.Join(append(slices.Clone(scope), best), ".")
}

// closest returns the key whose last part is within suggest.MaxTypos
// edits of name, the closest first, "" if none.
func closest(keys []string, name string) string {
	best, bestDist := "", -1
	for _, k := range keys {
		leaf := k[strings.LastIndexByte(k, '.')+1:]
		if d := suggest.Distance(strings.ToLower(name), leaf); d <= suggest.MaxTypos(name) && (bestDist < 0 || d < bestDist) {
			best, bestDist = k, d
		}
	}
	return best
}
