--[[ publish: store one task message as a job, deciding uniqueness atomically.
ARGV: 1 prefix, 2 id, 3 queue, 4 msg, 5 the numbers, separated by spaces: priority, eta ms
      (0 = now), unique ttl ms, slot limit, delivery limit (0 = none), hold backstop ms, lease
      token continued (0 = none), rate limit, rate window ms, compact layout (0 = the
      envelope in the hash's msg field, as releases before it; absent = 1); 6 task name, 7 unique lock
      ('' = none), 8 window, 9 concurrency group ('' = none), 10 rate group ('' = none). Text fields are separate arguments: a key or a name
      may contain any character.
Returns 1 (enqueued), 2 (scheduled), +10 when the publish continued a running job, the
holder's id (a string) when the key is held by another job, or {'fenced', state} when the
message may not change the job: its id is running and it does not carry that claim's lease
token, or it continues a claim that is no longer current (a job its own delivery finished,
by an early ack, is published anew).
A continuation (retry / Task.replace: the running delivery's lease token) settles the running
claim (slot freed, lease dropped) and the new message takes the job's place. A message with
another unique key than the job's releases the old key once the new one is decided. ]]
local id, queue, msg = ARGV[2], ARGV[3], ARGV[4]
local n = {}
for field in string.gmatch(ARGV[5], '%S+') do n[#n + 1] = tonumber(field) end
local pri, eta, ttl, limit, mdl, backstop, continues = n[1], n[2], n[3], n[4], n[5], n[6], n[7]
local rate_limit, rate_window = n[8] or 0, n[9] or 0
local compact = n[10] ~= 0
local name, lock, window, group = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local rate_group = ARGV[10] or ''
mark_boot()
local jk = jkey(id)
local prev = redis.call('HMGET', jk, 'st', 'q', 'cg', 'tok', 'uk', 'uw', 'rg')
local st, tok = prev[1], tonumber(prev[4] or '0')
local continued = st == 'running' and continues > 0 and tok == continues
-- A job its own delivery already finished (an early ack) is published anew, as any
-- finished job: the token is that claim's, and no other claim came since.
local own_finished = continues > 0 and tok == continues and FINISHED[st] == true
if (st == 'running' or continues > 0) and not continued and not own_finished then
  return {'fenced', st or ''}
end
local old_lock, old_window = prev[5] or '', prev[6] or ''

if continued then
  end_claim(id)
  push_history(jk, attempt_entry(jk, 'retried', nil))
end

if lock ~= '' then
  local holder = take_hold(lock, id, window, ttl, math.max(eta - NOW, 0) + backstop)
  if holder then
    if continued then
      release_hold(old_lock, old_window, id)
      coalesce(id)
    end
    redis.call('HINCRBY', P .. ':stats', 'deduplicated', 1)
    return holder
  end
end
if old_lock ~= '' and old_lock ~= lock then
  release_hold(old_lock, old_window, id)
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
  if prev[3] and prev[3] ~= '' then
    redis.call('ZREM', P .. ':blk:' .. prev[3], id)
    forget_if_unblocked(prev[3])
  end
  rate_unpark(id, prev[7])
end

local seq = redis.call('INCR', P .. ':seq')
-- as text: Lua prints numbers with 14 significant digits, scores need up to 15
local score = string.format('%.0f', pri * PRIORITY_FACTOR + seq)
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
if compact then
  set_msg(id, msg, prev[1] ~= false)
else
  -- (plus_redis_compact_records off: workers of an earlier release read only the hash)
  redis.call('DEL', mkey(id))
  redis.call('HSET', jk, 'msg', msg)
end
redis.call('HSET', jk, 'q', queue, 'name', name, 'score', score, 'dl', 0,
           'mdl', mdl, 'enq', NOW, 'due', eta, 'st', state)
if rate_group ~= '' then
  redis.call('HSET', jk, 'rg', rate_group, 'rl', rate_limit, 'rw', rate_window)
elseif prev[7] then
  redis.call('HDEL', jk, 'rg', 'rl', 'rw')
end
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
