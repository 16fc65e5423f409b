-- Shared (accounting.live.scripts puts this before every script with a "-- shared: inflight"
-- line): Redis's clock in milliseconds, read here only, and the one reading of an in-flight entry,
-- "<expiry ms>|<key>|<cores>|<gpus>|..." (release_prepare.lua and booking.lua write it), whose
-- triples the settle journal's entries carry too, without the expiry.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function entry_expiry(entry)
  return tonumber(string.match(entry, '^(%d+)'))
end

-- Adds text's "<key>|<cores>|<gpus>" triples, from its part `from` on, to amounts[key] = {cores, gpus}.
local function add_amounts(amounts, text, from)
  local parts = {}
  for part in string.gmatch(text, '[^|]+') do
    parts[#parts + 1] = part
  end
  for j = from, #parts - 2, 3 do
    local sums = amounts[parts[j]] or {0, 0}
    sums[1] = sums[1] + tonumber(parts[j + 1])
    sums[2] = sums[2] + tonumber(parts[j + 2])
    amounts[parts[j]] = sums
  end
end
