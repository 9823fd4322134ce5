# peers.sh - the nginx and HAProxy peers of the benchmarks, sourced by
# bench/compare.sh, bench/sidecar.sh and bench/h3.sh so that they run the
# same configuration of each (bench/README.md describes them), and the
# process helpers the three share.
#
# nginx_conf DIR and haproxy_conf DIR write the peer's configuration into DIR
# (a scratch folder that also holds its pid, logs and temporary files) from
# these variables of the caller:
#
#   LISTEN    host:port the clients connect to
#   H2C       host:port of nginx's h2c listener (nginx 1.22 serves h2c only on
#             a "listen ... http2" port of its own); empty = none
#   UPSTREAM  the origin's host:port
#   NOFILE    the file descriptor limit the peer runs with
#
# NGINX_CMD and HAPROXY_CMD start the peer in the foreground. They run under
# `bash -c` with BENCH_TMP (the DIR above) exported, from that folder.
#
# tree PID lists a process and its descendants; stop_tree PID ends them
# (TERM, then KILL after 5 s) and reaps PID, a child of the caller's shell;
# stop PID does so and drops PID from the caller's STARTED array. ticks PID
# and rss PID are the user+system clock ticks and the resident kB of a
# process tree.
# http_status ADDR PATH is the status of one GET (or nothing); port_open ADDR
# reports whether something accepts on ADDR.

# shellcheck disable=SC2016 # expanded by the bash -c that runs the command
NGINX_CMD='exec /usr/sbin/nginx -e "$BENCH_TMP/error.log" -p "$BENCH_TMP" -c "$BENCH_TMP/nginx.conf"'
# shellcheck disable=SC2016
HAPROXY_CMD='exec /usr/sbin/haproxy -db -f "$BENCH_TMP/haproxy.cfg"'

tree() { # PID: it and its descendants, one a line
  local c
  [[ -n "${1:-}" && -d /proc/$1 ]] || return 0
  echo "$1"
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done
}

http_status() { # host:port path: the status code of one GET, or nothing
  (
    exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
    printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$2" >&3
    read -r -t 2 _ code _ <&3 && echo "$code"
  ) 2>/dev/null || true
}

port_open() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

stop_tree() { # PID: TERM its tree, KILL what is left after 5 s, reap it
  local pids p i alive
  [[ -n "${1:-}" ]] || return 0
  pids=$(tree "$1")
  if [[ -n "$pids" ]]; then
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      alive=0
      for p in $pids; do
        [[ -d /proc/$p && $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]] && alive=1
      done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL $pids 2>/dev/null || true
  fi
  wait "$1" 2>/dev/null || true
}

stop() { # PID: stop_tree, then drop it from the caller's STARTED
  local p keep=()
  [[ -n "${1:-}" ]] || return 0
  stop_tree "$1"
  for p in "${STARTED[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
  STARTED=("${keep[@]}")
}

ticks() { # PID: user+system clock ticks of its tree
  local t=0 p line f
  for p in $(tree "${1:-}"); do
    line=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    read -ra f <<<"${line##*) }"
    t=$((t + f[11] + f[12]))
  done
  echo "$t"
}

rss() { # PID: resident kB of its tree
  local r=0 p v
  for p in $(tree "${1:-}"); do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
    r=$((r + ${v:-0}))
  done
  echo "$r"
}

nginx_conf() { # dir: one worker, a keep-alive upstream pool, no logs, all in dir
  local user=""
  ((EUID == 0)) && user="user root;"
  cat >"$1/nginx.conf" <<EOF_NGINX
$user
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections $((NOFILE / 2)); }
http {
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  keepalive_timeout 60s;
  keepalive_requests 1000000;
  client_body_buffer_size 32k;
  upstream origin {
    server $UPSTREAM;
    keepalive 1024;
    keepalive_requests 1000000;
  }
  server {
    listen $LISTEN backlog=4096;
    ${H2C:+listen $H2C http2 backlog=4096;}
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffer_size 16k;
      proxy_buffers 8 16k;
      proxy_max_temp_file_size 0;
    }
  }
}
EOF_NGINX
}

haproxy_conf() { # dir: one thread, server connections reused, no logs
  cat >"$1/haproxy.cfg" <<EOF_HAPROXY
global
  nbthread 1
  maxconn $((NOFILE / 2 - 100))
defaults
  mode http
  option http-keep-alive
  http-reuse always
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
frontend clients
  bind $LISTEN
  default_backend origin
backend origin
  server upstream $UPSTREAM
EOF_HAPROXY
}
