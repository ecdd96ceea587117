#!/usr/bin/env bash
# bench/compare.sh: fenceproxy's throughput against a plain Go reverse proxy
# (go-plain), nginx and, when libnginx-mod-http-lua is installed, nginx doing
# the same fencing in Lua (nginx-lua), measured in ONE interleaved run per
# Redis setting, reported as ratios.
#
#   bench/compare.sh                      both Redis settings, ~4 min
#   REDIS_DURABLE=1 bench/compare.sh      only appendonly yes + appendfsync always
#   REDIS_DURABLE=0 bench/compare.sh      only Redis without persistence
#   QUICK=1 bench/compare.sh              smoke test: 1 round of 3 s per target
#
# Per Redis setting: a fresh redis-server, the origin (bench/cmd/origin),
# go-plain (bench/cmd/goplain), nginx, nginx-lua and fenceproxy (built from
# this working tree with a routes file /r/{key} -> r/{key}); functional checks
# (a fresh token is admitted, an older one refused, exactly past 2^53, the
# mark is in Redis); a warm-up; then ROUNDS rounds, each running wrk against
# go-plain, nginx, nginx-lua and fenceproxy in turn (so a neighbour's load
# hits all of them alike). Load: wrk -t2 -cCONNS -dDURATION, PUT /r/k0..k999
# with a rising 19-digit Fencing-Token and a 20-byte body (bench/wrk/put.lua).
#
# stdout: one "compare[redis=SETTING]:" line per setting (medians and
# ratios); stderr: every run, the median tables, and for every run with
# non-2xx answers the proxy's counters and log lines that explain them.
# Raw rows: $OUT_DIR/compare-SETTING.tsv (OUT_DIR defaults to the run directory).
#
# Env: ROUNDS=3 DURATION=8s WARMUP=2s CONNS=32 REDIS_DURABLE=(both|0|1)
#      NGINX_LUA=auto|0  QUICK=1  OUT_DIR  PORT_BASE=28100  KEEP_RUN=1
#      FENCEPROXY_BIN (skip the build)  GOMAXPROCS (passed to fenceproxy)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${ROUNDS:=1}" "${DURATION:=3s}" "${WARMUP:=1}"
fi
: "${ROUNDS:=3}" "${DURATION:=8s}" "${WARMUP:=2}" "${CONNS:=32}"
WARMUP=${WARMUP%s}
: "${OUT_DIR:=$RUN_DIR}"
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/compare-summary.txt"
select_targets

check_tools
build

for setting in "${SETTINGS[@]}"; do
  say "=== Redis $setting ($(redis_args "$setting")): ${TARGETS[*]}, $ROUNDS x wrk -c$CONNS -d$DURATION"
  start_stack "$setting"

  stale=$(check_fencing fenceproxy fence:)
  say "fenceproxy functional check: $stale"
  lua_check=""
  if ((LUA)); then
    lua_check=$(check_fencing nginx-lua fencelua:)
    say "nginx-lua functional check: $lua_check"
  fi

  for t in "${TARGETS[@]}"; do warm "$t" "$WARMUP"; done
  results=$OUT_DIR/compare-$setting.tsv
  rm -f "$results"
  for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${TARGETS[@]}"; do
      measure "$results" "$setting" "$r" "$t" "$CONNS" "$DURATION"
    done
  done
  aof=""
  [[ $setting == none ]] || aof=" aof=$(du -sh "$RUN_DIR/redis-$setting" | cut -f1)"
  say "redis: $(redis-cli -p "$PORT_REDIS" INFO commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|eval):' | cut -d, -f1 | tr '\n' ' ')$aof"
  stop_all
  "$BENCH_BIN/report" compare -in "$results" -setting "$setting" -stale "$stale" \
    ${lua_check:+-lua-check "$lua_check"} -ncpu "$NCPU" | tee -a "$OUT_DIR/compare-summary.txt"
done
if [[ -s $RUN_DIR/non2xx-explained.log ]]; then
  say "non-2xx answers were seen; their explanations: $RUN_DIR/non2xx-explained.log"
  [[ $OUT_DIR == "$RUN_DIR" ]] || cp "$RUN_DIR/non2xx-explained.log" "$OUT_DIR/"
fi
