--[[ admin listing index, sync: index members of a finished state's index by queue and task.
The transport keeps one sorted set per finished state (P:done, P:dead, P:canceled,
P:discarded: ids by finish ms; schema in stores/redis/lua/lib.lua) and no way to find the dead
letters of one queue or task but reading every record. The admin keeps its own index beside
it, for filtered listings and per-queue counts (admin-owned keys, I = done|dead|canceled|
discarded):
  P:ax:I:q:{queue}   ZSET    ids of P:I whose record's queue is {queue} (score: finish ms)
  P:ax:I:t:{task}    ZSET    ids of P:I whose record's task name is {task}
  P:ax:I:qs          SET     queues having a P:ax:I:q:* set (index_counts.lua)
  P:ax:I:hw          STRING  highest P:I score indexed so far
  P:ax:I:next        STRING  where a bounded sync stopped (stores/redis/listing_index.py)
Dead letters are also added by the store when a job is dead-lettered, once this index is caught
up with P:dead (lib.lua: index_dead_letter), so a read syncs only the margin below hw.
Members are only ever added here; index_page.lua / index_counts.lua drop those that left P:I
(retried, discarded, purged, pruned) before they count, so counts are exact. New members of
P:I arrive at the top (their score is the Redis clock when they finished), so a sync reads
from just below hw up.
ARGV: 1 prefix, 2 I, 3 lowest score to read (inclusive, or '-inf'), 4 members of that lowest
      score already done (skip them), 5 batch size
Returns {members read, highest score read ('' if none), members read at that score}. ]]
local src = P .. ':' .. ARGV[2]
local ax = P .. ':ax:' .. ARGV[2]
local rows = redis.call('ZRANGEBYSCORE', src, ARGV[3], '+inf', 'WITHSCORES', 'LIMIT',
                        ARGV[4], ARGV[5])
-- Written in bulk: one ZADD per queue and per task of the batch, not two per member.
local by_key, queues = {}, {}
local function add(key, score, id)
  local m = by_key[key]
  if not m then m = {}; by_key[key] = m end
  m[#m + 1] = score
  m[#m + 1] = id
end
local high, at_high = nil, 0
for i = 1, #rows, 2 do
  local id, score = rows[i], rows[i + 1]
  local f = redis.call('HMGET', jkey(id), 'q', 'name')
  if f[1] and f[1] ~= '' then
    add(ax .. ':q:' .. f[1], score, id)
    queues[f[1]] = true
  end
  if f[2] and f[2] ~= '' then add(ax .. ':t:' .. f[2], score, id) end
  if score == high then at_high = at_high + 1 else high, at_high = score, 1 end
end
for key, m in pairs(by_key) do
  for i = 1, #m, 2000 do redis.call('ZADD', key, unpack(m, i, math.min(i + 1999, #m))) end
end
for queue in pairs(queues) do redis.call('SADD', ax .. ':qs', queue) end
if high then
  local hw = redis.call('GET', ax .. ':hw')
  if not hw or tonumber(hw) < tonumber(high) then redis.call('SET', ax .. ':hw', high) end
end
return {#rows / 2, high or '', at_high}
