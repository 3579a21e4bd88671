--[[ admin listing index, page: one page of a finished state filtered by queue and/or task.
Keys: P:I, P:ax:I:q:{queue}, P:ax:I:t:{task}, P:ax:I:tmp (schema in index_sync.lua).
ARGV: 1 prefix, 2 I (done|dead|canceled|discarded), 3 queue ('' = any), 4 task ('' = any),
      5 lowest finish ms ('-inf' or ms), 6 highest ('+inf' or ms), 7 offset, 8 limit,
      9 'asc' for oldest first (default: newest first)
(at least one of queue and task given). Each named set first loses the members that left
P:I (drop_stale, in index_sync.lua's terms); two sets are then intersected into P:ax:I:tmp,
deleted before the script returns.
Returns {total in the time range, {ids newest first; ties by id, descending (or the reverse
with 'asc')}}. ]]
local src = P .. ':' .. ARGV[2]
local ax = P .. ':ax:' .. ARGV[2]
local sets = {}
if ARGV[3] ~= '' then sets[#sets + 1] = ax .. ':q:' .. ARGV[3] end
if ARGV[4] ~= '' then sets[#sets + 1] = ax .. ':t:' .. ARGV[4] end
if #sets == 0 then return redis.error_reply('index_page needs a queue or a task') end
for _, key in ipairs(sets) do drop_stale(key, src) end
local key = sets[1]
if #sets == 2 then
  key = ax .. ':tmp'
  redis.call('ZINTERSTORE', key, 2, sets[1], sets[2], 'AGGREGATE', 'MAX')
end
local total = redis.call('ZCOUNT', key, ARGV[5], ARGV[6])
local ids
if ARGV[9] == 'asc' then
  ids = redis.call('ZRANGEBYSCORE', key, ARGV[5], ARGV[6], 'LIMIT', ARGV[7], ARGV[8])
else
  ids = redis.call('ZREVRANGEBYSCORE', key, ARGV[6], ARGV[5], 'LIMIT', ARGV[7], ARGV[8])
end
if #sets == 2 then redis.call('DEL', key) end
return {total, ids}
