# bench/lib.sh: process handling and measurement helpers for compare.sh,
# openloop.sh, sweep.sh, authz.sh, tracing.sh, stores.sh and signed.sh.
# Sourced, never run. Callers set strict mode.
#
# Every process binds 127.0.0.1 only and is started in a session of its own
# (setsid), so it is stopped, with any children (nginx workers), by its own
# PID, never by name. Everything a run writes goes under $RUN_DIR.
#
# Environment (all optional):
#   PORT_BASE=28100   ports PORT_BASE .. PORT_BASE+9 must be free (compare.sh's tracing target: up to +12)
#   NODRAIN=1         also run fenceproxy-nodrain (the same binary with FENCE_DRAIN=off); 0 leaves it out
#   RUN_DIR           where logs, configs and raw results go (default: a new /tmp dir, removed
#                     at exit unless KEEP_RUN=1 or the caller set RUN_DIR)
#   FENCEPROXY_BIN    use this fenceproxy binary instead of building one from the working tree
#   BENCH_BIN         directory holding already built bench tools (set by run-all.sh)
#   WRK_LUA           the wrk script measure and warm run (default bench/wrk/put.lua; signed.sh sets it)
#   GO=go

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
: "${GO:=go}"
: "${PORT_BASE:=28100}"
PORT_ORIGIN=$PORT_BASE
PORT_GOPLAIN=$((PORT_BASE + 1))
PORT_NGINX=$((PORT_BASE + 2))
PORT_NGINXLUA=$((PORT_BASE + 3))
PORT_FENCEPROXY=$((PORT_BASE + 4))
PORT_ADMIN=$((PORT_BASE + 5))
PORT_REDIS=$((PORT_BASE + 6))
PORT_NODRAIN=$((PORT_BASE + 7))
PORT_NODRAIN_ADMIN=$((PORT_BASE + 8))
# compare.sh's fenceproxy-trace-unsampled and the OTLP sink it exports to (tracing.sh maps +10.. its own way)
PORT_TRACE=$((PORT_BASE + 10))
PORT_TRACE_ADMIN=$((PORT_BASE + 11))
PORT_OTLP_SINK=$((PORT_BASE + 12))
LUA_MODULE=/usr/lib/nginx/modules/ngx_http_lua_module.so
CLK_TCK=$(getconf CLK_TCK)
NCPU=$(nproc)

if [[ -z ${RUN_DIR:-} ]]; then
  RUN_DIR=$(mktemp -d /tmp/fenceproxy-bench.XXXXXX)
  RUN_DIR_OWNED=1
else
  mkdir -p "$RUN_DIR"
  RUN_DIR_OWNED=0
fi
chmod 755 "$RUN_DIR" # nginx workers run as an unprivileged user and must reach their files

declare -A PID_OF=() # component -> pid (also its session and process group id)
STARTED=()           # components in start order

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

# port_open PORT: something accepts connections on 127.0.0.1:PORT
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

nginx_lua_available() { [[ -f $LUA_MODULE ]]; }

# select_targets: SETTINGS from REDIS_DURABLE (unset: both, 0: none, 1:
# durable), TARGETS in the order they run (go-plain, nginx, nginx-lua when its
# module is installed and NGINX_LUA is not 0, fenceproxy, fenceproxy-nodrain
# unless NODRAIN is 0), LUA=1 when nginx-lua is among them, NODRAIN=1 when
# fenceproxy-nodrain is.
select_targets() {
  case ${REDIS_DURABLE:-both} in
    both) SETTINGS=(none durable) ;;
    0) SETTINGS=(none) ;;
    1) SETTINGS=(durable) ;;
    *) die "REDIS_DURABLE must be 0, 1 or unset (both)" ;;
  esac
  TARGETS=(go-plain nginx)
  LUA=0
  if [[ ${NGINX_LUA:-auto} != 0 ]] && nginx_lua_available; then
    LUA=1
    TARGETS+=(nginx-lua)
  elif [[ ${NGINX_LUA:-auto} != 0 ]]; then
    say "nginx-lua skipped: $LUA_MODULE missing (apt-get install -y libnginx-mod-http-lua)"
  fi
  TARGETS+=(fenceproxy)
  if [[ ${NODRAIN:-1} != 0 ]]; then
    NODRAIN=1
    TARGETS+=(fenceproxy-nodrain)
  else
    NODRAIN=0
  fi
}

