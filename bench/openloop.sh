#!/usr/bin/env bash
# bench/openloop.sh: latency at a fixed request rate well below saturation
# (open loop, measured from each request's scheduled send time; see
# bench/cmd/openloop), for go-plain, nginx, nginx-lua (when installed) and
# fenceproxy, interleaved (OL_ROUNDS rounds of OL_DURATION/OL_ROUNDS each),
# then go-plain and fenceproxy simultaneously for OL_PAIRED, RATE/2 each (both
# meet the same noise, the machine carries the same total rate), per Redis
# setting. Both runs are also summarised over their quiet segments only (where
# the load generator's own send-lag p99 stayed under OL_QUIET_LAG for both
# targets). Reports p50/p90/p99/max of each and fenceproxy's added p99 over
# go-plain (the goal: at most 1 ms).
#
#   bench/openloop.sh                     both Redis settings, ~3.5 min
#   REDIS_DURABLE=0 bench/openloop.sh     Redis without persistence only
#   QUICK=1 bench/openloop.sh             1 round of 3 s per target
#
# stdout: one "openloop[redis=SETTING]:" line per setting; rows in
# $OUT_DIR/openloop.tsv. Every request is PUT /r/o<n> with a fresh token.
# Env: RATE=1000 OL_DURATION=15s OL_ROUNDS=15 OL_WARMUP=2s OL_PAIRED=20s OL_PAIRED_ROUNDS=20
#      OL_QUIET_LAG=1ms REDIS_DURABLE=(both|0|1)
#      NGINX_LUA=auto|0 QUICK=1 OUT_DIR PORT_BASE KEEP_RUN=1 FENCEPROXY_BIN GOMAXPROCS
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${OL_DURATION:=3s}" "${OL_ROUNDS:=1}" "${OL_WARMUP:=1s}" "${OL_PAIRED:=3s}" "${OL_PAIRED_ROUNDS:=3}"
fi
: "${RATE:=1000}" "${OL_DURATION:=15s}" "${OL_ROUNDS:=15}" "${OL_WARMUP:=2s}" "${OL_PAIRED:=20s}" "${OL_PAIRED_ROUNDS:=20}" "${OL_QUIET_LAG:=1ms}"
: "${OUT_DIR:=$RUN_DIR}"
mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR/openloop.tsv" "$OUT_DIR/openloop-summary.txt"
select_targets

check_tools
build

for setting in "${SETTINGS[@]}"; do
  say "=== open loop, Redis $setting: ${TARGETS[*]} at $RATE req/s, $OL_DURATION each in $OL_ROUNDS rounds"
  start_stack "$setting"
  check=$(check_fencing fenceproxy fence:)
  [[ $check == ok ]] || die "fenceproxy functional check failed: $check"
  args=()
  for t in "${TARGETS[@]}"; do args+=(-target "$t=http://127.0.0.1:$(port_of "$t")"); done
  timeout -k 5 600 "$BENCH_BIN/openloop" "${args[@]}" -rate "$RATE" -duration "$OL_DURATION" \
    -rounds "$OL_ROUNDS" -warmup "$OL_WARMUP" -paired go-plain,fenceproxy -paired-duration "$OL_PAIRED" \
    -paired-rounds "$OL_PAIRED_ROUNDS" -quiet-lag "$OL_QUIET_LAG" -label "redis=$setting" -out "$OUT_DIR/openloop.tsv" |
    tee -a "$OUT_DIR/openloop-summary.txt"
  refused=$(grep -c '"msg":"refused"' "$RUN_DIR/fenceproxy.log" || true)
  # the functional check refuses 4 requests on purpose (older, 2^53, no token, above uint64)
  if ((refused > 4)); then
    say "fenceproxy refused $((refused - 4)) requests under load; first of them:"
    grep '"msg":"refused"' "$RUN_DIR/fenceproxy.log" | tail -n +5 | head -n 5 | sed 's/^/    log: /' >&2
  fi
  stop_all
done
