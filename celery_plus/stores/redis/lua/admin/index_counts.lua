--[[ admin listing index, counts: members of a finished state per queue (celery-plus store-status).
Keys: P:I, P:ax:I:q:*, P:ax:I:qs (schema in index_sync.lua).
ARGV: 1 prefix, 2 I (done|dead|canceled|discarded)
Drops from each queue's set the members that left P:I (as index_page.lua does) and forgets
queues left with none.
Returns {queue, count, queue, count, ...}. ]]
local src = P .. ':' .. ARGV[2]
local ax = P .. ':ax:' .. ARGV[2]
local out = {}
for _, queue in ipairs(redis.call('SMEMBERS', ax .. ':qs')) do
  local key = ax .. ':q:' .. queue
  drop_stale(key, src)
  local n = redis.call('ZCARD', key)
  if n == 0 then
    redis.call('SREM', ax .. ':qs', queue)
  else
    out[#out + 1] = queue
    out[#out + 1] = n
  end
end
return out
