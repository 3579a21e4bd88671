--[[ admin walk: the jobs of a range of a state's index that a listing's filters keep, in the
index's order.
Keys read: ARGV[2] (a waiting index: P:q:{queue}, P:sched, P:blk:{group}, P:rblk:{group}; or a
finished state's: P:dead ... while the admin's listing index of it is being built), P:job:{id}
(schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2 the index's key, 3 first rank, 4 last rank, 5 'rev' (highest score first)
      or '', 6 the task name ('' = any), 7 enqueued at or after (ms; '' = any), 8 enqueued at
      or before (ms; '' = any), 9 the state the jobs must still be in, 10 the queue ('' = any)
A filtered listing of a million waiting jobs is read here, a range at a time, instead of
sending every record to the client to be filtered and sorted by time (the range bounds how
long Redis is busy). A finished state's time range is its index's score range: the caller
passes the ranks of that range and no enqueue times.
Returns {members of the index read, the ids kept among them, in order}. ]]
local key, first, last = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local task, since, till, state = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local queue = ARGV[10] or ''
local ids
if ARGV[5] == 'rev' then
  ids = redis.call('ZREVRANGE', key, first, last)
else
  ids = redis.call('ZRANGE', key, first, last)
end
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), 'st', 'name', 'enq', 'q')
  local enq = tonumber(f[3] or '0') or 0
  if f[1] == state and (task == '' or f[2] == task) and (queue == '' or f[4] == queue)
      and (not since or enq >= since) and (not till or enq <= till) then
    out[#out + 1] = id
  end
end
return {#ids, out}
