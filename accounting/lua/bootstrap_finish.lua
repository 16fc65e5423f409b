-- End a bootstrap: mark Redis seeded, but only if this bootstrap still owns the rebuild
-- (a restart since it began, or a newer bootstrap, dropped or replaced its token).
-- KEYS[1] acct:seeded   KEYS[2] acct:bootstrapping
-- ARGV[1] the bootstrap's token   ARGV[2] the marker's value
-- Returns 1 when marked, 0 when the token is gone (nothing changed).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2])
return 1
