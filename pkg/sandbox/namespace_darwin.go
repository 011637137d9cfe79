package sandbox

import (
	"runtime"
	"syscall"
)

// Without namespaces. macOS has neither user nor mount namespaces, so there
// is no sandbox to create, join or seal, and no Ferry process is ever
// re-executed as a sandbox child or a holder. Command refuses every plan
// with a *SetupError whose Blocker is platform.NoNamespaces (unwrapping to
// errors.ErrUnsupported); Ferry builds without the sandbox there, at host
// paths. Inside, which runs a command in the caller's own namespaces, and
// what reads /proc (LiveOverlays, IsHolder: nothing is found) still work.

// Init does nothing: no process here is a sandbox child or a holder.
func Init() {}

// namespaces refuses: this kernel has no namespaces.
func namespaces() error { return noNamespaces(runtime.GOOS) }

// namespaceAttr is never reached: Command refuses first (namespaces).
func namespaceAttr(Plan) *syscall.SysProcAttr { return nil }

// diesWithParent: no command started here gets a parent-death signal.
func diesWithParent(*syscall.SysProcAttr) bool { return false }
