#!/usr/bin/env bash
# bench/signed.sh: what signed tokens (FENCE_TOKEN_KEYS_FILE) cost, against
# plain tokens, in ONE interleaved run.
#
#   bench/signed.sh                 ~3 min: ROUNDS=3 DURATION=8s, plus ~25 s minting the tokens
#
# Targets, in the order each round runs them:
#   go-plain                  the plain Go reverse proxy (context)
#   fenceproxy                plain decimal tokens, compare.sh's load (bench/wrk/put.lua): the baseline
#   fenceproxy-signed-repeat  FENCE_TOKEN_KEYS_FILE set (EdDSA, keygen's default kind); each
#                             resource's signed token repeats for REPEAT (100) requests, then the
#                             next, higher one: the verifier's cache answers 99 of 100
#   fenceproxy-signed-unique  the same proxy setup; a new signed token on every request (the
#                             tokens still rise per resource), so every request checks a signature
#                             and the cache only churns
# All fenceproxy targets use one Redis (REDIS_SETTING, default none: no persistence, so the
# proxy's CPU and not fsync decides), each under its own key prefix. The signed loads are
# bench/wrk/signed.lua: the same requests as put.lua (PUT /r/k<n>, 20-byte body, thread i of 2
# owns the keys n % 2 == i), with tokens bench/cmd/signtokens minted before the run (one file
# per wrk thread, each token naming its resource in res, exp 2 h ahead). Each wrk run carries
# on where the previous one of that target stopped (one token stream per target over the
# warm-up and every round), so tokens keep rising across rounds, and with REPEAT a token is
# verified once per REPEAT requests of its resource over the whole run, not once more per round.
# Minting: (WARMUP + ROUNDS x DURATION) x MAX_RPS tokens; a run that used them all fails.
#
# Load, CPU accounting and the per-run lines on stderr are compare.sh's (lib.sh measure).
# Functional checks: plain fenceproxy lib.sh's check_fencing; the signed targets a fresh
# signed token admitted, an older one refused (409), a plain number refused (401).
#
# stdout: one "signed[redis=SETTING]:" line: the median req/s per target; signed-repeat/plain,
# signed-unique/plain (and each and plain against go-plain) as the median of the per-round
# ratios [min-max]; proxy CPU µs per request (median over rounds; Redis's not included).
# Raw rows: $OUT_DIR/signed.tsv (OUT_DIR defaults to the run directory).
#
# PROFILE=1: after the rounds, a CPU profile of each fenceproxy target over one more
# (unmeasured) DURATION of its load, from the admin port (the targets then run with
# FENCE_ADMIN_PPROF=true): $OUT_DIR/cpu.TARGET.pprof (go tool pprof -top BIN FILE).
#
# Env: ROUNDS=3 DURATION=8s WARMUP=2s CONNS=32 REPEAT=100 MAX_RPS=12000 REDIS_SETTING=none|durable
#      ORDER="go-plain fenceproxy fenceproxy-signed-repeat fenceproxy-signed-unique"
#      PROFILE=0  PORT_BASE=28100 (PORT_BASE..+13 must be free)
#      FENCEPROXY_BIN (skip the build)  OUT_DIR  KEEP_RUN=1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

run_settings
: "${REPEAT:=100}" "${MAX_RPS:=12000}" "${REDIS_SETTING:=none}" "${PROFILE:=0}"
[[ $PROFILE == 0 || $PROFILE == 1 ]] || die "PROFILE must be 0 or 1"
PORT_REPEAT=$((PORT_BASE + 10))
PORT_REPEAT_ADMIN=$((PORT_BASE + 11))
PORT_UNIQUE=$((PORT_BASE + 12))
PORT_UNIQUE_ADMIN=$((PORT_BASE + 13))
read -r -a TARGETS <<<"${ORDER:-go-plain fenceproxy fenceproxy-signed-repeat fenceproxy-signed-unique}"
TOKENS_DIR=$RUN_DIR/tokens

