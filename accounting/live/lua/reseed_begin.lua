-- Where a booked reseed begins, read before its SQL snapshot.
-- KEYS[1] acct:settled:seq
-- Returns "<settled>|<replid>": how many bookings had been settled (journalled) so far, and
-- this server's replication id (a restart or a promotion changes it). reseed_write.lua's
-- "journal" mode takes it back to add the bookings settled since and to refuse a Redis that
-- is not the one the reseed began on.
local settled = redis.call('GET', KEYS[1]) or '0'
return settled .. '|' .. string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
