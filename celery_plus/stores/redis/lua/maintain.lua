--[[ maintain: bounded housekeeping, run by one worker per interval (P:maint lock).
ARGV: 1 prefix, 2 batch, 3 completed retention ms, 4 completed max count,
      5 dead retention ms, 6 dead max count, 7 hold backstop ms, 8 '1' to renew the holds of
      waiting jobs too ('0': of running jobs only, for a coordination store)
Promotes due scheduled jobs, gives rate groups whose window has room their parked jobs
back, unblocks groups with free slots (and drops slot entries whose job
is no longer running), renews the holds of jobs that still need them, prunes completed and dead records past retention (canceled and
discarded records with the completed retention).
Returns {promoted, unblocked, pruned, renewed}. ]]
local batch = tonumber(ARGV[2])
local promoted = promote_due(batch)
local renewed = renew_holds(batch, tonumber(ARGV[7]), ARGV[8] == '1')
-- Every rate group with parked jobs is looked at again (a wake-up lost to nothing else).
for _, group in ipairs(redis.call('SRANDMEMBER', P .. ':rblkgroups', 50)) do
  redis.call('ZADD', P .. ':rwake', 'NX', NOW, group)
end
local released = release_rate(100)
local unblocked = 0
for _, group in ipairs(redis.call('SRANDMEMBER', P .. ':blkgroups', 50)) do
  local sk = P .. ':slot:' .. group
  for _, holder in ipairs(redis.call('SMEMBERS', sk)) do
    if redis.call('HGET', jkey(holder), 'st') ~= 'running' then
      redis.call('SREM', sk, holder)
    end
  end
  local first = redis.call('ZRANGE', P .. ':blk:' .. group, 0, 0)
  local limit = 0
  if first[1] then limit = tonumber(redis.call('HGET', jkey(first[1]), 'cl') or '0') end
  local free = limit - redis.call('SCARD', sk)
  while free > 0 and redis.call('ZCARD', P .. ':blk:' .. group) > 0 do
    unblock_one(group)
    free = free - 1
    unblocked = unblocked + 1
  end
  forget_if_unblocked(group)
end
local pruned = 0
local function prune(zkey, retention, max_count)
  local old = redis.call('ZRANGEBYSCORE', zkey, '-inf', NOW - retention, 'LIMIT', 0, batch)
  for _, id in ipairs(old) do
    del_job(id)
    redis.call('ZREM', zkey, id)
    pruned = pruned + 1
  end
  local excess = redis.call('ZCARD', zkey) - max_count
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', zkey, math.min(excess, batch))
    for i = 1, #popped, 2 do
      del_job(popped[i])
      pruned = pruned + 1
    end
  end
end
prune(P .. ':done', tonumber(ARGV[3]), tonumber(ARGV[4]))
prune(P .. ':dead', tonumber(ARGV[5]), tonumber(ARGV[6]))
prune(P .. ':canceled', tonumber(ARGV[3]), tonumber(ARGV[4]))
prune(P .. ':discarded', tonumber(ARGV[3]), tonumber(ARGV[4]))
return {promoted, unblocked + released, pruned, renewed}
