#!/usr/bin/env bash
# hostile.sh - what a hostile client costs queue, nginx and HAProxy: each attack alone
# against each proxy in front of the same upstream, the proxy's CPU (its process tree's
# threads' time on CPU, from /proc/PID/task/*/schedstat) around it, and what the attacker saw (bench/hostile and
# bench/chunks print it: how long the connection stayed open, the GOAWAY, the status).
#
#   bench/hostile.sh                         all proxies, all attacks
#   PEERS="haproxy queue" ATTACKS=hpack-bomb bench/hostile.sh
#   PEERS="queue queue-h2c" ATTACKS=rapid-reset bench/hostile.sh
#   QUEUE_BIN=/path/to/queue bench/hostile.sh
#
# Attacks: chunks-post (one POST of 8,000,000 one-byte chunks), chunks-response (a GET
# whose response from the upstream is 8,000,000 one-byte chunks), hpack-bomb (a 4,000-byte
# field indexed once, then referenced 20 times in header block after header block, for at
# most 10 s), bad-first-frame (the preface, then a frame header that is not SETTINGS and a
# payload that never completes; the attacker keeps writing after a GOAWAY; at most 10 s),
# rapid-reset (50,000 streams opened and reset at once, 50 a write, paced by PINGs; at most
# 60 s). Peer queue-h2c is queue with an h2c upstream (--upstream-protocol h2c), the same
# upstream: rapid-reset's two queue rows compare the h2c client with the HTTP/1.1 one.
# The proxy runs on CPU $PROXY_CPU (0), the attacker and the upstream on $LOAD_CPU (1).
# Prints one row per proxy and attack; writes them to $OUT/hostile.tsv too, and with
# RECORD=1 appends them to bench/results/hostile.tsv (record.sh).
# Needs: go, nginx, haproxy, taskset. Every process it starts is stopped by PID on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/peers.sh
source "$HERE/peers.sh"
# shellcheck source=bench/record.sh
source "$HERE/record.sh"
PEERS=${PEERS:-"haproxy nginx queue queue-h2c"}
ATTACKS=${ATTACKS:-"chunks-post chunks-response hpack-bomb bad-first-frame rapid-reset"}
PROXY_CPU=${PROXY_CPU:-0} LOAD_CPU=${LOAD_CPU:-1}
OUT=${OUT:-${TMPDIR:-/tmp}/queue-hostile/$(date +%Y%m%d-%H%M%S)}
NOFILE=$(ulimit -n)
UPSTREAM=127.0.0.1:18410 LISTEN=127.0.0.1:18411 H2C=127.0.0.1:18412

mkdir -p "$OUT/bin"
STARTED=()
cleanup() { for p in "${STARTED[@]}"; do stop_tree "$p"; done; }
trap cleanup EXIT

for prog in upstream hostile chunks; do
  (cd "$ROOT" && go build -o "$OUT/bin/$prog" "./bench/$prog")
done
if [[ -z "${QUEUE_BIN:-}" ]]; then
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/bin/queue" ./cmd/queue)
  QUEUE_BIN=$OUT/bin/queue
fi

cpu_ns() { # PIDs...: nanoseconds on CPU of the threads of the processes and their descendants
  # (schedstat: the scheduler's own count, not 10 ms ticks; a thread that has exited
  # is not counted, and none of the proxies' threads exit during an attack)
  local s=0 p t
  for p in $(for q in "$@"; do tree "$q"; done); do
    for t in /proc/"$p"/task/*/schedstat; do
      s=$((s + $(awk '{print $1}' "$t" 2>/dev/null || echo 0)))
    done
  done
  echo "$s"
}

wait_port() { local i; for ((i = 0; i < 100; i++)); do port_open "$1" && return 0; sleep 0.05; done; return 1; }

taskset -c "$LOAD_CPU" "$OUT/bin/upstream" -listen "$UPSTREAM" >"$OUT/upstream.log" 2>&1 &
STARTED+=($!)
wait_port "$UPSTREAM" || { echo "upstream did not start" >&2; exit 1; }

printf 'proxy\tattack\tcpu_ms\tresult\n' | tee "$OUT/hostile.tsv"
for peer in $PEERS; do
  tmp=$OUT/$peer
  mkdir -p "$tmp"
  h2c=$LISTEN
  case $peer in
    haproxy) haproxy_conf "$tmp"; cmd=$HAPROXY_CMD ;;
    nginx) nginx_conf "$tmp"; cmd=$NGINX_CMD; h2c=$H2C ;;
    queue | queue-h2c)
      cmd='exec "$QUEUE_BIN" --upstream "$UPSTREAM" --listen "$LISTEN" --admin-listen 127.0.0.1:18413
        --stats-listen 127.0.0.1:18414 --metrics-listen 127.0.0.1:18415 --drain-quiet-period 0s'
      [[ $peer == queue-h2c ]] && cmd+=' --upstream-protocol h2c'
      cmd=${cmd//$'\n'/ } ;;
    *) echo "unknown peer $peer" >&2; exit 2 ;;
  esac
  for attack in $ATTACKS; do
    # A fresh proxy for each attack, so that one attack's aftermath is not the next one's cost.
    (
      export BENCH_TMP=$tmp QUEUE_BIN UPSTREAM LISTEN
      cd "$tmp"
      exec taskset -c "$PROXY_CPU" bash -c "$cmd"
    ) >>"$tmp/proxy.log" 2>&1 &
    pid=$!
    STARTED+=("$pid")
    wait_port "$LISTEN" || { echo "$peer did not start" >&2; exit 1; }
    sleep 0.5
    before=$(cpu_ns "$pid")
    case $attack in
      chunks-post) res=$(taskset -c "$LOAD_CPU" "$OUT/bin/chunks" -target "$LISTEN" -n 8000000 -size 1 -path /discard 2>&1 || true) ;;
      chunks-response) res=$(taskset -c "$LOAD_CPU" "$OUT/bin/chunks" -target "$LISTEN" -get -path '/chunks?n=8000000&size=1' 2>&1 || true) ;;
      hpack-bomb | bad-first-frame) res=$(taskset -c "$LOAD_CPU" "$OUT/bin/hostile" -target "$h2c" -attack "$attack" -timeout 10s 2>&1 || true) ;;
      rapid-reset) res=$(taskset -c "$LOAD_CPU" "$OUT/bin/hostile" -target "$h2c" -attack rapid-reset -max-blocks 50000 -timeout 60s 2>&1 || true) ;;
      *) echo "unknown attack $attack" >&2; exit 2 ;;
    esac
    sleep 0.2 # what the proxy does after the attacker's last byte counts too
    after=$(cpu_ns "$pid")
    printf '%s\t%s\t%d\t%s\n' "$peer" "$attack" $(((after - before) / 1000000)) "${res//$'\n'/ }" | tee -a "$OUT/hostile.tsv"
    stop_tree "$pid"
  done
done
tail -n +2 "$OUT/hostile.tsv" | record hostile "$(head -1 "$OUT/hostile.tsv")"
