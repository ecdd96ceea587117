#!/usr/bin/env bash
# bench/authz.sh: fenceproxy's authorization mode (fenceproxy authz, over HTTP
# and over gRPC) against its proxy mode (fenceproxy serve), in ONE interleaved run.
#
#   bench/authz.sh              ~3.5 min: ROUNDS=5 DURATION=8s, four targets
#   QUICK=1 bench/authz.sh      ~1 min smoke run: ROUNDS=2 DURATION=3s WARMUP=1s
#
# Targets (one fenceproxy binary, one Redis, one routes file: /r/{key} -> r/{key}):
#   proxy          fenceproxy serve in front of bench/cmd/origin, as shipped (drain barrier on):
#                  PUT /r/k<n>, 20-byte body, forwarded; the answer is the origin's
#   authz-http     fenceproxy authz, asked as nginx auth_request asks: GET / with
#                  X-Original-Method: PUT, X-Original-URI: /r/k<n>, Fencing-Token
#   authz-grpc     the same authz process, asked as Envoy asks: Authorization/Check on
#                  FENCE_AUTHZ_GRPC_ADDR, attributes.request.http {PUT, /r/k<n>, fencing-token}
#   proxy-nodrain  fenceproxy serve with FENCE_DRAIN=off (NODRAIN=0 leaves it out): proxy minus the
#                  drain barrier's bookkeeping, which authz cannot do
# Each target has its own key prefix in the same Redis (fence:, fencend:, fenceaz: for both authz
# targets). Every target is driven by the same closed-loop generator, bench/cmd/authzload: CONNS
# workers, one question in flight each, RESOURCES resources split among them, a fresh token rising
# per resource on every request, so every decision is an admission that writes a new mark (the same
# admission work in every mode). Each round runs every target once for DURATION; the order rotates
# by one target per round, so no target always runs after the same one.
#
# Measured per run: decisions/s (admitted answers; anything else is an error), the fenceproxy
# process's CPU per decision (/proc/PID/stat utime+stime, read by authzload), Redis's and the
# origin's CPU per decision (lib.sh's ticks), the generator's own, p50/p99 of the answers, Redis
# script runs per decision, and the cores neither idle nor used by this run's processes
# ("neighbours": the shared machine's other loads, and kernel work not charged to a process).
#
# stdout: the rounds, one line per run and the round's ratios; then one "authz[redis=SETTING]:"
# line: median decisions/s per target, the ratios authz-http/proxy, authz-grpc/proxy,
# authz-grpc/authz-http and proxy/proxy-nodrain as the median of the per-round ratios [min-max],
# the median CPU µs per decision, errors, the load average at the start and the end.
# Raw rows: $OUT_DIR/authz.tsv (OUT_DIR defaults to the run directory).
#
# Redis's own command counts per run (INFO commandstats, reset before each run): $OUT_DIR/authz-redis.tsv;
# the script runs (EVALSHA) per decision are in authz.tsv (1 / the store's mean group-commit batch).
#
# PROFILE=1: after the rounds, a CPU profile of each target's fenceproxy process over one more
# (unmeasured) DURATION of that target's load, from the admin port (the processes then run with
# FENCE_ADMIN_PPROF=true): $OUT_DIR/cpu.TARGET.pprof (go tool pprof -top FENCEPROXY_BIN FILE).
#
# Env: ROUNDS=5 DURATION=8s WARMUP=2s CONNS=32 RESOURCES=1000 GRPC_CONNS=2 REDIS_SETTING=none|durable
#      NODRAIN=1  PROFILE=0  QUICK=1  PORT_BASE=28100 (PORT_BASE..+12 must be free)
#      FENCEPROXY_BIN (skip the build)  BENCH_BIN  OUT_DIR  KEEP_RUN=1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ ${QUICK:-0} == 1 ]]; then
  : "${ROUNDS:=2}" "${DURATION:=3s}" "${WARMUP:=1}"
fi
: "${ROUNDS:=5}" "${DURATION:=8s}" "${WARMUP:=2}" "${CONNS:=32}" "${RESOURCES:=1000}" "${GRPC_CONNS:=2}"
: "${REDIS_SETTING:=none}" "${NODRAIN:=1}" "${PROFILE:=0}"
[[ $PROFILE == 0 || $PROFILE == 1 ]] || die "PROFILE must be 0 or 1"
WARMUP=${WARMUP%s}
DURATION=${DURATION%s}s
: "${OUT_DIR:=$RUN_DIR}"
mkdir -p "$OUT_DIR"
PORT_AZ=$((PORT_BASE + 10))
PORT_AZ_ADMIN=$((PORT_BASE + 11))
PORT_AZ_GRPC=$((PORT_BASE + 12))
TARGETS=(proxy authz-http authz-grpc)
[[ $NODRAIN == 0 ]] || TARGETS+=(proxy-nodrain)

