--[[ admin error groups, page: ids of one group (schema in error_groups_lib.lua) dead-lettered
at or before a time, newest first (or oldest first), after dropping the members that left P:dead.
ARGV: 1 prefix, 2 gid, 3 offset, 4 limit, 5 'asc' for oldest first, 6 highest finish ms ('+inf')
Returns {members up to that time, {ids}}. ]]
local gid, high = ARGV[2], ARGV[6]
drop_gone(gid)
local key = GX .. ':g:' .. gid
local ids
if ARGV[5] == 'asc' then
  ids = redis.call('ZRANGEBYSCORE', key, '-inf', high, 'LIMIT', ARGV[3], ARGV[4])
else
  ids = redis.call('ZREVRANGEBYSCORE', key, high, '-inf', 'LIMIT', ARGV[3], ARGV[4])
end
return {redis.call('ZCOUNT', key, '-inf', high), ids}
