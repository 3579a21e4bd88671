--[[ claim_job: claim ONE job by id, for a message another broker delivered (coordination).
ARGV: 1 prefix, 2 id, 3 worker id, 4 lease ms, 5 hold backstop ms
Touches P:job:{id}, P:q:{queue} / P:sched / P:blk:{group} (the job leaves its waiting index),
P:slot:{group}, P:u:{lock}, P:lease, P:stats (blocked).
An enqueued, scheduled (due or not: the other broker decides when) or blocked job is claimed
as claim.lua claims it; a full group, or a restart's grace (check_boot), changes nothing. Running, finished and unknown jobs are
reported as they are.
Returns {outcome, state, token, deliveries, lease ms left}: outcome claimed | blocked | held |
finished | missing. ]]
local id, worker = ARGV[2], ARGV[3]
local lease_ms, backstop = tonumber(ARGV[4]), tonumber(ARGV[5])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'q', 'cg', 'cl', 'uk', 'uw', 'dl', 'rg', 'tok')
local st = f[1]
if not st then return {'missing', '', 0, 0, 0} end
if st == 'running' then
  local deadline = tonumber(redis.call('ZSCORE', P .. ':lease', id) or NOW)
  return {'held', st, 0, tonumber(f[7] or '0'), math.max(deadline - NOW, 0)}
end
if not WAITING[st] then
  return {'finished', st, 0, 0, 0}
end
if check_boot(lease_ms) > 0 then return {'blocked', st, 0, 0, 0} end
local group = f[3] or ''
if not take_slot(id, group, f[4]) then return {'blocked', st, 0, 0, 0} end
redis.call('ZREM', P .. ':q:' .. (f[2] or ''), id)
redis.call('ZREM', P .. ':sched', id)
if group ~= '' and st == 'blocked' then
  redis.call('ZREM', P .. ':blk:' .. group, id)
  forget_if_unblocked(group)
end
if st == 'blocked' then rate_unpark(id, f[8]) end
local tok, dl = begin_claim(id, f[5], f[6], f[7], worker, lease_ms, backstop, f[9])
return {'claimed', 'running', tok, dl, 0}