# target -> generator kind, address, launched component (whose pid authzload reads)
kind_of() { case $1 in proxy | proxy-nodrain) echo proxy ;; authz-http) echo http ;; authz-grpc) echo grpc ;; esac; }
addr_of() {
  case $1 in
    proxy) echo "127.0.0.1:$PORT_FENCEPROXY" ;;
    proxy-nodrain) echo "127.0.0.1:$PORT_NODRAIN" ;;
    authz-http) echo "127.0.0.1:$PORT_AZ" ;;
    authz-grpc) echo "127.0.0.1:$PORT_AZ_GRPC" ;;
  esac
}
comp_of() { case $1 in proxy) echo fenceproxy ;; proxy-nodrain) echo fenceproxy-nodrain ;; *) echo authz ;; esac; }
admin_of() { case $1 in proxy) echo "$PORT_ADMIN" ;; proxy-nodrain) echo "$PORT_NODRAIN_ADMIN" ;; *) echo "$PORT_AZ_ADMIN" ;; esac; }
pprof_env=()
[[ $PROFILE != 1 ]] || pprof_env=(FENCE_ADMIN_PPROF=true)

for t in redis-server redis-cli curl "$GO" setsid pgrep timeout; do
  command -v "$t" >/dev/null 2>&1 || die "missing tool: $t (Debian: apt-get install -y redis-server curl)"
done
ports_free "$PORT_BASE" $((PORT_BASE + 12))
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
build

# start_authz: fenceproxy authz on the same Redis and routes file as the proxy targets (written by
# lib.sh's start_fenceproxy), HTTP on PORT_AZ, gRPC on PORT_AZ_GRPC; no upstream
start_authz() {
  [[ -f $RUN_DIR/routes.yaml ]] || die "no routes file yet: start_fenceproxy first"
  launch authz env -i PATH="$PATH" \
    FENCE_LISTEN_ADDR="127.0.0.1:$PORT_AZ" FENCE_ADMIN_ADDR="127.0.0.1:$PORT_AZ_ADMIN" \
    FENCE_AUTHZ_GRPC_ADDR="127.0.0.1:$PORT_AZ_GRPC" FENCE_REDIS_URL="redis://127.0.0.1:$PORT_REDIS/0" \
    FENCE_ROUTES_FILE="$RUN_DIR/routes.yaml" FENCE_KEY_PREFIX=fenceaz: FENCE_LOG_LEVEL=info \
    ${GOMAXPROCS:+GOMAXPROCS=$GOMAXPROCS} "${pprof_env[@]}" "$FENCEPROXY_BIN" authz
  await authz "$PORT_AZ"
  await authz "$PORT_AZ_GRPC"
  local i
  for ((i = 0; i < 50; i++)); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT_AZ_ADMIN/readyz") == 200 ]] && return 0
    sleep 0.1
  done
  die "authz not ready (log: $RUN_DIR/authz.log)"
}

# load TARGET SECONDS [-check]: one authzload run against TARGET; its AUTHZLOAD line on stdout
load() {
  local t=$1 secs=$2
  shift 2
  timeout -k 5 $((secs + 30)) "$BENCH_BIN/authzload" -target "$(kind_of "$t")" -addr "$(addr_of "$t")" \
    -c "$CONNS" -d "${secs}s" -resources "$RESOURCES" -grpc-conns "$GRPC_CONNS" -pid "${PID_OF[$(comp_of "$t")]}" "$@"
}

COLUMNS_TSV='round	target	rps	decisions	errors	p50_us	p99_us	cpu_us	gen_cpu_us	redis_us	origin_us	idle_cores	neighbour_cores	wall_s	statuses	evalsha_per_decision'

