// Package deploy holds the Kubernetes and Knative manifests for running queue
// (the YAML files under kubernetes/ and knative/) and, in manifests_test.go,
// the test that decodes every one of them strictly into its typed API object
// and checks the invariants that tie them to queue's contract: the sidecar's
// security context, its probes, the termination grace period against the
// drain, the app's preStop hook on /wait-for-drain, and that the autoscalers
// (the HPA with its Prometheus Adapter rule, or KEDA's ScaledObject) scale on
// a gauge that docs/contract.md says queue exports. KEDA's and the adapter's
// configuration are decoded into copies of their types kept in the test
// (autoscaling_test.go), as strictly as the Kubernetes ones.
//
// It is its own module so that the Kubernetes API modules stay out of
// queue's module. It has no code to import.
package deploy
