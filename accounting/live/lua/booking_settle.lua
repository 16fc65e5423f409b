-- Settle a booking once its proc INSERT has committed: from now on SUM(proc) counts it.
-- KEYS[1] acct:inflight   KEYS[2] acct:seq
-- ARGV[1] operation id
-- Returns the new acct:seq. The bump makes any reseed that read the sequence while the
-- entry was live retry, since its snapshot may predate the INSERT.
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])