# measure FILE ROUND TARGET: one measured run; appends a row (COLUMNS_TSV) to FILE
measure_one() {
  local file=$1 round=$2 t=$3 comp line r0 o0 s0 t0 r1 o1 s1 t1 logsize row
  comp=$(comp_of "$t")
  [[ -s $file ]] || printf '%s\n' "$COLUMNS_TSV" >"$file"
  logsize=$(stat -c %s "$RUN_DIR/$comp.log")
  redis-cli -p "$PORT_REDIS" CONFIG RESETSTAT >/dev/null
  r0=$(ticks redis) o0=$(ticks origin) s0=$(head -n 1 /proc/stat) t0=$(date +%s%N)
  line=$(load "$t" "${DURATION%s}" | grep '^AUTHZLOAD ' || true)
  t1=$(date +%s%N) s1=$(head -n 1 /proc/stat) r1=$(ticks redis) o1=$(ticks origin)
  [[ -n $line ]] || die "authzload against $t produced no result"
  local rfile=${file%.tsv}-redis.tsv evalsha
  redis_commands "$rfile" "$REDIS_SETTING" "$round" "$t" "$(sed -n 's/.* decisions=\([0-9]*\) .*/\1/p' <<<"$line")"
  evalsha=$(awk -F'\t' -v r="$round" -v t="$t" '$2 == r && $3 == t && $5 == "evalsha" { v = $8 } END { print v + 0 }' "$rfile")
  row=$(awk -v line="$line" -v rnd="$round" -v tg="$t" -v r="$((r1 - r0))" -v o="$((o1 - o0))" -v k="$CLK_TCK" \
    -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v ncpu="$NCPU" -v es="$evalsha" 'BEGIN {
      n = split(line, f, " "); for (i = 2; i <= n; i++) { split(f[i], kv, "="); v[kv[1]] = kv[2] }
      w = (t1 - t0) / 1e9; split(s0, a, " "); split(s1, b, " ")
      idle = (b[5] - a[5] + b[6] - a[6]) / k / w
      d = v["decisions"]; rps = v["rps"]
      rus = (d > 0 ? r / k * 1e6 / d : 0); ous = (d > 0 ? o / k * 1e6 / d : 0)
      # cores this run used: proxy + generator (both from authzload) + Redis + origin; the rest not idle is neighbours
      mine = rps * (v["cpu_us"] + v["gen_cpu_us"]) / 1e6 + r / k / w + o / k / w
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%s\t%s\n", rnd, tg, rps, d, v["errors"],
        v["p50_us"], v["p99_us"], v["cpu_us"], v["gen_cpu_us"], rus, ous, idle, ncpu - idle - mine, w, v["statuses"], es }')
  printf '%s\n' "$row" >>"$file"
  awk -F'\t' '{ printf "  round %s %-13s %7.0f decisions/s  fenceproxy %6.1f µs/decision (+redis %5.1f, origin %5.1f; generator %5.1f)  p50 %5.2f ms  p99 %6.2f ms  errors=%s  evalsha/decision=%.3f  idle=%.2f neighbours=%.2f\n",
    $1, $2, $3, $8, $10, $11, $9, $6 / 1000, $7 / 1000, $5, $16, $12, $13 }' <<<"$row" >&2
  if [[ $(cut -f5 <<<"$row") != 0 ]]; then
    say "$t: errors in this run: $(cut -f15 <<<"$row"); $comp's log:"
    tail -c +$((logsize + 1)) "$RUN_DIR/$comp.log" | grep -v '"msg":"listening"' | head -n 8 | sed 's/^/    log: /' >&2 || true
  fi
}