# start_stack SETTING: a fresh Redis with SETTING and, in front of one origin,
# every target select_targets chose.
start_stack() {
  start_redis "$1"
  start_origin
  start_goplain
  start_nginx
  ((LUA == 0)) || start_nginxlua
  start_fenceproxy
  ((${NODRAIN:-0} == 0)) || start_fenceproxy_nodrain
}

check_tools() {
  local t missing=()
  for t in wrk redis-server redis-cli nginx curl "$GO" setsid pgrep timeout; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  ((${#missing[@]} == 0)) || die "missing tools: ${missing[*]} (Debian: apt-get install -y wrk redis-server nginx curl)"
  ports_free "$PORT_BASE" $((PORT_BASE + 9))
}

# ports_free FIRST LAST: fail unless every port FIRST..LAST is free
ports_free() {
  local p
  for p in $(seq "$1" "$2"); do
    ! port_open "$p" || die "port $p is in use; choose another PORT_BASE"
  done
}

# run_settings: the defaults of the interleaved runs (tracing.sh, stores.sh, signed.sh):
# ROUNDS=3 DURATION=8s WARMUP=2 (whole seconds; a trailing s is dropped) CONNS=32, and
# OUT_DIR (default: the run directory), created
run_settings() {
  : "${ROUNDS:=3}" "${DURATION:=8s}" "${WARMUP:=2}" "${CONNS:=32}"
  WARMUP=${WARMUP%s}
  : "${OUT_DIR:=$RUN_DIR}"
  mkdir -p "$OUT_DIR"
}

# copy_fn NAME NEWNAME: define NEWNAME with NAME's body
copy_fn() { eval "$2() $(declare -f "$1" | tail -n +2)"; }

# extend_targets: keep lib.sh's per-target lookups (port_of, admin_port_of, key_prefix_of,
# explain) as lib_port_of and so on, for a script that adds targets of its own to override
# them and fall back on lib_*
extend_targets() {
  local fn
  for fn in port_of admin_port_of key_prefix_of explain; do copy_fn "$fn" "lib_$fn"; done
}

# explain_added TARGET LOG_OFFSET DECISIONS WRK_OUT: explain for a target a script added
# (lib.sh's explain knows the logs of its own targets only; an added one logs to $RUN_DIR/TARGET.log)
explain_added() {
  say "$1 answered non-2xx or failed requests in this run; decisions: $3"
  grep -E 'Socket errors|Non-2xx' "$4" | sed 's/^/    wrk: /' >&2 || true
  tail -c +$(($2 + 1)) "$RUN_DIR/$1.log" | grep -v '"msg":"listening"' | head -n 8 | sed 's/^/    log: /' >&2 || true
}

# AWK_ROUNDS: awk functions for a summary of rows kept as a[target, round], rounds 1..R:
# med(a, t), the median of a[t, 1..R]; ratio(a, b), the median of the per-round ratios
# rps[a, i] / rps[b, i] (each round runs every target back to back) as "M[min-max]"
AWK_ROUNDS='
  function med(a, t,   n, i, j, v, x) { n = 0; for (i = 1; i <= R; i++) v[++n] = a[t, i]
    for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  function ratio(a, b,   i, r, lo, hi, q) { lo = 1e9; hi = 0
    for (i = 1; i <= R; i++) { r = rps[a, i] / rps[b, i]; q["x", i] = r; if (r < lo) lo = r; if (r > hi) hi = r }
    return sprintf("%.2f[%.2f-%.2f]", med(q, "x"), lo, hi) }
'

# build: fenceproxy from the working tree (unless FENCEPROXY_BIN is given) and
# the bench tools (unless BENCH_BIN holds them).
build() {
  if [[ -z ${BENCH_BIN:-} ]]; then
    BENCH_BIN=$RUN_DIR/bin
    mkdir -p "$BENCH_BIN"
    say "building bench tools"
    (cd "$BENCH_DIR" && "$GO" build -o "$BENCH_BIN/" ./cmd/...)
  fi
  if [[ -z ${FENCEPROXY_BIN:-} ]]; then
    say "building fenceproxy from $REPO_DIR (with make build's flags)"
    local version
    version=$(git -C "$REPO_DIR" describe --tags --always --dirty 2>/dev/null || echo dev)
    (cd "$REPO_DIR" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w -X main.version=$version" \
      -o "$RUN_DIR/fenceproxy" ./cmd/fenceproxy)
    FENCEPROXY_BIN=$RUN_DIR/fenceproxy
  fi
}

# launch NAME CMD...: run CMD in its own session, output to $RUN_DIR/NAME.log
launch() {
  local name=$1
  shift
  setsid "$@" >"$RUN_DIR/$name.log" 2>&1 </dev/null &
  PID_OF[$name]=$!
  STARTED+=("$name")
}

# alive PID: the process exists and is not a zombie
alive() {
  local st
  st=$(sed -e 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z ]]
}

# await NAME PORT: wait (<= 20 s) until NAME accepts on PORT; fail with its log if it died
await() {
  local name=$1 port=$2 pid=${PID_OF[$1]} i
  for ((i = 0; i < 200; i++)); do
    if ! alive "$pid"; then
      tail -n 20 "$RUN_DIR/$name.log" >&2 || true
      die "$name exited during start (log above: $RUN_DIR/$name.log)"
    fi
    if port_open "$port"; then
      # setsid must not have forked: the PID we hold leads its own session
      [[ $(sed -e 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f4) == "$pid" ]] || die "$name: pid $pid is not a session leader"
      return 0
    fi
    sleep 0.1
  done
  die "$name did not open port $port within 20 s (log: $RUN_DIR/$name.log)"
}

# session_pids PID: every live process in the session PID leads
session_pids() { pgrep -s "$1" || true; }

# stop NAME: SIGTERM to its process group, SIGKILL after 5 s
stop() {
  local name=$1 pid=${PID_OF[$1]:-} i
  [[ -n $pid ]] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    [[ -z $(session_pids "$pid") ]] && break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "PID_OF[$name]"
}

stop_all() {
  local i
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop "${STARTED[$i]}"; done
  STARTED=()
}

cleanup() {
  stop_all
  if [[ $RUN_DIR_OWNED == 1 && ${KEEP_RUN:-0} != 1 ]]; then rm -rf "$RUN_DIR"; else say "run directory: $RUN_DIR"; fi
}

# redis_args SETTING: the redis-server persistence flags of a setting
redis_args() {
  case $1 in
    none) echo "--appendonly no" ;;
    durable) echo "--appendonly yes --appendfsync always" ;;
    *) die "unknown Redis setting $1 (none or durable)" ;;
  esac
}

# start_redis SETTING: a fresh redis-server (empty data directory)
start_redis() {
  local dir=$RUN_DIR/redis-$1
  rm -rf "$dir" && mkdir -p "$dir"
  # shellcheck disable=SC2046
  launch redis redis-server --bind 127.0.0.1 --port "$PORT_REDIS" --protected-mode yes \
    --save '' --dir "$dir" --daemonize no $(redis_args "$1")
  await redis "$PORT_REDIS"
  [[ $(redis-cli -p "$PORT_REDIS" ping) == PONG ]] || die "redis does not answer PING"
}

start_origin() {
  launch origin "$BENCH_BIN/origin" -listen "127.0.0.1:$PORT_ORIGIN"
  await origin "$PORT_ORIGIN"
}

start_goplain() {
  launch goplain "$BENCH_BIN/goplain" -listen "127.0.0.1:$PORT_GOPLAIN" -upstream "http://127.0.0.1:$PORT_ORIGIN"
  await goplain "$PORT_GOPLAIN"
}

# start_fenceproxy [NAME PORT ADMIN_PORT KEY_PREFIX ENV...]: at
# FENCE_LOG_LEVEL=info every refusal is a log line, so a non-2xx answer under
# load can be explained from the log. Without arguments: the target
# fenceproxy, with the defaults (drain barrier on).
start_fenceproxy() {
  local name=${1:-fenceproxy} port=${2:-$PORT_FENCEPROXY} admin=${3:-$PORT_ADMIN} prefix=${4:-fence:}
  (($# < 4)) || shift 4
  printf 'routes:\n  - name: bench\n    path: /r/{key}\n    resource: r/{key}\n' >"$RUN_DIR/routes.yaml"
  launch "$name" env -i PATH="$PATH" \
    FENCE_LISTEN_ADDR="127.0.0.1:$port" FENCE_ADMIN_ADDR="127.0.0.1:$admin" \
    FENCE_UPSTREAM_URL="http://127.0.0.1:$PORT_ORIGIN" FENCE_REDIS_URL="redis://127.0.0.1:$PORT_REDIS/0" \
    FENCE_ROUTES_FILE="$RUN_DIR/routes.yaml" FENCE_KEY_PREFIX="$prefix" FENCE_LOG_LEVEL=info \
    ${GOMAXPROCS:+GOMAXPROCS=$GOMAXPROCS} "$@" "$FENCEPROXY_BIN"
  await "$name" "$port"
  local i
  for ((i = 0; i < 50; i++)); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$admin/readyz") == 200 ]] && return 0
    sleep 0.1
  done
  die "$name not ready (log: $RUN_DIR/$name.log)"
}

# start_fenceproxy_nodrain: the target fenceproxy-nodrain, the same binary
# with FENCE_DRAIN=off, on its own ports and key prefix (fencend:) in the
# same Redis.
start_fenceproxy_nodrain() {
  start_fenceproxy fenceproxy-nodrain "$PORT_NODRAIN" "$PORT_NODRAIN_ADMIN" fencend: FENCE_DRAIN=off
}

# start_fenceproxy_trace_unsampled: the target fenceproxy-trace-unsampled, the same binary
# with tracing wired (OTEL_TRACES_EXPORTER=otlp to a bench/cmd/otlpsink it starts) and a
# sampler that keeps nothing (OTEL_TRACES_SAMPLER=always_off), its own ports and key prefix
# (fencetr:) in the same Redis: against fenceproxy (tracing off), what tracing costs a
# request that is not sampled. Fails unless the proxy says tracing is on.
start_fenceproxy_trace_unsampled() {
  launch otlpsink "$BENCH_BIN/otlpsink" -listen "127.0.0.1:$PORT_OTLP_SINK"
  await otlpsink "$PORT_OTLP_SINK"
  start_fenceproxy fenceproxy-trace-unsampled "$PORT_TRACE" "$PORT_TRACE_ADMIN" fencetr: \
    OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$PORT_OTLP_SINK" OTEL_TRACES_SAMPLER=always_off
  grep -q '"msg":"tracing on"' "$RUN_DIR/fenceproxy-trace-unsampled.log" ||
    die "fenceproxy-trace-unsampled: tracing is not on (log: $RUN_DIR/fenceproxy-trace-unsampled.log)"
}

# render_nginx TEMPLATE DIR PORT: write DIR/nginx.conf from a template
render_nginx() {
  local tmpl=$1 dir=$2 port=$3
  rm -rf "$dir" && mkdir -p "$dir" && chmod 755 "$dir"
  sed -e "s#@DIR@#$dir#g" -e "s#@LISTEN@#127.0.0.1:$port#g" \
    -e "s#@ORIGIN@#127.0.0.1:$PORT_ORIGIN#g" -e "s#@REDIS_PORT@#$PORT_REDIS#g" \
    "$BENCH_DIR/nginx/$tmpl" >"$dir/nginx.conf"
}

start_nginx() {
  local dir=$RUN_DIR/nginx
  render_nginx nginx.conf.in "$dir" "$PORT_NGINX"
  launch nginx nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf"
  await nginx "$PORT_NGINX"
}

start_nginxlua() {
  local dir=$RUN_DIR/nginxlua
  render_nginx nginx-lua.conf.in "$dir" "$PORT_NGINXLUA"
  cp "$BENCH_DIR/nginx/fence_access.lua" "$dir/" && chmod 644 "$dir/fence_access.lua"
  launch nginxlua nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf"
  await nginxlua "$PORT_NGINXLUA"
}

# port_of TARGET
port_of() {
  case $1 in
    go-plain) echo "$PORT_GOPLAIN" ;;
    nginx) echo "$PORT_NGINX" ;;
    nginx-lua) echo "$PORT_NGINXLUA" ;;
    fenceproxy) echo "$PORT_FENCEPROXY" ;;
    fenceproxy-nodrain) echo "$PORT_NODRAIN" ;;
    fenceproxy-trace-unsampled) echo "$PORT_TRACE" ;;
    *) die "unknown target $1" ;;
  esac
}

