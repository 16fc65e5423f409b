-- End a bootstrap: mark Redis seeded, but only if this bootstrap still owns the rebuild
-- (a restart since it began, or a newer bootstrap, dropped or replaced its token).
-- KEYS[1] acct:seeded   KEYS[2] acct:bootstrapping   KEYS[3] acct:limits_refused
-- KEYS[4] acct:master   KEYS[5] acct:rebuild_owed
-- ARGV[1] the bootstrap's token   ARGV[2] the marker's value
-- Returns 1 when marked, 0 when the token is gone (nothing changed). Refused limit
-- publishes are forgotten: the rebuild wrote every committed limit. acct:master gets this
-- server's replication id: the keys now belong to it (a replica promoted later gets a new one).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[4], string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)'))
return 1