say "=== Redis $REDIS_SETTING ($(redis_args "$REDIS_SETTING")); ${TARGETS[*]}, $ROUNDS rounds x ${DURATION} x $CONNS workers, $RESOURCES resources; load average $LOAD_START"
start_redis "$REDIS_SETTING"
start_origin
start_fenceproxy fenceproxy "$PORT_FENCEPROXY" "$PORT_ADMIN" fence: "${pprof_env[@]}"
[[ $NODRAIN == 0 ]] || start_fenceproxy fenceproxy-nodrain "$PORT_NODRAIN" "$PORT_NODRAIN_ADMIN" fencend: FENCE_DRAIN=off "${pprof_env[@]}"
start_authz
checks=""
for t in "${TARGETS[@]}"; do checks+=" $t=$(load "$t" 1 -check || true)"; done
checks=${checks# }
say "functional checks (fresh admitted, older 409, equal admitted): $checks"
[[ $checks != *FAIL* && $(grep -o '=ok' <<<"$checks" | wc -l) == "${#TARGETS[@]}" ]] || die "a functional check failed"

for t in "${TARGETS[@]}"; do load "$t" "$WARMUP" >/dev/null; done
results=$OUT_DIR/authz.tsv
rm -f "$results"
n=${#TARGETS[@]}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do measure_one "$results" "$r" "${TARGETS[$(((r - 1 + i) % n))]}"; done
done
if [[ $PROFILE == 1 ]]; then
  for t in "${TARGETS[@]}"; do
    say "profiling $(comp_of "$t") over ${DURATION} of $t's load"
    curl -s -m $((${DURATION%s} + 30)) -o "$OUT_DIR/cpu.$t.pprof" \
      "http://127.0.0.1:$(admin_of "$t")/debug/pprof/profile?seconds=${DURATION%s}" &
    prof=$!
    sleep 0.2
    load "$t" "${DURATION%s}" >/dev/null
    wait "$prof" || say "profile of $t failed"
  done
fi
stop_all
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# per round, then medians and the median of the per-round ratios [min-max]
awk -F'\t' -v checks="$checks" -v setting="$REDIS_SETTING" -v ls="$LOAD_START" -v le="$LOAD_END" -v nodrain="$NODRAIN" \
  -v conns="$CONNS" -v dur="$DURATION" '
  NR == 1 { next }
  { t = $2; r = $1; if (r > R) R = r
    rps[t, r] = $3; cpu[t, r] = $8; gen[t, r] = $9; red[t, r] = $10; ori[t, r] = $11; p99[t, r] = $7 / 1000
    err[t] += $5; nb[t, r] = $13; es[t, r] = $16; allnb["x", ++N] = $13; if (!(t in seen)) { seen[t] = 1; order[++T] = t } }
  function med(a, t,   n, i, j, v, x) { n = 0; for (i = 1; i <= R; i++) v[++n] = a[t, i]
    for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  function lo(a, t,   i, m) { m = a[t, 1]; for (i = 2; i <= R; i++) if (a[t, i] < m) m = a[t, i]; return m }
  function hi(a, t,   i, m) { m = a[t, 1]; for (i = 2; i <= R; i++) if (a[t, i] > m) m = a[t, i]; return m }
  function ratio(a, b,   i, q) { for (i = 1; i <= R; i++) q["x", i] = rps[a, i] / rps[b, i]
    return sprintf("%.2f[%.2f-%.2f]", med(q, "x"), lo(q, "x"), hi(q, "x")) }
  END {
    printf "%-5s %-13s %12s %10s %9s %10s %9s %8s %8s %10s\n", "round", "target", "decisions/s", "cpu_us", "redis_us", "origin_us", "gen_us", "p99_ms", "evalsha", "neighbours"
    for (r = 1; r <= R; r++) {
      for (i = 1; i <= T; i++) { t = order[i]
        printf "%-5d %-13s %12.0f %10.1f %9.1f %10.1f %9.1f %8.2f %8.3f %10.2f\n", r, t, rps[t, r], cpu[t, r], red[t, r], ori[t, r], gen[t, r], p99[t, r], es[t, r], nb[t, r] }
      printf "      round %d: authz-http/proxy=%.2f authz-grpc/proxy=%.2f authz-grpc/authz-http=%.2f", r, \
        rps["authz-http", r] / rps["proxy", r], rps["authz-grpc", r] / rps["proxy", r], rps["authz-grpc", r] / rps["authz-http", r]
      if (nodrain) printf " proxy/proxy-nodrain=%.2f", rps["proxy", r] / rps["proxy-nodrain", r]
      printf "\n" }
    printf "%-5s %-13s %12s %10s %9s %10s %9s %8s %8s %10s\n", "", "", "median", "median", "median", "median", "median", "median", "median", "median"
    for (i = 1; i <= T; i++) { t = order[i]
      printf "%-5s %-13s %12.0f %10.1f %9.1f %10.1f %9.1f %8.2f %8.3f %10.2f\n", "med", t, med(rps, t), med(cpu, t), med(red, t), med(ori, t), med(gen, t), med(p99, t), med(es, t), med(nb, t) }
    printf "authz[redis=%s]: %d rounds x %s x %d workers |", setting, R, dur, conns
    for (i = 1; i <= T; i++) { t = order[i]; printf " %s=%.0f/s[%.0f-%.0f]", t, med(rps, t), lo(rps, t), hi(rps, t) }
    printf " | authz-http/proxy=%s authz-grpc/proxy=%s authz-grpc/authz-http=%s", ratio("authz-http", "proxy"), \
      ratio("authz-grpc", "proxy"), ratio("authz-grpc", "authz-http")
    if (nodrain) printf " proxy/proxy-nodrain=%s authz-http/proxy-nodrain=%s", ratio("proxy", "proxy-nodrain"), ratio("authz-http", "proxy-nodrain")
    printf " | fenceproxy-cpu-us/decision"
    for (i = 1; i <= T; i++) { t = order[i]; printf " %s=%.0f[%.0f-%.0f](+redis %.0f)", t, med(cpu, t), lo(cpu, t), hi(cpu, t), med(red, t) }
    printf " | evalsha/decision"
    for (i = 1; i <= T; i++) { t = order[i]; printf " %s=%.3f", t, med(es, t) }
    printf " | errors"
    for (i = 1; i <= T; i++) printf "%s%d", (i == 1 ? "=" : "/"), err[order[i]]
    R0 = R; R = N; printf " | neighbour-cores median=%.2f[%.2f-%.2f] over runs", med(allnb, "x"), lo(allnb, "x"), hi(allnb, "x"); R = R0
    printf " | loadavg start=%s end=%s | checks: %s\n", ls, le, checks }' "$results" | tee "$OUT_DIR/authz-summary.txt"