# component_of TARGET: the launched component serving TARGET
component_of() {
  case $1 in
    go-plain) echo goplain ;;
    nginx-lua) echo nginxlua ;;
    *) echo "$1" ;;
  esac
}

# admin_port_of TARGET: a fenceproxy target's admin port (metrics)
admin_port_of() {
  case $1 in
    fenceproxy) echo "$PORT_ADMIN" ;;
    fenceproxy-nodrain) echo "$PORT_NODRAIN_ADMIN" ;;
    fenceproxy-trace-unsampled) echo "$PORT_TRACE_ADMIN" ;;
    *) die "$1 has no admin port" ;;
  esac
}

# key_prefix_of TARGET: where a fencing target keeps its marks in Redis
key_prefix_of() {
  case $1 in
    fenceproxy) echo fence: ;;
    fenceproxy-nodrain) echo fencend: ;;
    fenceproxy-trace-unsampled) echo fencetr: ;;
    nginx-lua) echo fencelua: ;;
    *) die "$1 keeps no marks" ;;
  esac
}

# is_fenceproxy TARGET: TARGET is one of the fenceproxy targets
is_fenceproxy() { [[ $1 == fenceproxy || $1 == fenceproxy-nodrain || $1 == fenceproxy-trace-unsampled ]]; }