# lib.sh's per-target lookups, extended by the two new targets
extend_targets
port_of() {
  case $1 in
    fenceproxy-signed-repeat) echo "$PORT_REPEAT" ;;
    fenceproxy-signed-unique) echo "$PORT_UNIQUE" ;;
    *) lib_port_of "$1" ;;
  esac
}
admin_port_of() {
  case $1 in
    fenceproxy-signed-repeat) echo "$PORT_REPEAT_ADMIN" ;;
    fenceproxy-signed-unique) echo "$PORT_UNIQUE_ADMIN" ;;
    *) lib_admin_port_of "$1" ;;
  esac
}
key_prefix_of() {
  case $1 in
    fenceproxy-signed-repeat) echo fencesr: ;;
    fenceproxy-signed-unique) echo fencesu: ;;
    *) lib_key_prefix_of "$1" ;;
  esac
}
is_fenceproxy() { [[ $1 == fenceproxy || $1 == fenceproxy-* ]]; }
uses_redis() { is_fenceproxy "$1"; }
is_signed() { [[ $1 == fenceproxy-signed-* ]]; }
explain() { case $1 in fenceproxy-signed-*) explain_added "$@" ;; *) lib_explain "$@" ;; esac; }

# lib.sh's measure and warm send the load of WRK_LUA (default put.lua); for the
# signed targets they send signed.lua's, with the target's token files and state.
copy_fn measure lib_measure_lua
copy_fn warm lib_warm_lua
# with_load TARGET CMD...: CMD with WRK_LUA and the signed load's environment for TARGET
with_load() {
  local target=$1
  shift
  if is_signed "$target"; then
    local reps=1
    [[ $target != fenceproxy-signed-repeat ]] || reps=$REPEAT
    WRK_LUA=$BENCH_DIR/wrk/signed.lua BENCH_TOKENS=$TOKENS_DIR/tokens BENCH_TOKEN_STATE=$RUN_DIR/state.$target \
      BENCH_REPEAT=$reps "$@"
  else
    WRK_LUA=$BENCH_DIR/wrk/put.lua "$@"
  fi
}
# tokens_left TARGET: fail when the target's load ran out of minted tokens
tokens_left() {
  is_signed "$1" || return 0
  local f ex=0
  for f in "$RUN_DIR/state.$1".*; do ex=$((ex + $(cut -d' ' -f4 "$f"))); done
  ((ex == 0)) || die "$1 ran out of minted tokens ($ex blocks not renewed): raise MAX_RPS (now $MAX_RPS)"
}
measure() {
  with_load "$4" lib_measure_lua "$@"
  tokens_left "$4"
}
warm() {
  with_load "$1" lib_warm_lua "$@"
  tokens_left "$1"
}

check_tools
ports_free $((PORT_BASE + 10)) $((PORT_BASE + 13))
build

# The tokens: one file per wrk thread (lib.sh's measure and warm run 2), enough for the
# unique load at MAX_RPS over the warm-up and every round (and the profiling run), plus a block.
secs=${DURATION%s}
per_thread=$(((WARMUP + (ROUNDS + PROFILE) * secs) * MAX_RPS / 2 + 500))
say "minting $((2 * per_thread)) EdDSA tokens (MAX_RPS=$MAX_RPS)"
"$BENCH_BIN/signtokens" -out "$TOKENS_DIR" -kind EdDSA -threads 2 -keys 1000 -prefix k -per-thread "$per_thread"

# check_signed TARGET: a fresh signed token admitted, an older one refused, a plain number refused
check_signed() {
  local url path a b c
  url="http://127.0.0.1:$(port_of "$1")"
  path=/r/signed-sanity
  put() { curl -s -o /dev/null -m 5 -w '%{http_code}' -X PUT -H "Fencing-Token: $1" --data-binary x "$url$path" || true; }
  a=$(put "$(cat "$TOKENS_DIR/check.fresh")")
  b=$(put "$(cat "$TOKENS_DIR/check.older")")
  c=$(put 3)
  if [[ $a == 200 && $b == 409 && $c == 401 ]]; then echo ok; else echo "FAIL(fresh:$a/200,older:$b/409,plain:$c/401)"; fi
}

pprof_env=()
[[ $PROFILE != 1 ]] || pprof_env=(FENCE_ADMIN_PPROF=true)
say "=== Redis $REDIS_SETTING ($(redis_args "$REDIS_SETTING")); ${TARGETS[*]}, $ROUNDS x wrk -c$CONNS -d$DURATION, repeat=$REPEAT"
start_redis "$REDIS_SETTING"
start_origin
start_goplain
start_fenceproxy fenceproxy "$PORT_FENCEPROXY" "$PORT_ADMIN" fence: "${pprof_env[@]}"
start_fenceproxy fenceproxy-signed-repeat "$PORT_REPEAT" "$PORT_REPEAT_ADMIN" fencesr: \
  FENCE_TOKEN_KEYS_FILE="$TOKENS_DIR/jwks.json" "${pprof_env[@]}"
