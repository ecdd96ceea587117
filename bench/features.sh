#!/usr/bin/env bash
# bench/features.sh: what each feature costs one admitted request in
# fenceproxy's own process: proxy/feature_bench_test.go's BenchmarkFeature
# (the handler as shipped, then with one feature switched off or on at a
# time; the memory store and a canned upstream, no network), run COUNT times
# at GOMAXPROCS=1. bench/cmd/report reads its sub-benchmarks by name, whatever
# they are, and renders the per-feature table of docs/performance.md.
#
#   bench/features.sh                       ~1 min: FEATURE_COUNT=5 FEATURE_BENCHTIME=0.5s
#   FEATURE_CALLGRIND=1 bench/features.sh   also instructions per request under valgrind's
#                                           callgrind (load-independent; ~4 min more)
#   QUICK=1 bench/features.sh               one short run of each
#
# stdout: go test's output, after a "# benchtime" comment (run-all.sh keeps it as features.out).
# With FEATURE_CALLGRIND=1: $OUT_DIR/features-callgrind.tsv, per sub-benchmark the instructions
# of a run of N1 and of N2 requests (the report divides the difference by N2 − N1, so the test
# binary's start and end cancel out).
#
# Env: FEATURE_COUNT=5 FEATURE_BENCHTIME=0.5s FEATURE_CALLGRIND=0|1 FEATURE_CG_N1=1000
#      FEATURE_CG_N2=11000 OUT_DIR (default: the run directory) QUICK=1 GO=go
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${FEATURE_COUNT:=1}" "${FEATURE_BENCHTIME:=100ms}" "${FEATURE_CG_N1:=100}" "${FEATURE_CG_N2:=600}"
fi
# 10,000 requests between the two runs: the garbage collector's cycles make fewer repeat to within
# several percent only (to within about 2,000 instructions per request at 10,000)
: "${FEATURE_COUNT:=5}" "${FEATURE_BENCHTIME:=0.5s}" "${FEATURE_CALLGRIND:=0}" "${FEATURE_CG_N1:=1000}" "${FEATURE_CG_N2:=11000}"
: "${OUT_DIR:=$RUN_DIR}"
mkdir -p "$OUT_DIR"

# one test binary for both measurements, run from its package's directory as go test would
say "building proxy's test binary"
(cd "$REPO_DIR" && "$GO" test -c -o "$RUN_DIR/proxy.test" ./proxy) >&2
echo "# benchtime $FEATURE_BENCHTIME"
# the machine's 1-minute load average before and after: the report sets ns/op against it
echo "# loadavg $(cut -d' ' -f1 /proc/loadavg)"
say "BenchmarkFeature: $FEATURE_COUNT x $FEATURE_BENCHTIME per sub-benchmark, GOMAXPROCS=1"
out=$RUN_DIR/features.txt
# a sub-benchmark that fails is named in the output (--- FAIL), and the report says so; the
# others still count
rc=0
(cd "$REPO_DIR/proxy" && GOMAXPROCS=1 timeout -k 5 900 "$RUN_DIR/proxy.test" -test.run '^$' -test.bench '^BenchmarkFeature$' \
  -test.benchmem -test.count "$FEATURE_COUNT" -test.benchtime "$FEATURE_BENCHTIME") >"$out" 2>&1 || rc=$?
cat "$out"
echo "# loadavg $(cut -d' ' -f1 /proc/loadavg)"
grep -q '^BenchmarkFeature/' "$out" || die "BenchmarkFeature measured nothing (exit $rc; output: $out)"
((rc == 0)) || say "BenchmarkFeature failed in part (exit $rc): $(grep -- '--- FAIL' "$out" | tr '\n' ' ')"

if [[ $FEATURE_CALLGRIND == 1 ]]; then
  command -v valgrind >/dev/null || die "FEATURE_CALLGRIND=1 needs valgrind (apt-get install -y valgrind)"
  ((FEATURE_CG_N2 > FEATURE_CG_N1)) || die "FEATURE_CG_N2 must be above FEATURE_CG_N1"
  cgfile=$OUT_DIR/features-callgrind.tsv
  printf 'name\tn1\tir1\tn2\tir2\n' >"$cgfile"
  # instructions of one run of N requests of sub-benchmark NAME: valgrind 3.19 does not know
  # RDTSCP and callgrind stops on Go's preemption signals, hence the GODEBUG; the dump before
  # goleak.Find leaves out the test binary's final leak check, whose polling follows the clock
  instructions() {
    local name=$1 n=$2 cg=$RUN_DIR/callgrind.out
    rm -f "$cg"*
    (cd "$REPO_DIR/proxy" && GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off timeout -k 5 600 \
      valgrind --tool=callgrind --dump-before=go.uber.org/goleak.Find --callgrind-out-file="$cg" \
      "$RUN_DIR/proxy.test" -test.run '^$' -test.bench "^BenchmarkFeature\$/^$(sed 's/[][\.*^$+?(){}|]/\\&/g' <<<"$name")\$" \
      -test.benchtime "${n}x") >/dev/null 2>"$RUN_DIR/callgrind.log" || die "callgrind of $name failed (log: $RUN_DIR/callgrind.log)"
    # the first dump holds everything up to the leak check
    awk '/^summary:/ {print $2; exit}' "$cg.1"
  }
  for name in $(sed -n 's#^BenchmarkFeature/\([^ 	]*\).*#\1#p' "$out" | awk '!seen[$0]++'); do
    a=$(instructions "$name" "$FEATURE_CG_N1")
    b=$(instructions "$name" "$FEATURE_CG_N2")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$FEATURE_CG_N1" "$a" "$FEATURE_CG_N2" "$b" >>"$cgfile"
    say "callgrind $name: $(((b - a) / (FEATURE_CG_N2 - FEATURE_CG_N1))) instructions per request"
  done
fi
rm -f "$RUN_DIR/proxy.test" "$RUN_DIR/callgrind.out"*
