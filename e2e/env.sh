# env.sh: what node.sh and run.sh both name, sourced by each.
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
export E2E_DIR=${E2E_DIR:-/var/lib/queue-e2e} # state; "down" keeps only bin/
BIN=$E2E_DIR/bin
PKI=$E2E_DIR/pki
RUN=/run/queue-e2e # sockets and PIDs
# The pause image's name is the kubelet's default, so nothing is pulled.
PAUSE_IMAGE=registry.k8s.io/pause:3.10.1
