#!/usr/bin/env bash
# bench/run-all.sh: the whole load benchmark, what `make bench` runs (`make bench-quick`: QUICK=1).
#
#   bench/run-all.sh            ~10 min: compare.sh (both Redis settings, with nginx-lua when
#                               its module is installed, and fenceproxy-trace-unsampled),
#                               openloop.sh (both settings), sweep.sh, features.sh
#                               (BenchmarkFeature); then writes performance-data.tsv,
#                               performance.png and performance.md from this one run into
#                               OUT_DIR and copies them to docs/
#   QUICK=1 bench/run-all.sh    ~3 min smoke test of the same steps; leaves docs/ alone
#
# fenceproxy is built once, fresh from the working tree, and that one binary
# is measured by every step. Raw results, logs and summaries go to OUT_DIR
# (default bench/results/<UTC time>, ignored by git).
# Env: QUICK=1  OUT_DIR  DOCS_DIR (default docs/; empty with QUICK=1: no copy)
#      PORT_BASE=28100 (PORT_BASE..+12 must be free)  NGINX_LUA=auto|0  OL_NGINX_LUA=0|auto (nginx-lua
#      in the open loop too)  plus each step's own knobs (see the scripts)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
: "${GO:=go}"
stamp=$(date -u +%Y%m%d-%H%M%S)
: "${OUT_DIR:=$HERE/results/$stamp}"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
if [[ ${QUICK:-0} == 1 ]]; then : "${DOCS_DIR:=}"; else : "${DOCS_DIR:=$ROOT/docs}"; fi
export OUT_DIR

# One build for every step: the bench tools, and fenceproxy by `make build` (bin/fenceproxy).
export BENCH_BIN=$OUT_DIR/bin
mkdir -p "$BENCH_BIN"
echo "[$(date +%H:%M:%S)] building bench tools and fenceproxy ($(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown))" >&2
(cd "$HERE" && "$GO" build -o "$BENCH_BIN/" ./cmd/...)
make -C "$ROOT" --no-print-directory build GO="$GO" >&2
# measure a copy: bin/fenceproxy may be rebuilt by someone else while this runs
cp "$ROOT/bin/fenceproxy" "$BENCH_BIN/fenceproxy"
export FENCEPROXY_BIN=$BENCH_BIN/fenceproxy
sha256sum "$FENCEPROXY_BIN" | cut -d' ' -f1 >"$OUT_DIR/fenceproxy.sha256"

# the command line of this run, with the knobs that were set, for the doc
{
  for v in QUICK ROUNDS DURATION WARMUP CONNS REDIS_DURABLE NGINX_LUA RATE OL_DURATION OL_ROUNDS OL_WARMUP \
    OL_PAIRED OL_PAIRED_ROUNDS OL_QUIET_LAG SWEEP_CONNS SWEEP_ROUNDS SWEEP_DURATION SWEEP_TARGETS TRACE NODRAIN \
    FEATURE_COUNT FEATURE_BENCHTIME FEATURE_CALLGRIND FEATURE_CG_N1 FEATURE_CG_N2 OL_NGINX_LUA PORT_BASE GOMAXPROCS; do
    [[ -z ${!v:-} ]] || printf '%s=%q ' "$v" "${!v}"
  done
  echo "bench/run-all.sh"
} >"$OUT_DIR/command.txt"
# The whole run's budget (~10 min here): throughput runs of 6 s instead of compare.sh's 8 s, one
# sweep round instead of two (the plot), the open loop without nginx-lua (its goal is against go-plain)
if [[ ${QUICK:-0} != 1 ]]; then
  : "${DURATION:=6s}" "${SWEEP_ROUNDS:=1}"
  export DURATION SWEEP_ROUNDS
fi
: "${OL_NGINX_LUA:=0}"
phases=$OUT_DIR/phases.tsv
printf 'phase\tseconds\n' >"$phases"
t_all=$(date +%s)
phase() { # phase NAME CMD...: one step; its stdout also in OUT_DIR/NAME.out, stderr in NAME.log,
  # its processes' logs and configs in OUT_DIR/NAME-run (Redis data removed afterwards)
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  echo "[$(date +%H:%M:%S)] $name: $*" >&2
  set +e
  RUN_DIR=$OUT_DIR/$name-run "$@" 2> >(tee "$OUT_DIR/$name.log" >&2) | tee "$OUT_DIR/$name.out"
  rc=${PIPESTATUS[0]}
  set -e
  rm -rf "$OUT_DIR/$name-run"/redis-*
  printf '%s\t%d\n' "$name" $(($(date +%s) - t0)) >>"$phases"
  if ((rc != 0)); then
    echo "run-all: $name failed (exit $rc); its log: $OUT_DIR/$name.log" >&2
    exit "$rc"
  fi
}

RUN_DIR=$OUT_DIR bash -c "source '$HERE/lib.sh'; machine_info '$OUT_DIR/machine.tsv'"
phase compare "$HERE/compare.sh"
[[ ${NGINX_LUA:-auto} != 0 ]] || OL_NGINX_LUA=0
phase openloop env NGINX_LUA="$OL_NGINX_LUA" "$HERE/openloop.sh"
phase sweep env SWEEP_DATA="$OUT_DIR/performance-data.tsv" "$HERE/sweep.sh"
phase plot "$BENCH_BIN/plot" -data "$OUT_DIR/performance-data.tsv" -out "$OUT_DIR/performance.png"
# no load of its own beside it: the per-feature benchmark runs on a machine the load runs have left
phase features "$HERE/features.sh"
printf 'total\t%d\n' $(($(date +%s) - t_all)) >>"$phases"
# The report is written from this run's files only; docs/ gets a copy of all three.
"$BENCH_BIN/report" doc -run "$OUT_DIR" -out "$OUT_DIR/performance.md" ${QUICK:+-quick="$QUICK"}
if [[ -n $DOCS_DIR ]]; then
  mkdir -p "$DOCS_DIR"
  cp "$OUT_DIR/performance.md" "$OUT_DIR/performance.png" "$OUT_DIR/performance-data.tsv" "$DOCS_DIR/"
fi

echo
echo "== summary (one run, ratios measured side by side) =="
cat "$OUT_DIR/compare.out" "$OUT_DIR/openloop.out"
grep '^BenchmarkFeature/' "$OUT_DIR/features.out" || true
echo
echo "raw results and logs:  $OUT_DIR"
echo "sweep data:            $OUT_DIR/performance-data.tsv"
echo "plot:                  $OUT_DIR/performance.png"
echo "report:                $OUT_DIR/performance.md"
[[ -z $DOCS_DIR ]] || echo "copied to:             $DOCS_DIR/ (performance.md, performance.png, performance-data.tsv)"
echo "took:                  $(awk -F'\t' '$1 == "total" {printf "%dm%02ds", $2 / 60, $2 % 60}' "$phases")"
