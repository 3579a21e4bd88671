--[[ Helpers of the admin's error-group index (error_groups_*.lua), prepended to them after
stores/redis/lua/lib.lua. The index, admin-owned keys beside the listing index (index_sync.lua):
  P:ax:dead:g:{gid}   ZSET    ids of P:dead whose error is in group gid (score: finish ms)
  P:ax:dead:gt        HASH    gid -> the group's exception type
  P:ax:dead:gm        HASH    gid -> the group's message: the first line of the error message,
                              its first 200 characters (model/error_groups.py: normalize)
  P:ax:dead:gof       HASH    id -> the gid it is indexed under (a job that is retried and dies
                              again of another error moves to that group)
  P:ax:dead:ghw       STRING  highest P:dead score indexed so far
  P:ax:dead:gnext     STRING  "<score> <members done at it>": where a bounded sync (a read of the
                              group list: error_groups.py) stopped; the next sync resumes there
gid = sha1hex(type .. '\n' .. message) (model/error_groups.py: group_id). Members are added by
error_groups_sync.lua from P:dead by finish score (new dead letters arrive at the top), and
dropped when they left P:dead (retried, discarded, purged, pruned) before anything is counted. ]]
local GX = P .. ':ax:dead'

-- Remove from group gid the ids no longer in P:dead (ZDIFF: one lookup per member, nothing
-- allocated when none left) and forget them; forget the group once it is empty. Returns the
-- members left.
local function drop_gone(gid)
  local key = GX .. ':g:' .. gid
  local gone = redis.call('ZDIFF', 2, key, P .. ':dead')
  for i = 1, #gone, 1000 do
    redis.call('ZREM', key, unpack(gone, i, math.min(i + 999, #gone)))
  end
  for _, id in ipairs(gone) do
    if redis.call('HGET', GX .. ':gof', id) == gid then redis.call('HDEL', GX .. ':gof', id) end
  end
  local n = redis.call('ZCARD', key)
  if n == 0 then redis.call('HDEL', GX .. ':gt', gid); redis.call('HDEL', GX .. ':gm', gid) end
  return n
end
