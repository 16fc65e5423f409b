-- Release a named lock only if the caller still owns it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the owner token the caller acquired it with.
-- Returns 1 when released, 0 when the lock is gone or held by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
