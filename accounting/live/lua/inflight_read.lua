-- The live in-flight amounts per key, for the drift inspector (what a reseed would add back).
-- KEYS[1] acct:inflight
-- Returns a flat list of triples: key, cores, gpus, summed over the entries not expired.
-- shared: inflight
local amounts, now = {}, now_ms()
for _, entry in ipairs(redis.call('HVALS', KEYS[1])) do
  if entry_expiry(entry) > now then
    add_amounts(amounts, entry, 2)
  end
end
local reply = {}
for key, sums in pairs(amounts) do
  reply[#reply + 1] = key
  reply[#reply + 1] = sums[1]
  reply[#reply + 1] = sums[2]
end
return reply
