-- Shared (accounting.live.scripts puts this before every script with a "-- shared: open_key"
-- line): the one rule for "is this key open for booking?". A key is open once it carries a
-- limit field: booking.lua refuses a core booking without a burst, and a limit write is what
-- opens a key. show_id is one of them (a folder's, written whole with its caps), so a key
-- carrying any field that a limit write sets counts as open, whichever script asks.
local OPEN_KEY_FIELDS = {'size', 'burst', 'int_min_cores', 'int_max_cores', 'int_min_gpus', 'int_max_gpus',
                         'int_priority', 'show_id'}

local function is_open(key)
  for _, name in ipairs(OPEN_KEY_FIELDS) do
    if redis.call('HEXISTS', key, name) == 1 then
      return true
    end
  end
  return false
end
