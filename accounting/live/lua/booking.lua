-- The scheduler's hot-path booking: check limits, then apply one delta to five keys.
-- KEYS[1] acct:sub:{show}:{alloc}   KEYS[2] acct:folder:{folder}   KEYS[3] acct:job:{job}
-- KEYS[4] acct:layer:{layer}        KEYS[5] acct:point:{dept}:{show}
-- KEYS[6] acct:seq                  KEYS[7] acct:inflight
-- KEYS[8] acct:master (the replication id the keys were rebuilt under; see below)
-- ARGV[1] core delta (cores, not centicores)   ARGV[2] GPU delta
-- ARGV[3] force: "1" skips every limit check (rollback path, negated deltas)
-- ARGV[4] operation id, "" for none
-- ARGV[5] what to do with the operation id: "register" (a booking: add an in-flight entry
--         worth the deltas on the five keys) or "remove" (a rollback: apply the deltas only
--         if the entry is still live, and delete it)
-- ARGV[6] in-flight TTL in milliseconds (used by "register")
-- Returns {1, seq} when applied; {0, table, current, limit, unit} when a limit rejects it
-- (nothing changed; unit, "cores" or "gpus", names which of the table's caps refused: a
-- fifth element, so a caller that reads four is unaffected); {0, "failover", 0, 0} when
-- this server is a promoted replica whose keys are not rebuilt yet (acct:master holds
-- another replication id than this server's: it may have missed its old master's last
-- writes and read low; nothing changed); {0, "acct:inflight", 0, 0} when a rollback finds
-- its entry gone or expired (nothing changed: the booking may already have been erased by a reseed, so undoing it
-- again could push the counters low; left high, the next reseed heals it).
-- shared: inflight
local cores = tonumber(ARGV[1])
local gpus = tonumber(ARGV[2])
local force = ARGV[3] == '1'
local op_id = ARGV[4]
local op_mode = ARGV[5]

local function field(key, name)
  return tonumber(redis.call('HGET', key, name) or '0') or 0
end

if not force then
  local fence = redis.call('GET', KEYS[8])
  if fence and fence ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') then
    return {0, 'failover', 0, 0}
  end
  if cores > 0 then
    local booked = field(KEYS[1], 'int_cores')
    local burst = field(KEYS[1], 'burst')
    if burst == 0 or booked + cores > burst then
      return {0, 'subscription', booked, burst, 'cores'}
    end
  end
  -- The folder's and the job's caps, cores first, then GPUs: one loop over (delta, fields).
  for _, amount in ipairs({{cores, 'int_max_cores', 'int_cores', 'cores'}, {gpus, 'int_max_gpus', 'int_gpus', 'gpus'}}) do
    local delta, cap_field, count_field, unit = amount[1], amount[2], amount[3], amount[4]
    if delta > 0 then
      for _, pair in ipairs({{KEYS[2], 'folder'}, {KEYS[3], 'job'}}) do
        local cap = field(pair[1], cap_field)
        local current = field(pair[1], count_field)
        if cap > 0 and current + delta > cap then
          return {0, pair[2], current, cap, unit}
        end
      end
    end
  end
end

if op_id ~= '' and op_mode == 'remove' then
  local entry = redis.call('HGET', KEYS[7], op_id)
  if not entry then
    return {0, 'acct:inflight', 0, 0}
  end
  redis.call('HDEL', KEYS[7], op_id)
  if entry_expiry(entry) <= now_ms() then
    redis.call('INCR', KEYS[6])
    return {0, 'acct:inflight', 0, 0}
  end
end

for i = 1, 5 do
  redis.call('HINCRBY', KEYS[i], 'int_cores', cores)
  redis.call('HINCRBY', KEYS[i], 'int_gpus', gpus)
end

if op_id ~= '' and op_mode == 'register' then
  local parts = {tostring(now_ms() + tonumber(ARGV[6]))}
  for i = 1, 5 do
    parts[#parts + 1] = KEYS[i]
    parts[#parts + 1] = tostring(cores)
    parts[#parts + 1] = tostring(gpus)
  end
  redis.call('HSET', KEYS[7], op_id, table.concat(parts, '|'))
end

return {1, redis.call('INCR', KEYS[6])}
