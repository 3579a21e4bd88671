--[[ publish: store one task message as a job, deciding uniqueness atomically.
ARGV: 1 prefix, 2 id, 3 queue, 4 msg, 5 the other fields joined by U+001F (few arguments
      keep the client's cost down): priority, eta ms (0 = now), task name, unique lock
      ('' = none), window, ttl ms, concurrency group ('' = none), slot limit,
      delivery limit (0 = none), hold backstop ms
Returns 1 (enqueued), 2 (scheduled), +10 when the publish continued a running job,
or the holder's id (a string) when the key is held by another job.
A message whose id is running is a continuation (retry / Task.replace): the running claim
is settled (slot freed, lease dropped) and the new message takes the job's place. ]]
local id, queue, msg = ARGV[2], ARGV[3], ARGV[4]
local f = {}
for field in string.gmatch(ARGV[5] .. '\31', '([^\31]*)\31') do f[#f + 1] = field end
local pri, eta, name = tonumber(f[1]), tonumber(f[2]), f[3]
local lock, window, ttl = f[4], f[5], tonumber(f[6])
local group, limit, mdl, backstop = f[7], f[8], f[9], tonumber(f[10])
local jk = jkey(id)
local prev = redis.call('HMGET', jk, 'st', 'q', 'cg')
local continued = prev[1] == 'running'

if continued then
  end_claim(id)
  push_history(jk, attempt_entry(jk, 'retried', nil))
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

if prev[1] and not continued then
  -- Same task id published again: the new message replaces the job's previous one.
  -- (Only once the key is ours: a duplicate leaves the existing job where it was.)
  redis.call('ZREM', P .. ':q:' .. (prev[2] or ''), id)
  redis.call('ZREM', P .. ':sched', id)
  redis.call('ZREM', P .. ':done', id)
  redis.call('ZREM', P .. ':dead', id)
  redis.call('ZREM', P .. ':canceled', id)
  redis.call('ZREM', P .. ':discarded', id)
  if prev[3] and prev[3] ~= '' then redis.call('ZREM', P .. ':blk:' .. prev[3], id) end
end

local seq = redis.call('INCR', P .. ':seq')
-- as text: Lua prints numbers with 14 significant digits, scores need up to 15
local score = string.format('%.0f', pri * 1099511627776 + seq)
local state = 'enqueued'
if eta > NOW then state = 'scheduled' end
if prev[1] then
  redis.call('HSET', jk, 'uk', lock, 'uw', window, 'ut', ttl, 'cg', group, 'cl', limit)
  if not continued then
    redis.call('HDEL', jk, 'reason', 'etype', 'emsg', 'tb', 'start', 'fin', 'wk')
  end
elseif lock ~= '' or group ~= '' then
  redis.call('HSET', jk, 'uk', lock, 'uw', window, 'ut', ttl, 'cg', group, 'cl', limit)
end
redis.call('HSET', jk, 'msg', msg, 'q', queue, 'name', name, 'score', score, 'dl', 0,
           'mdl', mdl, 'enq', NOW, 'due', eta, 'st', state)
local bonus = continued and 10 or 0
redis.call('SADD', P .. ':queues', queue)
if state == 'scheduled' then
  redis.call('ZADD', P .. ':sched', eta, id)
  -- Wake a waiting consumer: its next claim learns the due time and it sleeps until then.
  wake(queue)
  return 2 + bonus
end
redis.call('ZADD', P .. ':q:' .. queue, score, id)
wake(queue)
return 1 + bonus
