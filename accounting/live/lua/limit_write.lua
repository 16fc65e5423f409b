-- Write limit fields (configuration, written whole) and bump acct:seq, so a booked-counter
-- reseed that read the sequence before this write retries. Limit fields open a key for
-- booking, so the write is guarded: it happens only while the guard key holds the
-- expected value (acct:seeded for a publish or a reseed, so nothing is opened on a Redis
-- that restarted and is not rebuilt yet; the bootstrap's own token for the bootstrap).
-- A publish also goes ahead when every key it writes already carries a limit field: such
-- a key is already open, whoever rebuilt it (this service, or the scheduler's bootstrap,
-- which never sets acct:seeded), so changing its values opens nothing. A publish that is
-- still refused is recorded, so the drift inspector can name it.
-- The subscription keys of a show in acct:closed_shows (closed by its switch to the scheduler
-- until its counters are seeded) are opened only by a write in mode "open", which follows fresh
-- booked counters and takes the show out of the set; a publish to one is refused and recorded,
-- and a reseed write leaves it out.
-- KEYS[1] acct:seq   KEYS[2] the guard key (acct:seeded or acct:bootstrapping)
-- KEYS[3] acct:limits_refused (hash: key -> refusal time in ms), used by publishes only
-- KEYS[4] acct:closed_shows (set of show ids)
-- ARGV[1] the value the guard key must hold; "" writes unconditionally (a show's switch seed)
-- ARGV[2] "1" for a publish (open keys may be written, refusals recorded), "0" for a reseed,
--         "open" for a write that follows the booked counters it opens keys on
-- ARGV[3..] triples: key, field, value (cores already converted, -1 verbatim)
-- Returns the new acct:seq, or 0 when refused (nothing written).
-- Whether a key is already open: is_open(), shared with reseed_write.lua (lua/shared/open_key.lua).
-- shared: open_key
-- shared: inflight
local publish = ARGV[2] == '1'
local opens = ARGV[2] == 'open'
-- The show of a subscription key, when that show is closed by its switch; nil otherwise.
local function closed_show(key)
  local show = string.match(key, '^acct:sub:([^:]+):')
  if show and redis.call('SISMEMBER', KEYS[4], show) == 1 then
    return show
  end
  return nil
end

local function refused()
  local now = now_ms()
  for i = 3, #ARGV, 3 do
    redis.call('HSET', KEYS[3], ARGV[i], now)
  end
  return 0
end

if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  if not publish then
    return 0
  end
  for i = 3, #ARGV, 3 do
    if not is_open(ARGV[i]) then
      return refused()
    end
  end
end
if publish then
  for i = 3, #ARGV, 3 do
    if closed_show(ARGV[i]) then
      return refused()
    end
  end
end
for i = 3, #ARGV, 3 do
  local show = closed_show(ARGV[i])
  if show and opens then
    redis.call('SREM', KEYS[4], show)
    show = nil
  end
  if not show then
    redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2])
  end
end
return redis.call('INCR', KEYS[1])
