-- Apply a committed release: take the released cores and gpus off each accounting hash,
-- settle its in-flight entry and bump acct:seq, atomically.
-- KEYS[1]: acct:inflight  KEYS[2]: acct:seq
-- KEYS[3..n]: accounting hashes (acct:sub/folder/job/layer/point), each listed once
-- ARGV[1]: operation id registered by release_prepare.lua
-- ARGV[2*(i-2)], ARGV[2*(i-2)+1]: cores (in cores) and gpus to take off KEYS[i], both >= 0
-- Returns the new acct:seq.
--
-- A missing hash is left missing: on an empty Redis a decrement would create a negative
-- counter (counting low, the unsafe direction), and the bootstrap reseed writes the key.
-- A counter is never taken below 0: if Redis already counted lower than this release,
-- keep the higher value (0) and let the recompute settle it.
local function take(key, field, amount)
  if amount > 0 and redis.call('HINCRBY', key, field, -amount) < 0 then
    redis.call('HSET', key, field, 0)
  end
end

for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    take(KEYS[i], 'int_cores', tonumber(ARGV[2 * (i - 2)]))
    take(KEYS[i], 'int_gpus', tonumber(ARGV[2 * (i - 2) + 1]))
  end
end
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])
