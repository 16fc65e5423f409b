-- The booked-counter reseed's compare-and-swap write. Does not bump acct:seq.
-- KEYS[1] acct:seq   KEYS[2] acct:inflight
-- ARGV[1] the acct:seq value read before the SQL snapshot ("" when it did not exist)
-- ARGV[2..] triples: key, int_cores (cores), int_gpus, from the snapshot
-- Returns {1, keys written} when acct:seq is unchanged, else {0, current acct:seq} and
-- nothing written. Each written key gets its snapshot value plus the amounts of live
-- in-flight operations on it (an operation counts as booked until it settles); expired
-- entries are purged first.
local seq = redis.call('GET', KEYS[1]) or ''
if seq ~= ARGV[1] then
  return {0, seq}
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

local written = 0
for i = 2, #ARGV, 3 do
  local key = ARGV[i]
  local add = extra[key] or {0, 0}
  redis.call('HSET', key, 'int_cores', tonumber(ARGV[i + 1]) + add[1], 'int_gpus', tonumber(ARGV[i + 2]) + add[2])
  written = written + 1
end
return {1, written}
