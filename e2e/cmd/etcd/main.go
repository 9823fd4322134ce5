// Command etcd is etcd's server, built from its module at the version
// Kubernetes pins, for the node e2e/run.sh starts.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
