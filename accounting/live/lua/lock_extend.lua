-- Renew a named lock's lease, only if the caller still owns it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the owner token the caller acquired it with.
-- ARGV[2]: the new time to live in milliseconds.
-- Returns 1 when renewed, 0 when the lock is gone or held by someone else (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
