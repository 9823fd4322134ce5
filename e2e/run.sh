#!/bin/bash
# run.sh: queue in a real pod. Brings up a single-node cluster (node.sh),
# builds and imports the images, runs the scenarios, prints "N passed,
# M failed" and takes the node down again, also when something fails.
# Needs root; not part of the README's test command nor of CI (a first run
# builds Kubernetes from its modules, minutes of CPU).
#
#   sudo e2e/run.sh            # E2E_DIR=/var/lib/queue-e2e by default
#   KEEP=1 e2e/run.sh          # leave the node up afterwards (node.sh down)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
source "$HERE/env.sh"
IMAGES=$E2E_DIR/images
CTR=(ctr --address "$RUN/containerd.sock" -n k8s.io)
export KUBECONFIG=$PKI/admin.kubeconfig
kubectl() { "$BIN/kubectl" "$@"; }
COREDNS=v1.15.0
KNATIVE_CMDS=(activator autoscaler controller webhook queue)

passed=0 failed=0 results=()
pass() { passed=$((passed + 1)); results+=("PASS $1${2:+: $2}"); echo "--- PASS $1${2:+: $2}"; }
fail() { failed=$((failed + 1)); results+=("FAIL $1${2:+: $2}"); echo "--- FAIL $1${2:+: $2}"; }

finish() {
  local rc=$?
  if ((rc != 0)); then
    echo "run: stopped by a failing command (exit $rc; the node's logs are in $E2E_DIR/logs)"
  fi
  if [[ -z ${KEEP:-} ]]; then "$HERE/node.sh" down || true; fi
  printf '%s\n' "${results[@]}"
  echo "$passed passed, $failed failed"
  ((failed == 0 && rc == 0))
}
trap finish EXIT

"$HERE/node.sh" up

