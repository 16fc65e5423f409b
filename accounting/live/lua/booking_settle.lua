-- Settle a booking once its proc INSERT has committed: from now on SUM(proc) counts it.
-- KEYS[1] acct:inflight   KEYS[2] acct:seq   KEYS[3] acct:settled:seq   KEYS[4] acct:settled
-- ARGV[1] operation id
-- Returns the new acct:seq.
--
-- A live entry is moved to the settle journal: acct:settled:seq counts every entry ever
-- journalled, acct:settled holds the newest ones ("key|cores|gpus|..." as registered), at
-- most JOURNAL_ENTRIES. A reseed that began before this settle (reseed_begin.lua) adds the
-- journalled amounts to the keys it writes: its snapshot may predate the INSERT, and once
-- settled the booking is no longer in flight. That lets the reseed finish while bookings
-- keep landing, instead of retrying on acct:seq.
-- The acct:seq bump stays for a reseeder that compares acct:seq (the scheduler's own).
local JOURNAL_ENTRIES = 20000

local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('INCR', KEYS[3])
  redis.call('RPUSH', KEYS[4], string.match(entry, '^%d+|(.*)$'))
  redis.call('LTRIM', KEYS[4], -JOURNAL_ENTRIES, -1)
end
return redis.call('INCR', KEYS[2])
