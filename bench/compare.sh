#!/usr/bin/env bash
# compare.sh - run queue and its peers through the same load on one machine
# and write the comparison table and chart (bench/README.md explains every
# figure).
#
#   bench/compare.sh                            all peers: direct nginx haproxy naive floor queue
#   bench/compare.sh --only direct,nginx,queue  a subset, by name ("direct" is needed for
#                                               the "added over direct" rows)
#   QUICK=1 bench/compare.sh                    smoke test: 2 s runs, 1 repeat
#   ONLY_SCENARIOS=stall5000 bench/compare.sh    a subset of the scenarios, by name
#   OUT=/tmp/run1 bench/compare.sh              where results go (default
#                                               ${TMPDIR:-/tmp}/queue-bench/<date-time>)
#   bench/compare.sh --report DIR               summarise DIR/runs.tsv again
#   RECORD=1 bench/compare.sh                   also append the summary's rows to
#                                               bench/results/compare.tsv (record.sh)
#
# Each proxy is pinned to CPU $PROXY_CPU (0) and the load generator and the
# upstream to CPU $LOAD_CPU (1). Writes OUT/runs.tsv (one row per measured
# run), OUT/summary.tsv (medians per peer and scenario), OUT/table.md (the
# printed table), OUT/results.svg (the chart) and OUT/meta.txt.
#
# Knobs (environment): DURATION=10 (s per run) REPEATS=3 (runs of c1 and
# c64) WARMUP=2 (s of load before a scenario's first run) RSS_DURATION=5
# (s of wrk -c1000) STALL_CONNS=5000 STALL_HOLD=3 PROXY_CPU=0 LOAD_CPU=1
# QUEUE_BIN (a prebuilt queue; default: built as shipped, CGO_ENABLED=0
# go build -trimpath -ldflags='-s -w' ./cmd/queue) NETNS=auto|0.
# Needs: go, wrk, h2load (nghttp2-client; else no h2c row), nginx, haproxy,
# taskset (util-linux), ps (procps), unshare and ip (iproute2) for isolation.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# nginx_conf, haproxy_conf, NGINX_CMD and HAPROXY_CMD: one copy, shared with sidecar.sh.
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
# shellcheck source=bench/record.sh
source "$HERE/record.sh"
ALL_PEERS=(direct nginx haproxy naive floor queue)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "compare.sh: $*"; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

