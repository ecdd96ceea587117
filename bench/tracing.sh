#!/usr/bin/env bash
# bench/tracing.sh: what OpenTelemetry tracing costs fenceproxy, in ONE
# interleaved run: the same binary with tracing off, with the wiring on but
# nothing sampled, and with every request sampled and exported.
#
#   bench/tracing.sh                ~3 min: ROUNDS=3 DURATION=8s
#
# Targets, in the order each round runs them:
#   go-plain                   the plain Go reverse proxy (context)
#   fenceproxy                 tracing off (OTEL_TRACES_EXPORTER unset): the baseline
#   fenceproxy-otel-unsampled  OTEL_TRACES_EXPORTER=otlp, OTEL_TRACES_SAMPLER=always_off: the
#                              wiring (otelhttp around handler and transport, the admission's
#                              span) runs, nothing is recorded or exported
#   fenceproxy-otel            OTEL_TRACES_EXPORTER=otlp, the default sampler: every request (the
#                              load sends no traceparent, so each is a root) gives three spans,
#                              batched (the SDK's defaults) to bench/cmd/otlpsink over OTLP/HTTP
#   fenceproxy-otel-console    OTEL_TRACES_EXPORTER=console, its standard output to /dev/null
#                              (JSON encoding instead of protobuf and HTTP)
# All fenceproxy targets use one Redis (REDIS_SETTING, default none), each under its own key
# prefix, and compare.sh's load (lib.sh measure: bench/wrk/put.lua, wrk -t2 -cCONNS).
# otlpsink counts the spans it receives: spans/req below 3 means the SDK's batch queue was
# full and dropped spans (it drops rather than slow the request down).
#
# stdout: one "tracing[redis=SETTING]:" line: median req/s per target; each traced target
# against off as the median of the per-round ratios [min-max]; proxy CPU µs per request;
# spans received per request. Raw rows: $OUT_DIR/tracing.tsv, $OUT_DIR/tracing-spans.tsv.
#
# Env: ROUNDS=3 DURATION=8s WARMUP=2s CONNS=32 REDIS_SETTING=none|durable
#      ORDER="go-plain fenceproxy fenceproxy-otel-unsampled fenceproxy-otel fenceproxy-otel-console"
#      PORT_BASE=28100 (PORT_BASE..+16 must be free)  FENCEPROXY_BIN (skip the build)  OUT_DIR  KEEP_RUN=1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

run_settings
: "${REDIS_SETTING:=none}"
PORT_SINK=$((PORT_BASE + 10))
read -r -a TARGETS <<<"${ORDER:-go-plain fenceproxy fenceproxy-otel-unsampled fenceproxy-otel fenceproxy-otel-console}"

# lib.sh's per-target lookups, extended by the traced targets (ports +11..+16)
extend_targets
traced_index() {
  case $1 in
    fenceproxy-otel-unsampled) echo 0 ;;
    fenceproxy-otel) echo 1 ;;
    fenceproxy-otel-console) echo 2 ;;
    *) echo -1 ;;
  esac
}
port_of() {
  local i
  i=$(traced_index "$1")
  if ((i >= 0)); then echo $((PORT_BASE + 11 + 2 * i)); else lib_port_of "$1"; fi
}
admin_port_of() {
  local i
  i=$(traced_index "$1")
  if ((i >= 0)); then echo $((PORT_BASE + 12 + 2 * i)); else lib_admin_port_of "$1"; fi
}
key_prefix_of() {
  local i
  i=$(traced_index "$1")
  if ((i >= 0)); then echo "fenceot$i:"; else lib_key_prefix_of "$1"; fi
}
is_fenceproxy() { [[ $1 == fenceproxy || $1 == fenceproxy-* ]]; }
uses_redis() { is_fenceproxy "$1"; }
explain() { case $1 in fenceproxy-otel*) explain_added "$@" ;; *) lib_explain "$@" ;; esac; }
sink_spans() { curl -s -m 5 "http://127.0.0.1:$PORT_SINK/count" | sed -n 's/^spans=\([0-9]*\) .*/\1/p'; }

check_tools
ports_free $((PORT_BASE + 10)) $((PORT_BASE + 16))
build

