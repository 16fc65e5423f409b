-- Register a release as in flight: until release.lua settles it, a reseed adds these
-- amounts back to SUM(proc), because the proc row is gone before Redis is decremented.
-- KEYS[1]: acct:inflight  KEYS[2]: acct:seq
-- ARGV[1]: operation id (uuid4 hex)
-- ARGV[2]: time to live in milliseconds (a holder that dies lets the entry expire)
-- ARGV[3]: "<key>|<cores>|<gpus>|<key>|<cores>|<gpus>|..." released amounts, cores in cores
-- Returns the new acct:seq.
local now = redis.call('TIME')
local expiry_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', expiry_ms) .. '|' .. ARGV[3])
return redis.call('INCR', KEYS[2])
