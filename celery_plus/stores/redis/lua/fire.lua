--[[ fire: advance a periodic schedule entry by one tick and publish its job, atomically.
ARGV: 1..19 as publish.lua, none left out (the tick's job; unused when 24 is '0'), 20 entry name,
      21 expected last due ms, 22 due ms of this tick, 23 next due ms (for display),
      24 '1' to publish the job, '0' to skip the tick
Touches P:beat:{name} and, for a fired tick, what publish.lua touches.
Returns {'beat', 'missing' | 'stale' | 'paused' | 'skipped'}, or publish.lua's reply when the
job was published (fired). This body is followed by publish.lua's (stores/redis/backend.py). ]]
local beat_key = P .. ':beat:' .. ARGV[20]
local entry = redis.call('HMGET', beat_key, 'last', 'paused')
if not entry[1] then return {'beat', 'missing'} end
if tonumber(entry[1]) ~= tonumber(ARGV[21]) then return {'beat', 'stale'} end
redis.call('HSET', beat_key, 'last', ARGV[22], 'next', ARGV[23])
if entry[2] == '1' then return {'beat', 'paused'} end
if ARGV[24] ~= '1' then return {'beat', 'skipped'} end
redis.call('HSET', beat_key, 'job', ARGV[2])
redis.call('HINCRBY', beat_key, 'fired', 1)
