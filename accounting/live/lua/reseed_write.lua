-- The booked-counter reseed's write. Does not bump acct:seq.
-- KEYS[1] acct:seq   KEYS[2] acct:inflight   KEYS[3] acct:bootstrapping
-- ARGV[1] mode: "cas" (a reseed of open keys) or "closed" (a rebuild of keys closed to booking)
-- ARGV[2] "cas": the acct:seq value read before the SQL snapshot ("" when it did not exist);
--         "closed": the rebuild's token in acct:bootstrapping
-- ARGV[3..] triples: key, int_cores (cores), int_gpus, from the snapshot
-- Returns {1, keys written, keys skipped}, or {0, why} and nothing written: "cas" when acct:seq
-- moved since it was read, "closed" when the rebuild no longer owns Redis (it restarted or
-- failed over again). Each written key gets its snapshot value plus the amounts of live
-- in-flight operations on it (an operation counts as booked until it settles); expired
-- entries are purged first.
--
-- Why "closed" needs no compare-and-swap: a key without limit fields books nothing
-- (booking.lua rejects a core booking without a burst), so while a rebuild holds the keys
-- closed the only writers are releases, and a release registered in flight before its
-- DELETE never takes a write below SUM(proc) (docs/redis-protocol.md). A key that carries a
-- limit field was opened by someone else (a show switched meanwhile, seeded by its own
-- compare-and-swap) and is skipped.
local mode = ARGV[1]
if mode == 'cas' then
  local seq = redis.call('GET', KEYS[1]) or ''
  if seq ~= ARGV[2] then
    return {0, 'cas'}
  end
elseif redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {0, 'closed'}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local extra = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local parts = {}
  for part in string.gmatch(entries[i + 1], '[^|]+') do
    parts[#parts + 1] = part
  end
  if tonumber(parts[1]) <= now then
    redis.call('HDEL', KEYS[2], entries[i])
  else
    for j = 2, #parts - 2, 3 do
      local add = extra[parts[j]] or {0, 0}
      add[1] = add[1] + tonumber(parts[j + 1])
      add[2] = add[2] + tonumber(parts[j + 2])
      extra[parts[j]] = add
    end
  end
end

local LIMIT_FIELDS = {'burst', 'size', 'int_max_cores', 'int_min_cores', 'int_max_gpus', 'int_min_gpus', 'int_priority'}
local function open(key)
  for _, name in ipairs(LIMIT_FIELDS) do
    if redis.call('HEXISTS', key, name) == 1 then
      return true
    end
  end
  return false
end

local written, skipped = 0, 0
for i = 3, #ARGV, 3 do
  local key = ARGV[i]
  if mode == 'closed' and open(key) then
    skipped = skipped + 1
  else
    local add = extra[key] or {0, 0}
    redis.call('HSET', key, 'int_cores', tonumber(ARGV[i + 1]) + add[1], 'int_gpus', tonumber(ARGV[i + 2]) + add[2])
    written = written + 1
  end
end
return {1, written, skipped}
