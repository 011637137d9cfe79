package deploy_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

const runnerManifest = "kubernetes/runner-job.yaml"

// decodeStrict decodes a manifest with the Kubernetes API types, as the API
// server's strict field validation would: an unknown or duplicated field is
// an error, not something silently dropped.
func decodeStrict(t *testing.T, data []byte) runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := batchv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
	obj, _, err := s.Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", runnerManifest, err)
	}
	return obj
}

// TestRunnerManifest decodes the runner Job strictly and checks what the
// hardened runner promises: not root, a read-only root file system, every
// capability dropped, no privilege escalation, RuntimeDefault seccomp (so
// the no-namespace mode, FERRY_SANDBOX=off), and Ferry's writes on emptyDirs
// at the same canonical store path as the publisher's.
func TestRunnerManifest(t *testing.T) {
	data, err := os.ReadFile(runnerManifest)
	if err != nil {
		t.Fatal(err)
	}
	// The decoder must be able to fail: a misspelt field is refused.
	bad := strings.Replace(string(data), "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", 1)
	scheme := runtime.NewScheme()
	batchv1.AddToScheme(scheme)
	if _, _, err := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true}).Decode([]byte(bad), nil, nil); err == nil {
		t.Fatal("a misspelt field was decoded without error: the check is not strict")
	}

	job, ok := decodeStrict(t, data).(*batchv1.Job)
	if !ok {
		t.Fatalf("%s: not a batch/v1 Job", runnerManifest)
	}
	pod := job.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q: an ephemeral runner runs once", pod.RestartPolicy)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("the pod mounts a service account token; the runner never talks to the Kubernetes API")
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("the pod may run as root")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the pod's seccomp profile is not RuntimeDefault")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the runner alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the runner container has no securityContext")
	}
	switch {
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("the root file system is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("privilege escalation is allowed (no_new_privs is not set)")
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("the container is privileged")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities: %+v, want every one dropped and none added", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("the container's seccomp profile is not RuntimeDefault")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("the container may run as root")
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	// RuntimeDefault refuses user namespaces: the no-namespace mode.
	if env["FERRY_SANDBOX"].Value != "off" && env["FERRY_SANDBOX"].Value != "auto" {
		t.Errorf("FERRY_SANDBOX=%q: RuntimeDefault seccomp blocks user namespaces, so the runner needs off (or auto)", env["FERRY_SANDBOX"].Value)
	}
	if e := env["FERRY_NATS_URL"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("FERRY_NATS_URL does not come from a Secret: it carries the runner's credentials")
	}

	// Every path Ferry, git and cargo write must be on an emptyDir.
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	writable := func(p string) bool {
		for _, m := range c.VolumeMounts {
			if (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) && emptyDirs[m.Name] && !m.ReadOnly {
				return true
			}
		}
		return false
	}
	for _, name := range []string{"FERRY_HOME", "FERRY_WORKTREES", "HOME", "CARGO_HOME"} {
		p := env[name].Value
		if p == "" || !writable(p) {
			t.Errorf("%s=%q is not on a writable emptyDir", name, p)
		}
	}
	if env["FERRY_HOME"].Value != "/ferry/store" {
		t.Errorf("FERRY_HOME=%q: keep the fleet's canonical store path (deploy/README.md), /ferry/store", env["FERRY_HOME"].Value)
	}
	for _, p := range []string{"/tmp", c.WorkingDir} {
		if !writable(p) {
			t.Errorf("%s is not on a writable emptyDir", p)
		}
	}
}
