--[[ claim: take up to N jobs from the given queues (in order) for one worker.
ARGV: 1 prefix, 2 worker id, 3 lease ms, 4 max jobs, 5 scan limit, 6 hold backstop ms, 7.. queues
Each claim: token+1, deliveries+1, lease = now + lease ms, slot taken atomically (a full
group parks the job as blocked and scanning goes on), pending-window hold released,
running-window hold refreshed. A job of a rate group whose window is full is parked as
blocked (rate_park) and counts nothing; a claim counts in its group's window. Due scheduled
jobs are promoted and rate groups whose window has room get their parked jobs back first.
Returns {{id, token, msg, deliveries, queue, ...}, {blocked id, ...}, ms until the next
scheduled job is due (-1 if none)}. A waiting job whose message is missing (evicted) is
dead-lettered with reason 'message missing' instead of claimed. A queue in P:paused
(pause.lua) is skipped: its jobs stay enqueued. For one lease after a restart (check_boot in
lib.lua) nothing is claimed: the reply is empty and its next due is the grace left. ]]
local worker, lease_ms = ARGV[2], tonumber(ARGV[3])
local max_n, scan_limit, backstop = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
-- After a restart (check_boot): no claim for one lease; the grace left is the next due.
local grace = check_boot(lease_ms)
if grace > 0 then return {{}, {}, grace} end
-- The first scheduled job and the first rate group to reopen, read once: promoting and
-- releasing only when one is due (then read again), and the next due time from them.
local function first_of(key) return redis.call('ZRANGE', P .. key, 0, 0, 'WITHSCORES') end
local sched_first, opens = first_of(':sched'), first_of(':rwake')
if sched_first[2] and tonumber(sched_first[2]) <= NOW then
  promote_due(100)
  sched_first = first_of(':sched')
end
if opens[2] and tonumber(opens[2]) <= NOW then release_rate(20) end
local parked = false  -- a job rate-parked below moves P:rwake: read it again at the end
local out, blocked = {}, {}
local n, scanned = 0, 0
for qi = 7, #ARGV do
  local queue = ARGV[qi]
  local qk = P .. ':q:' .. queue
  local paused = redis.call('HEXISTS', P .. ':paused', queue) == 1
  while not paused and n < max_n and scanned < scan_limit do
    local popped = redis.call('ZPOPMIN', qk, max_n - n)
    if #popped == 0 then break end
    for i = 1, #popped, 2 do
      local id, score = popped[i], popped[i + 1]
      scanned = scanned + 1
      local jk = jkey(id)
      local f = redis.call('HMGET', jk, 'st', 'cg', 'cl', 'uk', 'uw', 'msg', 'dl', 'rg', 'rl',
                           'rw', 'tok')
      local body = f[1] == 'enqueued' and (f[6] or redis.call('GET', mkey(id)))
      if f[1] == 'enqueued' and not body then
        -- Its message is gone (evicted by a maxmemory-policy other than noeviction): a dead
        -- letter saying so, never a claim without a body.
        dead_letter(id, {reason = 'message missing', exc_type = 'MessageMissing',
                         exc_message = "the job's message is missing from the store (evicted? "
                           .. "Redis must run with maxmemory-policy noeviction)"})
      elseif f[1] == 'enqueued' then
        local free = true
        local rg = f[8] or ''
        if rg ~= '' and rate_room(rg, tonumber(f[9]), tonumber(f[10])) <= 0 then
          free = false
          rate_park(id, rg, score, tonumber(f[10]))
          parked = true
          blocked[#blocked + 1] = id
        elseif not take_slot(id, f[2], f[3], score) then
          free = false
          blocked[#blocked + 1] = id
        end
        if free then
          local tok, dl = begin_claim(id, f[4], f[5], f[7], worker, lease_ms, backstop, f[11])
          if rg ~= '' then rate_take(rg, id, tok, tonumber(f[10]), lease_ms) end
          out[#out + 1] = id
          out[#out + 1] = tok
          out[#out + 1] = body
          out[#out + 1] = dl
          out[#out + 1] = queue
          n = n + 1
        end
      end
    end
  end
end
local next_due = -1
if sched_first[2] then next_due = math.max(tonumber(sched_first[2]) - NOW, 0) end
if parked or (opens[2] and tonumber(opens[2]) <= NOW) then opens = first_of(':rwake') end
if opens[2] and (next_due < 0 or tonumber(opens[2]) - NOW < next_due) then
  next_due = math.max(tonumber(opens[2]) - NOW, 0)
end
return {out, blocked, next_due}
