#!/usr/bin/env bash
# h3.sh - the HTTP/3 comparison: the CPU each server spends per request for
# GET /1k over 8 connections of 16 concurrent streams, queue over HTTP/3 next
# to queue over HTTP/2 (TLS), Caddy over HTTP/3 (and HTTP/2) and quic-go's
# own http3.Server, measured the same way in one run; prints the table
# (bench/README.md explains every figure).
#
#   bench/h3.sh                                 all rows, 3 interleaved sets, about 4 minutes
#   bench/h3.sh --only queue-h3,caddy-h3        a subset of the rows, by name
#   QUICK=1 bench/h3.sh                         smoke test: 2 s runs after 1 s, 1 set
#   OUT=/tmp/h3 bench/h3.sh                     where results go (default
#                                               ${TMPDIR:-/tmp}/queue-bench/h3-<date-time>)
#   RECORD=1 bench/h3.sh                        also append the summary's rows to
#                                               bench/results/h3.tsv (record.sh)
#
# Rows: queue-h3 (queue with TLS on, HTTP/3 on the TLS port's number over
# UDP, load bench/h3load), queue-h2 (the same queue over HTTP/2 and TLS,
# load h2load), caddy-h3 (Debian's caddy as a reverse proxy with HTTP/3 on,
# load h3load), floor-h3 (bench/h3floor: a bare quic-go http3.Server that
# answers 1 KiB from memory, no upstream; load h3load), engine-h3 (the same
# answer from queue's own HTTP/3 engine, package h3: h3floor -queue-engine),
# relay-h3 (h3floor
# -relay: the floor of an HTTP/3-to-HTTP/1.1 relay on quic-go's transport,
# to the same upstream; load h3load), caddy-h2 (the same
# caddy, load h2load). Every proxy forwards to one bench/upstream. Each run
# starts a fresh server pinned to CPU $PROXY_CPU (0), waits until it answers
# GET /1k over the row's protocol, sends WARMUP s of the row's load (not
# counted) and then DURATION s, from CPU $LOAD_CPU (1), where the upstream
# runs too; the server's CPU is its process tree's utime+stime from
# /proc/PID/stat before and after the measured load, its RSS is VmRSS just
# after it, and "foreign" is the share of CPU $PROXY_CPU's time (/proc/stat)
# in the same interval that was busy but not the server's. The sets run
# interleaved (every row, then every row again) and the table gives each
# figure's median. Writes OUT/runs.tsv (one row per measured run),
# OUT/summary.tsv (the medians), OUT/table.md (printed), OUT/meta.txt and
# OUT/logs/ (each server's output and each run's load output). A row whose
# server does not start or answer is left out, the others go on, and the
# script exits 1 at the end.
#
# Knobs (environment): DURATION=10 (s per run) REPEATS=3 (sets) WARMUP=2
# (s of the same load before each run) PROXY_CPU=0 LOAD_CPU=1 QUEUE_BIN (a
# prebuilt queue; default: built as shipped, CGO_ENABLED=0 go build -trimpath
# -ldflags='-s -w' ./cmd/queue) OUT NETNS=auto|0 QUICK=1 RECORD=1.
# Needs: go (builds queue, bench/h3load, bench/h3floor, bench/upstream),
# h2load (nghttp2-client), caddy (/usr/bin/caddy; else no caddy rows),
# openssl, taskset (util-linux), ps (procps), timeout; unshare and ip
# (iproute2) for a private network namespace.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# tree, stop_tree, http_status and port_open: one copy, shared with compare.sh.
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
# shellcheck source=bench/record.sh
source "$HERE/record.sh"
ALL_ROWS=(queue-h3 queue-h2 caddy-h3 floor-h3 engine-h3 relay-h3 caddy-h2)
CADDY=/usr/bin/caddy

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "h3.sh: $*"; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

