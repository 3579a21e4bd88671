--[[ publish: store one task message as a job, deciding uniqueness atomically.
ARGV: 1 prefix, 2 id, 3 queue, 4 msg, 5 priority, 6 eta ms (0 = now), 7 task name,
      8 unique lock ('' = none), 9 window, 10 ttl ms, 11 concurrency group ('' = none),
      12 slot limit, 13 delivery limit (0 = none), 14 hold backstop ms
Returns 1 (enqueued), 2 (scheduled), +10 when the publish continued a running job,
or the holder's id (a string) when the key is held by another job.
A message whose id is running is a continuation (retry / Task.replace): the running claim
is settled (slot freed, lease dropped) and the new message takes the job's place. ]]
local id, queue, msg = ARGV[2], ARGV[3], ARGV[4]
local pri, eta, name = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local lock, window, ttl = ARGV[8], ARGV[9], tonumber(ARGV[10])
local group, limit, mdl, backstop = ARGV[11], ARGV[12], ARGV[13], tonumber(ARGV[14])
local jk = jkey(id)
local prev = redis.call('HMGET', jk, 'st', 'q', 'cg')
local continued = prev[1] == 'running'

if continued then
  end_claim(id)
  push_history(jk, attempt_entry(jk, 'retried', nil))
elseif prev[1] then
  -- Same task id published again: the new message replaces the job's previous one.
  redis.call('ZREM', P .. ':q:' .. (prev[2] or ''), id)
  redis.call('ZREM', P .. ':sched', id)
  redis.call('ZREM', P .. ':done', id)
  redis.call('ZREM', P .. ':dead', id)
  redis.call('ZREM', P .. ':canceled', id)
  if prev[3] and prev[3] ~= '' then redis.call('ZREM', P .. ':blk:' .. prev[3], id) end
end

if lock ~= '' then
  local lk = P .. ':u:' .. lock
  local holder = redis.call('GET', lk)
  if holder and holder ~= id then
    if continued then coalesce(id) end
    redis.call('HINCRBY', P .. ':stats', 'deduplicated', 1)
    return holder
  end
  if window == 'ttl' then
    if not holder then redis.call('SET', lk, id, 'PX', ttl) end
  else
    redis.call('SET', lk, id, 'PX', backstop)
  end
end

local seq = redis.call('INCR', P .. ':seq')
local score = pri * 1099511627776 + seq
redis.call('HSET', jk, 'msg', msg, 'q', queue, 'name', name, 'score', score, 'dl', 0,
           'mdl', mdl, 'uk', lock, 'uw', window, 'ut', ttl, 'cg', group, 'cl', limit,
           'enq', NOW, 'due', eta)
if prev[1] and not continued then
  redis.call('HDEL', jk, 'reason', 'etype', 'emsg', 'tb', 'start', 'fin', 'wk')
end
local bonus = continued and 10 or 0
redis.call('SADD', P .. ':queues', queue)
if eta > NOW then
  redis.call('HSET', jk, 'st', 'scheduled')
  redis.call('ZADD', P .. ':sched', eta, id)
  return 2 + bonus
end
enqueue(id, queue, score)
return 1 + bonus
