--[[ admin error groups, sync: index the members of P:dead finished from a score on by their
error group (schema in error_groups_lib.lua).
ARGV: 1 prefix, 2 lowest score to read (inclusive, or '-inf'), 3 members of that lowest score
      already done (skip them), 4 batch size
Returns {members read, highest score read ('' if none), members read at that score}. ]]
local CHARS = 200

-- The first CHARS UTF-8 characters of `s` (a character is at most 4 bytes: no more than that
-- is looked at).
local function clip(s)
  s = string.sub(s, 1, CHARS * 4)
  local count = 0
  for i = 1, #s do
    local b = string.byte(s, i)
    if b < 128 or b >= 192 then
      count = count + 1
      if count > CHARS then return string.sub(s, 1, i - 1) end
    end
  end
  return s
end

-- The group's message: the first line of `s`, clipped.
local function group_message(s)
  return clip(string.match(string.sub(s, 1, CHARS * 4), '^[^\n]*'))
end

local rows = redis.call('ZRANGEBYSCORE', P .. ':dead', ARGV[2], '+inf', 'WITHSCORES', 'LIMIT',
                        ARGV[3], ARGV[4])
-- Written in bulk, one command per group and one per hash for the batch, not one per member:
-- the first read of a store with 100,000 dead letters builds the whole index (4.4 s with
-- seven commands and a SHA-1 per member).
local ids = {}
for i = 1, #rows, 2 do ids[#ids + 1] = rows[i] end
local was = {}
if #ids > 0 then was = redis.call('HMGET', GX .. ':gof', unpack(ids)) end
local gids, members, of = {}, {}, {}
local high, at_high = nil, 0
for i = 1, #rows, 2 do
  local id, score = rows[i], rows[i + 1]
  local f = redis.call('HMGET', jkey(id), 'etype', 'emsg')
  local etype, msg = clip(f[1] or ''), group_message(f[2] or '')
  local key = etype .. '\n' .. msg
  local gid = gids[key]
  if not gid then
    gid = redis.sha1hex(key)
    gids[key] = gid
    members[gid] = {}
    redis.call('HSET', GX .. ':gt', gid, etype)
    redis.call('HSET', GX .. ':gm', gid, msg)
  end
  local before = was[(i + 1) / 2]
  if before and before ~= gid then redis.call('ZREM', GX .. ':g:' .. before, id) end
  local m = members[gid]
  m[#m + 1] = score
  m[#m + 1] = id
  of[#of + 1] = id
  of[#of + 1] = gid
  if score == high then at_high = at_high + 1 else high, at_high = score, 1 end
end
for gid, m in pairs(members) do
  for i = 1, #m, 2000 do
    redis.call('ZADD', GX .. ':g:' .. gid, unpack(m, i, math.min(i + 1999, #m)))
  end
end
for i = 1, #of, 2000 do
  redis.call('HSET', GX .. ':gof', unpack(of, i, math.min(i + 1999, #of)))
end
if high then
  local hw = redis.call('GET', GX .. ':ghw')
  if not hw or tonumber(hw) < tonumber(high) then redis.call('SET', GX .. ':ghw', high) end
end
return {#rows / 2, high or '', at_high}
