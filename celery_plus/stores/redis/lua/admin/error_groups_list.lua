--[[ admin error groups, list: every group with its members now (schema in
error_groups_lib.lua); members that left P:dead are dropped first, empty groups forgotten.
ARGV: 1 prefix
Returns {gid, type, message, count, oldest score, newest score, gid, ...}. ]]
local out = {}
for _, gid in ipairs(redis.call('HKEYS', GX .. ':gt')) do
  local n = drop_gone(gid)
  if n > 0 then
    local key = GX .. ':g:' .. gid
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    out[#out + 1] = gid
    out[#out + 1] = redis.call('HGET', GX .. ':gt', gid) or ''
    out[#out + 1] = redis.call('HGET', GX .. ':gm', gid) or ''
    out[#out + 1] = n
    out[#out + 1] = oldest[2]
    out[#out + 1] = newest[2]
  end
end
return out
