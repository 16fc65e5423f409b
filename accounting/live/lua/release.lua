-- Apply a committed release: take the released cores and gpus off each accounting hash,
-- settle its in-flight entry and bump acct:seq, atomically.
-- KEYS[1]: acct:inflight  KEYS[2]: acct:seq
-- KEYS[3..n]: accounting hashes (acct:sub/folder/job/layer/point), each listed once
-- ARGV[1]: operation id registered by release_prepare.lua
-- ARGV[2]: "1" to bump acct:seq, "0" not to (release_prepare.lua says when)
-- ARGV[2*(i-2)+1], ARGV[2*(i-2)+2]: cores (in cores) and gpus to take off KEYS[i], both >= 0
-- Returns {applied, seq, clamped}: applied is 1 when the decrements were applied, 0 when the
-- entry was gone or expired; seq is acct:seq (bumped or not: 0 when it does not exist);
-- clamped is how many counters read below the amount taken off (see the last rule below).
-- shared: inflight
--
-- The decrements apply only while the release's in-flight entry is live. Once it is gone
-- (a Redis restart flushed it) or expired, a reseed may already have written SUM(proc)
-- without the deleted proc, and decrementing again would count it twice (low, the unsafe
-- direction): nothing is taken off, an expired entry is removed, and Redis stays high
-- until the next reseed.
-- A missing hash is left missing: on an empty Redis a decrement would create a negative
-- counter, and the bootstrap reseed writes the key.
-- A counter is never taken below 0: if Redis already counted lower than this release,
-- keep the higher value (0) and let the recompute settle it. Such a counter was low before
-- this release (it held less than a proc that still existed), so the clamp is counted and
-- returned, not hidden: the caller reports it.
local function seq()
  if ARGV[2] == '1' then
    return redis.call('INCR', KEYS[2])
  end
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end

local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then
  return {0, seq(), 0}
end
redis.call('HDEL', KEYS[1], ARGV[1])
if entry_expiry(entry) <= now_ms() then
  return {0, seq(), 0}
end

local clamped = 0
local function take(key, field, amount)
  if amount > 0 and redis.call('HINCRBY', key, field, -amount) < 0 then
    redis.call('HSET', key, field, 0)
    clamped = clamped + 1
  end
end

for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    take(KEYS[i], 'int_cores', tonumber(ARGV[2 * (i - 2) + 1]))
    take(KEYS[i], 'int_gpus', tonumber(ARGV[2 * (i - 2) + 2]))
  end
end
return {1, seq(), clamped}
