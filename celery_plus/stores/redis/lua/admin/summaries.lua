--[[ admin listing rows: the fields of each job a listing shows, long texts cut here.
Keys read: P:job:{id}, P:m:{id} (schema in stores/redis/lua/lib.lua).
ARGV: 1 prefix, 2 longest text (characters of name, q, reason, etype, emsg sent),
      3 largest message sent (bytes; a larger one is left out, its size sent instead),
      4.. job ids
A listing of dead letters whose errors or arguments are megabytes each costs the page it
shows, not the records: Redis cuts them before they are sent.
Returns per id {st, name, q, enq, due, start, fin, dl, reason, etype, emsg, msg, msglen,
tok, sm, rp} (rp = '1': blocked in its rate group's P:rblk, not behind a concurrency group)
(st = false: no such record; msg = false: larger than ARGV[3]). ]]
local text_max, msg_max = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  local jk = jkey(ARGV[i])
  local f = redis.call('HMGET', jk, 'st', 'name', 'q', 'enq', 'due', 'start', 'fin', 'dl',
                       'reason', 'etype', 'emsg')
  for n = 2, 11 do
    if f[n] and #f[n] > text_max then f[n] = string.sub(f[n], 1, text_max) end
  end
  local mk, field = mkey(ARGV[i]), true
  local size = 0
  if redis.call('HEXISTS', jk, 'msg') == 1 then
    field = false
    size = redis.call('HSTRLEN', jk, 'msg')
  else
    size = redis.call('STRLEN', mk)
  end
  local msg = false
  if f[1] and size <= msg_max then
    if field then msg = redis.call('GET', mk) else msg = redis.call('HGET', jk, 'msg') end
  end
  f[12] = msg
  f[13] = size
  local mark = redis.call('HMGET', jk, 'tok', 'sm')
  f[14] = mark[1]
  f[15] = mark[2]
  f[16] = false
  if f[1] == 'blocked' then
    local rg = redis.call('HGET', jk, 'rg')
    if rg and rg ~= '' and redis.call('ZSCORE', P .. ':rblk:' .. rg, ARGV[i]) then
      f[16] = '1'
    end
  end
  out[#out + 1] = f
end
return out
