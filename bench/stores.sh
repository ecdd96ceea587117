#!/usr/bin/env bash
# bench/stores.sh: fenceproxy on etcd against fenceproxy on Redis, and the
# mark cache on against off, in ONE interleaved run (the store goals of docs/performance.md).
#
#   bench/stores.sh                 ~3 min: ROUNDS=3 DURATION=8s
#
# Targets, in the order each round runs them:
#   go-plain             the plain Go reverse proxy (baseline)
#   fenceproxy           FENCE_STORE=redis, Redis appendonly yes + appendfsync always,
#                        mark cache on (the default, FENCE_MARK_CACHE=100000)
#   fenceproxy-etcd      FENCE_STORE=etcd, one local etcd member (etcd's defaults:
#                        fsync on every commit), started here, data dir under the run dir
#   fenceproxy-nocache   as fenceproxy, FENCE_MARK_CACHE=0 (key prefix fencenc: in the same Redis)
# Load, CPU accounting and the per-run lines on stderr are compare.sh's
# (lib.sh measure). Functional check: a fresh token is admitted, an older one
# refused (etcd's mark is not read back; the Redis targets' is).
#
# stdout: one "stores[redis=durable]:" line: the median req/s per target; the
# ratios etcd/redis-durable, cache-on/cache-off and each against go-plain, as
# the median of the per-round ratios [min-max]; proxy CPU µs per request
# (etcd's and Redis's own CPU not included); etcd-admissions/txn, the etcd
# store's mean batch (admissions per etcd transaction over the whole run).
# Raw rows: $OUT_DIR/stores.tsv (OUT_DIR defaults to the run directory).
#
# Env: ROUNDS=3 DURATION=8s WARMUP=2s CONNS=32 PORT_BASE=28100 (PORT_BASE..+15 must be free)
#      ORDER="go-plain fenceproxy fenceproxy-etcd fenceproxy-nocache" (the order within a round)
#      ETCD_BIN=etcd  FENCEPROXY_BIN (skip the build)  OUT_DIR  KEEP_RUN=1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

run_settings
: "${ETCD_BIN:=etcd}"
PORT_ETCDFP=$((PORT_BASE + 10))
PORT_ETCDFP_ADMIN=$((PORT_BASE + 11))
PORT_NOCACHE=$((PORT_BASE + 12))
PORT_NOCACHE_ADMIN=$((PORT_BASE + 13))
PORT_ETCD=$((PORT_BASE + 14))
PORT_ETCD_PEER=$((PORT_BASE + 15))
read -r -a TARGETS <<<"${ORDER:-go-plain fenceproxy fenceproxy-etcd fenceproxy-nocache}"

# lib.sh's per-target lookups, extended by the two new targets
extend_targets
port_of() {
  case $1 in
    fenceproxy-etcd) echo "$PORT_ETCDFP" ;;
    fenceproxy-nocache) echo "$PORT_NOCACHE" ;;
    *) lib_port_of "$1" ;;
  esac
}
admin_port_of() {
  case $1 in
    fenceproxy-etcd) echo "$PORT_ETCDFP_ADMIN" ;;
    fenceproxy-nocache) echo "$PORT_NOCACHE_ADMIN" ;;
    *) lib_admin_port_of "$1" ;;
  esac
}
key_prefix_of() {
  case $1 in
    fenceproxy-etcd) echo fence: ;;
    fenceproxy-nocache) echo fencenc: ;;
    *) lib_key_prefix_of "$1" ;;
  esac
}
is_fenceproxy() { [[ $1 == fenceproxy || $1 == fenceproxy-* ]]; }
uses_redis() { [[ $1 == fenceproxy || $1 == fenceproxy-nocache ]]; }
explain() { case $1 in fenceproxy-etcd | fenceproxy-nocache) explain_added "$@" ;; *) lib_explain "$@" ;; esac; }

command -v "$ETCD_BIN" >/dev/null || die "etcd not found (ETCD_BIN)"
check_tools
ports_free $((PORT_BASE + 10)) $((PORT_BASE + 15))
build
say "etcd: $("$ETCD_BIN" --version | head -n 1)"

start_etcd() {
  local dir=$RUN_DIR/etcd
  rm -rf "$dir" && mkdir -p "$dir"
  launch etcd "$ETCD_BIN" --name bench --data-dir "$dir" \
    --listen-client-urls "http://127.0.0.1:$PORT_ETCD" --advertise-client-urls "http://127.0.0.1:$PORT_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PORT_ETCD_PEER" \
    --initial-cluster "bench=http://127.0.0.1:$PORT_ETCD_PEER" --initial-cluster-state new --log-level warn
  await etcd "$PORT_ETCD"
  local i
  for ((i = 0; i < 100; i++)); do
    [[ $(curl -s -m 2 "http://127.0.0.1:$PORT_ETCD/health") == *'"health":"true"'* ]] && return 0
    sleep 0.1
  done
  die "etcd not healthy (log: $RUN_DIR/etcd.log)"
}

