package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// The SBOM is CycloneDX 1.5 JSON: the release (the main module), each
// binary of each platform with its SHA-256 and its build settings, and
// every module any of them links, each with its package URL and, from the
// h1 hash go.sum holds, a SHA-256. Dependencies say which binary links
// which modules. It has no serial number and its one time is the commit's:
// two runs must write the same bytes, and a random serial number would
// differ.

type bom struct {
	BOMFormat    string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	Version      int          `json:"version"`
	Metadata     metadata     `json:"metadata"`
	Components   []component  `json:"components"`
	Dependencies []dependency `json:"dependencies"`
}

type metadata struct {
	Timestamp string    `json:"timestamp"`
	Tools     tools     `json:"tools"`
	Component component `json:"component"`
}

type tools struct {
	Components []component `json:"components"`
}

type component struct {
	Type       string     `json:"type"`
	BOMRef     string     `json:"bom-ref,omitempty"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []hash     `json:"hashes,omitempty"`
	Properties []property `json:"properties,omitempty"`
}

type hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// tool is a compiler the release was built with, besides Go.
type tool struct{ name, version string }

func writeSBOMFile(dst, version string, epoch time.Time, bins []binary, cc []tool) error {
	data, err := sbomJSON(version, epoch, bins, cc)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// sbomJSON is the SBOM of bins, the release version's binaries.
func sbomJSON(version string, epoch time.Time, bins []binary, cc []tool) ([]byte, error) {
	if len(bins) == 0 {
		return nil, fmt.Errorf("no binaries for the SBOM")
	}
	mod := bins[0].info.Main
	b := bom{
		BOMFormat:   "CycloneDX",
		SpecVersion: "1.5",
		Version:     1,
		Metadata: metadata{
			Timestamp: epoch.UTC().Format(time.RFC3339),
			Component: component{Type: "application", BOMRef: purl(mod.Path, mod.Version), Name: mod.Path,
				Version: version, PURL: purl(mod.Path, mod.Version)},
		},
	}
	goVersions := map[string]bool{}
	modules := map[string]component{}
	var binComps []component
	var deps []dependency
	for _, bin := range bins {
		c, err := binaryComponent(version, bin)
		if err != nil {
			return nil, err
		}
		binComps = append(binComps, c)
		std := stdlib(bin.info.GoVersion)
		goVersions[bin.info.GoVersion] = true
		modules[std.BOMRef] = std
		d := dependency{Ref: c.BOMRef, DependsOn: []string{std.BOMRef}}
		for _, m := range bin.info.Deps {
			mc := moduleComponent(m)
			modules[mc.BOMRef] = mc
			d.DependsOn = append(d.DependsOn, mc.BOMRef)
		}
		sort.Strings(d.DependsOn)
		deps = append(deps, d)
	}
	sort.Slice(binComps, func(i, j int) bool { return binComps[i].BOMRef < binComps[j].BOMRef })
	sort.Slice(deps, func(i, j int) bool { return deps[i].Ref < deps[j].Ref })
	var binRefs []string
	for _, c := range binComps {
		binRefs = append(binRefs, c.BOMRef)
	}
	b.Components = binComps
	for _, ref := range sortedKeys(modules) {
		b.Components = append(b.Components, modules[ref])
	}
	for _, v := range sortedKeys(goVersions) {
		b.Metadata.Tools.Components = append(b.Metadata.Tools.Components, component{Type: "application", Name: "go", Version: v})
	}
	for _, t := range cc {
		b.Metadata.Tools.Components = append(b.Metadata.Tools.Components, component{Type: "application", Name: t.name, Version: t.version})
	}
	b.Dependencies = append([]dependency{{Ref: b.Metadata.Component.BOMRef, DependsOn: binRefs}}, deps...)

	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// binaryComponent describes one built binary: its path in its archive is
// its reference, and its build settings (platform, cgo, commit) are its
// properties.
func binaryComponent(version string, bin binary) (component, error) {
	sum, err := fileSHA256(bin.path)
	if err != nil {
		return component{}, err
	}
	c := component{
		Type:    "application",
		BOMRef:  archiveName(version, bin.platform) + "/bin/" + bin.name,
		Name:    bin.name,
		Version: version,
		Hashes:  []hash{{Alg: "SHA-256", Content: sum}},
	}
	c.Properties = append(c.Properties, property{Name: "go:package", Value: bin.info.Path})
	for _, s := range bin.info.Settings {
		c.Properties = append(c.Properties, property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	return c, nil
}

// moduleComponent describes a module a binary links, as replaced if it
// was.
func moduleComponent(m *debug.Module) component {
	used := m
	if m.Replace != nil {
		used = m.Replace
	}
	c := component{Type: "library", Name: used.Path, Version: used.Version, PURL: purl(used.Path, used.Version)}
	c.BOMRef = c.PURL
	if s, ok := h1SHA256(used.Sum); ok {
		c.Hashes = []hash{{Alg: "SHA-256", Content: s}}
	}
	if m.Replace != nil {
		c.Properties = []property{{Name: "go:replaces", Value: m.Path + "@" + m.Version}}
	}
	return c
}

// stdlib describes the Go standard library of toolchain goVersion
// ("go1.26.8"). Its package URL is the one vulnerability databases match
// the standard library by: name stdlib, version without "go".
func stdlib(goVersion string) component {
	p := purl("stdlib", strings.TrimPrefix(goVersion, "go"))
	return component{Type: "library", BOMRef: p, Name: "stdlib", Version: goVersion, PURL: p}
}

// h1SHA256 turns a go.sum hash ("h1:" and the base64 SHA-256 of the
// module's file list) into hex, the form CycloneDX takes.
func h1SHA256(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 32 {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

// purl is the package URL of Go module path at version (none when
// version is empty, as for a module replaced by a directory).
func purl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = purlEscape(s)
	}
	p := "pkg:golang/" + strings.Join(segs, "/")
	if version != "" {
		p += "@" + purlEscape(version)
	}
	return p
}

// purlEscape percent-encodes all but the characters a package URL
// component may hold as they are ("+" in "+dirty" becomes "%2B").
func purlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
