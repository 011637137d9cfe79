package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// protocol are the FERRY_* variables that are not settings: what Ferry
// passes between its own processes, and names that are not variables at
// all. Each may be used only by the packages listed.
var protocol = map[string][]string{
	"FERRY_AGENT":         {"pkg/agent", "pkg/shim", "pkg/base", "pkg/cli/ferrycmd"}, // set for scripts in an agent's sandbox, never trusted
	"FERRY_WORKTREE":      {"pkg/cli/ferrycmd"},                                      // printed by ferry env
	"FERRY_HOST_TARGET":   {"pkg/cli/ferrycmd"},                                      // printed by ferry env
	"FERRY_WARM_SRC":      {"pkg/base", "pkg/shim"},                                  // a base's warm build tells the shim its checkout
	"FERRY_WARM_TARGET":   {"pkg/base", "pkg/shim"},                                  // and its target
	"FERRY_WARM_UNITS":    {"pkg/base", "pkg/shim"},                                  // and where the shim records its cargo calls
	"FERRY_WARM_CARGO":    {"pkg/base", "pkg/shim"},                                  // and the base's Cargo version (the CI rule)
	"FERRY_REMAP_CHANNEL": {"pkg/remap"},                                             // the toolchain's channel, for remap mode's rustc wrapper
	"FERRY_SHIM_CALL":     {"pkg/shim"},                                              // the shim's recursion guard
	"FERRY_SHIM_DEPTH":    {"pkg/shim"},                                              // the shim's recursion guard
	"FERRY_SANDBOX_PLAN":  {"pkg/sandbox"},                                           // the plan a re-executed sandbox child reads
	"FERRY_COMMITS":       {"pkg/bus"},                                               // a stream's name
	"FERRY_EVENTS":        {"pkg/bus"},                                               // a stream's name
	"FERRY_PROFILE":       {"pkg/doctor"},                                            // a here-document's delimiter
	"FERRY_INVOKED_AS":    {"pkg/cli"},                                               // the command as typed, from the front to a stage
	"FERRY_BASE_FILE":     {"pkg/hook"},                                              // read by the cloud setup line's shell, not by Ferry
	"FERRY_SIGNING_KEY":   {"pkg/hook"},                                              // an Actions secret Copilot's workflow reads (ferry key --from -), not Ferry
}

// dropped are settings a package below this one may name, only to drop
// them from an environment: cargoenv.WithoutBus keeps the bus's variables
// from every command Ferry runs in a sandbox, and the shim, which runs
// such commands, does not link this package.
var dropped = map[string][]string{
	"FERRY_NATS_URL":         {"pkg/cargoenv"},
	"FERRY_BUS_REPLICAS":     {"pkg/cargoenv"},
	"FERRY_ACK_WAIT":         {"pkg/cargoenv"},
	"FERRY_BUS_MONITOR_PORT": {"pkg/cargoenv"},
}

// TestFerryVariablesAreSettings fails when code outside this package uses a
// FERRY_* variable that is neither a setting (read here, once), a test knob
// (internal/knobs), nor one of the protocol or dropped variables above
// where it belongs. Settings read elsewhere would be decided twice.
func TestFerryVariablesAreSettings(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^(FERRY_[A-Z0-9_]+)(=.*)?$`)
	for _, top := range []string{"cmd", "pkg", "events"} {
		filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			pkg := filepath.Dir(rel)
			if pkg == filepath.Join("pkg", "config") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				v, _ := strconv.Unquote(lit.Value)
				m := name.FindStringSubmatch(v)
				if m == nil {
					return true
				}
				for _, allowed := range append(protocol[m[1]], dropped[m[1]]...) {
					if pkg == allowed {
						return true
					}
				}
				t.Errorf("%s: %s is read outside package config: make it a setting (config.Settings), a test knob (internal/knobs), or a protocol variable listed in this test",
					fset.Position(lit.Pos()), m[1])
				return true
			})
			return nil
		})
	}
}
