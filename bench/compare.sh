#!/usr/bin/env bash
# bench/compare.sh: fenceproxy's throughput against a plain Go reverse proxy
# (go-plain), nginx and, when libnginx-mod-http-lua is installed, nginx doing
# the same fencing in Lua (nginx-lua), and against itself with the drain
# barrier off (fenceproxy-nodrain) and, with Redis without persistence, with
# tracing wired but nothing sampled (fenceproxy-trace-unsampled), measured in
# ONE interleaved run per Redis setting, reported as ratios.
#
#   bench/compare.sh                      both Redis settings, ~6 min
#   REDIS_DURABLE=1 bench/compare.sh      only appendonly yes + appendfsync always
#   REDIS_DURABLE=0 bench/compare.sh      only Redis without persistence
#   QUICK=1 bench/compare.sh              smoke test: 1 round of 3 s per target
#
# Per Redis setting: a fresh redis-server, the origin (bench/cmd/origin),
# go-plain (bench/cmd/goplain), nginx, nginx-lua, fenceproxy (built from this
# working tree with a routes file /r/{key} -> r/{key}; the defaults, so the
# drain barrier is on) and fenceproxy-nodrain (the same binary with
# FENCE_DRAIN=off, its own key prefix fencend: in the same Redis) and, at the
# setting none, fenceproxy-trace-unsampled (the same binary with
# OTEL_TRACES_EXPORTER=otlp to bench/cmd/otlpsink and OTEL_TRACES_SAMPLER=always_off,
# key prefix fencetr:); functional checks of every fenceproxy target and
# nginx-lua (a fresh token is admitted,
# an older one refused, exactly past 2^53, the mark is in Redis); a warm-up;
# then ROUNDS rounds, each running wrk against every target in turn (so a
# neighbour's load hits all of them alike). Load: wrk -t2 -cCONNS -dDURATION,
# PUT /r/k0..k999 with a rising 19-digit Fencing-Token and a 20-byte body
# (bench/wrk/put.lua). Redis's command statistics (INFO commandstats) are
# reset before and read after every run of a target that uses Redis, so the
# commands and script runs per admission are that target's own. Then bench/cmd/drainwake
# measures, WAKE_N times, how long after an older request's answer a newer
# request of the same resource (held by the barrier) is answered.
#
# stdout: one "compare[redis=SETTING]:" line per setting (medians and
# ratios) and one "drain-wake[redis=SETTING]:" line; stderr: every run, the
# median tables, and for every run with non-2xx answers the proxy's counters
# and log lines that explain them.
# Raw rows: $OUT_DIR/compare-SETTING.tsv, compare-SETTING-redis.tsv (Redis
# commands per run), drainwake.tsv (OUT_DIR defaults to the run directory).
#
# Env: ROUNDS=3 DURATION=8s WARMUP=2s CONNS=32 REDIS_DURABLE=(both|0|1)
#      NGINX_LUA=auto|0  NODRAIN=1|0  TRACE=1|0 (0: no fenceproxy-trace-unsampled)
#      WAKE_N=100 (0: no drain-wake) WAKE_HOLD=20ms WAKE_GAP=5ms
#      QUICK=1  OUT_DIR  PORT_BASE=28100 (PORT_BASE..+12 must be free)  KEEP_RUN=1
#      FENCEPROXY_BIN (skip the build)  GOMAXPROCS (passed to fenceproxy)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${ROUNDS:=1}" "${DURATION:=3s}" "${WARMUP:=1}" "${WAKE_N:=20}"
fi
: "${ROUNDS:=3}" "${DURATION:=8s}" "${WARMUP:=2}" "${CONNS:=32}" "${WAKE_N:=100}" "${WAKE_HOLD:=20ms}" "${WAKE_GAP:=5ms}"
: "${TRACE:=1}"
WARMUP=${WARMUP%s}
: "${OUT_DIR:=$RUN_DIR}"
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/compare-summary.txt" "$OUT_DIR/drainwake.tsv"
select_targets

