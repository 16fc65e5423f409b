-- Write limit fields (configuration, written whole) and bump acct:seq, so a booked-counter
-- reseed that read the sequence before this write retries. Limit fields open a key for
-- booking, so the write is guarded: it happens only while the guard key holds the
-- expected value (acct:seeded for a publish or a reseed, so nothing is opened on a Redis
-- that restarted and is not rebuilt yet; the bootstrap's own token for the bootstrap).
-- KEYS[1] acct:seq   KEYS[2] the guard key (acct:seeded or acct:bootstrapping)
-- ARGV[1] the value the guard key must hold; "" writes unconditionally (a show's switch seed)
-- ARGV[2..] triples: key, field, value (cores already converted, -1 verbatim)
-- Returns the new acct:seq, or 0 when the guard does not hold (nothing written).
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
for i = 2, #ARGV, 3 do
  redis.call('HSET', ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return redis.call('INCR', KEYS[1])
