--[[ admin purge: delete finished job records (failed, completed, canceled, discarded).
Keys touched: P:job:{id}, P:m:{id} and the state's index P:dead | P:done | P:canceled | P:discarded
(schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2 state, 3 task name ('' = any), 4 queue ('' = any),
      5 finished at least this many ms ago ('' = any age), 6.. job ids
Each record is deleted only if it is still in `state` and in the scope. Finished jobs hold no
pending/running unique hold or slot; a ttl hold lapses by itself.
Returns the deleted ids. ]]
local state, name, queue = ARGV[2], ARGV[3], ARGV[4]
local index = ({failed = 'dead', completed = 'done', canceled = 'canceled',
                discarded = 'discarded'})[state]
if not index then return redis.error_reply('cannot purge state ' .. state) end
local cutoff = nil
if ARGV[5] ~= '' then cutoff = NOW - tonumber(ARGV[5]) end
local deleted = {}
for i = 6, #ARGV do
  local id = ARGV[i]
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'name', 'q', 'fin')
  if f[1] == state and (name == '' or f[2] == name) and (queue == '' or f[3] == queue)
      and (not cutoff or tonumber(f[4] or '0') <= cutoff) then
    del_job(id)
    redis.call('ZREM', P .. ':' .. index, id)
    deleted[#deleted + 1] = id
  end
end
return deleted
