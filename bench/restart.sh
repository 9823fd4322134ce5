#!/usr/bin/env bash
# restart.sh - the upstream restart run: h2load (h2c, -c16 -m32) through queue for 14 to 20 s
# while the upstream is killed at 8 s and started again 2 s later; 5 s after the clients
# leave, queue's open descriptors are compared with those it had before the load, and it
# gets SIGTERM, which it must obey within a second. A try is clean when no descriptor is
# left over and queue exits 0 in time. One row per try, then how many were clean; exits 1
# if any was not.
#
#   bench/restart.sh                       20 tries, queue built from this checkout
#   TRIES=5 QUEUE_BIN=/path/to/queue bench/restart.sh
#   RECORD=1 bench/restart.sh              also append the rows to bench/results/restart.tsv
#
# Needs: go, h2load (nghttp2-client), curl. Every process it starts is stopped by PID.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=bench/record.sh
source "$HERE/record.sh"
TRIES=${TRIES:-20}
OUT=${OUT:-${TMPDIR:-/tmp}/queue-restart/$(date +%Y%m%d-%H%M%S)}
P=${PORT_BASE:-18520}
UP=127.0.0.1:$P LISTEN=127.0.0.1:$((P + 1))
mkdir -p "$OUT"

(cd "$ROOT" && go build -o "$OUT/upstream" ./bench/upstream)
if [[ -z "${QUEUE_BIN:-}" ]]; then
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$OUT/queue" ./cmd/queue)
  QUEUE_BIN=$OUT/queue
fi

up="" q="" load=""
cleanup() { for p in $load $q $up; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

clean=0
printf 'try\tload_s\trequests\tfailed\tfds_before\tfds_after\texit_ms\tstatus\tclean\n' | tee "$OUT/restart.tsv"
for ((i = 1; i <= TRIES; i++)); do
  d=$((14 + (i - 1) % 7))
  "$OUT/upstream" -listen "$UP" >/dev/null 2>&1 &
  up=$!
  "$QUEUE_BIN" --upstream "$UP" --listen "$LISTEN" --admin-listen 127.0.0.1:$((P + 2)) \
    --stats-listen 127.0.0.1:$((P + 3)) --metrics-listen 127.0.0.1:$((P + 4)) \
    --drain-quiet-period 0s >"$OUT/queue.$i.log" 2>&1 &
  q=$!
  for ((w = 0; w < 100; w++)); do curl -s -o /dev/null "http://$LISTEN/1k" && break; sleep 0.05; done
  sleep 2 # the readiness request's upstream connection retires (--upstream-idle-timeout)
  before=$(fds "$q")
  timeout $((d + 30)) h2load -c16 -m32 -D "$d" "http://$LISTEN/1k" >"$OUT/h2load.$i.out" 2>&1 &
  load=$!
  sleep 8
  kill -9 "$up"
  wait "$up" 2>/dev/null || true
  sleep 2
  "$OUT/upstream" -listen "$UP" >/dev/null 2>&1 &
  up=$!
  wait "$load" || true
  load=""
  sleep 5
  after=$(fds "$q")
  start=$(date +%s%N)
  kill -TERM "$q"
  status=""
  for ((w = 0; w < 1000; w++)); do
    if ! kill -0 "$q" 2>/dev/null; then
      wait "$q" && status=0 || status=$?
      break
    fi
    sleep 0.001
  done
  exit_ms=$((($(date +%s%N) - start) / 1000000))
  if [[ -z "$status" ]]; then
    status=running
    kill -9 "$q" 2>/dev/null || true
    wait "$q" 2>/dev/null || true
  fi
  q=""
  kill "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
  up=""
  read -r total failed < <(awk '/^requests:/ { print $2, $10 }' "$OUT/h2load.$i.out")
  ok=no
  if [[ "$status" == 0 && $after -le $before && $exit_ms -lt 1000 ]]; then
    ok=yes
    clean=$((clean + 1))
  fi
  printf '%d\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n' "$i" "$d" "${total:-?}" "${failed:-?}" "$before" "$after" "$exit_ms" "$status" "$ok" |
    tee -a "$OUT/restart.tsv"
done
echo "clean: $clean of $TRIES"
tail -n +2 "$OUT/restart.tsv" | record restart "$(head -1 "$OUT/restart.tsv")"
((clean == TRIES))