check_tools
((TRACE == 0)) || ports_free $((PORT_BASE + 10)) $((PORT_BASE + 12))
build

all_targets=("${TARGETS[@]}")
for setting in "${SETTINGS[@]}"; do
  # tracing's cost is measured once, with Redis without persistence: it is the proxy's CPU
  TARGETS=("${all_targets[@]}")
  [[ $TRACE == 0 || $setting != none ]] || TARGETS+=(fenceproxy-trace-unsampled)
  say "=== Redis $setting ($(redis_args "$setting")): ${TARGETS[*]}, $ROUNDS x wrk -c$CONNS -d$DURATION"
  start_stack "$setting"
  trace_check=""
  if [[ " ${TARGETS[*]} " == *" fenceproxy-trace-unsampled "* ]]; then
    start_fenceproxy_trace_unsampled
    trace_check=$(check_fencing fenceproxy-trace-unsampled "$(key_prefix_of fenceproxy-trace-unsampled)")
    say "fenceproxy-trace-unsampled functional check: $trace_check"
  fi

  stale=$(check_fencing fenceproxy "$(key_prefix_of fenceproxy)")
  say "fenceproxy functional check: $stale"
  nodrain_check=""
  if ((NODRAIN)); then
    nodrain_check=$(check_fencing fenceproxy-nodrain "$(key_prefix_of fenceproxy-nodrain)")
    say "fenceproxy-nodrain functional check: $nodrain_check"
  fi
  lua_check=""
  if ((LUA)); then
    lua_check=$(check_fencing nginx-lua "$(key_prefix_of nginx-lua)")
    say "nginx-lua functional check: $lua_check"
  fi

  for t in "${TARGETS[@]}"; do warm "$t" "$WARMUP"; done
  results=$OUT_DIR/compare-$setting.tsv
  rm -f "$results" "$OUT_DIR/compare-$setting-redis.tsv"
  for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${TARGETS[@]}"; do
      measure "$results" "$setting" "$r" "$t" "$CONNS" "$DURATION"
    done
  done
  aof=""
  [[ $setting == none ]] || aof=" aof=$(du -sh "$RUN_DIR/redis-$setting" | cut -f1)"
  [[ -z $aof ]] || say "redis:$aof"
  # the wait of a newer generation after its older request completes (drain on), and the
  # overlap at the origin the barrier prevents (drain off); a few seconds, no load of our own
  wake=""
  if ((WAKE_N > 0)); then
    wake_args=(-target "fenceproxy=http://127.0.0.1:$(port_of fenceproxy)")
    ((NODRAIN == 0)) || wake_args+=(-target "fenceproxy-nodrain=http://127.0.0.1:$(port_of fenceproxy-nodrain)")
    wake=$(timeout -k 5 300 "$BENCH_BIN/drainwake" "${wake_args[@]}" -n "$WAKE_N" -hold "$WAKE_HOLD" -gap "$WAKE_GAP" \
      -label "redis=$setting" -out "$OUT_DIR/drainwake.tsv") || die "drainwake failed"
  fi
  stop_all
  "$BENCH_BIN/report" compare -in "$results" -setting "$setting" -stale "$stale" \
    ${lua_check:+-lua-check "$lua_check"} ${nodrain_check:+-nodrain-check "$nodrain_check"} ${trace_check:+-trace-check "$trace_check"} \
    -redis "$OUT_DIR/compare-$setting-redis.tsv" -ncpu "$NCPU" | tee -a "$OUT_DIR/compare-summary.txt"
  [[ -z $wake ]] || printf '%s\n' "$wake" | tee -a "$OUT_DIR/compare-summary.txt"
done
if [[ -s $RUN_DIR/non2xx-explained.log ]]; then
  say "non-2xx answers were seen; their explanations: $RUN_DIR/non2xx-explained.log"
  [[ $OUT_DIR == "$RUN_DIR" ]] || cp "$RUN_DIR/non2xx-explained.log" "$OUT_DIR/"
fi
