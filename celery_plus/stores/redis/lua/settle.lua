--[[ settle: end claims, fenced by (id, token). Stale settles change nothing.
ARGV: 1 prefix, 2 hold backstop ms, 3.. groups of 5: id, token, action, detail JSON ('' = none;
      text values; anything else is kept as text or a note, never an error), run ms (how
      long its task ran: the job's start moves to now - run ms, lib.lua mark_start; '' = not
      known)
actions: ack (completed), fail / reject (dead letter), requeue (back to enqueued, or dead letter
once deliveries reach the limit), defer (as requeue, but scheduled after defer_ms(deliveries)),
release (back to enqueued, delivery not counted).
Returns {applied count, {dead-lettered id, reason, ...}}. ]]
local backstop = tonumber(ARGV[2])
local applied, dead = 0, {}
for i = 3, #ARGV, 5 do
  local id, tok, action, raw = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'tok', 'uk', 'uw', 'dl', 'mdl', 'cg')
  if f[1] == 'running' and f[2] == tok then
    applied = applied + 1
    mark_start(jk, tok, ARGV[i + 4])
    -- Decoded before anything is written: a bad detail is a note, never an error that
    -- would leave this claim half-ended or fail the batch.
    local detail = decode_detail(raw)
    end_claim(id, f[7] or '')
    if action == 'ack' then
      release_hold(f[3], f[4], id)
      redis.call('HSET', jk, 'st', 'completed', 'fin', NOW)
      redis.call('ZADD', P .. ':done', NOW, id)
    elseif action == 'requeue' or action == 'defer' or action == 'release' then
      local dl, mdl = tonumber(f[5] or '0'), tonumber(f[6] or '0')
      if action == 'release' then
        redis.call('HSET', jk, 'dl', math.max(dl - 1, 0))
        requeue(id, backstop)
      elseif mdl > 0 and dl >= mdl then
        detail = detail or {}
        detail['reason'] = 'delivery limit'
        if not detail['exc_message'] then
          detail['exc_message'] = 'message delivered ' .. dl .. ' times without being settled'
        end
        dead_letter(id, detail)
        dead[#dead + 1] = id
        dead[#dead + 1] = 'delivery limit'
      elseif action == 'defer' then
        push_history(jk, attempt_entry(jk, (detail and detail['reason']) or 'deferred', detail))
        requeue(id, backstop, NOW + defer_ms(dl))
      else
        push_history(jk, attempt_entry(jk, (detail and detail['reason']) or 'requeued', detail))
        requeue(id, backstop)
      end
    else
      detail = detail or {}
      if action == 'reject' and not detail['reason'] then detail['reason'] = 'rejected' end
      dead_letter(id, detail)
      dead[#dead + 1] = id
      dead[#dead + 1] = detail['reason'] or 'task failed'
    end
  end
end
return {applied, dead}
