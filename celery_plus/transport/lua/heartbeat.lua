--[[ heartbeat: renew the leases of claims a worker still holds.
ARGV: 1 prefix, 2 lease ms, 3.. pairs of id, token
Returns the ids whose claim is no longer ours (lease lost). ]]
local lease_ms = tonumber(ARGV[2])
local lost = {}
for i = 3, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', jkey(id), 'st', 'tok')
  if f[1] == 'running' and f[2] == tok then
    redis.call('ZADD', P .. ':lease', 'XX', NOW + lease_ms, id)
  else
    lost[#lost + 1] = id
  end
end
return lost
