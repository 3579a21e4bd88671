--[[
celery-plus durable store on Redis: shared helpers, prepended to every script.

Key schema (P = key prefix: "plus" on one server; "plus:{q:<queue>}" etc. on a Redis Cluster,
where P's hash tag puts every key below in one slot: stores/redis/keyspace.py). Every script is
called with KEYS[1] = ARGV[1] = P; keys are built here from P, so they share KEYS[1]'s slot:
  P:seq              STRING  monotonic counter; FIFO tie-break inside a priority
  P:job:{id}         HASH    one job record per task id (small fields only, so Redis keeps it
                             a listpack while every value is within hash-max-listpack-value):
                       q      queue            name  task name
                       st     enqueued|scheduled|blocked|running|completed|failed|canceled|discarded
                       score  ordering score in its queue: priority * PRIORITY_FACTOR + seq (lower first)
                       tok    lease token of the last claim (fences heartbeats, settles and
                              continuation messages); from P:tok, so never repeated for an id
                       dl     deliveries of the current message    mdl  delivery limit (0 = none)
                       uk uw ut  unique lock key, window (pending|running|ttl), ttl ms
                       cg cl  concurrency group, slot limit
                       due enq start fin  ms timestamps    wk  worker holding the claim
                       sm     start mark of the claim `tok` (the worker's, carried by its
                              heartbeats and settles): tok = its task started at `start`;
                              -tok = not started yet (reserved); absent or another token's:
                              not known (`start` is the claim's time): mark_start
                       reason etype emsg tb  dead-letter details      hist  JSON array of attempts
                       msg    the envelope, in records stored by releases before the compact
                              layout or with plus_redis_compact_records off (then no P:m:{id});
                              read first when present
  P:m:{id}           STRING  the job's kombu envelope, as published or (plus_redis_deflate)
                             deflated by the client ("\0z1" + raw deflate against a fixed
                             dictionary: stores/redis/envelope.py; the scripts never read
                             its content); written, read and deleted with P:job:{id} by the
                             same scripts
  P:q:{queue}        ZSET    enqueued job ids by score
  P:sched            ZSET    scheduled (eta/countdown/retry) job ids by due ms
  P:blk:{group}      ZSET    blocked job ids by their queue score
  P:blkgroups        SET     groups having blocked jobs
  P:slot:{group}     SET     job ids holding a slot of the group
  P:lease            ZSET    running job ids by lease deadline ms
  P:u:{lock}         STRING  unique hold: holder task id (PX = ttl, or due time + backstop)
  P:hexp             ZSET    non-TTL holds (lock) by the deadline last given: maintenance renews
                             those whose job still waits or runs (renew_holds); a released hold
                             leaves it, a lapsed one when maintenance reaches its deadline
  P:tok              STRING  store-wide lease token counter (a pruned id published again never
                             gets a token an old delivery could still carry); raised to the
                             server's clock in microseconds when P:boot finds a restart
  P:boot             HASH    run (the run_id of the server that last stored here), since (ms
                             the claims' grace after a restart began): check_boot
  P:done             ZSET    completed job ids by finish ms
  P:dead             ZSET    failed (dead-lettered) job ids by finish ms
  P:canceled         ZSET    canceled job ids by cancel ms (admin cancel)
  P:discarded        ZSET    discarded dead letters by discard ms (admin discard)
  P:wake:{queue}     LIST    wake-up tokens for idle consumers
  P:paused           HASH    paused queues: queue -> ms it was paused (claim.lua skips them)
  P:qhist            HASH    the admin's queue history: bucket ms -> "at ms|sample JSON", one a
                             minute, a day kept (admin/history_put.lua)
  P:ax:dead:*        the admin's listing index of dead letters (admin/index_sync.lua), kept by
                     dead_letter once it is caught up
  P:stats            HASH    cluster counters (deduplicated, recovered, dead_lettered, blocked)
  job fields of a cluster rate limit: rg (rate group), rl (starts allowed per window), rw
                     (window ms)
  P:rate:{group}     ZSET    the group's starts in the current window: id:token by start ms
  P:ratep:{group}    ZSET    its claims not started yet (prefetched): id:token by the claim's
                             first lease deadline (counted until they start, or until then)
  P:rblk:{group}     ZSET    jobs parked (st = blocked) because the group's window was full,
                             by their queue score
  P:rblkgroups       SET     groups having rate-parked jobs
  P:rwake            ZSET    rate groups with parked jobs by the ms their window next has room
  P:lead:{role}      STRING  holder of a role's lease (PX = its ttl): beat's leader
  P:beat:{name}      HASH    a periodic schedule entry: last (due ms of the last tick fired,
                             skipped or passed while paused), next (ms, for display), paused
                             ('1'), task, sched (text), job (last job id), fired (count)
  P:beats            SET     names of the schedule entries
]]

-- @prelude begin  (per call: the key prefix and the server clock; in the Redis Function
-- library, scripts.py turns this block into begin(ARGV), run by every function)
local P = ARGV[1]
local t = redis.call('TIME')
local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- @prelude end
-- The rules' constants, never retyped here: scripts.py puts celery_plus/model/rules.py's RENDERED
-- in place of the next line (PRIORITY_FACTOR, HISTORY_MAX, and the state sets WAITING and
-- FINISHED as tables {[state] = true}).
-- @rules
-- A queue's wake-up list holds at most WAKE_CAP + 1 tokens; past that it is cut back to
-- WAKE_KEEP + 1, so a publish to a queue nobody waits on trims once in 32, not every time.
local WAKE_CAP, WAKE_KEEP = 63, 31

local function jkey(id) return P .. ':job:' .. id end
local function mkey(id) return P .. ':m:' .. id end

-- Store the envelope of job `id` next to its hash (a record of the older layout loses its
-- `msg` field, so the message is stored once).
local function set_msg(id, msg, legacy)
  redis.call('SET', mkey(id), msg)
  if legacy then redis.call('HDEL', jkey(id), 'msg') end
end

-- Delete job `id`: its hash and its envelope.
local function del_job(id)
  redis.call('DEL', jkey(id), mkey(id))
end

-- A paused queue wakes no one (pause.lua wakes it when it is resumed).
local function wake(queue)
  if redis.call('HEXISTS', P .. ':paused', queue) == 1 then return end
  local k = P .. ':wake:' .. queue
  if redis.call('RPUSH', k, '1') > WAKE_CAP + 1 then
    redis.call('LTRIM', k, 0, WAKE_KEEP)
  end
end

-- A waiting job's score in its queue: priority first, then the publish order (P:seq). As
-- text: Lua prints numbers with 14 significant digits, scores need up to 15.
local function queue_score(pri, seq)
  return string.format('%.0f', pri * PRIORITY_FACTOR + seq)
end

local function enqueue(id, queue, score)
  redis.call('HSET', jkey(id), 'st', 'enqueued')
  redis.call('ZADD', P .. ':q:' .. queue, score, id)
  wake(queue)
end

-- Drop `group` from P:blkgroups once it has no blocked job left.
local function forget_if_unblocked(group)
  if redis.call('ZCARD', P .. ':blk:' .. group) == 0 then
    redis.call('SREM', P .. ':blkgroups', group)
  end
end

-- Move one blocked job of `group` back to its queue (it keeps its place in line).
local function unblock_one(group)
  local popped = redis.call('ZPOPMIN', P .. ':blk:' .. group, 1)
  if popped[1] then
    local f = redis.call('HMGET', jkey(popped[1]), 'st', 'q')
    if f[1] == 'blocked' then
      enqueue(popped[1], f[2], popped[2])
    end
  end
  forget_if_unblocked(group)
end

local function free_slot(group, id)
  if group and group ~= '' then
    if redis.call('SREM', P .. ':slot:' .. group, id) == 1 then
      unblock_one(group)
    end
  end
end

-- Take unique hold `lock` for `id` for `ms`, tracked for renewal (pending/running windows).
local function set_hold(lock, id, ms)
  redis.call('SET', P .. ':u:' .. lock, id, 'PX', ms)
  redis.call('ZADD', P .. ':hexp', NOW + ms, lock)
end

-- Delete hold `lock` (the caller checked who holds it) and its renewal entry.
local function drop_hold(lock)
  redis.call('DEL', P .. ':u:' .. lock)
  redis.call('ZREM', P .. ':hexp', lock)
end

-- Hold.TAKE (model/rules.py): take unique hold `lock` for `id` unless another job holds it:
-- a pending/running `window` for `ms` (the due time + the backstop: rules.hold_deadline,
-- tracked for renewal), a ttl window for `ttl` ms and only when the key is free (never
-- extended). Returns the id of the other job holding it (a duplicate: nothing taken), or nil.
local function take_hold(lock, id, window, ttl, ms)
  local lk = P .. ':u:' .. lock
  local holder = redis.call('GET', lk)
  if holder and holder ~= id then return holder end
  if window ~= 'ttl' then
    set_hold(lock, id, ms)
  elseif not holder and ttl > 0 then
    redis.call('SET', lk, id, 'PX', ttl)
  end
  return nil
end

-- Extend hold `lock` to now + `ms`, but only if `id` holds it.
local function refresh_hold(lock, id, ms)
  local lk = P .. ':u:' .. lock
  if redis.call('GET', lk) == id then
    redis.call('PEXPIRE', lk, ms)
    redis.call('ZADD', P .. ':hexp', NOW + ms, lock)
  end
end

-- Slot.TAKE (model/rules.py): a slot of concurrency `group` (`limit` at once) for `id`. True
-- when taken, or the job has no group. False when the group is full (counted as 'blocked');
-- given its queue `score`, the job is then parked: blocked, keeping its place in line, until
-- a slot is freed (free_slot). Without a score nothing else changes (the caller reports it).
local function take_slot(id, group, limit, score)
  if not group or group == '' then return true end
  local sk = P .. ':slot:' .. group
  if redis.call('SCARD', sk) >= tonumber(limit or '0') then
    if score then
      redis.call('ZADD', P .. ':blk:' .. group, score, id)
      redis.call('SADD', P .. ':blkgroups', group)
      redis.call('HSET', jkey(id), 'st', 'blocked')
    end
    redis.call('HINCRBY', P .. ':stats', 'blocked', 1)
    return false
  end
  redis.call('SADD', sk, id)
  return true
end

-- == tokens across a rewind (a restart from an older RDB / AOF, a promoted lagging replica) ==
-- The keyspace may have lost its last writes, P:tok and the job records with them: tokens
-- already handed out would be issued again. The server's run_id (a new one per process) is
-- kept in P:boot; a claim that finds another one raises P:tok to the clock in microseconds
-- (above every token issued before, at under one token per microsecond) and claims nothing
-- for one lease: a run whose claim was lost stops within 80% of a lease of its last renewal.

-- This server process's run_id (in the function library: read once per load).
local RUN_ID = nil
local function run_id()
  if not RUN_ID then
    RUN_ID = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  end
  return RUN_ID
end

-- Record this server in P:boot unless it holds a server already (publish: a snapshot of a
-- store with jobs always names the server that wrote it; the plain publish's lean path calls
-- it with the store's first job only, P:boot being kept from then on).
local function mark_boot()
  local bk = P .. ':boot'
  if redis.call('HEXISTS', bk, 'run') == 0 then redis.call('HSET', bk, 'run', run_id()) end
end

-- Before a claim: a restart found (P:boot names another server) raises P:tok to the clock
-- and starts the claims' grace; a store that never issued a token starts from 1. Returns the
-- ms until claims may resume (0: now).
local function check_boot(lease_ms)
  local bk = P .. ':boot'
  local f = redis.call('HMGET', bk, 'run', 'since')
  local run = run_id()
  if f[1] ~= run then
    local tok = tonumber(redis.call('GET', P .. ':tok') or '0')
    if f[1] or tok > 0 then
      local t = redis.call('TIME')
      local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
      if floor > tok then redis.call('SET', P .. ':tok', floor) end
    end
    f[2] = f[1] and NOW or nil
    redis.call('HSET', bk, 'run', run)
    if f[2] then redis.call('HSET', bk, 'since', f[2]) end
  end
  return math.max(tonumber(f[2] or '0') + lease_ms - NOW, 0)
end

-- The next lease token of a job whose last token is `old` (its hash's `tok`; nil: none):
-- from the store-wide counter, and above `old` (a record older than the counter). The
-- caller stores it in the job's hash.
local function next_token(old)
  local tok = redis.call('INCR', P .. ':tok')
  old = tonumber(old or '0')
  if tok <= old then
    tok = old + 1
    redis.call('SET', P .. ':tok', tok)
  end
  return tok
end

-- Make a waiting job running under a new claim (slot already taken by the caller): the
-- pending window's hold is released, the running window's refreshed; token+1 (above
-- `old_tok`, the hash's `tok`), deliveries+1, lease = now + lease_ms. Returns token,
-- deliveries.
local function begin_claim(id, lock, window, deliveries, worker, lease_ms, backstop, old_tok)
  local jk = jkey(id)
  if lock and lock ~= '' then
    local lk = P .. ':u:' .. lock
    if window == 'pending' then
      if redis.call('GET', lk) == id then drop_hold(lock) end
    elseif window == 'running' then
      refresh_hold(lock, id, backstop)
    end
  end
  local tok = next_token(old_tok)
  local dl = tonumber(deliveries or '0') + 1
  redis.call('HSET', jk, 'tok', tok, 'st', 'running', 'wk', worker, 'start', NOW, 'dl', dl)
  redis.call('ZADD', P .. ':lease', NOW + lease_ms, id)
  return tok, dl
end

-- Apply a worker's start mark `age` to the running claim `tok` of job hash `jk` (a
-- heartbeat's or a settle's): '' = not known (nothing); -1 = not started yet (reserved);
-- n >= 0 = its task started n ms ago: `start` moves there (never before the claim, never
-- after now), once per claim. (celery_plus/model/store.py start_time)
local function mark_start(jk, tok, age)
  if age == nil or age == '' then return end
  local n = tonumber(age)
  if not n then return end
  local sm = redis.call('HGET', jk, 'sm')
  if sm == tostring(tok) then return end
  if n < 0 then
    redis.call('HSET', jk, 'sm', '-' .. tok)
    return
  end
  local claimed = tonumber(redis.call('HGET', jk, 'start') or NOW) or NOW
  redis.call('HSET', jk, 'start', math.max(claimed, math.min(NOW, NOW - n)), 'sm', tok)
end

-- Release a non-TTL unique hold, but only if `id` holds it.
local function release_hold(lock, window, id)
  if lock and lock ~= '' and window ~= 'ttl' then
    local lk = P .. ':u:' .. lock
    if redis.call('GET', lk) == id then
      drop_hold(lock)
    end
  end
end

-- Failure details as stored: text values only (numbers and tables as text, null and false
-- left out). `raw` that is not a JSON object is kept as a note, never an error.
local function decode_detail(raw)
  if raw == nil or raw == '' then return nil end
  local ok, decoded = pcall(cjson.decode, raw)
  if not ok or type(decoded) ~= 'table' then
    return {exc_message = 'failure details could not be decoded'}
  end
  local out = {}
  for k, v in pairs(decoded) do
    if type(k) == 'string' then
      local kind = type(v)
      if kind == 'string' then out[k] = v
      elseif kind == 'number' then out[k] = tostring(v)
      elseif kind == 'boolean' then if v then out[k] = 'true' end
      elseif kind == 'table' then
        local encoded, text = pcall(cjson.encode, v)
        if encoded then out[k] = text end
      end
    end
  end
  return out
end

-- The history as JSON, its tokens exact: cjson writes 14 digits, so a token (16 after a
-- restart) is written as text and unquoted.
local function encode_history(hist)
  for _, e in ipairs(hist) do
    if type(e) == 'table' and type(e['token']) == 'number' then
      e['token'] = string.format('%d', e['token'])
    end
  end
  return (string.gsub(cjson.encode(hist), '"token":"(%d+)"', '"token":%1'))
end

local function push_history(jk, entry)
  local raw = redis.call('HGET', jk, 'hist')
  local hist = {}
  if raw and raw ~= '' then
    local ok, decoded = pcall(cjson.decode, raw)
    if ok and type(decoded) == 'table' then hist = decoded end
  end
  hist[#hist + 1] = entry
  while #hist > HISTORY_MAX do table.remove(hist, 1) end
  redis.call('HSET', jk, 'hist', encode_history(hist))
end

local function attempt_entry(jk, outcome, detail)
  local f = redis.call('HMGET', jk, 'dl', 'wk', 'start', 'tok')
  local e = {delivery = tonumber(f[1] or '0'), worker = f[2] or '', started_ms = tonumber(f[3] or '0'),
             finished_ms = NOW, outcome = outcome, token = tonumber(f[4] or '0')}
  if detail then
    e['exc_type'] = detail['exc_type']
    e['exc_message'] = detail['exc_message']
  end
  return e
end

-- Add a dead letter (its queue and task name) to the admin's listing index of dead letters
-- (schema: admin/index_sync.lua) when that index is caught up with P:dead (its high-water mark
-- at P:dead's newest score, or no dead letter, and no bounded sync stopped midway: members
-- sharing the newest score may be left), so no admin read has to build it (issue #28).
-- Behind (a store of an earlier release, or a dead letter an earlier release's worker added),
-- it is left to the sync, which reads P:dead from where it stopped (stores/redis/
-- listing_index.py: caught_up says the same). Run before the ZADD.
local function index_dead_letter(id, queue, name)
  local ax = P .. ':ax:dead'
  local top = redis.call('ZREVRANGE', P .. ':dead', 0, 0, 'WITHSCORES')
  local hw = redis.call('GET', ax .. ':hw')
  if top[2] and not (hw and tonumber(hw) >= tonumber(top[2])
                     and redis.call('EXISTS', ax .. ':next') == 0) then
    return
  end
  if queue and queue ~= '' then
    redis.call('ZADD', ax .. ':q:' .. queue, NOW, id)
    redis.call('SADD', ax .. ':qs', queue)
  end
  if name and name ~= '' then redis.call('ZADD', ax .. ':t:' .. name, NOW, id) end
  if not hw or tonumber(hw) < NOW then redis.call('SET', ax .. ':hw', NOW) end
end

-- Dead-letter a job (any state): release its hold, keep the message, record why.
local function dead_letter(id, detail)
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'uk', 'uw', 'q', 'name')
  release_hold(f[1], f[2], id)
  index_dead_letter(id, f[3], f[4])
  push_history(jk, attempt_entry(jk, detail['reason'] or 'task failed', detail))
  redis.call('HSET', jk, 'st', 'failed', 'fin', NOW, 'reason', detail['reason'] or 'task failed',
             'etype', detail['exc_type'] or '', 'emsg', detail['exc_message'] or '',
             'tb', detail['traceback'] or '')
  redis.call('ZADD', P .. ':dead', NOW, id)
  redis.call('HINCRBY', P .. ':stats', 'dead_lettered', 1)
end

local function coalesce(id)
  local jk = jkey(id)
  redis.call('HSET', jk, 'st', 'completed', 'fin', NOW, 'reason', 'coalesced')
  redis.call('ZADD', P .. ':done', NOW, id)
  redis.call('HINCRBY', P .. ':stats', 'deduplicated', 1)
end

-- Waiting, scheduled until `due` (it keeps its score); a waiting consumer wakes to learn
-- the due time (as publish.lua's scheduled job).
local function schedule(id, queue, due)
  redis.call('HSET', jkey(id), 'st', 'scheduled', 'due', due)
  redis.call('ZADD', P .. ':sched', due, id)
  wake(queue)
end

-- How long a job given back by `defer` after its `dl`-th delivery waits (rules.defer_ms).
local function defer_ms(dl)
  return math.min(DEFER_BASE_MS * 2 ^ math.min(math.max(dl - 1, 0), 30), DEFER_MAX_MS)
end

-- A running job goes back to waiting (reject+requeue, lease expiry, graceful release;
-- scheduled until `due` if given: defer). The pending window's hold is taken again; if
-- another job took it meanwhile, this one coalesces into it. Returns 'requeued' or 'coalesced'.
local function requeue(id, backstop, due)
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'uk', 'uw', 'q', 'score')
  if f[1] and f[1] ~= '' then
    local lk = P .. ':u:' .. f[1]
    if f[2] == 'pending' then
      local holder = redis.call('GET', lk)
      if holder and holder ~= id then
        coalesce(id)
        return 'coalesced'
      end
      set_hold(f[1], id, backstop)
    elseif f[2] == 'running' then
      refresh_hold(f[1], id, backstop)
    end
  end
  if due then
    schedule(id, f[3], due)
  else
    enqueue(id, f[3], f[4])
  end
  return 'requeued'
end

-- Leave the running state: drop the lease and free the slot of concurrency `group` (the
-- hash's `cg`, read here when the caller did not: nil). Caller has checked the fence.
local function end_claim(id, group)
  redis.call('ZREM', P .. ':lease', id)
  if group == nil then group = redis.call('HGET', jkey(id), 'cg') end
  free_slot(group, id)
end

-- Renew the non-TTL holds lapsing within half a backstop whose job still needs them: a
-- running job of the running window, and (`waiting`) a job that waits (enqueued, blocked,
-- scheduled). A hold no job needs any more is left to lapse at its deadline. Bounded.
local function renew_holds(batch, backstop, waiting)
  local due = redis.call('ZRANGEBYSCORE', P .. ':hexp', '-inf', NOW + math.floor(backstop / 2),
                         'LIMIT', 0, batch)
  local renewed = 0
  for _, lock in ipairs(due) do
    local lk = P .. ':u:' .. lock
    local holder = redis.call('GET', lk)
    local keep = false
    if holder then
      local f = redis.call('HMGET', jkey(holder), 'st', 'uk', 'uw')
      if f[2] == lock and f[3] == 'running' and f[1] == 'running' then
        keep = true
      elseif f[2] == lock and (f[3] == 'running' or f[3] == 'pending') and waiting and
          WAITING[f[1]] then
        keep = true
      end
    end
    if keep then
      redis.call('PEXPIRE', lk, backstop)
      redis.call('ZADD', P .. ':hexp', NOW + backstop, lock)
      renewed = renewed + 1
    else
      redis.call('ZREM', P .. ':hexp', lock)
    end
  end
  return renewed
end

-- == cluster rate limits (a sliding log of starts per group) ==
-- A claim counts in its group's window from the claim on: as not started yet (P:ratep, until
-- its lease deadline, renewed by heartbeat.lua) until its task starts (rate_start.lua), then
-- by its start time (P:rate). So however long a prefetched job waits in a live worker, no
-- window of starts ever holds more than the limit.

-- Room left in `group`'s window: `limit` minus its starts of the last `window` ms and its
-- claims not started yet (lapsed entries dropped). A start at t lets the next claim in at
-- t + window + 1 ms.
local function rate_room(group, limit, window)
  local rk, pk = P .. ':rate:' .. group, P .. ':ratep:' .. group
  redis.call('ZREMRANGEBYSCORE', rk, '-inf', '(' .. (NOW - window))
  redis.call('ZREMRANGEBYSCORE', pk, '-inf', '(' .. NOW)
  return limit - redis.call('ZCARD', rk) - redis.call('ZCARD', pk)
end

-- Count claim `tok` of `id` in `group`'s window, as not started yet.
local function rate_take(group, id, tok, window, lease_ms)
  local pk = P .. ':ratep:' .. group
  redis.call('ZADD', pk, NOW + lease_ms, string.format('%s:%d', id, tok))
  redis.call('PEXPIRE', pk, lease_ms + 1000)
end

-- When `group`'s window next has room: its oldest start leaves the window, or its oldest
-- claim not started yet lapses (NOW when it has neither).
local function rate_opens(group, window)
  local at = nil
  local oldest = redis.call('ZRANGE', P .. ':rate:' .. group, 0, 0, 'WITHSCORES')
  if oldest[2] then at = tonumber(oldest[2]) + window + 1 end
  local lapse = redis.call('ZRANGE', P .. ':ratep:' .. group, 0, 0, 'WITHSCORES')
  if lapse[2] and (at == nil or tonumber(lapse[2]) < at) then at = tonumber(lapse[2]) end
  return at or NOW
end

-- Park `id` (its group's window is full): blocked, in line by its queue score, woken when
-- the window has room.
local function rate_park(id, group, score, window)
  redis.call('ZADD', P .. ':rblk:' .. group, score, id)
  redis.call('SADD', P .. ':rblkgroups', group)
  redis.call('HSET', jkey(id), 'st', 'blocked')
  redis.call('HINCRBY', P .. ':stats', 'rate_limited', 1)
  redis.call('ZADD', P .. ':rwake', 'LT', rate_opens(group, window), group)
end

-- Drop `id` from its rate group's parked jobs (it leaves the blocked state another way).
local function rate_unpark(id, group)
  if group and group ~= '' then
    redis.call('ZREM', P .. ':rblk:' .. group, id)
  end
end

-- Give the groups whose window has room (at most `max_groups`) their parked jobs back, as
-- many as there is room, oldest first and keeping their place in line. A job given back
-- is decided again when claimed.
local function release_rate(max_groups)
  local due = redis.call('ZRANGEBYSCORE', P .. ':rwake', '-inf', NOW, 'LIMIT', 0, max_groups)
  local released = 0
  for _, group in ipairs(due) do
    local bk = P .. ':rblk:' .. group
    local window = 0
    local first = redis.call('ZRANGE', bk, 0, 0)
    if first[1] then
      local f = redis.call('HMGET', jkey(first[1]), 'rl', 'rw')
      window = tonumber(f[2] or '0')
      local room = rate_room(group, tonumber(f[1] or '0'), window)
      while room > 0 do
        local popped = redis.call('ZPOPMIN', bk, 1)
        if not popped[1] then break end
        local g = redis.call('HMGET', jkey(popped[1]), 'st', 'q')
        if g[1] == 'blocked' then
          enqueue(popped[1], g[2], popped[2])
          room = room - 1
          released = released + 1
        end
      end
    end
    if redis.call('ZCARD', bk) == 0 then
      redis.call('ZREM', P .. ':rwake', group)
      redis.call('SREM', P .. ':rblkgroups', group)
    else
      -- (an empty window: the jobs given back are not claimed yet; look again in a second)
      local at = rate_opens(group, window)
      if at <= NOW then at = NOW + 1000 end
      redis.call('ZADD', P .. ':rwake', at, group)
    end
  end
  return released
end

-- Move due scheduled jobs to their queues (bounded).
local function promote_due(limit)
  local due = redis.call('ZRANGEBYSCORE', P .. ':sched', '-inf', NOW, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', P .. ':sched', id)
    local f = redis.call('HMGET', jkey(id), 'st', 'q', 'score')
    if f[1] == 'scheduled' then
      enqueue(id, f[2], f[3])
    end
  end
  return #due
end
