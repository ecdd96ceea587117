-- signed.lua: bench/signed.sh's load with signed tokens, otherwise put.lua's.
--
--   BENCH_TOKENS=DIR/tokens BENCH_TOKEN_STATE=FILE BENCH_REPEAT=R \
--   wrk -t T -c C -d D -s bench/wrk/signed.lua http://127.0.0.1:PORT -- T [KEYS] [KEYPREFIX]
--
-- As put.lua: every request is PUT /r/<KEYPREFIX><n> with a 20-byte body,
-- thread i of T uses only the keys n with n % T == i (so two threads never
-- send one resource), and goes round its keys in order. The Fencing-Token
-- is a signed token (a JWS) that bench/cmd/signtokens minted ahead:
-- thread i reads BENCH_TOKENS.<i>, a header line and then blocks of one
-- token per key of the thread (fences rising from block to block). The
-- thread sends one block's tokens for BENCH_REPEAT rounds over its keys
-- (each resource's token repeats R times; 1: a new token on every request),
-- then reads the next block. It reads the file as it goes, so memory stays
-- one block per thread whatever the run's length.
--
-- Across wrk runs: done() writes, per thread, where it was (BENCH_TOKEN_STATE.<i>:
-- "<byte offset of the block> <next key slot> <rounds done on the block>
-- <exhausted>"), and init() carries on from there, so the runs of a target
-- are one stream: each resource's tokens never fall (the marks live on in
-- Redis), and a token repeats R times in all, not R times per run (a run
-- that started on a new block would check 1,000 signatures more than the
-- stream does). When the file runs out, the
-- thread keeps its last block (its tokens are still admitted, as equal
-- ones, but are no longer new) and counts it in "exhausted", which
-- bench/signed.sh treats as a failed run (mint more: MAX_RPS).
--
-- With BENCH_STATUS=1 responses are counted by status code, as in put.lua.
-- done() prints put.lua's "WRKOUT" line, plus exhausted=N.

local all = {}

function setup(thread)
  thread:set("me", #all)
  table.insert(all, thread)
end

-- nextblock: the block at the file's position becomes the current one
local function nextblock()
  local at = tokfile:seek()
  local b = {}
  for i = 0, slots - 1 do
    local t = tokfile:read("*l")
    if not t then
      exhausted = exhausted + 1
      tokfile:seek("set", at)
      return
    end
    b[i] = t
  end
  block = b
  offset = at
end

function init(args)
  nthreads = tonumber(args[1] or "1")
  nkeys = tonumber(args[2] or "1000")
  keyprefix = args[3] or "k"
  me = me or 0
  slots = math.floor((nkeys - 1 - me) / nthreads) + 1 -- keys this thread owns
  reps = tonumber(os.getenv("BENCH_REPEAT") or "1")
  local tokens = assert(os.getenv("BENCH_TOKENS"), "BENCH_TOKENS is not set")
  statefile = assert(os.getenv("BENCH_TOKEN_STATE"), "BENCH_TOKEN_STATE is not set") .. "." .. me
  tokfile = assert(io.open(tokens .. "." .. me, "r"))
  local head = tokfile:read("*l") or ""
  local want = string.format("#signed-tokens threads=%d keys=%d prefix=%s thread=%d slots=%d ",
    nthreads, nkeys, keyprefix, me, slots)
  if head:sub(1, #want) ~= want then
    error(string.format("%s.%d was minted for another load: %q, want %q...", tokens, me, head, want))
  end
  exhausted = 0
  slot = 0
  round = 0
  local st = io.open(statefile, "r")
  if st then
    local at = st:read("*n")
    slot = st:read("*n")
    round = st:read("*n")
    st:close()
    tokfile:seek("set", at)
  end
  nextblock()
  if not block then
    error(string.format("%s.%d holds no tokens at byte %d", tokens, me, tokfile:seek()))
  end
  paths = {}
  for s = 0, slots - 1 do paths[s] = "/r/" .. keyprefix .. (me + s * nthreads) end
  payload = "twenty-byte-payload\n"
  headers = { ["Content-Type"] = "application/octet-stream" }
  codes = {}
end

function request()
  headers["Fencing-Token"] = block[slot]
  local path = paths[slot]
  slot = slot + 1
  if slot == slots then
    slot = 0
    round = round + 1
    if round == reps then
      round = 0
      nextblock()
    end
  end
  return wrk.format("PUT", path, headers, payload)
end

if os.getenv("BENCH_STATUS") == "1" then
  function response(status, hdrs, body)
    codes[status] = (codes[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local byStatus = {}
  local ex = 0
  local prefix = os.getenv("BENCH_TOKEN_STATE")
  for _, t in ipairs(all) do
    local c = t:get("codes")
    if type(c) == "table" then
      for s, n in pairs(c) do byStatus[s] = (byStatus[s] or 0) + n end
    end
    -- the next run carries on with the next request of this one
    local st = assert(io.open(prefix .. "." .. t:get("me"), "w"))
    st:write(string.format("%d %d %d %d\n", t:get("offset"), t:get("slot"), t:get("round"), t:get("exhausted")))
    st:close()
    ex = ex + t:get("exhausted")
  end
  local keys = {}
  for s in pairs(byStatus) do table.insert(keys, s) end
  table.sort(keys)
  local parts = {}
  for _, s in ipairs(keys) do table.insert(parts, s .. ":" .. byStatus[s]) end
  local e = summary.errors
  io.write(string.format(
    "WRKOUT rps=%.1f requests=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d sockerr=%d statuses=%s exhausted=%d\n",
    summary.requests / (summary.duration / 1e6), summary.requests,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout,
    (#parts > 0) and table.concat(parts, ",") or "-", ex))
end
