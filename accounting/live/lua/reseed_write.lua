-- The booked-counter reseed's write. Does not bump acct:seq.
-- KEYS[1] acct:seq   KEYS[2] acct:inflight   KEYS[3] acct:bootstrapping
-- KEYS[4] acct:settled:seq   KEYS[5] acct:settled (the settle journal: booking_settle.lua)
-- ARGV[1] mode: "journal" (a reseed of open keys) or "closed" (a rebuild of keys closed to booking)
-- ARGV[2] "journal": what reseed_begin.lua returned before the SQL snapshot;
--         "closed": the rebuild's token in acct:bootstrapping
-- ARGV[3..] triples: key, int_cores (cores), int_gpus, from the snapshot
-- Returns {1, keys written, keys skipped}, or {0, why} and nothing written: "restarted" when
-- this is not the server the reseed began on (restarted or promoted since), "journal" when the
-- journal no longer reaches back to the reseed's beginning, "closed" when the rebuild no longer
-- owns Redis (it restarted or failed over again). Each written key gets its snapshot value
-- plus the amounts of live in-flight operations on it (an operation counts as booked until it
-- settles; expired entries are purged first) and, in "journal" mode, of the bookings settled
-- since the reseed began: their procs committed before they settled, after or before the
-- snapshot began. After: only the journal counts them. Before: the snapshot holds them too,
-- and the key is written high by them, the safe side, until the next reseed. Releases need
-- no such care: one registered before its DELETE can only leave a write high
-- (docs/redis-protocol.md), so a reseed finishes whatever the booking and release rates.
--
-- Why "closed" needs no journal: a key without limit fields books nothing (booking.lua
-- rejects a core booking without a burst), so while a rebuild holds the keys closed the only
-- writers are releases. A key that carries a limit field was opened by someone else (a show
-- switched meanwhile, seeded by its own journal write) and is skipped.
-- Whether a key carries a limit field: is_open(), shared with limit_write.lua (lua/shared/open_key.lua).
-- shared: open_key
-- shared: inflight
local mode = ARGV[1]
local extra = {}

if mode == 'journal' then
  local since, replid = string.match(ARGV[2], '^(%d+)|(%w+)$')
  if replid ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') then
    return {0, 'restarted'}
  end
  local first = tonumber(redis.call('GET', KEYS[4]) or '0') - redis.call('LLEN', KEYS[5])
  if tonumber(since) < first then
    return {0, 'journal'}
  end
  for _, settled in ipairs(redis.call('LRANGE', KEYS[5], tonumber(since) - first, -1)) do
    add_amounts(extra, settled, 1)
  end
elseif redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {0, 'closed'}
end

local now = now_ms()
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if entry_expiry(entries[i + 1]) <= now then
    redis.call('HDEL', KEYS[2], entries[i])
  else
    add_amounts(extra, entries[i + 1], 2)
  end
end

local written, skipped = 0, 0
for i = 3, #ARGV, 3 do
  local key = ARGV[i]
  if mode == 'closed' and is_open(key) then
    skipped = skipped + 1
  else
    local amounts = extra[key] or {0, 0}
    redis.call('HSET', key, 'int_cores', tonumber(ARGV[i + 1]) + amounts[1], 'int_gpus', tonumber(ARGV[i + 2]) + amounts[2])
    written = written + 1
  end
end
return {1, written, skipped}
