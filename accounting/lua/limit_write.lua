-- Write limit fields unconditionally (they are configuration) and bump acct:seq, so a
-- booked-counter reseed that read the sequence before this write retries.
-- KEYS[1] acct:seq
-- ARGV triples: key, field, value (cores already converted, -1 verbatim)
-- Returns the new acct:seq.
for i = 1, #ARGV, 3 do
  redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return redis.call('INCR', KEYS[1])