start_fenceproxy fenceproxy-signed-unique "$PORT_UNIQUE" "$PORT_UNIQUE_ADMIN" fencesu: \
  FENCE_TOKEN_KEYS_FILE="$TOKENS_DIR/jwks.json" "${pprof_env[@]}"
checks="fenceproxy=$(check_fencing fenceproxy fence:)"
for t in fenceproxy-signed-repeat fenceproxy-signed-unique; do checks+=" $t=$(check_signed "$t")"; done
say "functional checks: $checks"
[[ $checks != *FAIL* ]] || die "a functional check failed"

for t in "${TARGETS[@]}"; do warm "$t" "$WARMUP"; done
results=$OUT_DIR/signed.tsv
rm -f "$results" "$OUT_DIR/signed-redis.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${TARGETS[@]}"; do measure "$results" "$REDIS_SETTING" "$r" "$t" "$CONNS" "$DURATION"; done
done
if [[ $PROFILE == 1 ]]; then
  for t in "${TARGETS[@]}"; do
    is_fenceproxy "$t" || continue
    say "profiling $t over ${secs}s of its load"
    curl -s -m $((secs + 30)) -o "$OUT_DIR/cpu.$t.pprof" \
      "http://127.0.0.1:$(admin_port_of "$t")/debug/pprof/profile?seconds=$secs" &
    prof=$!
    sleep 0.2
    warm "$t" "$secs"
    wait "$prof" || say "profile of $t failed"
  done
fi
stop_all

# medians, per-round ratio ranges, proxy CPU µs/request (median over rounds)
awk -F'\t' -v checks="$checks" -v setting="$REDIS_SETTING" -v reps="$REPEAT" "$AWK_ROUNDS"'
  NR == 1 { next }
  { rps[$3, $2] = $5; us[$3, $2] = ($5 > 0 ? $14 * 1e6 / $5 : 0); bad[$3] += $11 + $12; if ($2 > R) R = $2
    idle[$2 ":" $3] = $18; nidle++; sidle += $18; if (nidle == 1 || $18 < lidle) lidle = $18; if ($18 > hidle) hidle = $18 }
  function rounds(a, b,   i, s) { s = ""; for (i = 1; i <= R; i++) s = s (i > 1 ? "," : "") sprintf("%.2f", rps[a, i] / rps[b, i]); return s }
  END {
    printf "signed[redis=%s]: go-plain=%.0frps plain=%.0frps signed-repeat=%.0frps signed-unique=%.0frps", setting, \
      med(rps, "go-plain"), med(rps, "fenceproxy"), med(rps, "fenceproxy-signed-repeat"), med(rps, "fenceproxy-signed-unique")
    printf " | repeat%d/plain=%s (rounds %s) goal>=0.9:%s", reps, ratio("fenceproxy-signed-repeat", "fenceproxy"), \
      rounds("fenceproxy-signed-repeat", "fenceproxy"), (med_ratio("fenceproxy-signed-repeat", "fenceproxy") >= 0.9 ? "met" : "not-met")
    printf "(median; rounds below 0.9: %d of %d)", below("fenceproxy-signed-repeat", "fenceproxy", 0.9), R
    printf " unique/plain=%s (rounds %s)", ratio("fenceproxy-signed-unique", "fenceproxy"), rounds("fenceproxy-signed-unique", "fenceproxy")
    printf " | plain/go-plain=%s repeat/go-plain=%s unique/go-plain=%s", ratio("fenceproxy", "go-plain"), \
      ratio("fenceproxy-signed-repeat", "go-plain"), ratio("fenceproxy-signed-unique", "go-plain")
    printf " | proxy-cpu-us/req go-plain=%.0f plain=%.0f repeat=%.0f unique=%.0f", med(us, "go-plain"), \
      med(us, "fenceproxy"), med(us, "fenceproxy-signed-repeat"), med(us, "fenceproxy-signed-unique")
    printf " | idle-cores mean=%.2f [%.2f-%.2f]", sidle / nidle, lidle, hidle
    printf " | rounds=%d non2xx+sockerr=%d/%d/%d/%d checks: %s\n", R, bad["go-plain"], bad["fenceproxy"], \
      bad["fenceproxy-signed-repeat"], bad["fenceproxy-signed-unique"], checks }
  function below(a, b, x,   i, n) { n = 0; for (i = 1; i <= R; i++) if (rps[a, i] / rps[b, i] < x) n++; return n }
  function med_ratio(a, b,   i, q) { for (i = 1; i <= R; i++) q["x", i] = rps[a, i] / rps[b, i]; return med(q, "x") }
  ' "$results" | tee "$OUT_DIR/signed-summary.txt"
