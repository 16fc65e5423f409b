-- The release floor's script: what a release has to do to the live view, and nothing else.
-- KEYS[1..n-1]: accounting hashes (each listed once)  KEYS[n]: acct:seq
-- ARGV[2i-1], ARGV[2i]: cores and gpus to add to KEYS[i] (negative: a release)
-- Returns the new acct:seq.
for i = 1, #KEYS - 1 do
  redis.call('HINCRBY', KEYS[i], 'int_cores', ARGV[2 * i - 1])
  redis.call('HINCRBY', KEYS[i], 'int_gpus', ARGV[2 * i])
end
return redis.call('INCR', KEYS[#KEYS])