ONLY=""
while (($#)); do
  case "$1" in
    --only) [[ $# -ge 2 ]] || die "--only needs a list"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

if [[ -n "${QUICK:-}" ]]; then
  DURATION=${DURATION:-2} REPEATS=${REPEATS:-1} WARMUP=${WARMUP:-1}
fi
DURATION=${DURATION:-10} REPEATS=${REPEATS:-3} WARMUP=${WARMUP:-2}
PROXY_CPU=${PROXY_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}
CONNS=8 STREAMS=16
# Ports of this script's own (compare.sh has 180xx, sidecar.sh 182xx, hostile.sh 184xx).
# A TLS port is TCP (HTTP/2) and UDP (HTTP/3) of the same number.
UPSTREAM=127.0.0.1:18510
QUEUE_TLS=127.0.0.1:18511 QUEUE_PLAIN=127.0.0.1:18512
QUEUE_SIDE=(127.0.0.1:18513 127.0.0.1:18514 127.0.0.1:18515) # admin, stats, metrics
CADDY_TLS=127.0.0.1:18516 FLOOR_TLS=127.0.0.1:18517

ROWS=()
for r in "${ALL_ROWS[@]}"; do
  [[ -z "$ONLY" || ",$ONLY," == *",$r,"* ]] && ROWS+=("$r")
done
for r in ${ONLY//,/ }; do
  [[ " ${ALL_ROWS[*]} " == *" $r "* ]] || die "unknown row $r (rows: ${ALL_ROWS[*]})"
done
((${#ROWS[@]})) || die "no row selected"
[[ "$DURATION" =~ ^[1-9][0-9]*$ && "$REPEATS" =~ ^[1-9][0-9]*$ && "$WARMUP" =~ ^[0-9]+$ ]] ||
  die "DURATION and REPEATS are whole seconds and sets (at least 1), WARMUP whole seconds"

# --- build (before entering the network namespace) -------------------------
if [[ -z "${H3_BIN:-}" ]]; then
  for t in go h2load openssl taskset ps timeout; do
    command -v "$t" >/dev/null || die "missing $t (bench/README.md lists the packages)"
  done
  (($(nproc --all) >= 2)) || die "needs two CPUs"
  H3_BIN=$(mktemp -d "${TMPDIR:-/tmp}/queue-h3-bin.XXXXXX") OWN_BIN=1
  export H3_BIN OWN_BIN
  # Until the namespaced run takes it over (its own cleanup removes it).
  trap 'rm -rf "$H3_BIN"' EXIT
  log "building into $H3_BIN"
  (
    cd "$ROOT"
    for prog in upstream h3load h3floor; do
      go build -trimpath -o "$H3_BIN/$prog" "./bench/$prog"
    done
    # queue as shipped (the Dockerfile's flags).
    [[ -n "${QUEUE_BIN:-}" ]] || CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$H3_BIN/queue" ./cmd/queue
  ) || die "build failed"
fi
QUEUE_BIN=${QUEUE_BIN:-$H3_BIN/queue}
[[ -x "$QUEUE_BIN" ]] || die "QUEUE_BIN=$QUEUE_BIN is not an executable"
export QUEUE_BIN

# --- isolation: a network namespace of our own, with only lo ---------------
# Ports (TCP and UDP) cannot clash with anything on the host, and nothing can leave it.
NETNS=${NETNS:-auto}
if [[ -z "${H3_IN_NETNS:-}" && "$NETNS" != 0 ]]; then
  if [[ $EUID -eq 0 ]] && command -v unshare >/dev/null && command -v ip >/dev/null &&
    unshare -n true 2>/dev/null; then
    export H3_IN_NETNS=1 QUICK DURATION REPEATS WARMUP PROXY_CPU LOAD_CPU OUT RECORD
    # shellcheck disable=SC2016 # expanded by the namespaced bash
    exec unshare -n -- bash -c 'ip link set lo up && exec "$0" "$@"' "$0" --only "$(IFS=,; echo "${ROWS[*]}")"
  fi
  log "no private network namespace (needs root, unshare, ip): using the host's loopback"
fi

OUT=${OUT:-${TMPDIR:-/tmp}/queue-bench/h3-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.tsv
printf 'row\trep\trequests\terrors\tseconds\trps\tcpu_ms\tus_per_req\tcpu_pct\trss_kb\tforeign_pct\tsoftirq_pct\tsteal_pct\n' >"$RUNS"
HZ=$(getconf CLK_TCK)

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/queue-h3.XXXXXX")
STARTED=() # PIDs of the process trees we started and have not reaped

# --- processes ---------------------------------------------------------------
cleanup() {
  local p
  for p in "${STARTED[@]}"; do stop "$p"; done
  rm -rf "$SCRATCH"
  [[ "${OWN_BIN:-}" != 1 ]] || rm -rf "$H3_BIN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cpu_stat() { # the proxy CPU's busy, total, irq+softirq and steal ticks
  # (/proc/stat: user nice system idle iowait irq softirq steal)
  awk -v c="cpu$PROXY_CPU" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $7 + $8, $9 }' /proc/stat
}

start() { # name cpu cmd: start cmd under bash -c pinned to cpu, in a folder of its own; sets PID
  local name=$1 cpu=$2 cmd=$3 tmp
  tmp=$(mktemp -d "$SCRATCH/$name.XXXX")
  [[ "$name" != caddy-* ]] || write_caddyfile "$tmp/Caddyfile" "$ADDR"
  (
    # caddy's data and config folders (it writes there at start), out of $HOME.
    export BENCH_TMP=$tmp BENCH_UPSTREAM=$UPSTREAM H3_BIN CERT KEY QUEUE_BIN CADDY
    export HOME=$tmp XDG_DATA_HOME=$tmp/data XDG_CONFIG_HOME=$tmp/config
    cd "$tmp"
    exec taskset -c "$cpu" bash -c "$cmd"
  ) >>"$OUT/logs/$name.log" 2>&1 &
  PID=$!
  STARTED+=("$PID")
}

# load seconds cmd...: a load generator on the load CPU, bounded in time.
load() {
  local s=$1
  shift
  timeout -k 5 $((s + 30)) taskset -c "$LOAD_CPU" "$@"
}

# h3_args seconds addr, h2_args seconds addr: the row's load, as words.
h3_args() { printf '%s\n' "$H3_BIN/h3load" -url "https://$2/1k" -c "$CONNS" -s "$STREAMS" -d "$1s"; }
h2_args() { printf '%s\n' h2load -c"$CONNS" -m"$STREAMS" -D"$1" "https://$2/1k"; }

# parse file: the load's output -> "requests errors seconds" (requests: 200 answers;
# errors: everything else, a missing figure counting as one)
parse() {
  awk '
    function secs(v) {
      if (v ~ /ms$/) return v / 1e3
      if (v ~ /us$/) return v / 1e6
      return v + 0
    }
    /^requests=/ {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); h3[kv[1]] = kv[2] }
      req = h3["requests"]; err = h3["errors"]; sec = h3["seconds"]; seen = 1
    }
    /^finished in/ { sub(/,$/, "", $3); sec = secs($3) }
    /^requests:/ { err += $10 + $12 + $14; seen = 1 }
    /^status codes:/ { req = $3; err += $5 + $7 + $9 }
    /^Application protocol:/ && $3 != "h2" { err++ }
    END { if (!seen) err++; print req + 0, err + 0, sec + 0 }' "$1"
}

# probe kind addr pid: wait (<= 15 s) until one GET /1k over HTTP/3 (h3) or
# HTTP/2 over TLS (h2) answers 200 while pid lives.
probe() {
  local kind=$1 addr=$2 pid=$3 i req err sec out=$SCRATCH/probe.out
  local -a cmd
  for ((i = 0; i < 30; i++)); do
    [[ -d /proc/$pid ]] || return 1
    if [[ $kind == h3 ]]; then
      cmd=("$H3_BIN/h3load" -url "https://$addr/1k" -c 1 -s 1 -n 1 -d 1s)
    else
      cmd=(h2load -n1 -c1 "https://$addr/1k")
    fi
    timeout -k 2 5 "${cmd[@]}" >"$out" 2>&1 || true
    read -r req err sec < <(parse "$out")
    ((req == 1 && err == 0)) && return 0
    sleep 0.5
  done
  tail -3 "$out" >&2
  return 1
}

# --- rows ----------------------------------------------------------------------
write_caddyfile() { # file addr: caddy as a reverse proxy with h1, h2 and h3 on addr
  # Forwarding comparable to queue's: caddy adds X-Forwarded-For, -Proto and -Host
  # itself; queue adds Forwarded too (RFC 7239, host quoted for its colon). The
  # upstream pool keeps up to 1024 idle connections, as queue's does (caddy's
  # default is 32: with 128 requests in flight it would close and redial).
  # default_sni: the loads connect to an IP address, so their ClientHello has no
  # SNI; over TCP caddy then picks the certificate by the local address, over QUIC
  # it cannot (a QUIC handshake has no net.Conn) and fails it, "tls: internal error".
  cat >"$1" <<EOF_CADDY
{
	admin off
	auto_https off
	default_sni ${2%:*}
	servers {
		protocols h1 h2 h3
	}
}
https://$2 {
	tls $CERT $KEY
	reverse_proxy $UPSTREAM {
		header_up Forwarded "for={remote_host};host=\"{hostport}\";proto={scheme}"
		transport http {
			keepalive_idle_conns_per_host 1024
		}
	}
}
EOF_CADDY
}

# row NAME: sets ADDR (where the load goes), KIND (h3 or h2), SERVER (the
# process name, for logs) and CMD (run by bash -c with BENCH_* exported).
row() {
  case "$1" in
    queue-h3 | queue-h2)
      # The same process for both: TLS on, HTTP/3 on by default; side ports
      # moved off their defaults; no drain wait when stopped.
      ADDR=$QUEUE_TLS SERVER=queue
      # shellcheck disable=SC2016 # expanded by the bash -c that runs it
      CMD='exec "$QUEUE_BIN" --upstream "$BENCH_UPSTREAM" --listen '$QUEUE_PLAIN'
        --tls-listen '$QUEUE_TLS' --tls-cert "$CERT" --tls-key "$KEY"
        --admin-listen '${QUEUE_SIDE[0]}' --stats-listen '${QUEUE_SIDE[1]}'
        --metrics-listen '${QUEUE_SIDE[2]}' --drain-quiet-period 0s --drain-timeout 1s'
      CMD=${CMD//$'\n'/ } ;;
    caddy-h3 | caddy-h2)
      ADDR=$CADDY_TLS SERVER=caddy
      # shellcheck disable=SC2016
      CMD='exec "$CADDY" run --config "$BENCH_TMP/Caddyfile" --adapter caddyfile' ;;
    floor-h3)
      ADDR=$FLOOR_TLS SERVER=h3floor
      # shellcheck disable=SC2016
      CMD='exec "$H3_BIN/h3floor" -listen '$FLOOR_TLS' -cert "$CERT" -key "$KEY"' ;;
    engine-h3)
      ADDR=$FLOOR_TLS SERVER=h3floor
      # shellcheck disable=SC2016
      CMD='exec "$H3_BIN/h3floor" -listen '$FLOOR_TLS' -cert "$CERT" -key "$KEY" -queue-engine' ;;
    relay-h3)
      ADDR=$FLOOR_TLS SERVER=h3floor
      # shellcheck disable=SC2016
      CMD='exec "$H3_BIN/h3floor" -listen '$FLOOR_TLS' -cert "$CERT" -key "$KEY" -relay "$BENCH_UPSTREAM"' ;;
  esac
  KIND=${1##*-}
}

# run_row NAME REP: a fresh server, warmed up, measured, stopped; one line of runs.tsv.
run_row() {
  local name=$1 rep=$2 pid b0 b1 c0 c1 t0 t1 q0 q1 s0 s1 rss_kb req err sec
  local -a cmd warm
  row "$name"
  if [[ $SERVER == caddy && ! -x $CADDY ]]; then
    log "== $name: no $CADDY (apt-get install caddy), its figures are -"
    return 0
  fi
  ! port_open "$ADDR" || { log "== $name: $ADDR is already in use"; return 1; }
  start "$name" "$PROXY_CPU" "$CMD"
  pid=$PID
  if ! probe "$KIND" "$ADDR" "$pid"; then
    log "== $name: no 200 for GET /1k over $KIND at $ADDR within 15 s; its log ends:"
    tail -5 "$OUT/logs/$name.log" >&2
    stop "$pid"
    return 1
  fi
  mapfile -t cmd < <("${KIND}_args" "$DURATION" "$ADDR")
  if ((WARMUP > 0)); then
    mapfile -t warm < <("${KIND}_args" "$WARMUP" "$ADDR")
    load "$WARMUP" "${warm[@]}" >/dev/null 2>&1 || true
  fi
  c0=$(ticks "$pid")
  read -r b0 t0 q0 s0 < <(cpu_stat)
  load "$DURATION" "${cmd[@]}" >"$SCRATCH/load.out" 2>&1 || true
  read -r b1 t1 q1 s1 < <(cpu_stat)
  c1=$(ticks "$pid")
  rss_kb=$(rss "$pid")
  cp "$SCRATCH/load.out" "$OUT/logs/$name.$rep.load"
  read -r req err sec < <(parse "$SCRATCH/load.out")
  [[ -d /proc/$pid ]] || { log "    $name died during the run"; err=$((err + 1)); }
  stop "$pid"
  ((req > 0)) || { log "    no requests completed; the load generator said:"; tail -3 "$SCRATCH/load.out" >&2; }
  ((err == 0)) || log "    $err errors or non-200 answers"
  awk -v OFS='\t' -v row="$name" -v rep="$rep" -v req="$req" -v err="$err" -v sec="$sec" \
    -v t="$((c1 - c0))" -v busy="$((b1 - b0))" -v total="$((t1 - t0))" -v irq="$((q1 - q0))" \
    -v steal="$((s1 - s0))" -v hz="$HZ" -v rss="$rss_kb" '
    BEGIN {
      rps = per = pct = foreign = irqp = stealp = "-"
      if (sec > 0) rps = sprintf("%.0f", req / sec)
      if (req > 0) per = sprintf("%.2f", 1e6 * t / hz / req)
      if (total > 0) {
        pct = sprintf("%.1f", 100 * t / total)
        f = 100 * (busy - t) / total
        foreign = sprintf("%.1f", f < 0 ? 0 : f)
        irqp = sprintf("%.1f", 100 * irq / total)
        stealp = sprintf("%.1f", 100 * steal / total)
      }
      print row, rep, req, err, sec, rps, sprintf("%.0f", 1e3 * t / hz), per, pct, rss, foreign, irqp, stealp
    }' >>"$RUNS"
  tail -1 "$RUNS" | awk -F'\t' '{ printf "    %-8s r%s requests=%s errors=%s rps=%s cpu=%sms (%s%% of CPU) %sus/req rss=%skB foreign=%s%% (softirq %s%%, steal %s%%)\n",
    $1, $2, $3, $4, $6, $7, $9, $8, $10, $11, $12, $13 }' >&2
}

