--[[ fire: advance a periodic schedule entry by one tick and publish its job, atomically.
ARGV: 1..10 as publish.lua (the tick's job; unused when 15 is '0'), 11 entry name,
      12 expected last due ms, 13 due ms of this tick, 14 next due ms (for display),
      15 '1' to publish the job, '0' to skip the tick
Touches P:beat:{name} and, for a fired tick, what publish.lua touches.
Returns {'beat', 'missing' | 'stale' | 'paused' | 'skipped'}, or publish.lua's reply when the
job was published (fired). This body is followed by publish.lua's (stores/redis/backend.py). ]]
local beat_key = P .. ':beat:' .. ARGV[11]
local entry = redis.call('HMGET', beat_key, 'last', 'paused')
if not entry[1] then return {'beat', 'missing'} end
if tonumber(entry[1]) ~= tonumber(ARGV[12]) then return {'beat', 'stale'} end
redis.call('HSET', beat_key, 'last', ARGV[13], 'next', ARGV[14])
if entry[2] == '1' then return {'beat', 'paused'} end
if ARGV[15] ~= '1' then return {'beat', 'skipped'} end
redis.call('HSET', beat_key, 'job', ARGV[2])
redis.call('HINCRBY', beat_key, 'fired', 1)
