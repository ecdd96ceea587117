-- fence_access.lua: the peer fenceproxy is compared with, nginx's access
-- phase doing the same compare-and-advance in Redis as fenceproxy: one EVALSHA
-- per fenced request over a pooled cosocket, failing closed (503) when Redis
-- does not answer. Written for the benchmark only: it implements the part of
-- fenceproxy's rules the load uses (>= comparison, canonical uint64
-- tokens, 409/428/400/503), not routes files or metrics.
--
-- Loaded by nginx-lua.conf (bench/lib.sh renders it):
--   init_by_lua_block { require("fence_access").configure{ host=..., port=..., prefix=..., timeout_ms=... } }
--   access_by_lua_block { require("fence_access").check("r/" .. ngx.var.fence_key) }

local M = {}

local cfg = { host = "127.0.0.1", port = 6379, prefix = "fencelua:", timeout_ms = 500, header = "Fencing-Token" }

-- Runs inside Redis. Tokens and marks are compared exactly: both are
-- left-padded to 20 digits and cut into two 10-digit halves, each below 2^53,
-- so the doubles Lua compares are exact. Returns 1 when admitted, or the
-- mark (a bulk string) that makes the token stale.
local ADMIT = [[
local function halves(s)
  local p = string.rep("0", 20 - #s) .. s
  return tonumber(string.sub(p, 1, 10)), tonumber(string.sub(p, 11, 20))
end
local function wellformed(s)
  if #s < 1 or #s > 20 or string.find(s, "^%d+$") == nil then return false end
  if #s > 1 and string.sub(s, 1, 1) == "0" then return false end
  if #s < 20 then return true end
  local h, l = halves(s)
  return h < 1844674407 or (h == 1844674407 and l <= 3709551615)
end
local tok = ARGV[1]
if not wellformed(tok) then return redis.error_reply("ERR token not a canonical uint64") end
local mark = redis.call("GET", KEYS[1])
if not mark then
  redis.call("SET", KEYS[1], tok)
  return 1
end
if not wellformed(mark) then return redis.error_reply("ERR corrupt mark at " .. KEYS[1]) end
local th, tl = halves(tok)
local mh, ml = halves(mark)
if th > mh or (th == mh and tl > ml) then
  redis.call("SET", KEYS[1], tok)
  return 1
end
if th == mh and tl == ml then return 1 end
return mark
]]

local sha -- hex SHA-1 of ADMIT, computed on first use

local function hex(bin)
  return (string.gsub(bin, ".", function(c) return string.format("%02x", string.byte(c)) end))
end

function M.configure(opts)
  for k, v in pairs(opts) do cfg[k] = v end
end

-- token validates the header value nginx saw: exactly one line, canonical
-- decimal uint64 after trimming blanks. Returns the token or nil, reason.
local UMAX = "18446744073709551615"
local function token(v)
  if v == nil then return nil, "missing" end
  if type(v) == "table" then return nil, "repeated" end
  v = string.match(v, "^[ \t]*(.-)[ \t]*$")
  local n = #v
  if n < 1 or n > 20 or string.find(v, "^%d+$") == nil then return nil, "malformed" end
  if n > 1 and string.byte(v, 1) == 48 then return nil, "malformed" end
  if n == 20 and v > UMAX then return nil, "malformed" end -- same-length digit strings: byte order is numeric order
  return v
end

local function answer(status, kind, detail, extra)
  ngx.status = status
  ngx.header["Content-Type"] = "application/problem+json"
  if status == 503 then ngx.header["Retry-After"] = "1" end
  ngx.print(string.format('{"type":"urn:fenceproxy:%s","status":%d,"detail":"%s"%s}\n',
    kind, status, detail, extra or ""))
  return ngx.exit(status)
end

local function bulk(s)
  return "$" .. #s .. "\r\n" .. s .. "\r\n"
end

-- call sends one EVALSHA (EVAL after NOSCRIPT) and returns true (admitted),
-- false, mark (stale), or nil, err.
local function call(sock, key, tok)
  local body = bulk(key) .. bulk(tok)
  local ok, err = sock:send("*5\r\n" .. bulk("EVALSHA") .. bulk(sha) .. bulk("1") .. body)
  if not ok then return nil, "send: " .. err end
  local line
  line, err = sock:receive("*l")
  if not line then return nil, "receive: " .. err end
  if string.sub(line, 1, 9) == "-NOSCRIPT" then
    ok, err = sock:send("*5\r\n" .. bulk("EVAL") .. bulk(ADMIT) .. bulk("1") .. body)
    if not ok then return nil, "send: " .. err end
    line, err = sock:receive("*l")
    if not line then return nil, "receive: " .. err end
  end
  local kind = string.sub(line, 1, 1)
  if kind == ":" then
    if line == ":1" then return true end
    return nil, "unexpected reply " .. line
  elseif kind == "$" then
    local n = tonumber(string.sub(line, 2))
    if not n or n < 0 then return nil, "unexpected reply " .. line end
    local data
    data, err = sock:receive(n + 2)
    if not data then return nil, "receive: " .. err end
    return false, string.sub(data, 1, n)
  end
  return nil, "redis: " .. line
end

function M.check(resource)
  local tok, why = token(ngx.req.get_headers(64)[cfg.header])
  if not tok then
    if why == "missing" then return answer(428, "token-required", "missing " .. cfg.header) end
    return answer(400, "token-malformed", cfg.header .. " is " .. why)
  end
  if not sha then sha = hex(ngx.sha1_bin(ADMIT)) end
  local sock = ngx.socket.tcp()
  sock:settimeouts(cfg.timeout_ms, cfg.timeout_ms, cfg.timeout_ms)
  local ok, err = sock:connect(cfg.host, cfg.port)
  if not ok then
    ngx.log(ngx.WARN, "fence: redis connect: ", err)
    return answer(503, "store-unavailable", "store unavailable")
  end
  local admitted, mark = call(sock, cfg.prefix .. resource, tok)
  if admitted == nil then
    sock:close()
    ngx.log(ngx.WARN, "fence: ", mark, " resource=", resource, " token=", tok)
    return answer(503, "store-unavailable", "store unavailable")
  end
  sock:setkeepalive(60000, 512)
  if admitted then return end
  ngx.log(ngx.WARN, "fence: stale resource=", resource, " token=", tok, " mark=", mark)
  return answer(409, "stale-token", "token " .. tok .. " is older than the mark " .. mark,
    ',"highWaterMark":"' .. mark .. '"')
end

return M
