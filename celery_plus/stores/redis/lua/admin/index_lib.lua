--[[ Helpers of the admin's listing index (index_page.lua, index_counts.lua; schema in
index_sync.lua), prepended to them after stores/redis/lua/lib.lua. ]]

-- Remove from the index set `key` the ids that are no longer members of `src` (retried,
-- discarded, purged, pruned since they were indexed). ZDIFF looks each member up in `src`
-- and allocates nothing when none left, which is the common case: cheap even at 100k.
local function drop_stale(key, src)
  local stale = redis.call('ZDIFF', 2, key, src)
  for i = 1, #stale, 1000 do
    redis.call('ZREM', key, unpack(stale, i, math.min(i + 999, #stale)))
  end
end