# --- summary and table ----------------------------------------------------------
summarize() { # runs.tsv -> summary.tsv: the median of each figure per row
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
      return c ~ /^(requests|errors|rps|cpu_ms|rss_kb)$/ ? sprintf("%.0f", x) : c ~ /_pct$/ ? sprintf("%.1f", x) : sprintf("%.2f", x)
    }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      k = $col["row"]
      if (!(k in n)) { order[++nk] = k; n[k] = 0 }
      n[k]++
      for (c in col) v[k, c, n[k]] = $col[c]
    }
    END {
      nm = split("requests errors rps cpu_ms us_per_req cpu_pct rss_kb foreign_pct softirq_pct steal_pct", m, " ")
      printf "row\truns"
      for (i = 1; i <= nm; i++) printf "\t%s", m[i]
      print ""
      for (o = 1; o <= nk; o++) {
        printf "%s\t%d", order[o], n[order[o]]
        for (i = 1; i <= nm; i++) printf "\t%s", median(order[o], m[i])
        print ""
      }
    }' "$RUNS" >"$OUT/summary.tsv"
}

table() { # summary.tsv -> the markdown table, on stdout
  awk -F'\t' '
    function ratio(a, b) { return a == "-" || b == "-" || a == "" || b == "" || b + 0 <= 0 ? "-" : sprintf("%.2fx", a / b) }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { rows[++nr] = $col["row"]; for (c in col) val[$col["row"], c] = $col[c] }
    END {
      print "| row | requests | errors | requests/s | CPU ms | CPU µs/request | CPU % | vs queue-h2 | vs caddy-h3 | vs floor-h3 | vs relay-h3 | RSS MiB | foreign CPU % |"
      print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
      for (i = 1; i <= nr; i++) {
        r = rows[i]; u = val[r, "us_per_req"]
        vc = vf = vr = "-"
        if (r == "queue-h3") { vc = ratio(u, val["caddy-h3", "us_per_req"]); vf = ratio(u, val["floor-h3", "us_per_req"]); vr = ratio(u, val["relay-h3", "us_per_req"]) }
        rss = val[r, "rss_kb"] == "-" ? "-" : sprintf("%.1f", val[r, "rss_kb"] / 1024)
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r, val[r, "requests"],
          val[r, "errors"], val[r, "rps"], val[r, "cpu_ms"], u, val[r, "cpu_pct"],
          ratio(u, val["queue-h2", "us_per_req"]), vc, vf, vr, rss, val[r, "foreign_pct"]
      }
    }' "$OUT/summary.tsv"
}

