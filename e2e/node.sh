#!/bin/bash
# node.sh up|down: a single-node Kubernetes cluster on this machine, for the
# end-to-end runs (run.sh). Needs root. Everything it starts lives under
# $E2E_DIR (default /var/lib/queue-e2e) and in the network namespaces and
# the bridge it makes; "down" stops and removes all of it.
#
# The node: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy and the kubelet, built from their Go modules at the versions
# e2e/go.mod pins; Debian's containerd, runc and CNI plugins; a bridge
# (queue-e2e0, 10.88.0.1/16) that is the node's address and the pods'
# gateway; services in 10.96.0.0/16.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
LOGS=$E2E_DIR/logs
NODE=queue-e2e
BRIDGE=queue-e2e0
NODE_IP=10.88.0.1
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/16
API_IP=10.96.0.1
DNS_IP=10.96.0.10
SERVER=https://$NODE_IP:6443
CRI=unix://$RUN/containerd.sock

log() { echo "node: $*" >&2; }

# start NAME CMD...: run CMD in the background, its output in $LOGS/NAME.log
# and its PID in $RUN/NAME.pid.
start() {
  local name=$1; shift
  setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds, or fail.
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" > /dev/null 2>&1; do
    if ((SECONDS > end)); then
      log "$what not up within ${secs}s; its log:"; tail -20 "$LOGS/$what.log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

packages() {
  local need=()
  command -v containerd > /dev/null || need+=(containerd)
  command -v runc > /dev/null || need+=(runc)
  [[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
  command -v iptables > /dev/null || need+=(iptables)
  command -v conntrack > /dev/null || need+=(conntrack)
  command -v jq > /dev/null || need+=(jq)
  command -v curl > /dev/null || need+=(curl)
  if ((${#need[@]})); then
    log "installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" > "$LOGS/apt.log" 2>&1
  fi
}

binaries() {
  log "building the node's binaries (the first time takes minutes)"
  # Kubernetes' own build stamps its version into every binary; clients
  # (Knative checks the server's) read it back through discovery.
  local v
  v=$(cd "$HERE" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  local pkg=k8s.io/component-base/version
  local ldflags="-X $pkg.gitVersion=$v -X $pkg.gitMajor=$(echo "${v#v}" | cut -d. -f1)"
  ldflags+=" -X $pkg.gitMinor=$(echo "$v" | cut -d. -f2) -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000 -X $pkg.buildDate=1970-01-01T00:00:00Z"
  (cd "$HERE" && go build -ldflags "$ldflags" -o "$BIN/" ./cmd/etcd ./cmd/pki ./cmd/img ./cmd/load \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
}

network() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/16" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1
  mkdir -p "$E2E_DIR/cni"
  cat > "$E2E_DIR/cni/10-bridge.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "queue-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.88.1.0", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
}

containerd_up() {
  mkdir -p "$E2E_DIR/containerd"
  cat > "$E2E_DIR/containerd.toml" <<TOML
version = 2
root = "$E2E_DIR/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj below 0 (the kubelet asks -998 for a pod's sandbox, -997
  # for a Guaranteed pod's containers): containerd keeps them at its own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$E2E_DIR/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = "$RUN/runc"
TOML
  start containerd containerd --config "$E2E_DIR/containerd.toml"
  wait_for containerd 30 ctr --address "$RUN/containerd.sock" version
}

etcd_up() {
  start etcd "$BIN/etcd" --name e2e --data-dir "$E2E_DIR/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
  wait_for etcd 30 curl -sf http://127.0.0.1:2381/health
}

control_plane() {
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$NODE_IP" --bind-address "$NODE_IP" --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --kubelet-preferred-address-types InternalIP \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged
  wait_for kube-apiserver 90 "$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig" get --raw /readyz
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$PKI/controller-manager.kubeconfig" --authorization-kubeconfig "$PKI/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig "$PKI/scheduler.kubeconfig" --authorization-kubeconfig "$PKI/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
}

node_up() {
  mkdir -p "$E2E_DIR/kubelet"
  # Pods resolve through the cluster's DNS; the node itself has no upstream
  # resolver to give them (nothing here leaves the machine).
  printf 'nameserver %s\n' "$DNS_IP" > "$E2E_DIR/resolv.conf"
  cat > "$E2E_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: ["$DNS_IP"]
resolvConf: "$E2E_DIR/resolv.conf"
containerRuntimeEndpoint: "$CRI"
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
serializeImagePulls: false
YAML
  start kubelet "$BIN/kubelet" --config "$E2E_DIR/kubelet.yaml" --kubeconfig "$PKI/kubelet.kubeconfig" \
    --root-dir "$E2E_DIR/kubelet" --hostname-override "$NODE" --node-ip "$NODE_IP"
  cat > "$E2E_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: "$POD_CIDR"
hostnameOverride: "$NODE"
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: "$PKI/kube-proxy.kubeconfig"}
conntrack: {maxPerCore: 0}
YAML
  start kube-proxy "$BIN/kube-proxy" --config "$E2E_DIR/kube-proxy.yaml"
  wait_for kubelet 120 "$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig" wait --for=condition=Ready "node/$NODE" --timeout=1s
}

up() {
  [[ $(id -u) == 0 ]] || { log "needs root"; exit 2; }
  if [[ -e $RUN ]]; then log "$RUN exists: a node is up, or was not taken down (node.sh down)"; exit 2; fi
  mkdir -p "$BIN" "$LOGS" "$RUN"
  packages
  binaries
  rm -rf "$PKI" && "$BIN/pki" -dir "$PKI" -server "$SERVER" -ip "$NODE_IP,$API_IP" -node "$NODE"
  network
  containerd_up
  etcd_up
  control_plane
  node_up
  log "up: KUBECONFIG=$PKI/admin.kubeconfig $BIN/kubectl get nodes"
}

# shims: the PIDs of the containerd shims serving this node's containerd.
shims() {
  local d args
  for d in /proc/[0-9]*; do
    args=$(tr '\0' ' ' 2> /dev/null < "$d/cmdline") || continue
    if [[ $args == */containerd-shim-runc-v2\ * && $args == *" -address $RUN/containerd.sock"* ]]; then
      echo "${d#/proc/}"
    fi
  done
}

# down stops what up started, newest first, and removes its state but the
# binaries (a warm machine builds nothing).
down() {
  local name pid
  if [[ -d $RUN ]]; then
    for name in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
      [[ -f $RUN/$name.pid ]] && kill "$(cat "$RUN/$name.pid")" 2> /dev/null || true
    done
    # The pods' containers: their shims and processes are containerd's.
    if [[ -S $RUN/containerd.sock ]]; then
      for c in $(ctr --address "$RUN/containerd.sock" -n k8s.io tasks ls -q 2> /dev/null); do
        ctr --address "$RUN/containerd.sock" -n k8s.io tasks kill -s KILL "$c" 2> /dev/null || true
      done
    fi
    [[ -f $RUN/containerd.pid ]] && kill "$(cat "$RUN/containerd.pid")" 2> /dev/null || true
    # The shims outlive containerd: each is told apart by our socket.
    for pid in $(shims); do kill "$pid" 2> /dev/null || true; done
    sleep 1
    for pid in $(cat "$RUN"/*.pid 2> /dev/null); do kill -KILL "$pid" 2> /dev/null || true; done
  fi
  # Mounts the kubelet and containerd left (pod volumes, rootfs, shm).
  grep -oE " ($E2E_DIR|$RUN)/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2> /dev/null || true; done
  # The network: pod namespaces, the bridge, kube-proxy's rules.
  for ns in $(ip netns list 2> /dev/null | awk '/^cni-/{print $1}'); do ip netns del "$ns" 2> /dev/null || true; done
  ip link del "$BRIDGE" 2> /dev/null || true
  if [[ -x $BIN/kube-proxy ]]; then "$BIN/kube-proxy" --cleanup > /dev/null 2>&1 || true; fi
  # The kubelet's own chains (KUBE-KUBELET-CANARY, KUBE-FIREWALL, ...):
  # every table restored without the KUBE- chains and the rules that jump to them.
  if iptables-save | grep -q KUBE-; then
    iptables-save | grep -v -- 'KUBE-' | iptables-restore || true
  fi
  if ip6tables-save 2> /dev/null | grep -q KUBE-; then
    ip6tables-save | grep -v -- 'KUBE-' | ip6tables-restore || true
  fi
  # The kubelet's cgroups.
  for d in /sys/fs/cgroup/*/kubepods; do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2> /dev/null || true
  done
  rm -rf "$RUN" "$E2E_DIR/etcd" "$E2E_DIR/kubelet" "$E2E_DIR/containerd" "$E2E_DIR/cni" "$PKI"
  log "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: node.sh up|down" >&2; exit 2 ;;
esac
