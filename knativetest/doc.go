// Package knativetest holds, in knative_test.go, the test that runs queue
// under the exact environment Knative Serving's reconciler gives its
// queue-proxy container.
//
// It is its own module so that Knative Serving and the Kubernetes modules
// stay out of queue's module. It has no code to import.
package knativetest
