--[[ heartbeat: renew the leases of claims a worker still holds, and say what became of the
others, in the same step.
ARGV: 1 prefix, 2 lease ms, 3.. triples of id, token, start mark ('' = not known, -1 = not
started yet, n = started n ms ago: lib.lua mark_start, applied to renewed claims only)
A claim of a rate group not started yet keeps counting in its group's window while its
lease is renewed (P:ratep:{group}): a job prefetched behind a long task never lets the window
take more than its limit. Returns, for each pair NOT renewed (its job does not run under
that token), its position among the pairs (1 = the first) and its verdict: 'ended' (by its
own run) or 'lost' (celery_plus/model/rules.py heartbeat_verdict); a pair left out was renewed. ]]
local lease_ms = tonumber(ARGV[2])

-- What became of claim `tok` of job `id`, no longer current: 'ended' when its own run ended
-- it (continued: 'retried' under its token; acked: completed under its token with no reason;
-- given back unstarted: waiting under its token, no delivery counted), unless the history
-- records any other end under its token (a recovery, whatever the job became since);
-- otherwise 'lost'.
local function verdict(id, tok)
  local f = redis.call('HMGET', jkey(id), 'st', 'tok', 'dl', 'reason', 'hist')
  if not f[1] then return 'lost' end
  local mine, continued = tonumber(tok), false
  if f[5] and f[5] ~= '' then
    local ok, hist = pcall(cjson.decode, f[5])
    if ok and type(hist) == 'table' then
      for _, e in ipairs(hist) do
        if type(e) == 'table' and tonumber(e['token']) == mine then
          if e['outcome'] ~= 'retried' then return 'lost' end
          continued = true
        end
      end
    end
  end
  if continued then return 'ended' end
  if f[2] ~= tok then return 'lost' end
  if f[1] == 'completed' and (not f[4] or f[4] == '') then return 'ended' end
  if WAITING[f[1]]
      and tonumber(f[3] or '0') == 0 then
    return 'ended'
  end
  return 'lost'
end

local out = {}
for i = 3, #ARGV, 3 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', jkey(id), 'st', 'tok', 'rg')
  if f[1] == 'running' and f[2] == tok then
    redis.call('ZADD', P .. ':lease', 'XX', NOW + lease_ms, id)
    mark_start(jkey(id), tok, ARGV[i + 2])
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
    out[#out + 1] = i / 3
    out[#out + 1] = verdict(id, tok)
  end
end
return out
