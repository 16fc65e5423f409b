-- Read-only comparison for the drift inspector: one call per chunk instead of one
-- command per field.
-- KEYS: none (single-node Redis; the keys are data here, like the reseed write's).
-- ARGV[1] "booked" (a missing field reads as 0, as in the booking script) or "limits"
--         (a missing field is drift whatever the expected value)
-- ARGV[2..] triples: key, field, expected integer
-- Returns a flat list of (index of the triple, 1-based; actual value or false) for each
-- triple whose value differs.
local booked = ARGV[1] == 'booked'
local out = {}
local n = 0
for i = 2, #ARGV, 3 do
  n = n + 1
  local actual = redis.call('HGET', ARGV[i], ARGV[i + 1])
  local value = tonumber(actual)
  if value == nil and booked then
    value = 0
  end
  if value ~= tonumber(ARGV[i + 2]) then
    out[#out + 1] = n
    out[#out + 1] = actual
  end
end
return out
