--[[ admin cancel: enqueued | scheduled | blocked -> canceled; each job re-checked here.
Keys touched: P:job:{id}, P:q:{queue}, P:sched, P:blk:{group}, P:blkgroups, P:rblk:{rate group}, P:u:{lock},
P:canceled (schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2.. job ids
The job leaves its queue, the schedule or its group's blocked set; its non-TTL unique hold is
released if it holds it (a waiting job holds no concurrency slot); st = canceled, fin = now,
an 'admin cancel' history entry; indexed in P:canceled, pruned like completed records.
Running jobs are not touched (Celery's revoke stops them).
Returns per id a triple {id, outcome, extra}: {'canceled', previous state} | {'noop', state}
| {'missing', ''}. ]]
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'q', 'cg', 'uk', 'uw', 'dl', 'rg')
  local outcome, extra = 'canceled', f[1]
  if not f[1] then
    outcome, extra = 'missing', ''
  elseif not WAITING[f[1]] then
    outcome, extra = 'noop', f[1]
  else
    redis.call('ZREM', P .. ':q:' .. (f[2] or ''), id)
    redis.call('ZREM', P .. ':sched', id)
    if f[3] and f[3] ~= '' then
      redis.call('ZREM', P .. ':blk:' .. f[3], id)
      forget_if_unblocked(f[3])
    end
    rate_unpark(id, f[7])
    release_hold(f[4], f[5], id)
    push_history(jk, {delivery = tonumber(f[6] or '0'), worker = '', started_ms = NOW,
                      finished_ms = NOW, outcome = 'admin cancel'})
    redis.call('HSET', jk, 'st', 'canceled', 'fin', NOW)
    redis.call('ZADD', P .. ':canceled', NOW, id)
  end
  out[#out + 1] = id
  out[#out + 1] = outcome
  out[#out + 1] = extra
end
return out