say "=== Redis $REDIS_SETTING ($(redis_args "$REDIS_SETTING")); ${TARGETS[*]}, $ROUNDS x wrk -c$CONNS -d$DURATION"
start_redis "$REDIS_SETTING"
start_origin
start_goplain
launch otlpsink "$BENCH_BIN/otlpsink" -listen "127.0.0.1:$PORT_SINK"
await otlpsink "$PORT_SINK"
otlp=(OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$PORT_SINK")
start_fenceproxy fenceproxy "$PORT_FENCEPROXY" "$PORT_ADMIN" fence:
for t in fenceproxy-otel-unsampled fenceproxy-otel fenceproxy-otel-console; do
  env=()
  case $t in
    fenceproxy-otel-unsampled) env=("${otlp[@]}" OTEL_TRACES_SAMPLER=always_off) ;;
    fenceproxy-otel) env=("${otlp[@]}") ;;
    # env runs sh, which runs fenceproxy (its $0) with standard output to /dev/null
    fenceproxy-otel-console) env=(OTEL_TRACES_EXPORTER=console sh -c 'exec "$0" >/dev/null') ;;
  esac
  start_fenceproxy "$t" "$(port_of "$t")" "$(admin_port_of "$t")" "$(key_prefix_of "$t")" "${env[@]}"
  grep -q '"msg":"tracing on"' "$RUN_DIR/$t.log" || die "$t: tracing is not on (log: $RUN_DIR/$t.log)"
done
! grep -q '"msg":"tracing on"' "$RUN_DIR/fenceproxy.log" || die "fenceproxy: tracing is on, want off"
checks=""
for t in "${TARGETS[@]}"; do
  is_fenceproxy "$t" || continue
  checks+="$t=$(check_fencing "$t" "$(key_prefix_of "$t")") "
done
say "functional checks: $checks"
[[ $checks != *FAIL* ]] || die "a functional check failed"

for t in "${TARGETS[@]}"; do warm "$t" "$WARMUP"; done
sleep 6 # the warm-up's last batch leaves the exporter (every 5 s) before the rounds count spans
results=$OUT_DIR/tracing.tsv
spansfile=$OUT_DIR/tracing-spans.tsv
rm -f "$results" "$OUT_DIR/tracing-redis.tsv"
printf 'round\ttarget\tspans\n' >"$spansfile"
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${TARGETS[@]}"; do
    s0=$(sink_spans)
    measure "$results" "$REDIS_SETTING" "$r" "$t" "$CONNS" "$DURATION"
    # the batch a sampled run left in its queue is exported within 5 s: let it
    # arrive (and not run beside the next target's load)
    case $t in fenceproxy-otel | fenceproxy-otel-console) sleep 6 ;; esac
    printf '%s\t%s\t%s\n' "$r" "$t" $(($(sink_spans) - s0)) >>"$spansfile"
  done
done
stop_all

awk -F'\t' -v checks="$checks" -v setting="$REDIS_SETTING" "$AWK_ROUNDS"'
  FNR == 1 { next }
  FILENAME ~ /spans/ { spans[$2, $1] = $3; next }
  { rps[$3, $2] = $5; req[$3, $2] = $6; us[$3, $2] = ($5 > 0 ? $14 * 1e6 / $5 : 0); bad[$3] += $11 + $12; if ($2 > R) R = $2 }
  function perreq(t,   i, q) { for (i = 1; i <= R; i++) q["x", i] = (req[t, i] > 0 ? spans[t, i] / req[t, i] : 0); return med(q, "x") }
  END {
    printf "tracing[redis=%s]: go-plain=%.0frps off=%.0frps unsampled=%.0frps sampled-otlp=%.0frps sampled-console=%.0frps", setting,
      med(rps, "go-plain"), med(rps, "fenceproxy"), med(rps, "fenceproxy-otel-unsampled"), med(rps, "fenceproxy-otel"), med(rps, "fenceproxy-otel-console")
    printf " | unsampled/off=%s sampled-otlp/off=%s sampled-console/off=%s off/go-plain=%s", ratio("fenceproxy-otel-unsampled", "fenceproxy"),
      ratio("fenceproxy-otel", "fenceproxy"), ratio("fenceproxy-otel-console", "fenceproxy"), ratio("fenceproxy", "go-plain")
    printf " | proxy-cpu-us/req go-plain=%.0f off=%.0f unsampled=%.0f sampled-otlp=%.0f sampled-console=%.0f", med(us, "go-plain"),
      med(us, "fenceproxy"), med(us, "fenceproxy-otel-unsampled"), med(us, "fenceproxy-otel"), med(us, "fenceproxy-otel-console")
    printf " | spans/req received unsampled=%.2f sampled-otlp=%.2f", perreq("fenceproxy-otel-unsampled"), perreq("fenceproxy-otel")
    printf " | rounds=%d non2xx+sockerr=%d/%d/%d/%d/%d checks: %s\n", R, bad["go-plain"], bad["fenceproxy"],
      bad["fenceproxy-otel-unsampled"], bad["fenceproxy-otel"], bad["fenceproxy-otel-console"], checks }
  ' "$spansfile" "$results" | tee "$OUT_DIR/tracing-summary.txt"