# check_simple TARGET: a fresh token admitted, an older one refused
check_simple() {
  local url path a b
  url="http://127.0.0.1:$(port_of "$1")"
  path="/r/sanity-$$-$RANDOM"
  a=$(curl -s -o /dev/null -m 5 -w '%{http_code}' -X PUT -H 'Fencing-Token: 18446744073709551614' --data-binary x "$url$path" || true)
  b=$(curl -s -o /dev/null -m 5 -w '%{http_code}' -X PUT -H 'Fencing-Token: 18446744073709551613' --data-binary x "$url$path" || true)
  if [[ $a == 200 && $b == 409 ]]; then echo ok; else echo "FAIL(fresh:$a/200,older:$b/409)"; fi
}

say "=== $(redis_args durable); ${TARGETS[*]}, $ROUNDS x wrk -c$CONNS -d$DURATION"
start_redis durable
start_etcd
start_origin
start_goplain
start_fenceproxy
# lib.sh always sets FENCE_REDIS_URL, which FENCE_STORE=etcd refuses: env -u drops it
start_fenceproxy fenceproxy-etcd "$PORT_ETCDFP" "$PORT_ETCDFP_ADMIN" fence: \
  env -u FENCE_REDIS_URL FENCE_STORE=etcd FENCE_ETCD_ENDPOINTS="127.0.0.1:$PORT_ETCD"
start_fenceproxy fenceproxy-nocache "$PORT_NOCACHE" "$PORT_NOCACHE_ADMIN" fencenc: FENCE_MARK_CACHE=0
checks=""
for t in fenceproxy fenceproxy-etcd fenceproxy-nocache; do checks+=" $t=$(check_simple "$t")"; done
say "functional checks:$checks"
[[ $checks != *FAIL* ]] || die "a functional check failed"

for t in "${TARGETS[@]}"; do warm "$t" "$WARMUP"; done
results=$OUT_DIR/stores.tsv
rm -f "$results" "$OUT_DIR/stores-redis.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${TARGETS[@]}"; do measure "$results" durable "$r" "$t" "$CONNS" "$DURATION"; done
done
etcd_db=$(du -sh "$RUN_DIR/etcd" | cut -f1)
# the mean batch: fenceproxy-etcd's admissions (admitted and stale, warm-up and checks included) per etcd
# transaction (a batch of releases alone counts as one too)
etcd_batch=$(awk -v d="$(fence_decisions fenceproxy-etcd)" -v txns="$(curl -s -m 5 "http://127.0.0.1:$PORT_ETCD/metrics" |
  awk '/^grpc_server_handled_total\{.*grpc_method="Txn"/ { n += $NF } END { print n + 0 }')" 'BEGIN {
  n = split(d, kv, /[,=]/); for (i = 1; i < n; i += 2) if (kv[i] == "admitted" || kv[i] == "stale") a += kv[i + 1]
  printf "%.1f", (txns > 0 ? a / txns : 0) }')
stop_all

# medians, per-round ratio ranges, proxy CPU µs/request (median over rounds)
awk -F'\t' -v checks="${checks# }" -v etcddb="$etcd_db" -v etcdbatch="$etcd_batch" "$AWK_ROUNDS"'
  NR == 1 { next }
  { rps[$3, $2] = $5; us[$3, $2] = ($5 > 0 ? $14 * 1e6 / $5 : 0); bad[$3] += $11 + $12; if ($2 > R) R = $2 }
  END {
    printf "stores[redis=durable]: go-plain=%.0frps redis=%.0frps etcd=%.0frps redis-nocache=%.0frps", \
      med(rps, "go-plain"), med(rps, "fenceproxy"), med(rps, "fenceproxy-etcd"), med(rps, "fenceproxy-nocache")
    printf " | etcd/redis=%s cache-on/off=%s", ratio("fenceproxy-etcd", "fenceproxy"), ratio("fenceproxy", "fenceproxy-nocache")
    printf " | redis/go-plain=%s etcd/go-plain=%s nocache/go-plain=%s", ratio("fenceproxy", "go-plain"), \
      ratio("fenceproxy-etcd", "go-plain"), ratio("fenceproxy-nocache", "go-plain")
    printf " | proxy-cpu-us/req go-plain=%.0f redis=%.0f etcd=%.0f nocache=%.0f", med(us, "go-plain"), \
      med(us, "fenceproxy"), med(us, "fenceproxy-etcd"), med(us, "fenceproxy-nocache")
    printf " | rounds=%d non2xx+sockerr=%d/%d/%d/%d etcd-data=%s etcd-admissions/txn=%s checks: %s\n", R, bad["go-plain"], \
      bad["fenceproxy"], bad["fenceproxy-etcd"], bad["fenceproxy-nocache"], etcddb, etcdbatch, checks }' "$results" | tee "$OUT_DIR/stores-summary.txt"
