// Package deploy holds the Kubernetes and Knative manifests for running queue
// (the YAML files under kubernetes/ and knative/) and, in manifests_test.go,
// the test that decodes every one of them strictly into its typed API object
// and checks the invariants that tie them to queue's contract: the sidecar's
// security context, its probes, the termination grace period against the
// drain, and the app's preStop hook on /wait-for-drain.
//
// It is its own module so that the Kubernetes API modules stay out of
// queue's module. It has no code to import.
package deploy
