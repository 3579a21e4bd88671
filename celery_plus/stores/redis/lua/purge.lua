--[[ purge: delete the jobs waiting in one queue (Celery's purge), in one atomic step.
ARGV: 1 prefix, 2 queue
Waiting = enqueued, blocked (parked behind a full concurrency group) and scheduled (eta,
countdown, retry): every message of the queue no worker holds. Running jobs stay. Each deleted
job's non-TTL unique hold is released (only if that job holds it); its queue, schedule and
blocked index entries go with it. Scans the whole schedule and every blocked group: an
operator's command, not a hot path. Returns the number of jobs deleted. ]]
local queue = ARGV[2]
local victims = {}
local qk = P .. ':q:' .. queue
for _, id in ipairs(redis.call('ZRANGE', qk, 0, -1)) do victims[#victims + 1] = id end
redis.call('DEL', qk)
-- Take the ids of `zkey` that are in `state` and belong to the queue out of that index.
local function take(zkey, state)
  for _, id in ipairs(redis.call('ZRANGE', zkey, 0, -1)) do
    local f = redis.call('HMGET', jkey(id), 'st', 'q')
    if f[1] == state and f[2] == queue then
      redis.call('ZREM', zkey, id)
      victims[#victims + 1] = id
    end
  end
end
take(P .. ':sched', 'scheduled')
for _, group in ipairs(redis.call('SMEMBERS', P .. ':blkgroups')) do
  take(P .. ':blk:' .. group, 'blocked')
  forget_if_unblocked(group)
end
for _, group in ipairs(redis.call('SMEMBERS', P .. ':rblkgroups')) do
  take(P .. ':rblk:' .. group, 'blocked')
end
local purged = 0
for _, id in ipairs(victims) do
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'uk', 'uw')
  if WAITING[f[1]] then
    release_hold(f[2], f[3], id)
    del_job(id)
    purged = purged + 1
  end
end
return purged
