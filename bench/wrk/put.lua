-- put.lua: the closed-loop load of bench/compare.sh and bench/sweep.sh.
--
--   wrk -t T -c C -d D -s bench/wrk/put.lua http://127.0.0.1:PORT -- T [KEYS] [KEYPREFIX]
--
-- Every request is PUT /r/<KEYPREFIX><n> (n in 0..KEYS-1, default k0..k999)
-- with a 20-byte body and "Fencing-Token: <epoch seconds><9-digit counter>",
-- a 19-digit decimal above 2^53, so a proxy that compares tokens as doubles
-- would be caught. Thread i of T only uses the keys n with n % T == i, and
-- its counter only grows, so each resource sees rising tokens within a run;
-- a later run starts in a later second, so its tokens are above every token
-- of the earlier runs. A correct fencing proxy therefore admits everything.
--
-- With BENCH_STATUS=1 in the environment, responses are also counted by
-- status code (costs wrk some CPU per response, so it is off by default).
-- done() prints one line starting with "WRKOUT" that the scripts parse.

local all = {}

function setup(thread)
  thread:set("me", #all)
  table.insert(all, thread)
end

function init(args)
  nthreads = tonumber(args[1] or "1")
  nkeys = tonumber(args[2] or "1000")
  keyprefix = args[3] or "k"
  me = me or 0
  epoch = os.time()
  seq = 0
  slot = 0
  slots = math.floor((nkeys - 1 - me) / nthreads) + 1 -- keys this thread owns
  payload = "twenty-byte-payload\n"
  headers = { ["Content-Type"] = "application/octet-stream" }
  codes = {}
end

function request()
  seq = seq + 1
  local key = me + slot * nthreads
  slot = (slot + 1) % slots
  headers["Fencing-Token"] = string.format("%d%09d", epoch, seq)
  return wrk.format("PUT", "/r/" .. keyprefix .. key, headers, payload)
end

if os.getenv("BENCH_STATUS") == "1" then
  function response(status, hdrs, body)
    codes[status] = (codes[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local byStatus = {}
  for _, t in ipairs(all) do
    local c = t:get("codes")
    if type(c) == "table" then
      for s, n in pairs(c) do byStatus[s] = (byStatus[s] or 0) + n end
    end
  end
  local keys = {}
  for s in pairs(byStatus) do table.insert(keys, s) end
  table.sort(keys)
  local parts = {}
  for _, s in ipairs(keys) do table.insert(parts, s .. ":" .. byStatus[s]) end
  local e = summary.errors
  io.write(string.format(
    "WRKOUT rps=%.1f requests=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d sockerr=%d statuses=%s\n",
    summary.requests / (summary.duration / 1e6), summary.requests,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout,
    (#parts > 0) and table.concat(parts, ",") or "-"))
end
