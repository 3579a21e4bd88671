--[[ pause: pause (ARGV[3] = '1') or resume (ARGV[3] = '0') queue ARGV[2].
P:paused is a HASH queue -> ms it was paused; claim.lua takes nothing from a queue in it. A
claim is a script as this is, so once this returns no claim hands out a job of a paused queue.
A paused queue's wake-up tokens are dropped and wake() pushes none (its consumers do not wake
for jobs they may not claim); resuming wakes as many idle consumers as the queue has jobs (up
to the wake cap).
Returns the server ms of the step. ]]
local queue = ARGV[2]
if ARGV[3] == '1' then
  redis.call('HSETNX', P .. ':paused', queue, NOW)
  redis.call('DEL', P .. ':wake:' .. queue)
elseif redis.call('HDEL', P .. ':paused', queue) == 1 then
  local waiting = math.min(redis.call('ZCARD', P .. ':q:' .. queue), WAKE_CAP + 1)
  for _ = 1, waiting do wake(queue) end
end
return NOW
