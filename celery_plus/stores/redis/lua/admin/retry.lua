--[[ admin retry: failed -> enqueued, for one job or a batch; each job re-checked here.
Keys touched (schema in stores/redis/lua/lib.lua): P:job:{id}, P:dead, P:u:{lock}, P:seq,
P:q:{queue}, P:wake:{queue}.
ARGV: 1 prefix, 2 hold backstop ms, 3 task name ('' = any), 4 queue ('' = any),
      5 finished at least this many ms ago ('' = any age), 6.. job ids
The job keeps its task id, message, history and last error details; deliveries go back to 0,
it joins the back of its queue at its priority (new seq, enq = now) and the history gets an
'admin retry' entry. Its unique hold is taken again with the publish rules (pending/running:
held by this job with the backstop; ttl: taken for the ttl if free); if ANOTHER job holds the
key nothing changes and the reply says who.
Returns per id a triple {id, outcome, extra}: {'enqueued', 'failed'} | {'noop', state} (not
failed: already retried, or never failed) | {'skipped', state} (no longer in the scope) |
{'missing', ''} | {'conflict', holder}. ]]
local backstop, name, queue = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local cutoff = nil
if ARGV[5] ~= '' then cutoff = NOW - tonumber(ARGV[5]) end

local function retry(id)
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'name', 'q', 'fin', 'uk', 'uw', 'ut', 'score', 'dl')
  if not f[1] then return {'missing', ''} end
  if f[1] ~= 'failed' then return {'noop', f[1]} end
  if (name ~= '' and f[2] ~= name) or (queue ~= '' and f[3] ~= queue)
      or (cutoff and tonumber(f[4] or '0') > cutoff) then
    return {'skipped', f[1]}
  end
  local lock, window = f[5], f[6]
  if lock and lock ~= '' then
    local holder = take_hold(lock, id, window, tonumber(f[7] or '0'), backstop)
    if holder then return {'conflict', holder} end
  end
  push_history(jk, {delivery = tonumber(f[9] or '0'), worker = '', started_ms = NOW,
                    finished_ms = NOW, outcome = 'admin retry'})
  redis.call('ZREM', P .. ':dead', id)
  local pri = math.floor(tonumber(f[8] or '0') / PRIORITY_FACTOR)
  local seq = redis.call('INCR', P .. ':seq')
  local score = queue_score(pri, seq)
  redis.call('HSET', jk, 'dl', 0, 'enq', NOW, 'score', score)
  redis.call('HDEL', jk, 'fin')
  enqueue(id, f[3], score)
  return {'enqueued', 'failed'}
end

local out = {}
for i = 6, #ARGV do
  local r = retry(ARGV[i])
  out[#out + 1] = ARGV[i]
  out[#out + 1] = r[1]
  out[#out + 1] = r[2]
end
return out
