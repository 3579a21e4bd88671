--[[ lead: take, renew or give up the lease of a role (beat's leader).
ARGV: 1 prefix, 2 role, 3 holder, 4 ttl ms (0: give it up if `holder` has it)
Touches P:lead:{role}. Returns 1 while `holder` has the lease, else 0. ]]
local k = P .. ':lead:' .. ARGV[2]
local holder, ttl = ARGV[3], tonumber(ARGV[4])
local current = redis.call('GET', k)
if ttl <= 0 then
  if current == holder then redis.call('DEL', k) end
  return 0
end
if current == false or current == holder then
  redis.call('SET', k, holder, 'PX', ttl)
  return 1
end
return 0
