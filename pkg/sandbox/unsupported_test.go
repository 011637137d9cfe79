package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/platform"
)

// On macOS Command refuses every plan with this error: typed as a setup
// failure of creating the namespace, blocked by the operating system (not
// a setting to fix), and "not on this platform" to errors.Is.
func TestNoNamespacesError(t *testing.T) {
	var err error = noNamespaces("darwin")
	var se *SetupError
	if !errors.As(err, &se) || se.Step != platform.StepCreate || se.Blocker == nil {
		t.Fatalf("%v is not a SetupError of %q with a blocker", err, platform.StepCreate)
	}
	if se.Blocker.Setting != platform.SettingOS || se.Blocker.Value != "darwin" {
		t.Errorf("blocker %v, want the operating system", se.Blocker)
	}
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("%v does not unwrap to errors.ErrUnsupported", err)
	}
	if failure.KindOf(err) != failure.Blocked || failure.HintOf(err) != se.Blocker.Remedy {
		t.Errorf("kind %v, hint %q; want blocked with the remedy", failure.KindOf(err), failure.HintOf(err))
	}
	if !strings.Contains(err.Error(), "macOS has no user or mount namespaces") {
		t.Errorf("message %q does not say why", err)
	}
}
