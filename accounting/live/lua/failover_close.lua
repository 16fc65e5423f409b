-- Close the managed keys of a Redis that is a new master (a promoted replica), so that
-- nothing books on counters that may have lost writes until they are rebuilt, exactly as on
-- a Redis that came up empty: no acct:seeded, no limit field (booking.lua rejects a core
-- booking without a burst). The first call marks the close; later calls (more chunks of
-- the same close) only delete fields, and only while that close is still the current one.
-- KEYS[1] acct:master   KEYS[2] acct:seeded   KEYS[3] acct:bootstrapping   KEYS[4] acct:rebuild_owed
-- ARGV[1] the replication id recorded before (first call), or "" (a later chunk)
-- ARGV[2..] pairs: key, limit field to delete
-- Returns 1 when done, 0 when this server is the recorded one or another process closed (or
-- rebuilt) it first (nothing changed).
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] or replid == ARGV[1] then
    return 0
  end
  redis.call('SET', KEYS[1], replid)
  -- A bootstrap that began before the failover must not finish on these keys.
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('SET', KEYS[4], '1')
elseif redis.call('GET', KEYS[1]) ~= replid or redis.call('EXISTS', KEYS[4]) == 0 then
  return 0
end
for i = 2, #ARGV, 2 do
  redis.call('HDEL', ARGV[i], ARGV[i + 1])
end
return 1
