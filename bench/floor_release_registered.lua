-- The registering floor's release script (bench/floor_wsgi.py): the release floor's decrements,
-- and the in-flight entry the release registered before its transaction, removed.
-- KEYS[1..n-2]: accounting hashes (each listed once)  KEYS[n-1]: acct:seq  KEYS[n]: the floor's in-flight hash
-- ARGV[1]: the entry's field  ARGV[2i], ARGV[2i+1]: cores and gpus to add to KEYS[i] (negative: a release)
-- Returns the new acct:seq.
for i = 1, #KEYS - 2 do
  redis.call('HINCRBY', KEYS[i], 'int_cores', ARGV[2 * i])
  redis.call('HINCRBY', KEYS[i], 'int_gpus', ARGV[2 * i + 1])
end
redis.call('HDEL', KEYS[#KEYS], ARGV[1])
return redis.call('INCR', KEYS[#KEYS - 1])