ONLY="" REPORT=""
while (($#)); do
  case "$1" in
    --only) [[ $# -ge 2 ]] || die "--only needs a list"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --report) [[ $# -ge 2 ]] || die "--report needs a folder"; REPORT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

if [[ -n "${QUICK:-}" ]]; then
  DURATION=${DURATION:-2} REPEATS=${REPEATS:-1} WARMUP=${WARMUP:-1} RSS_DURATION=${RSS_DURATION:-2}
fi
DURATION=${DURATION:-10} REPEATS=${REPEATS:-3} WARMUP=${WARMUP:-2} RSS_DURATION=${RSS_DURATION:-5}
STALL_CONNS=${STALL_CONNS:-5000} STALL_HOLD=${STALL_HOLD:-3}
PROXY_CPU=${PROXY_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}
UPSTREAM=127.0.0.1:18010
H2_CLIENTS=16 H2_STREAMS=32

PEERS=()
for p in "${ALL_PEERS[@]}"; do
  [[ -z "$ONLY" || ",$ONLY," == *",$p,"* ]] && PEERS+=("$p")
done
for p in ${ONLY//,/ }; do
  [[ " ${ALL_PEERS[*]} " == *" $p "* ]] || die "unknown peer $p (peers: ${ALL_PEERS[*]})"
done
((${#PEERS[@]})) || die "no peer selected"

# --- summary and table ----------------------------------------------------------
summarize() { # dir: DIR/runs.tsv -> DIR/summary.tsv (median of each figure)
  awk -F'\t' -v OFS='\t' '
    function median(k, c,   i, j, m, x, a) {
      m = 0
      for (i = 1; i <= n[k]; i++) {
        x = v[k, c, i]
        if (x != "-" && x != "") a[++m] = x + 0
      }
      if (m == 0) return "-"
      for (i = 2; i <= m; i++) {
        x = a[i]
        for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
        a[j + 1] = x
      }
      x = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
      return c ~ /_kb$|^conns$|^requests$|^errors$/ ? sprintf("%.0f", x) : sprintf("%.2f", x)
    }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      k = $col["peer"] SUBSEP $col["scenario"]
      if (!(k in n)) { order[++nk] = k; n[k] = 0 }
      n[k]++
      for (c in col) v[k, c, n[k]] = $col[c]
    }
    END {
      nm = split("conns requests rps p50_us p99_us errors proxy_us_per_req proxy_cpu_pct rss_kb rss_idle_kb rss_peak_kb", m, " ")
      printf "peer\tscenario\truns"
      for (i = 1; i <= nm; i++) printf "\t%s", m[i]
      print ""
      for (o = 1; o <= nk; o++) {
        split(order[o], key, SUBSEP)
        printf "%s\t%s\t%d", key[1], key[2], n[order[o]]
        for (i = 1; i <= nm; i++) printf "\t%s", median(order[o], m[i])
        print ""
      }
    }' "$1/runs.tsv" >"$1/summary.tsv"
}

table() { # dir: DIR/summary.tsv -> the markdown table, on stdout
  awk -F'\t' '
    function get(p, s, c) { return ((p, s, c) in val) && val[p, s, c] != "-" ? val[p, s, c] + 0 : "" }
    function fig(p, s, c, kind,   x, d) {
      x = get(p, s, c)
      if (x == "") return ""
      if (kind == "added") {
        d = get("direct", s, c)
        if (p == "direct" || d == "") return ""
        return x - d
      }
      return kind == "mib" ? x / 1024 : x
    }
    function show(x, kind) {
      if (x == "") return "-"
      if (kind == "cpu" || kind == "mib") return sprintf("%.1f", x)
      return sprintf("%.0f", x)
    }
    function ratio(q, b) { return q == "" || b == "" || b <= 0 || q < 0 ? "-" : sprintf("%.2fx", q / b) }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      p = $col["peer"]
      if (!(p in seen)) { seen[p] = 1; peers[++np] = p }
      for (c in col) val[p, $col["scenario"], c] = $col[c]
    }
    END {
      nr = split("c64: proxy CPU µs/request|c64: requests/s|post16k: proxy CPU µs/request|" \
        "get64k: proxy CPU µs/request|h2c: proxy CPU µs/request|c1: p50 µs|" \
        "c1: p50 added over direct, µs|c1same: p50 added over direct, µs|RSS idle, MiB|" \
        "RSS peak under 1000 connections, MiB|RSS holding 5000 stalled heads, MiB", label, "|")
      split("c64 c64 post16k get64k h2c c1 c1 c1same conn1000 conn1000 stall5000", scen, " ")
      split("proxy_us_per_req rps proxy_us_per_req proxy_us_per_req proxy_us_per_req p50_us p50_us p50_us rss_idle_kb rss_peak_kb rss_peak_kb", metric, " ")
      split("cpu int cpu cpu cpu int added added mib mib mib", kind, " ")
      printf "| figure |"
      for (i = 1; i <= np; i++) printf " %s |", peers[i]
      print " queue/nginx | queue/haproxy | queue/floor |"
      printf "| --- |"
      for (i = 1; i <= np + 3; i++) printf " ---: |"
      print ""
      for (r = 1; r <= nr; r++) {
        printf "| %s |", label[r]
        for (i = 1; i <= np; i++) printf " %s |", show(fig(peers[i], scen[r], metric[r], kind[r]), kind[r])
        q = fig("queue", scen[r], metric[r], kind[r])
        printf " %s | %s | %s |\n", ratio(q, fig("nginx", scen[r], metric[r], kind[r])),
          ratio(q, fig("haproxy", scen[r], metric[r], kind[r])), ratio(q, fig("floor", scen[r], metric[r], kind[r]))
      }
    }' "$1/summary.tsv"
}

report() { # dir: summary, table (printed and in DIR/table.md) and, if it can, the chart
  summarize "$1"
  table "$1" >"$1/table.md"
  echo >&2
  cat "$1/table.md"
  echo
  local n
  n=$(awk -F'\t' '$2 == "c64" { n = $3 } END { print n + 0 }' "$1/summary.tsv")
  if ((n > 1)); then
    echo "c1 and c64: medians of $n runs; the other scenarios: one run. - is not measured or does not apply."
  else
    echo "One run per scenario. - is not measured or does not apply."
  fi
  if [[ -x "${COMPARE_BIN:-}/bench.test" ]]; then
    (cd "$HERE" && QUEUE_BENCH_SUMMARY=$1/summary.tsv QUEUE_BENCH_SVG=$1/results.svg \
      "$COMPARE_BIN/bench.test" -test.run '^TestChart$' -test.count=1 >"$1/chart.log" 2>&1) &&
      echo "chart: $1/results.svg" || log "the chart failed: see $1/chart.log"
  else
    echo "chart: QUEUE_BENCH_SUMMARY=$1/summary.tsv QUEUE_BENCH_SVG=$1/results.svg go test ./bench -run '^TestChart\$' -count=1"
  fi
  echo "results: $1"
}

if [[ -n "$REPORT" ]]; then
  [[ -s "$REPORT/runs.tsv" ]] || die "$REPORT/runs.tsv: no runs"
  report "$(cd "$REPORT" && pwd)"
  exit 0
fi

# --- build (before entering the network namespace) -------------------------
if [[ -z "${COMPARE_BIN:-}" ]]; then
  for t in go wrk taskset ps timeout; do
    command -v "$t" >/dev/null || die "missing $t (bench/README.md lists the packages)"
  done
  (($(nproc --all) >= 2)) || die "needs two CPUs"
  for p in nginx haproxy; do
    [[ " ${PEERS[*]} " != *" $p "* || -x /usr/sbin/$p ]] ||
      die "no /usr/sbin/$p (apt-get install $p, or leave it out with --only)"
  done
  COMPARE_BIN=$(mktemp -d "${TMPDIR:-/tmp}/queue-bench-bin.XXXXXX") OWN_BIN=1
  export COMPARE_BIN OWN_BIN
  log "building into $COMPARE_BIN"
  (
    cd "$ROOT"
    for prog in upstream naive floor stall; do
      go build -trimpath -o "$COMPARE_BIN/$prog" "./bench/$prog"
    done
    # queue as shipped (Dockerfile): a cgo build maps libc and the loader,
    # 1.3-1.6 MiB more at idle on a machine with gcc.
    [[ -n "${QUEUE_BIN:-}" ]] || CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$COMPARE_BIN/queue" ./cmd/queue
    # The chart is drawn by bench/chart_test.go; a failure here only costs the SVG.
    go test -c -o "$COMPARE_BIN/bench.test" ./bench 2>"$COMPARE_BIN/bench.test.log" ||
      log "warning: bench tests do not build, no chart (see $COMPARE_BIN/bench.test.log)"
  ) || { rm -rf "$COMPARE_BIN"; die "build failed"; }
fi
QUEUE_BIN=${QUEUE_BIN:-$COMPARE_BIN/queue}
FLOOR_BIN=$COMPARE_BIN/floor
export QUEUE_BIN FLOOR_BIN

# --- isolation: a network namespace of our own, with only lo ---------------
# Ports cannot clash with anything on the host, and nothing can leave it.
NETNS=${NETNS:-auto}
if [[ -z "${COMPARE_IN_NETNS:-}" && "$NETNS" != 0 ]]; then
  if [[ $EUID -eq 0 ]] && command -v unshare >/dev/null && command -v ip >/dev/null &&
    unshare -n true 2>/dev/null; then
    export COMPARE_IN_NETNS=1 QUICK DURATION REPEATS WARMUP RSS_DURATION STALL_CONNS STALL_HOLD PROXY_CPU LOAD_CPU OUT
    exec unshare -n -- bash -c 'ip link set lo up && exec "$0" "$@"' "$0" --only "$(IFS=,; echo "${PEERS[*]}")"
  fi
  log "no private network namespace (needs root, unshare, ip): using the host's loopback"
fi

OUT=${OUT:-${TMPDIR:-/tmp}/queue-bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.tsv
printf 'peer\tscenario\trep\tconns\trequests\tseconds\trps\tp50_us\tp99_us\terrors\tproxy_cpu_s\tproxy_cpu_pct\tproxy_us_per_req\trss_kb\trss_idle_kb\trss_peak_kb\tload1\n' >"$RUNS"

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
((NOFILE >= 12000)) || log "warning: only $NOFILE file descriptors; conn1000 and stall5000 need about 12000"
HZ=$(getconf CLK_TCK)
HAVE_H2LOAD=0
command -v h2load >/dev/null && HAVE_H2LOAD=1

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/queue-bench.XXXXXX")
STARTED=() # PIDs of the process trees we started and have not reaped

# --- processes ---------------------------------------------------------------
cleanup() {
  local p
  for p in "${STARTED[@]}"; do stop "$p"; done
  rm -rf "$SCRATCH"
  [[ "${OWN_BIN:-}" != 1 ]] || rm -rf "$COMPARE_BIN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ready() { # addr pid: wait (<= 15 s) until GET /1k through addr answers 200
  local i
  for ((i = 0; i < 150; i++)); do
    [[ -d /proc/$2 ]] || return 1
    [[ $(http_status "$1" /1k) == 200 ]] && return 0
    sleep 0.1
  done
  return 1
}

start() { # name addr cpu cmd: start cmd under bash -c pinned to cpu; sets PID
  local name=$1 addr=$2 cpu=$3 cmd=$4 tmp
  ! port_open "$addr" || { log "$addr is already in use"; return 1; }
  tmp=$(mktemp -d "$SCRATCH/$name.XXXX")
  chmod 755 "$tmp"
  [[ "$name" == nginx ]] && nginx_conf "$tmp"
  [[ "$name" == haproxy ]] && haproxy_conf "$tmp"
  (
    export BENCH_LISTEN=$addr BENCH_H2C_LISTEN=$H2C BENCH_UPSTREAM=$UPSTREAM BENCH_TMP=$tmp
    cd "$tmp"
    exec taskset -c "$cpu" bash -c "$cmd"
  ) >>"$OUT/logs/$name.log" 2>&1 &
  PID=$!
  STARTED+=("$PID")
  if ! ready "$addr" "$PID"; then
    log "$name did not answer GET /1k on $addr; its log ends:"
    tail -5 "$OUT/logs/$name.log" >&2
    stop "$PID"
    return 1
  fi
}

# --- peers ---------------------------------------------------------------------
# peer NAME sets LISTEN (where the load goes), H2C (h2c prior-knowledge
# address, or empty), CMD (run by bash -c with BENCH_* exported; empty for
# direct) and SCENARIOS (those that apply to it).
peer() {
  H2C="" CMD=""
  SCENARIOS="c1 c64 c1same get64k post16k h2c conn1000 stall5000"
  case "$1" in
    direct)
      LISTEN=$UPSTREAM H2C=$UPSTREAM SCENARIOS="c1 c64 c1same get64k post16k h2c" ;;
    nginx)
      # nginx 1.22 serves h2c only on a port of its own ("listen ... http2").
      LISTEN=127.0.0.1:18011 H2C=127.0.0.1:18111
      CMD=$NGINX_CMD ;;
    haproxy)
      # An HTTP-mode bind recognises the HTTP/2 preface: h2c on the same port.
      LISTEN=127.0.0.1:18013 H2C=127.0.0.1:18013
      CMD=$HAPROXY_CMD ;;
    naive)
      LISTEN=127.0.0.1:18015 H2C=127.0.0.1:18015
      CMD='exec "$COMPARE_BIN/naive" -listen "$BENCH_LISTEN" -upstream "$BENCH_UPSTREAM"' ;;
    floor)
      local NAME
      # shellcheck source=bench/floor.peer
      source "$HERE/floor.peer"
      H2C=$H2C_LISTEN
      SCENARIOS="c1 c64 c1same get64k post16k h2c conn1000 stall5000" ;;
    queue)
      # Side ports moved off their defaults; no drain wait when stopped.
      LISTEN=127.0.0.1:18017 H2C=127.0.0.1:18017
      CMD='exec "$QUEUE_BIN" --upstream "$BENCH_UPSTREAM" --listen "$BENCH_LISTEN"
        --admin-listen 127.0.0.1:18122 --stats-listen 127.0.0.1:18123
        --metrics-listen 127.0.0.1:18124 --drain-quiet-period 0s --drain-timeout 1s'
      CMD=${CMD//$'\n'/ } ;;
  esac
}

# --- measurement -------------------------------------------------------------
# load ARGS...: run a load generator on the load CPU, bounded in time.
load() { timeout -k 5 $((DURATION + RSS_DURATION + 60)) taskset -c "$LOAD_CPU" "$@"; }

# row scenario rep conns requests seconds rps p50 p99 errors cpu_ticks rss idle peak
row() {
  awk -v OFS='\t' -v peer="$NAME" -v scen="$1" -v rep="$2" -v conns="$3" -v req="$4" \
    -v sec="$5" -v rps="$6" -v p50="$7" -v p99="$8" -v err="$9" -v t="${10}" -v hz="$HZ" \
    -v rss="${11}" -v idle="${12}" -v peak="${13}" -v load1="$(cut -d' ' -f1 /proc/loadavg)" '
    BEGIN {
      cpu = pct = per = "-"
      if (t != "-") {
        cpu = sprintf("%.3f", t / hz)
        if (sec > 0) pct = sprintf("%.1f", 100 * t / hz / sec)
        if (req > 0) per = sprintf("%.2f", 1e6 * t / hz / req)
      }
      print peer, scen, rep, conns, req, sec, rps, p50, p99, err, cpu, pct, per, rss, idle, peak, load1
    }' >>"$RUNS"
  tail -1 "$RUNS" | awk -F'\t' '{ printf "    %-8s %-9s r%s rps=%s p50=%sus p99=%sus errors=%s cpu=%s%% %sus/req rss=%skB idle=%skB peak=%skB\n",
    $1, $2, $3, $7, $8, $9, $10, $12, $13, $14, $15, $16 }' >&2
}