# --- main ----------------------------------------------------------------------
CERT=$SCRATCH/cert.pem KEY=$SCRATCH/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext 'subjectAltName=IP:127.0.0.1,DNS:localhost' \
  -keyout "$KEY" -out "$CERT" >"$OUT/logs/openssl.log" 2>&1 || die "openssl could not make a certificate (see $OUT/logs/openssl.log)"

busy=$(
  a=$(cpu_stat)
  sleep 1
  b=$(cpu_stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.0f", (y[2] > x[2] ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0) }'
)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc --all) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(uname -sr)"
  echo "go: $(go version 2>/dev/null || echo -)"
  echo "queue: $("$QUEUE_BIN" --version 2>&1 | head -1)"
  echo "caddy: $("$CADDY" version 2>/dev/null | head -1 || echo -)"
  echo "h2load: $(h2load --version 2>/dev/null || echo -)"
  echo "knobs: DURATION=$DURATION REPEATS=$REPEATS WARMUP=$WARMUP PROXY_CPU=$PROXY_CPU LOAD_CPU=$LOAD_CPU load: $CONNS connections x $STREAMS streams"
  echo "network namespace: $([[ -n "${H3_IN_NETNS:-}" ]] && echo "private, lo only" || echo host)"
  echo "before the run: loadavg $(cut -d' ' -f1-3 /proc/loadavg), CPU $PROXY_CPU ${busy}% busy"
  echo "rows: ${ROWS[*]}"
} >"$OUT/meta.txt"
cat "$OUT/meta.txt" >&2
((busy < 10)) || log "warning: CPU $PROXY_CPU is already ${busy}% busy; figures will be noisy"

