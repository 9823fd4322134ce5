#!/usr/bin/env bash
# sidecar.sh - what queue costs as a sidecar left at rest, and held to a
# small CPU limit (Kubernetes cpu: 100m) at low rates next to nginx and
# HAProxy, all in one run; prints the table (bench/README.md explains every
# figure). CPU is read from the kernel's cgroup accounting, never timed.
#
#   bench/sidecar.sh                          everything, about 9 minutes
#   bench/sidecar.sh --part rest              only the at-rest rows (queue alone)
#   bench/sidecar.sh --part throttled --only haproxy,queue
#                                             only the held-to-100m rows, for some peers
#   QUICK=1 bench/sidecar.sh                  smoke test: 5 s at-rest rows, 5 s down,
#                                             rates 250,1000 for 5 s after 1 s, about 2 minutes
#   OUT=/tmp/side bench/sidecar.sh            where results go (default
#                                             ${TMPDIR:-/tmp}/queue-bench/sidecar-<date-time>)
#   RECORD=1 bench/sidecar.sh                 also append the summary's rows to
#                                             bench/results/sidecar.tsv (record.sh)
#   QUEUE_BASE_BIN=/tmp/q-before bench/sidecar.sh --part rest
#                                             the at-rest rows of queue and of a
#                                             baseline build (peer queuebase) side by
#                                             side, in the same seconds
#
# At rest, queue runs alone in a cgroup without a CPU limit on CPU
# $PROXY_CPU: (a) 30 s with its upstream down and nobody probing, (b) 30 s
# down with a kubelet probe each second, (c) after 30 s more down the
# upstream's port is bound and probes go every 5 ms: the time to the first
# 200, (d) 60 s healthy with one autoscaler scrape and one probe a second.
# With QUEUE_BASE_BIN, a second queue from that binary (peer queuebase, its
# own cgroup, ports and upstream) goes through each row at the same time on
# the same CPU: a figure of a few milliseconds a minute moves with the
# machine from one minute to the next, so a change is read as the ratio of
# the two in one run, not against a figure taken at another hour.
# Held to 100m, each peer runs in a cgroup with QUOTA_MILLI of one CPU per
# 100 ms on CPU $PROXY_CPU and vegeta sends it GET /1k open-loop at each
# rate from CPU $LOAD_CPU. Writes OUT/table.md (printed), OUT/summary.tsv
# (every figure), OUT/meta.txt and OUT/logs/.
#
# Knobs (environment): RATES=250,500,1000,2000 DURATION=20 (s per rate)
# WARMUP=3 (s of the same load before, not counted) QUOTA_MILLI=100
# PROXY_CPU=0 LOAD_CPU=1 QUEUE_BIN (a prebuilt queue; default: the shipped
# build of ./cmd/queue) QUEUE_BASE_BIN (a baseline queue for the at-rest
# rows; default none) QUEUE_BASE_LABEL (what the baseline is, for the recorded
# rows; default its file name) QUEUE_TLS=1 (queue and queuebase also serve
# TLS on a port of their own, with a fresh self-signed certificate: with it,
# queue's HTTP/3 listener is open through the at-rest rows, which then show
# what a QUIC socket nobody talks to costs) OUT NETNS=auto|0 QUICK=1.
# Needs: root (cgroups), two CPUs, go (builds queue, the upstream, the
# helper bench/sidecar and vegeta v12.13.0), taskset (util-linux), ps
# (procps), timeout; nginx and haproxy (else their columns say "-");
# unshare and ip (iproute2) for a private network namespace.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# nginx_conf, haproxy_conf, NGINX_CMD and HAPROXY_CMD: one copy, shared with compare.sh.
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
# shellcheck source=bench/record.sh
source "$HERE/record.sh"
ALL_PEERS=(nginx haproxy queue)
VEGETA_VERSION=v12.13.0

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "sidecar.sh: $*"; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