# measure scenario rep conns cmd...: run the load, account the proxy's CPU.
measure() {
  local scen=$1 rep=$2 conns=$3 t0 t1 c0 c1 secs
  shift 3
  c0=$( [[ -n "$PROXY" ]] && ticks "$PROXY" || echo -)
  t0=$EPOCHREALTIME
  load "$@" >"$SCRATCH/load.out" 2>&1 || true
  t1=$EPOCHREALTIME
  c1=$( [[ -n "$PROXY" ]] && ticks "$PROXY" || echo -)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  local req rps p50 p99 err
  if [[ "$1" == h2load ]]; then
    read -r req rps err < <(awk '
      /^finished in/ { rps = $4 }
      /^requests:/ { ok = $8; bad = $10 + $12 + $14 }
      END { print ok + 0, rps + 0, bad + 0 }' "$SCRATCH/load.out")
    p50=- p99=-
  else
    read -r req rps p50 p99 err < <(awk '
      function us(v) {
        if (v ~ /us$/) return v + 0
        if (v ~ /ms$/) return 1e3 * v
        if (v ~ /m$/) return 6e7 * v
        if (v ~ /s$/) return 1e6 * v
        return "-"
      }
      / requests in / { req = $1 }
      /^Requests\/sec:/ { rps = $2 }
      $1 == "50%" { p50 = us($2) }
      $1 == "99%" { p99 = us($2) }
      /Socket errors:/ { gsub(/,/, ""); err += $4 + $6 + $8 + $10 }
      /Non-2xx or 3xx responses:/ { err += $NF }
      END { print req + 0, rps + 0, (p50 == "" ? "-" : p50), (p99 == "" ? "-" : p99), err + 0 }' "$SCRATCH/load.out")
  fi
  ((req > 0)) || { log "    no requests completed; the load generator said:"; tail -3 "$SCRATCH/load.out" >&2; }
  ((err == 0)) || log "    $err errors or non-2xx answers"
  local t=-
  [[ "$c0" != - ]] && t=$((c1 - c0))
  row "$scen" "$rep" "$conns" "$req" "$secs" "$rps" "$p50" "$p99" "$err" "$t" \
    "$([[ -n "$PROXY" ]] && rss "$PROXY" || echo -)" - -
}

wrk_args() { # conns seconds path [script]
  local a=(wrk -t1 -c"$1" -d"$2s" --latency --timeout 10s)
  [[ -n "${4:-}" ]] && a+=(-s "$4")
  printf '%s\n' "${a[@]}" "http://$LISTEN$3"
}

run_wrk() { # scenario rep conns path [script]
  local -a warm cmd
  mapfile -t cmd < <(wrk_args "$3" "$DURATION" "$4" "${5:-}")
  if (($2 == 1 && WARMUP > 0)); then
    mapfile -t warm < <(wrk_args "$3" "$WARMUP" "$4" "${5:-}")
    load "${warm[@]}" >/dev/null 2>&1 || true
  fi
  measure "$1" "$2" "$3" "${cmd[@]}"
}

run_h2c() {
  if ((!HAVE_H2LOAD)); then log "    h2c skipped: no h2load"; return; fi
  local cmd=(h2load -t1 -c"$H2_CLIENTS" -m"$H2_STREAMS")
  ((WARMUP > 0)) && { load "${cmd[@]}" -D "$WARMUP" "http://$H2C/1k" >/dev/null 2>&1 || true; }
  measure h2c 1 $((H2_CLIENTS * H2_STREAMS)) "${cmd[@]}" -D "$DURATION" "http://$H2C/1k"
}

pin() { # PID cpu: move every thread of a tree
  local p
  for p in $(tree "$1"); do taskset -a -p -c "$2" "$p" >/dev/null 2>&1 || true; done
}

sample_peak() { # PID file: write the tree's peak RSS to file every 0.2 s (<= 5 min)
  local peak=0 r i
  for ((i = 0; i < 1500; i++)); do
    r=$(rss "$1")
    ((r > peak)) && { peak=$r; echo "$peak" >"$2"; }
    sleep 0.2
  done
}

restart_proxy() { # a fresh process, so that its memory starts from nothing
  stop "$PROXY"
  PROXY=""
  start "$NAME" "$LISTEN" "$PROXY_CPU" "$CMD" || return 1
  PROXY=$PID
}

run_conn1000() {
  restart_proxy || return 1
  sleep 1
  local idle sampler peakf=$SCRATCH/peak
  idle=$(rss "$PROXY")
  echo 0 >"$peakf"
  sample_peak "$PROXY" "$peakf" &
  sampler=$!
  STARTED+=("$sampler")
  taskset -p -c "$LOAD_CPU" "$sampler" >/dev/null 2>&1 || true
  local -a cmd
  mapfile -t cmd < <(wrk_args 1000 "$RSS_DURATION" /1k)
  measure conn1000 1 1000 "${cmd[@]}"
  stop "$sampler"
  # measure wrote the row without the memory figures: add them.
  local last
  last=$(tail -1 "$RUNS" | awk -F'\t' -v OFS='\t' -v idle="$idle" -v peak="$(cat "$peakf")" \
    '{ $15 = idle; $16 = peak; print }')
  sed -i '$ d' "$RUNS"
  printf '%s\n' "$last" >>"$RUNS"
  log "    conn1000: RSS idle ${idle} kB, peak $(cat "$peakf") kB"
}

run_stall() {
  restart_proxy || return 1
  sleep 1
  local idle sampler peakf=$SCRATCH/peak held
  idle=$(rss "$PROXY")
  echo 0 >"$peakf"
  sample_peak "$PROXY" "$peakf" &
  sampler=$!
  STARTED+=("$sampler")
  taskset -p -c "$LOAD_CPU" "$sampler" >/dev/null 2>&1 || true
  timeout -k 5 $((STALL_HOLD + 60)) taskset -c "$LOAD_CPU" "$COMPARE_BIN/stall" -target "$LISTEN" \
    -n "$STALL_CONNS" -hold "${STALL_HOLD}s" >"$SCRATCH/stall.out" 2>&1 || true
  stop "$sampler"
  held=$(awk '/^open/ { print $2 }' "$SCRATCH/stall.out")
  [[ "${held:-0}" == "$STALL_CONNS" ]] || log "    only ${held:-0} of $STALL_CONNS connections held: $(tail -1 "$SCRATCH/stall.out")"
  row stall5000 1 "${held:-0}" - - - - - - - "$(rss "$PROXY")" "$idle" "$(cat "$peakf")"
}

run_peer() {
  NAME=$1
  peer "$NAME"
  log "== $NAME: ${CMD:+proxy on CPU $PROXY_CPU at $LISTEN, }load and upstream on CPU $LOAD_CPU"
  PROXY=""
  if [[ -n "$CMD" ]]; then
    start "$NAME" "$LISTEN" "$PROXY_CPU" "$CMD" || return 1
    PROXY=$PID
  fi
  local scen r n
  for scen in $SCENARIOS; do
    [[ -n "${ONLY_SCENARIOS:-}" && " ${ONLY_SCENARIOS//,/ } " != *" $scen "* ]] && continue
    n=1
    [[ $scen == c1 || $scen == c64 ]] && n=$REPEATS
    for ((r = 1; r <= n; r++)); do
      case $scen in
        c1) run_wrk c1 "$r" 1 /1k ;;
        c64) run_wrk c64 "$r" 64 /1k ;;
        c1same)
          # The proxy joins the load on one CPU: no cross-CPU wake-ups, so
          # what it adds to the latency is its own serial work.
          [[ -n "$PROXY" ]] && pin "$PROXY" "$LOAD_CPU"
          run_wrk c1same 1 1 /1k
          [[ -n "$PROXY" ]] && pin "$PROXY" "$PROXY_CPU" ;;
        get64k) run_wrk get64k 1 64 /64k ;;
        post16k) run_wrk post16k 1 64 /echo "$HERE/post16k.lua" ;;
        h2c) run_h2c ;;
        conn1000) run_conn1000 || return 1 ;;
        stall5000) run_stall || return 1 ;;
      esac
    done
  done
  stop "$PROXY"
  PROXY=""
}

