--[[ admin discard: failed -> discarded; each job re-checked here.
Keys touched: P:job:{id}, P:dead, P:discarded (schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2.. job ids
The record is kept (st = discarded, fin = now, an 'admin discard' history entry) in
P:discarded, which maintenance prunes like completed records. A failed job holds no
pending/running unique hold (dead_letter released it); a ttl hold lapses by itself.
Returns per id a triple {id, outcome, extra}: {'discarded', 'failed'} | {'noop', state} |
{'missing', ''}. ]]
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = jkey(id)
  local st = redis.call('HGET', jk, 'st')
  local outcome, extra = 'discarded', 'failed'
  if not st then
    outcome, extra = 'missing', ''
  elseif st ~= 'failed' then
    outcome, extra = 'noop', st
  else
    local dl = redis.call('HGET', jk, 'dl')
    push_history(jk, {delivery = tonumber(dl or '0'), worker = '', started_ms = NOW,
                      finished_ms = NOW, outcome = 'admin discard'})
    redis.call('ZREM', P .. ':dead', id)
    redis.call('HSET', jk, 'st', 'discarded', 'fin', NOW)
    redis.call('ZADD', P .. ':discarded', NOW, id)
  end
  out[#out + 1] = id
  out[#out + 1] = outcome
  out[#out + 1] = extra
end
return out
