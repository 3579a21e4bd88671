--[[ rate_start: the task of claim (id, token) starts now (a job of a rate group).
ARGV: 1 prefix, 2 id, 3 token
Touches P:job:{id} (read), P:ratep:{group}, P:rate:{group}, P:rwake. The claim leaves its
group's claims not started yet and counts by this start time; the group's parked jobs are
woken when this start leaves the window, if that is sooner than planned. Returns 1, or 0 for
a job of no rate group. ]]
local f = redis.call('HMGET', jkey(ARGV[2]), 'rg', 'rw')
local group, window = f[1], tonumber(f[2] or '0')
if not group or group == '' then return 0 end
local member = ARGV[2] .. ':' .. ARGV[3]
local rk = P .. ':rate:' .. group
redis.call('ZREM', P .. ':ratep:' .. group, member)
redis.call('ZADD', rk, NOW, member)
redis.call('PEXPIRE', rk, window + 1000)
if redis.call('ZSCORE', P .. ':rwake', group) then
  redis.call('ZADD', P .. ':rwake', 'LT', rate_opens(group, window), group)
end
return 1