# --- main ----------------------------------------------------------------------
mkdir -p "$OUT/logs"
busy=$(
  a=$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)
  sleep 1
  b=$(awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.0f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }'
)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc --all) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(uname -sr)"
  echo "go: $(go version 2>/dev/null || echo -)"
  echo "queue: $("$QUEUE_BIN" --version 2>&1 | head -1)"
  echo "nginx: $(/usr/sbin/nginx -v 2>&1 || echo -)"
  echo "haproxy: $(/usr/sbin/haproxy -v 2>/dev/null | head -1 || echo -)"
  echo "wrk: $(wrk -v 2>&1 | head -1 || true)"
  echo "h2load: $(h2load --version 2>/dev/null || echo -)"
  echo "knobs: DURATION=$DURATION REPEATS=$REPEATS WARMUP=$WARMUP RSS_DURATION=$RSS_DURATION STALL_CONNS=$STALL_CONNS STALL_HOLD=$STALL_HOLD PROXY_CPU=$PROXY_CPU LOAD_CPU=$LOAD_CPU"
  echo "network namespace: $([[ -n "${COMPARE_IN_NETNS:-}" ]] && echo "private, lo only" || echo host)"
  echo "before the run: loadavg $(cut -d' ' -f1-3 /proc/loadavg), CPUs ${busy}% busy"
  echo "peers: ${PEERS[*]}"
} >"$OUT/meta.txt"
cat "$OUT/meta.txt" >&2
((busy < 10)) || log "warning: the machine is already ${busy}% busy; figures will be noisy"

begin=$SECONDS
H2C=""
start upstream "$UPSTREAM" "$LOAD_CPU" 'exec "$COMPARE_BIN/upstream" -listen "$BENCH_LISTEN"' ||
  die "the upstream did not start"
UPSTREAM_PID=$PID
for p in "${PEERS[@]}"; do
  [[ -d /proc/$UPSTREAM_PID ]] || die "the upstream died (see $OUT/logs/upstream.log)"
  run_peer "$p" || log "$p failed; going on with the next peer"
done
stop "$UPSTREAM_PID"
echo "took: $((SECONDS - begin)) s" >>"$OUT/meta.txt"

report "$OUT"
# With RECORD=1: the medians, one row per peer and scenario, into bench/results/compare.tsv.
tail -n +2 "$OUT/summary.tsv" | awk -v run="$([[ -n "${QUICK:-}" ]] && echo quick || echo full)" '{ print run "\t" $0 }' |
  record compare $'run\t'"$(head -1 "$OUT/summary.tsv")"
