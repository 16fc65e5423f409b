-- Write limit fields (configuration, written whole) and bump acct:seq, so a booked-counter
-- reseed that read the sequence before this write retries. Limit fields open a key for
-- booking, so the write is guarded: it happens only while the guard key holds the
-- expected value (acct:seeded for a publish or a reseed, so nothing is opened on a Redis
-- that restarted and is not rebuilt yet; the bootstrap's own token for the bootstrap).
-- A publish also goes ahead when every key it writes already carries a limit field: such
-- a key is already open, whoever rebuilt it (this service, or the scheduler's bootstrap,
-- which never sets acct:seeded), so changing its values opens nothing. A publish that is
-- still refused is recorded, so the drift inspector can name it.
-- KEYS[1] acct:seq   KEYS[2] the guard key (acct:seeded or acct:bootstrapping)
-- KEYS[3] acct:limits_refused (hash: key -> refusal time in ms), used by publishes only
-- ARGV[1] the value the guard key must hold; "" writes unconditionally (a show's switch seed)
-- ARGV[2] "1" for a publish (open keys may be written, refusals recorded), "0" otherwise
-- ARGV[3..] triples: key, field, value (cores already converted, -1 verbatim)
-- Returns the new acct:seq, or 0 when refused (nothing written).
local publish = ARGV[2] == '1'
local limit_fields = {size = true, burst = true, int_min_cores = true, int_max_cores = true, int_min_gpus = true,
                      int_max_gpus = true, int_priority = true, show_id = true}

local function already_open(key)
  for name in pairs(limit_fields) do
    if redis.call('HEXISTS', key, name) == 1 then
      return true
    end
  end
  return false
end

if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  if not publish then
    return 0
  end
  local refused = false
  for i = 3, #ARGV, 3 do
    if not already_open(ARGV[i]) then
      refused = true
      break
    end
  end
  if refused then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    for i = 3, #ARGV, 3 do
      redis.call('HSET', KEYS[3], ARGV[i], now)
    end
    return 0
  end
end
for i = 3, #ARGV, 3 do
  redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return redis.call('INCR', KEYS[1])
