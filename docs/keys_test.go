package docs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/share"
)

// The ferry.toml block of configuration.md lies between these lines.
const (
	keysBegin = "<!-- keys: go test ./docs -run TestConfigurationBlock -->"
	keysEnd   = "<!-- /keys -->"
)

// keysTrailer ends the block: the platform tables, which take any key.
const keysTrailer = `[platform.linux.base]          # per-platform overrides of any table above; [platform.macos.*] on macOS
warm = ["cargo build --workspace"]
`

// TestConfigurationBlock holds configuration.md's ferry.toml to package
// config's table of keys (config.Keys): each table, each key with the
// value shown for it and its line, in the table's order. With
// FERRY_UPDATE_LISTS=1 it rewrites the block.
func TestConfigurationBlock(t *testing.T) {
	var b strings.Builder
	b.WriteString("```toml\n")
	table := ""
	for _, k := range config.Keys() {
		tbl, name, _ := strings.Cut(k.Name, ".")
		if tbl != table {
			if table != "" {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "[%s]\n", tbl)
			table = tbl
		}
		if k.Example == "" {
			t.Errorf("%s has no example in package config's table", k.Name)
		}
		line := name + " = " + k.Example
		if k.Doc != "" {
			line = fmt.Sprintf("%-30s # %s", line, k.Doc)
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("\n" + keysTrailer + "```\n")
	want := b.String()

	// The defaults package config leaves to the packages that use them.
	for key, v := range map[string]string{"bus.ack-wait": `"` + bus.DefaultAckWait.String() + `"`, "bus.bases-bucket": `"` + share.DefaultBucket + `"`} {
		if !strings.Contains(want, strings.TrimPrefix(key, "bus.")+" = "+v+" ") {
			t.Errorf("configuration.md does not show %s's default, %s", key, v)
		}
	}

	holdSection(t, "docs/configuration.md", keysBegin, keysEnd, want, "ferry.toml", "TestConfigurationBlock")
}