# images builds every image the scenarios run, and imports it into the
# node's containerd. The pause image takes the kubelet's default name.
images() {
  mkdir -p "$IMAGES"
  (cd "$HERE" && "$BIN/img" -pkg ./cmd/pause -ref "$PAUSE_IMAGE" -o "$IMAGES/pause.tar" -user 65535:65535)
  (cd "$HERE" && "$BIN/img" -pkg ./cmd/hello -ref e2e.test/hello:e2e -o "$IMAGES/hello.tar")
  (cd "$ROOT" && go run ./cmd/image -o "$IMAGES/queue.tar" -tag e2e.test/queue:e2e > /dev/null)
  (cd "$HERE" && "$BIN/img" -pkg "github.com/coredns/coredns@$COREDNS" -ref e2e.test/coredns:e2e -o "$IMAGES/coredns.tar")
  # Knative Serving's components and its own queue-proxy, at the version
  # e2e/knative/go.mod pins.
  local c
  for c in "${KNATIVE_CMDS[@]}"; do
    (cd "$HERE/knative" && "$BIN/img" -pkg "knative.dev/serving/cmd/$c" -ref "e2e.test/knative-$c:e2e" -o "$IMAGES/knative-$c.tar")
  done
  for t in "$IMAGES"/*.tar; do "${CTR[@]}" images import "$t" > /dev/null; done
}
images

# dns: the cluster's DNS, as kube-dns.
dns() {
  kubectl apply -f "$HERE/manifests/coredns.yaml" > /dev/null
  kubectl -n kube-system rollout status deployment/coredns --timeout=120s > /dev/null
}
dns

# serving: Knative Serving as its users install it: its release's core
# manifests (config/core of the module e2e/knative pins, which `ko
# resolve` turns into serving-core.yaml), the ko:// image references
# replaced by the images built above and nothing else; then, as a user
# would, its config-deployment told not to resolve our images' tags (there
# is no registry) and which queue sidecar to inject, and its autoscaler's
# windows shortened.
serving() {
  local crds=$E2E_DIR/serving-crds.yaml core=$E2E_DIR/serving-core.yaml dirs f
  # config/core links some files from knative.dev/networking's and
  # knative.dev/caching's config (the CRDs of Certificate, Ingress,
  # ServerlessService, ClusterDomainClaim and Image, and config-network);
  # a module holds no links, so they are read from those modules.
  dirs=$(cd "$HERE/knative" && go list -m -f '{{.Dir}}' knative.dev/serving knative.dev/networking knative.dev/caching)
  dirs=$(echo "$dirs" | sed -n '1s|$|/config/core|p; 2,3s|$|/config|p')
  : > "$crds"; : > "$core"
  # As Knative's release splits them: the CRDs, then everything else.
  # Serving's own files first (its namespace comes first of all).
  for f in $(for d in $dirs; do find "$d" -name '*.yaml' | sort; done); do
    if grep -q '^kind: CustomResourceDefinition' "$f"; then echo "---" >> "$crds"; cat "$f" >> "$crds"
    else echo "---" >> "$core"; cat "$f" >> "$core"; fi
  done
  sed -i -e 's|ko://knative.dev/serving/cmd/\([a-z-]*\)|e2e.test/knative-\1:e2e|g' "$core"
  if grep -q 'ko://' "$core"; then echo "run: an image reference left unresolved in $core" >&2; return 1; fi
  kubectl apply -f "$crds" > /dev/null
  kubectl wait --for=condition=Established crd --all --timeout=60s > /dev/null
  kubectl apply -f "$core" > /dev/null
  kubectl -n knative-serving wait --for=condition=Available deployment --all --timeout=300s > /dev/null
  kubectl -n knative-serving patch configmap config-deployment --type merge \
    -p '{"data":{"registries-skipping-tag-resolving":"e2e.test","queue-sidecar-image":"e2e.test/queue:e2e"}}' > /dev/null
  # Scale to zero within seconds instead of a minute and a half: the
  # shortest stable window and grace period Knative accepts.
  kubectl -n knative-serving patch configmap config-autoscaler --type merge \
    -p '{"data":{"stable-window":"6s","scale-to-zero-grace-period":"6s"}}' > /dev/null
}
serving

# podIP NAME: the pod's address, reachable from the node over the bridge.
podIP() { kubectl get pod "$1" -o jsonpath='{.status.podIP}'; }

# Scenario: queue as a pod's sidecar in front of its user container, as
# its own user on a read-only root, held to a CPU limit, probed by the
# kubelet through queue.
scenario_sidecar() {
  kubectl apply -f - > /dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: sidecar}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: user-container
    image: e2e.test/hello:e2e
    imagePullPolicy: Never
    env: [{name: PORT, value: "8080"}]
  - name: queue
    image: e2e.test/queue:e2e
    imagePullPolicy: Never
    args: ["--upstream", "127.0.0.1:8080"]
    ports: [{name: http, containerPort: 8012}, {name: admin, containerPort: 8022}]
    readinessProbe: {httpGet: {path: /ready, port: 8022}, periodSeconds: 1}
    resources: {limits: {cpu: 500m, memory: 128Mi}, requests: {cpu: 25m, memory: 32Mi}}
    securityContext:
      runAsNonRoot: true
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
YAML
  local t0=$SECONDS
  if ! kubectl wait --for=condition=Ready pod/sidecar --timeout=120s > /dev/null; then
    fail sidecar "not Ready in 120 s"; kubectl describe pod sidecar | tail -20; return
  fi
  local ready=$((SECONDS - t0)) ip body uid
  ip=$(podIP sidecar)
  body=$(curl -sS -m 5 "http://$ip:8012/") || true
  [[ $body == "hello from sidecar" ]] || { fail sidecar "GET through queue: '$body'"; return; }
  # The queue container's process, as the node sees it: its user and its
  # root's mount.
  local id pid procs root
  id=$(kubectl get pod sidecar -o jsonpath='{.status.containerStatuses[?(@.name=="queue")].containerID}')
  pid=$("${CTR[@]}" tasks ls | awk -v id="${id#containerd://}" '$1 == id {print $2}')
  uid=$(awk '/^Uid:/{print $2}' "/proc/$pid/status")
  root=$(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | cut -d, -f1)
  procs=$(kubectl logs sidecar -c queue | grep -o '"gomaxprocs":[0-9]*' | head -1) || true
  [[ $uid == 65532 ]] || { fail sidecar "queue runs as uid $uid"; return; }
  [[ $root == ro ]] || { fail sidecar "queue's root is mounted $root"; return; }
  pass sidecar "Ready in ${ready}s, answered '$body', uid $uid, root $root, $procs"
}
scenario_sidecar

# The scenarios on Knative run twice, with queue's image as the sidecar
# Knative injects and then with Knative's own queue-proxy built from the
# same knative.dev/serving: config-deployment's queue-sidecar-image, which
# Knative applies to the revisions that exist too.
use_sidecar() {
  kubectl -n knative-serving patch configmap config-deployment --type merge \
    -p "{\"data\":{\"queue-sidecar-image\":\"$1\"}}" > /dev/null
}

# ksvc NAME [ANNOTATIONS]: the Knative Service NAME of the hello app,
# with ANNOTATIONS (a YAML flow map) on its revisions.
ksvc() {
  local annotations=${2:-"{}"}
  kubectl apply -f - > /dev/null <<YAML
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: $1}
spec:
  template:
    metadata:
      annotations: $annotations
    spec:
      containers:
      - image: e2e.test/hello:e2e
        ports: [{containerPort: 8080, name: http1}]
YAML
}

# ready NAME SIDECAR: NAME's first revision is Ready, its deployment runs
# SIDECAR and has rolled out.
ready() {
  kubectl wait --for=condition=Ready "revision/$1-00001" --timeout=180s > /dev/null &&
    kubectl wait --for=jsonpath='{.spec.template.spec.containers[1].image}'="$2" \
      "deployment/$1-00001-deployment" --timeout=60s > /dev/null &&
    kubectl rollout status "deployment/$1-00001-deployment" --timeout=120s > /dev/null
}

# drive NAME RATE DURATION OUT: GETs of 100 ms to NAME's first revision as
# an ingress would send them (its Service, Knative's routing headers), in
# the background; load's report goes to OUT.
drive() {
  local ip
  ip=$(kubectl get service "$1-00001" -o jsonpath='{.spec.clusterIP}')
  "$BIN/load" -url "http://$ip/?sleep=100ms" -rate "$2" -duration "$3" \
    -H "Host: $1.default.svc.cluster.local" -H "Knative-Serving-Namespace: default" \
    -H "Knative-Serving-Revision: $1-00001" > "$4" 2>&1 &
}

# revision: the Knative Service hello (made the first time) has a Ready
# revision whose pods run the sidecar, and its queue container is what
# Knative's reconciler wrote (saved for the comparison below).
scenario_revision() {
  local sidecar=$1 label=$2 t0=$SECONDS
  ksvc hello
  if ! ready hello "$sidecar"; then
    fail "revision [$label]" "not Ready with $sidecar"
    kubectl get revision/hello-00001 -o jsonpath='{.status.conditions}'; echo
    return
  fi
  kubectl get deployment hello-00001-deployment -o json |
    jq -S '.spec.template.spec.containers[] | select(.name == "queue-proxy") | del(.image)' > "$E2E_DIR/queue-proxy.$label.json"
  pass "revision [$label]" "Ready with $sidecar in $((SECONDS - t0))s"
}

# coldstart: once the revision has scaled to zero, a request sent as the
# ingress would send it (the revision's Service, which the activator
# fronts at zero, with Knative's routing headers) starts a pod and is
# answered.
scenario_coldstart() {
  local label=$1 ip out
  if ! kubectl wait --for=delete pod -l serving.knative.dev/revision=hello-00001 --timeout=180s > /dev/null 2>&1; then
    fail "coldstart [$label]" "the revision did not scale to zero in 180 s"; return
  fi
  ip=$(kubectl get service hello-00001 -o jsonpath='{.spec.clusterIP}')
  out=$(curl -sS -m 30 -H "Host: hello.default.svc.cluster.local" -H "Knative-Serving-Namespace: default" \
    -H "Knative-Serving-Revision: hello-00001" "http://$ip/" -w ' %{http_code} %{time_total}') || true
  if [[ $out != "hello from hello-00001-deployment-"*" 200 "* ]]; then
    fail "coldstart [$label]" "through the activator: '$out'"; return
  fi
  pass "coldstart [$label]" "the first request through the activator answered in ${out##* }s"
}

# scale: under a steady load (200 requests a second of 100 ms for 60 s, a
# target of 10 in flight a pod), Knative's autoscaler, scraping the
# sidecar, scales to at least two pods, and back to zero once the load
# stops; no request fails.
scenario_scale() {
  local sidecar=$1 label=$2 max=0 n out rc=0 load
  ksvc busy '{autoscaling.knative.dev/target: "10"}'
  if ! ready busy "$sidecar"; then fail "scale [$label]" "revision busy-00001 not Ready with $sidecar"; return; fi
  drive busy 200 60s "$E2E_DIR/scale.$label.txt"
  load=$!
  # The most pods Ready at once while the load runs, read every second.
  while kill -0 "$load" 2> /dev/null; do
    n=$(kubectl get pods -l serving.knative.dev/revision=busy-00001 -o json |
      jq '[.items[] | select(.status.containerStatuses != null and all(.status.containerStatuses[]; .ready))] | length')
    ((n > max)) && max=$n
    sleep 1
  done
  wait "$load" || rc=$?
  out=$(cat "$E2E_DIR/scale.$label.txt")
  if ((rc != 0)); then fail "scale [$label]" "$out"; return; fi
  if ((max < 2)); then fail "scale [$label]" "at most $max pod(s) under load; $out"; return; fi
  if ! kubectl wait --for=delete pod -l serving.knative.dev/revision=busy-00001 --timeout=180s > /dev/null 2>&1; then
    fail "scale [$label]" "not back to zero within 180 s of the load's end"; return
  fi
  pass "scale [$label]" "$max pods at most, back to zero; $out"
}

# delete: a pod deleted under load (the kubelet's SIGTERM, the preStop
# Knative gives the user container, the sidecar's drain) fails no request:
# 100 requests a second of 100 ms for 20 s to a revision held at two pods,
# one of them deleted 5 s in.
scenario_delete() {
  local sidecar=$1 label=$2 pod rc=0 out load
  ksvc steady '{autoscaling.knative.dev/min-scale: "2"}'
  if ! ready steady "$sidecar"; then fail "delete [$label]" "revision steady-00001 not Ready with $sidecar"; return; fi
  drive steady 100 20s "$E2E_DIR/delete.$label.txt"
  load=$!
  sleep 5 # the load's shape: a pod goes a quarter of the way in
  pod=$(kubectl get pods -l serving.knative.dev/revision=steady-00001 -o jsonpath='{.items[0].metadata.name}')
  kubectl delete pod "$pod" --wait=false > /dev/null
  wait "$load" || rc=$?
  out=$(cat "$E2E_DIR/delete.$label.txt")
  if ((rc != 0)); then fail "delete [$label]" "$pod deleted under load: $out"; return; fi
  pass "delete [$label]" "$pod deleted under load; $out"
}

for sidecar in queue knative; do
  case $sidecar in
    queue) image=e2e.test/queue:e2e ;;
    knative) image=e2e.test/knative-queue:e2e ;;
  esac
  use_sidecar "$image"
  scenario_revision "$image" "$sidecar"
  scenario_coldstart "$sidecar"
  scenario_scale "$image" "$sidecar"
  scenario_delete "$image" "$sidecar"
  # Each sidecar's scenarios start from the same cluster: hello alone, at zero.
  kubectl delete ksvc busy steady --wait=true > /dev/null
  kubectl wait --for=delete pod -l 'serving.knative.dev/service in (busy,steady)' --timeout=120s > /dev/null 2>&1 || true
done

# The queue container Knative wrote is the same for both images.
if diff "$E2E_DIR/queue-proxy.queue.json" "$E2E_DIR/queue-proxy.knative.json" > "$E2E_DIR/queue-proxy.diff"; then
  pass "reconciled" "the queue-proxy container Knative writes is the same for both images but the image"
else
  fail "reconciled" "the queue-proxy containers differ: $E2E_DIR/queue-proxy.diff"
fi
