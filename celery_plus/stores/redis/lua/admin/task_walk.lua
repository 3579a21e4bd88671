--[[ admin task walk: one task's waiting jobs in a range of a waiting index, in its order.
Keys read: ARGV[2] (a waiting index: P:q:{queue}, P:sched, P:blk:{group}, P:rblk:{group}),
P:job:{id} (schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2 the index's key, 3 first rank, 4 last rank, 5 'rev' (highest score first)
      or '', 6 the task name, 7 the state the jobs must still be in
A listing of one task's jobs among a million waiting ones is read here, a range at a time,
instead of sending every record's name to the client (the range bounds how long Redis is busy).
Returns {members of the index read, the ids of the task's jobs among them, in order}. ]]
local key, first, last = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local task, state = ARGV[6], ARGV[7]
local ids
if ARGV[5] == 'rev' then
  ids = redis.call('ZREVRANGE', key, first, last)
else
  ids = redis.call('ZRANGE', key, first, last)
end
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), 'name', 'st')
  if f[1] == task and f[2] == state then out[#out + 1] = id end
end
return {#ids, out}
