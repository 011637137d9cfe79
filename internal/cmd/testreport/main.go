// Command testreport runs `go test -json` with its arguments and prints what
// plain `go test` prints, as it comes (a line per package, the output of each
// failing test), then names the ten slowest tests and lists every skipped
// test with its reason. It exits with go test's exit status. `make test`
// runs it as `go tool testreport`.
//
// Why: a suite whose tests skip when the host lacks something can pass
// having tested little, and plain `go test` hides skips unless -v, which
// buries them in thousands of lines. Under `make test` a missing
// prerequisite that script/bootstrap could provide fails instead of skipping
// (see internal/fixture); what still skips is an optional host feature (no
// reflink filesystem, no unprivileged user, blocked user namespaces), and
// this list says which, in one place at the end of the log.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Ctrl-C reaches go test too (same process group): keep reading until
	// it exits, so the report still comes.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	os.Exit(run("", os.Args[1:], os.Stdout, os.Stderr))
}
