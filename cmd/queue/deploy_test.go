package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDeployManifests runs the deploy module's tests, which decode every
// Kubernetes and Knative manifest strictly. They live in a nested module so
// that the Kubernetes API modules stay out of queue's own; this test makes
// the README's one test command cover them too.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "-timeout=3m", "./...")
	cmd.Dir = "../../deploy"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runCmd(t, cmd, 5*time.Minute); err != nil {
		t.Fatalf("deploy module tests: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok ") {
		t.Fatalf("deploy module tests: no package passed:\n%s", out.String())
	}
	t.Logf("%s", out.String())
}