ONLY="" PART=all
while (($#)); do
  case "$1" in
    --only) [[ $# -ge 2 ]] || die "--only needs a list"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --part) [[ $# -ge 2 ]] || die "--part needs rest, throttled or all"; PART=$2; shift 2 ;;
    --part=*) PART=${1#--part=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ $PART == rest || $PART == throttled || $PART == all ]] || die "--part is rest, throttled or all, not $PART"
((EUID == 0)) || die "needs root: it puts the proxies in cgroups of its own (run it with sudo)"

if [[ -n "${QUICK:-}" ]]; then
  RATES=${RATES:-250,1000} DURATION=${DURATION:-5} WARMUP=${WARMUP:-1}
  IDLE=5 HEALTHY=5 DOWN=5
else
  IDLE=30 HEALTHY=60 DOWN=30
fi
RATES=${RATES:-250,500,1000,2000} DURATION=${DURATION:-20} WARMUP=${WARMUP:-3}
QUOTA_MILLI=${QUOTA_MILLI:-100} PROXY_CPU=${PROXY_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}
UPSTREAM=127.0.0.1:18210
QUEUE_LISTEN=127.0.0.1:18217 QUEUE_STATS=127.0.0.1:18223 QUEUE_METRICS=127.0.0.1:18224
# The baseline's, with QUEUE_BASE_BIN: an upstream of its own, so that row c
# binds one port for each.
BASE_UPSTREAM=127.0.0.1:18219
BASE_LISTEN=127.0.0.1:18218 BASE_ADMIN=127.0.0.1:18225 BASE_STATS=127.0.0.1:18226 BASE_METRICS=127.0.0.1:18227

PEERS=()
for p in "${ALL_PEERS[@]}"; do
  [[ -z "$ONLY" || ",$ONLY," == *",$p,"* ]] && PEERS+=("$p")
done
for p in ${ONLY//,/ }; do
  [[ " ${ALL_PEERS[*]} " == *" $p "* ]] || die "unknown peer $p (peers: ${ALL_PEERS[*]})"
done
[[ $PART == rest ]] || ((${#PEERS[@]})) || die "no peer selected"

# --- build (before entering the network namespace) -------------------------
if [[ -z "${SIDECAR_BIN:-}" ]]; then
  for t in go taskset ps timeout; do
    command -v "$t" >/dev/null || die "missing $t (bench/README.md lists the packages)"
  done
  (($(nproc --all) >= 2)) || die "needs two CPUs"
  SIDECAR_BIN=$(mktemp -d "${TMPDIR:-/tmp}/queue-sidecar-bin.XXXXXX") OWN_BIN=1
  export SIDECAR_BIN OWN_BIN
  log "building into $SIDECAR_BIN"
  (
    cd "$ROOT"
    go build -trimpath -o "$SIDECAR_BIN/upstream" ./bench/upstream
    go build -trimpath -o "$SIDECAR_BIN/sidecar" ./bench/sidecar
    # The shipped build (the Dockerfile's flags).
    [[ -n "${QUEUE_BIN:-}" ]] ||
      CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$SIDECAR_BIN/queue" ./cmd/queue
    # Pinned, and installed here rather than expected on the machine.
    cd "$SIDECAR_BIN" && GOBIN=$SIDECAR_BIN go install "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
  ) || { rm -rf "$SIDECAR_BIN"; die "build failed"; }
fi
QUEUE_BIN=${QUEUE_BIN:-$SIDECAR_BIN/queue}
SC=$SIDECAR_BIN/sidecar
export QUEUE_BIN QUEUE_BASE_BIN=${QUEUE_BASE_BIN:-}
[[ -z "$QUEUE_BASE_BIN" || -x "$QUEUE_BASE_BIN" ]] || die "QUEUE_BASE_BIN=$QUEUE_BASE_BIN is not an executable"

# --- isolation: a network namespace of our own, with only lo ---------------
NETNS=${NETNS:-auto}
if [[ -z "${SIDECAR_IN_NETNS:-}" && "$NETNS" != 0 ]]; then
  if command -v unshare >/dev/null && command -v ip >/dev/null && unshare -n true 2>/dev/null; then
    export SIDECAR_IN_NETNS=1 QUICK RATES DURATION WARMUP QUOTA_MILLI PROXY_CPU LOAD_CPU OUT
    exec unshare -n -- bash -c 'ip link set lo up && exec "$0" "$@"' "$0" --part "$PART" \
      --only "$(IFS=,; echo "${PEERS[*]}")"
  fi
  log "no private network namespace (needs unshare and ip): using the host's loopback"
fi

OUT=${OUT:-${TMPDIR:-/tmp}/queue-bench/sidecar-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/logs" "$OUT/raw"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.tsv
printf 'part\tpeer\tcase\tfigure\tvalue\n' >"$SUMMARY"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/queue-sidecar.XXXXXX")
# QUEUE_TLS=1: a certificate for the TLS ports (and so HTTP/3) of both queues.
QUEUE_TLS_ARGS="" BASE_TLS_ARGS=""
if [[ "${QUEUE_TLS:-}" == 1 ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -addext 'subjectAltName=IP:127.0.0.1' -keyout "$SCRATCH/key.pem" -out "$SCRATCH/cert.pem" >/dev/null 2>&1 ||
    { echo "sidecar.sh: openssl could not make a certificate" >&2; exit 2; }
  QUEUE_TLS_ARGS="--tls-listen 127.0.0.1:18228 --tls-cert $SCRATCH/cert.pem --tls-key $SCRATCH/key.pem"
  BASE_TLS_ARGS="--tls-listen 127.0.0.1:18229 --tls-cert $SCRATCH/cert.pem --tls-key $SCRATCH/key.pem"
fi
STARTED=() # PIDs of the process trees we started and have not reaped
CGROUPS=() # names of the cgroups we made and have not removed
CGROUP_PREFIX=queue-sidecar-$$

# --- processes ---------------------------------------------------------------
cg_create() { # name [quota-milli]: make a cgroup of ours
  "$SC" create -cgroup "$CGROUP_PREFIX-$1" -quota-milli "${2:-0}" || return 1
  CGROUPS+=("$1")
}

cg_remove() { # name: kill by PID whatever is still in it, then remove it
  local p keep=()
  for p in $("$SC" procs -cgroup "$CGROUP_PREFIX-$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  "$SC" remove -cgroup "$CGROUP_PREFIX-$1" || log "could not remove cgroup $CGROUP_PREFIX-$1"
  for p in "${CGROUPS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  CGROUPS=("${keep[@]}")
}

cleanup() {
  local p
  for p in "${STARTED[@]}"; do stop "$p"; done
  for p in "${CGROUPS[@]}"; do cg_remove "$p"; done
  rm -rf "$SCRATCH"
  [[ "${OWN_BIN:-}" != 1 ]] || rm -rf "$SIDECAR_BIN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() { # pid what cmd...: wait (<= 15 s) until cmd succeeds while pid lives
  local pid=$1 what=$2 i
  shift 2
  for ((i = 0; i < 150; i++)); do
    [[ -d /proc/$pid ]] || { log "$what: the process ended"; return 1; }
    "$@" && return 0
    sleep 0.1
  done
  log "$what: not ready after 15 s"
  return 1
}

answers_200() { [[ $(http_status "$1" "$2") == 200 ]]; }

start() { # name addr cpu cgroup cmd: start cmd under bash -c, pinned, in cgroup (or none); sets PID
  local name=$1 addr=$2 cpu=$3 cg=$4 cmd=$5 tmp
  ! port_open "$addr" || { log "$addr is already in use"; return 1; }
  tmp=$(mktemp -d "$SCRATCH/$name.XXXX")
  chmod 755 "$tmp"
  local -a wrap=()
  [[ -n "$cg" ]] && wrap=("$SC" exec -cgroup "$CGROUP_PREFIX-$cg" --)
  (
    export BENCH_LISTEN=$addr BENCH_UPSTREAM=$UPSTREAM BENCH_TMP=$tmp SIDECAR_BIN
    LISTEN=$addr H2C=""
    [[ "$name" == nginx ]] && nginx_conf "$tmp"
    [[ "$name" == haproxy ]] && haproxy_conf "$tmp"
    cd "$tmp"
    exec taskset -c "$cpu" "${wrap[@]}" bash -c "$cmd"
  ) >>"$OUT/logs/$name.log" 2>&1 &
  PID=$!
  STARTED+=("$PID")
}

peer() { # NAME: sets LISTEN and CMD, or returns 1 when the peer is not installed
  case "$1" in
    nginx) LISTEN=127.0.0.1:18211 CMD=$NGINX_CMD; [[ -x /usr/sbin/nginx ]] ;;
    haproxy) LISTEN=127.0.0.1:18213 CMD=$HAPROXY_CMD; [[ -x /usr/sbin/haproxy ]] ;;
    queue)
      # Side ports moved off their defaults; no drain wait when stopped.
      LISTEN=$QUEUE_LISTEN
      # shellcheck disable=SC2016 # expanded by the bash -c that runs it
      CMD='exec "$QUEUE_BIN" --upstream "$BENCH_UPSTREAM" --listen "$BENCH_LISTEN"
        --admin-listen 127.0.0.1:18222 --stats-listen '$QUEUE_STATS'
        --metrics-listen '$QUEUE_METRICS' --drain-quiet-period 0s --drain-timeout 1s '$QUEUE_TLS_ARGS
      CMD=${CMD//$'\n'/ } ;;
    queuebase)
      # The same command from QUEUE_BASE_BIN, on ports and an upstream of its own.
      LISTEN=$BASE_LISTEN
      # shellcheck disable=SC2016 # expanded by the bash -c that runs it
      CMD='exec "$QUEUE_BASE_BIN" --upstream '$BASE_UPSTREAM' --listen "$BENCH_LISTEN"
        --admin-listen '$BASE_ADMIN' --stats-listen '$BASE_STATS'
        --metrics-listen '$BASE_METRICS' --drain-quiet-period 0s --drain-timeout 1s '$BASE_TLS_ARGS
      CMD=${CMD//$'\n'/ } ;;
  esac
}

helper() { # seconds args...: run the helper on the load CPU, bounded, its figures into the summary
  local limit=$1
  shift
  timeout -k 5 "$limit" taskset -c "$LOAD_CPU" "$SC" "$@" | tee -a "$SUMMARY" |
    awk -F'\t' '{ printf "    %s %s %s=%s\n", $2, $3, $4, $5 }' >&2
}

UPSTREAM_PID=""
start_upstream() {
  [[ -z "$UPSTREAM_PID" ]] || return 0
  # shellcheck disable=SC2016
  start upstream "$UPSTREAM" "$LOAD_CPU" "" 'exec "$SIDECAR_BIN/upstream" -listen "$BENCH_LISTEN"' || return 1
  UPSTREAM_PID=$PID
  wait_for "$PID" upstream answers_200 "$UPSTREAM" /1k
}

# --- at rest -------------------------------------------------------------------
# The queues at rest: queue, and queuebase with QUEUE_BASE_BIN; for each, its
# port, its upstream and its stats port.
REST=(queue)
declare -A REST_LISTEN=([queue]=$QUEUE_LISTEN [queuebase]=$BASE_LISTEN)
declare -A REST_UP=([queue]=$UPSTREAM [queuebase]=$BASE_UPSTREAM)
declare -A REST_STATS=([queue]=$QUEUE_STATS [queuebase]=$BASE_STATS)

# each_rest SECONDS ARGS...: the helper for each queue at rest, all at the
# same time; in ARGS, @Q@, @LISTEN@, @UP@ and @STATS@ stand for the queue's
# name, port, upstream and stats port. Each queue's figures carry its name.
# Each helper starts half a second after the one before, so that probes
# sent once a second do not reach the two queues in the same instant,
# where each would wait on the other's on the one CPU.
each_rest() {
  local q a pids=() args rc=0
  for q in "${REST[@]}"; do
    ((${#pids[@]} == 0)) || sleep 0.5
    args=()
    for a in "$@"; do
      a=${a//@Q@/$q} a=${a//@LISTEN@/${REST_LISTEN[$q]}}
      a=${a//@UP@/${REST_UP[$q]}} a=${a//@STATS@/${REST_STATS[$q]}}
      args+=("$a")
    done
    helper "${args[@]}" -peer "$q" &
    pids+=($!)
  done
  for q in "${pids[@]}"; do wait "$q" || rc=1; done
  return $rc
}

run_rest() {
  [[ -z "$QUEUE_BASE_BIN" ]] || REST=(queue queuebase)
  log "== at rest: ${REST[*]} on CPU $PROXY_CPU, each in a cgroup without a limit; probes and scrapes from CPU $LOAD_CPU"
  local q p started=() cg=$CGROUP_PREFIX-rest-@Q@
  for q in "${REST[@]}"; do
    cg_create "rest-$q" || return 1
    peer "$q"
    start "$q" "$LISTEN" "$PROXY_CPU" "rest-$q" "$CMD" || return 1
    started+=("$PID")
    wait_for "$PID" "$q's port" port_open "$LISTEN" || return 1
  done
  log "a: upstream down, nobody probing, ${IDLE} s after 2 s"
  each_rest $((IDLE + 30)) idle -cgroup "$cg" -case a -settle 2s -duration "${IDLE}s"
  log "b: upstream down, a kubelet probe each second, ${IDLE} s"
  each_rest $((IDLE + 30)) idle -cgroup "$cg" -case b -duration "${IDLE}s" -probe "http://@LISTEN@/"
  log "c: ${DOWN} s more down, then the upstream's port is bound; probes every 5 ms"
  each_rest $((DOWN + 30)) firstok -cgroup "$cg" -case c -down "${DOWN}s" -listen "@UP@" \
    -probe "http://@LISTEN@/" -probe-every 5ms -timeout 10s
  start_upstream || return 1
  if [[ -n "$QUEUE_BASE_BIN" ]]; then
    # shellcheck disable=SC2016
    start upstreambase "$BASE_UPSTREAM" "$LOAD_CPU" "" 'exec "$SIDECAR_BIN/upstream" -listen "$BENCH_LISTEN"' || return 1
    started+=("$PID")
    wait_for "$PID" "the baseline's upstream" answers_200 "$BASE_UPSTREAM" /1k || return 1
  fi
  for q in "${REST[@]}"; do
    wait_for "${started[0]}" "$q to its upstream" answers_200 "${REST_LISTEN[$q]}" /1k || return 1
  done
  log "d: healthy, one scrape and one kubelet probe each second, ${HEALTHY} s after 2 s"
  each_rest $((HEALTHY + 30)) idle -cgroup "$cg" -case d -settle 2s -duration "${HEALTHY}s" \
    -probe "http://@LISTEN@/" -scrape "http://@STATS@/metrics"
  for p in "${started[@]}"; do stop "$p"; done
  for q in "${REST[@]}"; do cg_remove "rest-$q"; done
}

# --- held to the quota ---------------------------------------------------------
run_throttled() { # peer
  local name=$1 rate
  if ! peer "$name"; then
    log "== $name: not installed, its figures are -"
    return 0
  fi
  log "== $name held to ${QUOTA_MILLI}m on CPU $PROXY_CPU at $LISTEN; vegeta and the upstream on CPU $LOAD_CPU"
  cg_create "$name" "$QUOTA_MILLI" || return 1
  start "$name" "$LISTEN" "$PROXY_CPU" "$name" "$CMD" || return 1
  local p=$PID
  if ! wait_for "$p" "$name" answers_200 "$LISTEN" /1k; then
    tail -5 "$OUT/logs/$name.log" >&2
    stop "$p"
    cg_remove "$name"
    return 1
  fi
  local -a extra=()
  [[ $name == queue ]] && extra=(-gomaxprocs "http://$QUEUE_METRICS/metrics")
  for rate in ${RATES//,/ }; do
    log "  $rate requests/s: ${WARMUP} s warm-up, ${DURATION} s measured"
    helper $((WARMUP + DURATION + 90)) attack -cgroup "$CGROUP_PREFIX-$name" -peer "$name" -case "$rate" \
      -vegeta "$SIDECAR_BIN/vegeta" -url "http://$LISTEN/1k" -rate "$rate" -duration "${DURATION}s" \
      -warmup "${WARMUP}s" -timeout 2s -out "$OUT/raw" "${extra[@]}" ||
      log "  $name at $rate requests/s failed"
  done
  stop "$p"
  cg_remove "$name"
}

# --- main ----------------------------------------------------------------------
CGV=$("$SC" version) || die "no usable cgroup hierarchy"
for p in "$UPSTREAM" "$QUEUE_LISTEN" "$QUEUE_STATS" "$QUEUE_METRICS" 127.0.0.1:18211 127.0.0.1:18213 127.0.0.1:18222 \
  "$BASE_UPSTREAM" "$BASE_LISTEN" "$BASE_ADMIN" "$BASE_STATS" "$BASE_METRICS"; do
  ! port_open "$p" || die "$p is already in use"
done
{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -sr)"
  echo "cgroup: $CGV"
  echo "host: $(nproc --all) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo))"
  echo "go: $(go version 2>/dev/null || echo -)"
  echo "queue: $("$QUEUE_BIN" --version 2>&1 | head -1)"
  [[ -z "$QUEUE_BASE_BIN" ]] || echo "queuebase: $QUEUE_BASE_BIN, $("$QUEUE_BASE_BIN" --version 2>&1 | head -1)"
  echo "nginx: $(/usr/sbin/nginx -v 2>&1 || echo -)"
  echo "haproxy: $(/usr/sbin/haproxy -v 2>/dev/null | head -1 || echo -)"
  echo "vegeta: $VEGETA_VERSION"
  echo "knobs: PART=$PART RATES=$RATES DURATION=$DURATION WARMUP=$WARMUP QUOTA_MILLI=$QUOTA_MILLI PROXY_CPU=$PROXY_CPU LOAD_CPU=$LOAD_CPU at rest: ${IDLE}/${IDLE}/${DOWN}/${HEALTHY} s"
  echo "network namespace: $([[ -n "${SIDECAR_IN_NETNS:-}" ]] && echo "private, lo only" || echo host)"
  echo "before the run: loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "peers: ${PEERS[*]}"
} >"$OUT/meta.txt"
cat "$OUT/meta.txt" >&2

begin=$SECONDS
if [[ $PART != throttled ]]; then
  run_rest || log "the at-rest part failed; see $OUT/logs"
fi
if [[ $PART != rest ]]; then
  start_upstream || die "the upstream did not start (see $OUT/logs/upstream.log)"
  for p in "${PEERS[@]}"; do
    [[ -d /proc/$UPSTREAM_PID ]] || die "the upstream died (see $OUT/logs/upstream.log)"
    run_throttled "$p" || log "$p failed; going on with the next peer"
  done
fi
[[ -z "$UPSTREAM_PID" ]] || stop "$UPSTREAM_PID"
{
  echo "queue GOMAXPROCS held to ${QUOTA_MILLI}m: $(awk -F'\t' '$2 == "queue" && $4 == "gomaxprocs" { v = $5 } END { print v == "" ? "-" : v }' "$SUMMARY")"
  echo "took: $((SECONDS - begin)) s"
} >>"$OUT/meta.txt"

"$SC" table -summary "$SUMMARY" -rates "$RATES" -peers nginx,haproxy,queue -down "${DOWN} s" >"$OUT/table.md"
echo >&2
cat "$OUT/table.md"
echo
[[ -z "${QUICK:-}" ]] || echo "QUICK=1: short rows; the targets are scaled to them, the figures are not for quoting."
echo "results: $OUT"
# With RECORD=1: every figure (part peer case figure value) into bench/results/sidecar.tsv.
# The commit column is the checkout's; a baseline's rows name their binary in the peer
# column (queuebase:QUEUE_BASE_LABEL, by default the binary's file name).
tail -n +2 "$SUMMARY" |
  awk -v run="$([[ -n "${QUICK:-}" ]] && echo quick || echo full)" \
    -v base="queuebase:${QUEUE_BASE_LABEL:-$(basename "${QUEUE_BASE_BIN:-none}")}" \
    -F'\t' -v OFS='\t' '{ if ($2 == "queuebase") $2 = base; print run, $0 }' |
  record sidecar $'run\t'"$(head -1 "$SUMMARY")"
