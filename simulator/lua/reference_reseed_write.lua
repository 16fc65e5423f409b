-- The reference design's reseed write, as the scheduler's own recompute does it: a
-- compare-and-swap on acct:seq that writes the snapshot as it is, with no in-flight
-- overlay. The service never runs it; the simulator (--reseeder scheduler) and the tests
-- play the scheduler's reseeder with it, to show what it costs (docs/redis-protocol.md).
-- KEYS[1] acct:seq   KEYS[2] acct:inflight (read only, to say what the write ignored)
-- ARGV[1] the acct:seq value read before the SQL snapshot ("" when it did not exist)
-- ARGV[2..] triples: key, int_cores (cores), int_gpus, from the snapshot
-- Returns {1, keys written, keys written while a live in-flight operation touched them,
-- then per such key: key, cores, gpus (the live entries' amounts on it, which the write
-- ignored: how low it may have left the key)} when acct:seq is unchanged, else
-- {0, current acct:seq} and nothing written.
local seq = redis.call('GET', KEYS[1]) or ''
if seq ~= ARGV[1] then
  return {0, seq}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local touched = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local parts = {}
  for part in string.gmatch(entries[i + 1], '[^|]+') do
    parts[#parts + 1] = part
  end
  if tonumber(parts[1]) > now then
    for j = 2, #parts - 2, 3 do
      local amounts = touched[parts[j]] or {0, 0}
      touched[parts[j]] = {amounts[1] + tonumber(parts[j + 1]), amounts[2] + tonumber(parts[j + 2])}
    end
  end
end

local written, ignored = 0, {}
for i = 2, #ARGV, 3 do
  redis.call('HSET', ARGV[i], 'int_cores', ARGV[i + 1], 'int_gpus', ARGV[i + 2])
  written = written + 1
  local amounts = touched[ARGV[i]]
  if amounts then
    ignored[#ignored + 1] = ARGV[i]
    ignored[#ignored + 1] = amounts[1]
    ignored[#ignored + 1] = amounts[2]
  end
end
local reply = {1, written, #ignored / 3}
for _, part in ipairs(ignored) do
  reply[#reply + 1] = part
end
return reply