# uses_redis TARGET
uses_redis() { is_fenceproxy "$1" || [[ $1 == nginx-lua ]]; }

# ticks NAME: CPU clock ticks used so far by every process in NAME's session,
# including reaped children (utime+stime+cutime+cstime of /proc/PID/stat).
ticks() {
  local pid=${PID_OF[$1]:-} p sum=0 v
  [[ -n $pid ]] || {
    echo 0
    return
  }
  for p in $(session_pids "$pid"); do
    v=$(sed -e 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13 + $14 + $15}') || v=0
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# check_fencing TARGET PREFIX: the functional checks that make a measurement
# mean something. Prints "ok" or "FAIL(name:got/want ...)". PREFIX is the
# target's key prefix in Redis, to verify the mark really lives there.
check_fencing() {
  local target=$1 prefix=$2 url path bad=() got
  url="http://127.0.0.1:$(port_of "$target")"
  path="/r/sanity-$$-$RANDOM"
  put() { # put PATH [TOKEN]: HTTP status of one PUT
    local args=(-s -o /dev/null -m 5 -w '%{http_code}' -X PUT --data-binary x)
    [[ $# -lt 2 ]] || args+=(-H "Fencing-Token: $2")
    curl "${args[@]}" "$url$1" || true
  }
  expect() {
    got=$1
    [[ $got == "$2" ]] || bad+=("$3:$got/$2")
  }
  expect "$(put "$path" 18446744073709551614)" 200 fresh
  expect "$(put "$path" 18446744073709551613)" 409 older
  expect "$(put "$path" 18446744073709551614)" 200 equal
  expect "$(put "$path" 18446744073709551615)" 200 max-uint64
  expect "$(put "$path-b" 9007199254740993)" 200 2^53+1
  expect "$(put "$path-b" 9007199254740992)" 409 2^53
  expect "$(put "$path-b" 10000000000000000)" 200 more-digits
  expect "$(put "$path-b")" 428 no-token
  expect "$(put "$path-b" 18446744073709551616)" 400 above-uint64
  got=$(redis-cli -p "$PORT_REDIS" GET "${prefix}r${path#/r}") || got="?"
  [[ $got == 18446744073709551615 ]] || bad+=("mark-in-redis:$got")
  if ((${#bad[@]})); then echo "FAIL(${bad[*]})"; else echo ok; fi
}

# fence_decisions [TARGET]: a fenceproxy target's request counters by
# decision, then its drain barrier's outcomes,
# "admitted=N,stale=N,...,upstream_errors=N,drain_none=N,drain_waited=N,..."
fence_decisions() {
  curl -s -m 5 "http://127.0.0.1:$(admin_port_of "${1:-fenceproxy}")/metrics" | awk '
    /^fenceproxy_requests_total\{/ { match($0, /decision="[a-z_]+"/); d = substr($0, RSTART + 10, RLENGTH - 11); n[d] += $NF; if (!(d in seen)) { seen[d] = 1; order[++k] = d } }
    /^fenceproxy_upstream_errors_total\{/ { up += $NF }
    /^fenceproxy_drain_total\{/ { match($0, /outcome="[a-z_]+"/); o = substr($0, RSTART + 9, RLENGTH - 10); dn[o] += $NF; if (!(o in dseen)) { dseen[o] = 1; dorder[++dk] = o } }
    END { for (i = 1; i <= k; i++) printf "%s=%d,", order[i], n[order[i]]; printf "upstream_errors=%d", up
      for (i = 1; i <= dk; i++) printf ",drain_%s=%d", dorder[i], dn[dorder[i]]; printf "\n" }'
}

# decisions_delta BEFORE AFTER: the non-zero differences, "stale=3,admitted=99"
decisions_delta() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    n = split(a, x, ","); for (i = 1; i <= n; i++) { split(x[i], kv, "="); before[kv[1]] = kv[2] }
    m = split(b, y, ","); out = ""
    for (i = 1; i <= m; i++) { split(y[i], kv, "="); d = kv[2] - before[kv[1]]; if (d != 0) out = out (out == "" ? "" : ",") kv[1] "=" d }
    print (out == "" ? "-" : out) }'
}

RESULT_COLUMNS='setting	round	target	conns	rps	requests	p50_us	p90_us	p99_us	max_us	non2xx	sockerr	statuses	cpu_proxy	cpu_origin	cpu_redis	cpu_wrk	cpu_idle	cpu_steal	wall_s	decisions'

# measure FILE SETTING ROUND TARGET CONNS DURATION: one closed-loop wrk run
# against TARGET; appends one row (RESULT_COLUMNS) to FILE. CPU columns are
# cores used over the run (1.00 = one core busy all the time); cpu_idle and
# cpu_steal are machine-wide, so a neighbour's load shows up as what is left.
measure() {
  local file=$1 setting=$2 round=$3 target=$4 conns=$5 duration=$6
  local port comp threads out secs
  port=$(port_of "$target")
  comp=$(component_of "$target")
  threads=$((conns < 2 ? conns : 2))
  out=$RUN_DIR/wrk.$setting.$target.c$conns.r$round.out
  secs=${duration%s}
  [[ -s $file ]] || printf '%s\n' "$RESULT_COLUMNS" >"$file"

  local p0 o0 r0 s0 t0 dec0="" logsize=0
  if is_fenceproxy "$target"; then
    dec0=$(fence_decisions "$target")
    logsize=$(stat -c %s "$RUN_DIR/$target.log")
  elif [[ $target == nginx-lua ]]; then
    logsize=$(stat -c %s "$RUN_DIR/nginxlua/error.log" 2>/dev/null || echo 0)
  fi
  # Redis's own count of the commands this run sent (scripts' inner commands included)
  ! uses_redis "$target" || redis-cli -p "$PORT_REDIS" CONFIG RESETSTAT >/dev/null
  p0=$(ticks "$comp")
  o0=$(ticks origin)
  r0=$(ticks redis)
  s0=$(head -n 1 /proc/stat)
  t0=$(date +%s%N)
  local TIMEFORMAT='%U %S'
  { time timeout -k 5 $((secs + 60)) wrk -t"$threads" -c"$conns" -d"$duration" --timeout 5s \
    -s "${WRK_LUA:-$BENCH_DIR/wrk/put.lua}" "http://127.0.0.1:$port" -- "$threads" 1000 k >"$out" 2>&1 || true; } 2>"$out.cpu"
  local t1 s1 p1 o1 r1
  t1=$(date +%s%N)
  s1=$(head -n 1 /proc/stat)
  p1=$(ticks "$comp")
  o1=$(ticks origin)
  r1=$(ticks redis)
  local wrkline
  wrkline=$(grep '^WRKOUT ' "$out" || true)
  [[ -n $wrkline ]] || die "wrk against $target produced no result: $(tail -n 3 "$out")"
  if uses_redis "$target"; then
    redis_commands "${file%.tsv}-redis.tsv" "$setting" "$round" "$target" "$(sed -n 's/.* requests=\([0-9]*\) .*/\1/p' <<<"$wrkline")"
  fi
  local decisions=-
  ! is_fenceproxy "$target" || decisions=$(decisions_delta "$dec0" "$(fence_decisions "$target")")
  uses_redis "$target" || r1=$r0
  local row
  row=$(awk -v line="$wrkline" -v set="$setting" -v rnd="$round" -v tg="$target" -v c="$conns" \
    -v p="$((p1 - p0))" -v o="$((o1 - o0))" -v r="$((r1 - r0))" -v k="$CLK_TCK" \
    -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v wcpu="$(cat "$out.cpu")" -v dec="$decisions" 'BEGIN {
      n = split(line, f, " "); for (i = 2; i <= n; i++) { split(f[i], kv, "="); v[kv[1]] = kv[2] }
      w = (t1 - t0) / 1e9; split(s0, a, " "); split(s1, b, " "); split(wcpu, wc, " ")
      idle = (b[5] - a[5] + b[6] - a[6]) / k / w; steal = (b[9] - a[9]) / k / w
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\n",
        set, rnd, tg, c, v["rps"], v["requests"], v["p50_us"], v["p90_us"], v["p99_us"], v["max_us"],
        v["non2xx"], v["sockerr"], v["statuses"], p / k / w, o / k / w, r / k / w, (wc[1] + wc[2]) / w, idle, steal, w, dec }')
  printf '%s\n' "$row" >>"$file"
  local non2xx sockerr
  non2xx=$(cut -f11 <<<"$row")
  sockerr=$(cut -f12 <<<"$row")
  printf '  %-18s c=%-3s round %s: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  non2xx=%s sockerr=%s  cpu %s=%.2f origin=%.2f redis=%.2f wrk=%.2f idle=%.2f\n' \
    "$target" "$conns" "$round" "$(cut -f5 <<<"$row")" "$(awk -v x="$(cut -f7 <<<"$row")" 'BEGIN{print x/1000}')" \
    "$(awk -v x="$(cut -f9 <<<"$row")" 'BEGIN{print x/1000}')" "$non2xx" "$sockerr" "$comp" \
    "$(cut -f14 <<<"$row")" "$(cut -f15 <<<"$row")" "$(cut -f16 <<<"$row")" "$(cut -f17 <<<"$row")" "$(cut -f18 <<<"$row")" >&2
  if ((non2xx + sockerr > 0)); then explain "$target" "$logsize" "$decisions" "$out"; fi
}

# redis_commands FILE SETTING ROUND TARGET REQUESTS: Redis's command counts
# since the last CONFIG RESETSTAT, one row per command (calls, total
# microseconds, calls per request), appended to FILE.
redis_commands() {
  local file=$1 setting=$2 round=$3 target=$4 requests=$5
  [[ -s $file ]] || printf 'setting\tround\ttarget\trequests\tcommand\tcalls\tusec\tcalls_per_req\n' >"$file"
  redis-cli -p "$PORT_REDIS" INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v set="$setting" -v rnd="$round" \
    -v tg="$target" -v req="${requests:-0}" '
    /^cmdstat_/ { cmd = substr($1, 9); calls = $3; usec = $5
      if (cmd ~ /^(config|info)/) next # RESETSTAT, INFO and the start-up checks of the proxies
      printf "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%.3f\n", set, rnd, tg, req, cmd, calls, usec, (req > 0 ? calls / req : 0) }' >>"$file"
}

# explain TARGET LOG_OFFSET DECISIONS WRK_OUT: say why answers were not 2xx
explain() {
  local target=$1 offset=$2 decisions=$3 out=$4 log
  say "$target answered non-2xx or failed requests in this run; what explains them:"
  grep -E 'Socket errors|Non-2xx' "$out" | sed 's/^/    wrk: /' >&2 || true
  case $target in
    fenceproxy | fenceproxy-nodrain | fenceproxy-trace-unsampled) log=$RUN_DIR/$target.log ;;
    nginx-lua) log=$RUN_DIR/nginxlua/error.log ;;
    nginx) log=$RUN_DIR/nginx/error.log ;;
    go-plain) log=$RUN_DIR/goplain.log ;;
  esac
  ! is_fenceproxy "$target" || say "    $target decisions in this run: $decisions"
  if [[ -f $log ]]; then
    tail -c +$((offset + 1)) "$log" | grep -v '"msg":"listening"' | head -n 8 | sed 's/^/    log: /' >&2 || true
    tail -c +$((offset + 1)) "$log" | stale_distances "$out" >&2 || true
    {
      printf '%s non-2xx explanation (%s):\n' "$target" "$out"
      ! is_fenceproxy "$target" || printf '  decisions: %s\n' "$decisions"
      tail -c +$((offset + 1)) "$log" | head -n 50
    } >>"$RUN_DIR/non2xx-explained.log"
  fi
}

# stale_distances WRK_OUT < LOG: for refusals as stale in a log slice, how far
# behind the mark each token was, in the load's own sequence numbers. Tokens
# are <epoch><9-digit counter> (bench/wrk/put.lua), and a wrk thread comes
# back to the same resource every 1000/threads requests, so a distance of
# one such cycle means the request was overtaken in flight by its thread's
# next request to that resource (a stalled worker or connection): a correct
# refusal of an older token, caused by the load, not by the proxy.
stale_distances() {
  local threads
  threads=$(sed -n 's/^ *\([0-9]*\) threads and.*/\1/p' "$1" | head -n 1)
  awk -v cycle=$((1000 / ${threads:-2})) '
    { t = ""; m = ""
      if (match($0, /"token":"[0-9]+"/)) t = substr($0, RSTART + 9, RLENGTH - 10)
      else if (match($0, /token=[0-9]+/)) t = substr($0, RSTART + 6, RLENGTH - 6)
      if (match($0, /"mark":"[0-9]+"/)) m = substr($0, RSTART + 8, RLENGTH - 9)
      else if (match($0, /mark=[0-9]+/)) m = substr($0, RSTART + 5, RLENGTH - 5)
      if (t == "" || m == "" || $0 !~ /stale/) next
      n++
      if (length(t) == 19 && length(m) == 19 && substr(t, 1, 10) == substr(m, 1, 10)) d[substr(m, 11) - substr(t, 11)]++
      else other++ }
    END { if (n == 0) exit
      s = ""; for (k in d) s = s sprintf(" %d (x%d)", k, d[k])
      printf "    %d stale refusals; mark minus token, in sequence numbers of one wrk thread:%s%s\n", n, s, (other ? sprintf(", %d across runs or seconds", other) : "")
      printf "    (%d = one cycle of a thread over its resources: the request was overtaken by the next one its thread sent to the same resource; refusing it is fencing doing its job)\n", cycle }'
}

# warm TARGET SECONDS: unmeasured load so every proxy has its connections and caches
warm() {
  local threads=2
  timeout -k 5 $(($2 + 30)) wrk -t"$threads" -c32 -d"$2"s --timeout 5s -s "${WRK_LUA:-$BENCH_DIR/wrk/put.lua}" \
    "http://127.0.0.1:$(port_of "$1")" -- "$threads" 1000 k >"$RUN_DIR/warm.$1.out" 2>&1 || true
}

# machine_info FILE: what the doc needs to say what the numbers were measured on
machine_info() {
  {
    printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'nproc\t%s\n' "$NCPU"
    printf 'cpu\t%s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    printf 'kernel\t%s\n' "$(uname -sr)"
    printf 'mem\t%s\n' "$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    printf 'go\t%s\n' "$("$GO" version | sed 's/^go version //')"
    printf 'redis\t%s\n' "$(redis-server --version | sed 's/^Redis server //')"
    printf 'nginx\t%s\n' "$(nginx -v 2>&1 | sed 's/^nginx version: //')"
    printf 'nginx_lua\t%s\n' "$(dpkg-query -W -f '${Version}' libnginx-mod-http-lua 2>/dev/null || echo absent)"
    printf 'wrk\t%s\n' "$(wrk -v 2>&1 | head -n 1 | awk '{print $2}')"
    printf 'fs\t%s\n' "$(df -T "$RUN_DIR" | awk 'NR == 2 {print $2 " on " $1}')"
    # what one appendfsync-always write waits for: 200 synchronous 4 KiB appends to a new file
    printf 'fsync\t%s\n' "$(dd if=/dev/zero of="$RUN_DIR/.fsync-probe" bs=4k count=200 oflag=dsync 2>&1 |
      awk '/copied/ {for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) printf "%.0f us per 4 KiB O_DSYNC append (mean of 200)", $(i - 1) / 200 * 1e6}')"
    rm -f "$RUN_DIR/.fsync-probe"
    printf 'commit\t%s\n' "$(git -C "$REPO_DIR" describe --always --dirty 2>/dev/null || echo unknown)"
    [[ -z ${FENCEPROXY_BIN:-} ]] || printf 'binary\t%s\n' "sha256 $(sha256sum "$FENCEPROXY_BIN" | cut -c1-16)…"
    printf 'loadavg\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$1"
}
