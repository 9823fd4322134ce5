package main

import (
	"os/exec"
	"testing"
)

// TestDeployManifests runs the deploy module's tests, which decode every
// Kubernetes and Knative manifest strictly. They live in a nested module so
// that the Kubernetes API modules stay out of queue's own; this test makes
// the README's one test command cover them too.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = "../../deploy"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy module tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
