--[[ publish: store one task message as a job, deciding uniqueness atomically.
ARGV: 1 prefix, 2 id, 3 queue, 4 msg, 5 task name, 6 hold backstop ms, 7 priority, 8 eta ms
      (0 = now), 9 delivery limit (0 = none), 10 compact layout ('0' = the envelope in the
      hash's msg field, as releases before it; absent = 1), 11 lease token continued
      (0 = none), 12 unique lock ('' = none), 13 window, 14 unique ttl ms, 15 concurrency
      group ('' = none), 16 slot limit, 17 rate group ('' = none), 18 rate limit, 19 rate
      window ms. Every field is an argument of its own, so a key or a name may contain any
      character and nothing is parsed: a number is one tonumber, or stored as it came.
      Arguments after the 9th may be left out when they hold their default (0, '', compact).
Returns 1 (enqueued), 2 (scheduled), +10 when the publish continued a running job, the
holder's id (a string) when the key is held by another job, or {'fenced', state} when the
message may not change the job: its id is running and it does not carry that claim's lease
token, or it continues a claim that is no longer current (a job its own delivery finished,
by an early ack, is published anew).
A continuation (retry / Task.replace: the running delivery's lease token) settles the running
claim (slot freed, lease dropped) and the new message takes the job's place. A message with
another unique key than the job's releases the old key once the new one is decided.
The plain publish (a `delay()`: a new id, nine arguments — compact layout, no lease token,
unique key, group or rate group — and no ETA) takes the lean path below: nine commands, TIME,
EXISTS, INCR, SET, HSET, SADD, ZADD and the wake-up's HEXISTS and RPUSH, and no parsing. It
writes what the general path writes for that job; the boot mark (mark_boot) is written by the
store's first job (P:seq reaching 1: a store with jobs has it from then on; the general path
still marks it every time, for stores of releases before the mark). Everything else — an id the
store has, an ETA, any other argument — takes the general path after it. ]]
if #ARGV == 9 and ARGV[8] == '0' and redis.call('EXISTS', jkey(ARGV[2])) == 0 then
  local id, queue = ARGV[2], ARGV[3]
  local seq = redis.call('INCR', P .. ':seq')
  if seq == 1 then mark_boot() end
  local score = queue_score(tonumber(ARGV[7]), seq)
  redis.call('SET', mkey(id), ARGV[4])
  redis.call('HSET', jkey(id), 'q', queue, 'name', ARGV[5], 'score', score, 'dl', '0',
             'mdl', ARGV[9], 'enq', NOW, 'due', '0', 'st', 'enqueued')
  redis.call('SADD', P .. ':queues', queue)
  redis.call('ZADD', P .. ':q:' .. queue, score, id)
  wake(queue)
  return 1
end
local id, queue, msg, name = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local backstop, pri, eta = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local compact = ARGV[10] ~= '0'
local continues = tonumber(ARGV[11] or 0)
local lock, window, ttl = ARGV[12] or '', ARGV[13] or '', tonumber(ARGV[14] or 0)
local group, limit = ARGV[15] or '', tonumber(ARGV[16] or 0)
local rate_group, rate_limit, rate_window = ARGV[17] or '', ARGV[18] or '0', ARGV[19] or '0'
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
  end_claim(id, prev[3] or '')
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

local score = queue_score(pri, redis.call('INCR', P .. ':seq'))
local state = 'enqueued'
if eta > NOW then state = 'scheduled' end
-- The record's fields, written by one HSET.
-- (numbers as they came: a Lua number would be formatted again)
local fields = {'q', queue, 'name', name, 'score', score, 'dl', '0', 'mdl', ARGV[9],
                'enq', NOW, 'due', ARGV[8], 'st', state}
local function put(...)
  for _, v in ipairs({...}) do fields[#fields + 1] = v end
end
if prev[1] or lock ~= '' or group ~= '' then
  put('uk', lock, 'uw', window, 'ut', ttl, 'cg', group, 'cl', limit)
end
if prev[1] and not continued then
  redis.call('HDEL', jk, 'reason', 'etype', 'emsg', 'tb', 'start', 'fin', 'wk')
end
if compact then
  set_msg(id, msg, prev[1] ~= false)
else
  -- (plus_redis_compact_records off: workers of an earlier release read only the hash)
  redis.call('DEL', mkey(id))
  put('msg', msg)
end
if rate_group ~= '' then
  put('rg', rate_group, 'rl', rate_limit, 'rw', rate_window)
elseif prev[7] then
  redis.call('HDEL', jk, 'rg', 'rl', 'rw')
end
redis.call('HSET', jk, unpack(fields))
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
