--[[ worker_beat: record a beat of a Celery worker (the admin's workers page and health).
ARGV: 1 prefix, 2 node name, 3 its info (JSON: host, pid, queues, interval_ms), 4 keep ms
P:workers HASH node -> JSON of the info with started_ms (its first beat under this pid) and
at_ms (this beat), both server ms; a record with no beat for `keep` ms is dropped (checked
on each beat of any worker, the first few records of the hash). ]]
local k = P .. ':workers'
local ok, info = pcall(cjson.decode, ARGV[3])
if not ok or type(info) ~= 'table' then info = {} end
info['started_ms'] = NOW
local old = redis.call('HGET', k, ARGV[2])
if old then
  local fine, was = pcall(cjson.decode, old)
  if fine and type(was) == 'table' and was['pid'] == info['pid'] and tonumber(was['started_ms']) then
    info['started_ms'] = tonumber(was['started_ms'])
  end
end
info['at_ms'] = NOW
redis.call('HSET', k, ARGV[2], cjson.encode(info))
local keep = tonumber(ARGV[4])
local scan = redis.call('HSCAN', k, '0', 'COUNT', 10)
local fields = scan[2]
for i = 1, #fields, 2 do
  local fine, was = pcall(cjson.decode, fields[i + 1])
  if not fine or type(was) ~= 'table' or (tonumber(was['at_ms']) or 0) < NOW - keep then
    redis.call('HDEL', k, fields[i])
  end
end
return NOW
