--[[ heartbeat: renew the leases of claims a worker still holds.
ARGV: 1 prefix, 2 lease ms, 3.. pairs of id, token
A claim of a rate group not started yet keeps counting in its group's window while its
lease is renewed (P:ratep:{group}): a job prefetched behind a long task never lets the window
take more than its limit. Returns the ids whose claim is no longer ours (lease lost). ]]
local lease_ms = tonumber(ARGV[2])
local lost = {}
for i = 3, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', jkey(id), 'st', 'tok', 'rg')
  if f[1] == 'running' and f[2] == tok then
    redis.call('ZADD', P .. ':lease', 'XX', NOW + lease_ms, id)
    if f[3] and f[3] ~= '' then
      -- Renewed unless it lapsed already (dropped from the window or not yet).
      local pk, member = P .. ':ratep:' .. f[3], id .. ':' .. tok
      local at = redis.call('ZSCORE', pk, member)
      if at and tonumber(at) >= NOW then
        redis.call('ZADD', pk, NOW + lease_ms, member)
        redis.call('PEXPIRE', pk, lease_ms + 1000)
      end
    end
  else
    lost[#lost + 1] = id
  end
end
return lost
