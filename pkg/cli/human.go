package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/events"
)

// Short is a commit or base id cut to its first 12 characters, which is
// how people read ids; paths are never cut.
func Short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ShortBase shortens a base id (commit-fingerprint) for a table: the
// commit's first 12 characters and the fingerprint's first 6. Two bases
// of one commit (a progressive build's first base and its full one) share
// the commit, so a short base id keeps part of the fingerprint.
func ShortBase(id string) string {
	commit, fp, ok := strings.Cut(id, "-")
	if !ok {
		return Short(id)
	}
	return Short(commit) + "-" + fp[:min(6, len(fp))]
}

// Seconds rounds a duration in seconds for people: "850µs", "12ms", "3.4s",
// "2m5s".
func Seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Bytes is a size for people: "512B", "4.0K", "70.9M", "1.2G".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// PrintEvent prints one event on stdout: a JSON object per line, or an
// EventLine for people.
func PrintEvent(io IO, ev events.Event, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(io.Stdout, string(b))
		return
	}
	fmt.Fprintln(io.Stdout, EventLine(ev))
}

// EventLine is one event for people: its time, kind and payload fields,
// with ids shortened, durations rounded and paths whole.
func EventLine(ev events.Event) string {
	h := ev.EventHeader()
	b, _ := json.Marshal(ev)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"type", "id", "time", "repo_key", "host", "repo", "RepoKey"} {
		delete(m, k)
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+fieldValue(k, v))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s  %-14s %s", h.Time.Local().Format("15:04:05.000"), ev.Kind(), strings.Join(parts, " "))
}

var hexID = regexp.MustCompile(`^[0-9a-f]{40}(-[0-9a-f]{16})?$`)

// fieldValue renders one payload field: commit and base ids cut to 12
// characters (which is how people read them), seconds rounded, lists
// comma-separated, anything else (paths, errors) whole.
func fieldValue(key string, v any) string {
	switch v := v.(type) {
	case string:
		if hexID.MatchString(v) {
			return Short(v) + "…"
		}
		if strings.ContainsAny(v, " \t\n") {
			return strconv.Quote(v)
		}
		return v
	case float64:
		if key == "seconds" || strings.HasSuffix(key, "_seconds") {
			return Seconds(v)
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	case []any:
		if key == "warm" {
			// A base's warm set: how many commands, and how many of them
			// agents demanded (the list itself is in the JSON).
			demanded := 0
			for _, e := range v {
				if m, ok := e.(map[string]any); ok && m["demanded"] != nil {
					demanded++
				}
			}
			return fmt.Sprintf("%d_commands(%d_demanded)", len(v), demanded)
		}
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fieldValue(key, e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprint(v)
}
