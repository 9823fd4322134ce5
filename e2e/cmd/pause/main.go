// Command pause is the pods' sandbox process: it holds the pod's
// namespaces and waits for the kubelet to stop it, as Kubernetes' own
// pause image does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
