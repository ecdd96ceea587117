#!/usr/bin/env bash
# bench/sweep.sh: throughput and p99 of fenceproxy and go-plain against the
# number of client connections (closed loop, wrk, Redis without persistence),
# interleaved, for the plot in docs/performance.png.
#
#   bench/sweep.sh                 connections 1 8 32 128, 2 rounds of 5 s, ~1.5 min
#   QUICK=1 bench/sweep.sh         1 round of 2 s
#
# Writes $OUT_DIR/sweep.tsv (every run) and $SWEEP_DATA (medians per target
# and connection count, default $OUT_DIR/performance-data.tsv), the input of
# bench/cmd/plot.
# Env: SWEEP_CONNS="1 8 32 128" SWEEP_ROUNDS=2 SWEEP_DURATION=5s SWEEP_TARGETS="go-plain fenceproxy"
#      SWEEP_DATA QUICK=1 OUT_DIR PORT_BASE KEEP_RUN=1 FENCEPROXY_BIN GOMAXPROCS
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${SWEEP_ROUNDS:=1}" "${SWEEP_DURATION:=2s}"
fi
: "${SWEEP_CONNS:=1 8 32 128}" "${SWEEP_ROUNDS:=2}" "${SWEEP_DURATION:=5s}"
: "${SWEEP_TARGETS:=go-plain fenceproxy}"
: "${OUT_DIR:=$RUN_DIR}"
: "${SWEEP_DATA:=$OUT_DIR/performance-data.tsv}"
mkdir -p "$OUT_DIR"
read -r -a CONNS_LIST <<<"$SWEEP_CONNS"
read -r -a TARGETS <<<"$SWEEP_TARGETS"

check_tools
build

say "=== sweep, Redis none: ${TARGETS[*]} at ${CONNS_LIST[*]} connections, $SWEEP_ROUNDS x $SWEEP_DURATION"
start_redis none
start_origin
for t in "${TARGETS[@]}"; do
  case $t in
    go-plain) start_goplain ;;
    nginx) start_nginx ;;
    nginx-lua) start_nginxlua ;;
    fenceproxy) start_fenceproxy ;;
    fenceproxy-nodrain) start_fenceproxy_nodrain ;;
    *) die "unknown target $t" ;;
  esac
done
check=$(check_fencing fenceproxy fence:)
[[ $check == ok ]] || die "fenceproxy functional check failed: $check"
for t in "${TARGETS[@]}"; do warm "$t" 2; done
results=$OUT_DIR/sweep.tsv
rm -f "$results"
for ((r = 1; r <= SWEEP_ROUNDS; r++)); do
  for c in "${CONNS_LIST[@]}"; do
    for t in "${TARGETS[@]}"; do
      measure "$results" none "$r" "$t" "$c" "$SWEEP_DURATION"
    done
  done
done
stop_all
"$BENCH_BIN/report" sweep -in "$results" -out "$SWEEP_DATA"
say "sweep data: $SWEEP_DATA"
