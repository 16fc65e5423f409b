-- Register a release as in flight: until release.lua settles it, a reseed adds these
-- amounts back to SUM(proc), because the proc row is gone before Redis is decremented.
-- KEYS[1]: acct:inflight  KEYS[2]: acct:seq
-- KEYS[3]: acct:seeded  KEYS[4]: the farm reseed lock (held by a rebuild under way)
-- ARGV[1]: operation id (uuid4 hex)
-- ARGV[2]: time to live in milliseconds (a holder that dies lets the entry expire)
-- ARGV[3]: "<key>|<cores>|<gpus>|<key>|<cores>|<gpus>|..." released amounts, cores in cores
-- ARGV[4]: "1" to bump acct:seq, "0" not to (below)
-- Returns {acct:seq (bumped or not; 0 when it does not exist), empty}: empty is 1 when
-- Redis has no acct:seeded marker and no rebuild holds the farm lock (it restarted, and
-- nothing rebuilds it yet), so that the first release to meet an empty Redis starts its
-- rebuild at once (accounting.reconcile.empty); else 0.
--
-- The bump is for a reseeder that does not read acct:inflight (the Rust scheduler's own,
-- ACCOUNTING_SCHEDULER_RESEEDS): its compare-and-swap then retries when a release lands in
-- its window. This project's reseeds add the in-flight entries, for which a release never
-- takes a write low: without such a reseeder, releases leave acct:seq alone, so a reseed
-- finishes however fast procs are released.
-- shared: inflight
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now_ms() + tonumber(ARGV[2])) .. '|' .. ARGV[3])
local empty = 0
if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
  empty = 1
end
if ARGV[4] == '1' then
  return {redis.call('INCR', KEYS[2]), empty}
end
return {tonumber(redis.call('GET', KEYS[2]) or '0'), empty}
