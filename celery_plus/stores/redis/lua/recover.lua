--[[ recover: return claims whose stored lease deadline passed (worker died or stalled).
ARGV: 1 prefix, 2 batch limit, 3 hold backstop ms
Each expired claim goes back to enqueued, or to failed ('delivery limit') once its deliveries
reach the job's limit. Returns {id, outcome, ...} with outcome requeued|coalesced|dead. ]]
local limit, backstop = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
local expired = redis.call('ZRANGEBYSCORE', P .. ':lease', '-inf', NOW, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'dl', 'mdl', 'wk')
  if f[1] ~= 'running' then
    redis.call('ZREM', P .. ':lease', id)
  else
    end_claim(id)
    redis.call('HINCRBY', P .. ':stats', 'recovered', 1)
    local dl, mdl = tonumber(f[2] or '0'), tonumber(f[3] or '0')
    local why = 'lease expired (claimed by ' .. (f[4] or '?') .. ')'
    if mdl > 0 and dl >= mdl then
      dead_letter(id, {reason = 'delivery limit',
                       exc_message = 'message delivered ' .. dl .. ' times; last lease expired'})
      out[#out + 1] = id
      out[#out + 1] = 'dead'
    else
      push_history(jk, attempt_entry(jk, 'lease expired', {exc_message = why}))
      out[#out + 1] = id
      out[#out + 1] = requeue(id, backstop)
    end
  end
end
return out
