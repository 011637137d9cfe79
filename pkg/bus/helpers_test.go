package bus_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
)

var execCommand = exec.Command

// goTool finds the go command that runs the test: GOROOT's, else PATH's.
func goTool() (string, error) {
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(p); err == nil {
		return p, nil
	}
	return exec.LookPath("go")
}