begin=$SECONDS
FAILED=() # ROW.SET of the runs that did not start or did not answer
! port_open "$UPSTREAM" || die "$UPSTREAM is already in use"
# shellcheck disable=SC2016
start upstream "$LOAD_CPU" 'exec "$H3_BIN/upstream" -listen "$BENCH_UPSTREAM"'
UPSTREAM_PID=$PID
for ((i = 0; i < 150; i++)); do
  [[ -d /proc/$UPSTREAM_PID ]] || break
  [[ $(http_status "$UPSTREAM" /1k) == 200 ]] && break
  sleep 0.1
done
[[ $(http_status "$UPSTREAM" /1k) == 200 ]] || die "the upstream did not answer (see $OUT/logs/upstream.log)"

for ((rep = 1; rep <= REPEATS; rep++)); do
  log "== set $rep of $REPEATS: ${ROWS[*]}; servers on CPU $PROXY_CPU, load and upstream on CPU $LOAD_CPU"
  for r in "${ROWS[@]}"; do
    [[ -d /proc/$UPSTREAM_PID ]] || die "the upstream died (see $OUT/logs/upstream.log)"
    log "  $r"
    run_row "$r" "$rep" || { log "    $r failed; going on with the next row"; FAILED+=("$r.$rep"); }
  done
done
stop "$UPSTREAM_PID"
echo "took: $((SECONDS - begin)) s" >>"$OUT/meta.txt"

summarize
table >"$OUT/table.md"
echo >&2
cat "$OUT/table.md"
echo
echo "Medians of $REPEATS run(s) of ${DURATION} s per row; CPU is the server's process tree's, on CPU $PROXY_CPU;"
echo "vs: CPU µs/request over the other row's; foreign CPU %: CPU $PROXY_CPU busy but not with the server."
((${#FAILED[@]} == 0)) || echo "not run (see the log above and $OUT/logs): ${FAILED[*]}"
echo "results: $OUT"
# With RECORD=1: the medians, one row per row of the table, into bench/results/h3.tsv.
tail -n +2 "$OUT/summary.tsv" | awk -v run="$([[ -n "${QUICK:-}" ]] && echo quick || echo full)" '{ print run "\t" $0 }' |
  record h3 $'run\t'"$(head -1 "$OUT/summary.tsv")"
((${#FAILED[@]} == 0)) || exit 1
