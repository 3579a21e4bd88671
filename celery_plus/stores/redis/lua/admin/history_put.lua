--[[ admin queue history: store one sample (stores/admin_base/queue_history.py).
Keys: P:qhist HASH bucket ms -> "sampled at ms|sample JSON" (one field per minute bucket of the
server clock; the samples of the last day).
ARGV: 1 prefix, 2 bucket ms, 3 the value, 4 keep from ms (fields of earlier buckets dropped)
Returns 1 if the bucket's sample was stored, 0 if the bucket had one. ]]
local key = P .. ':qhist'
local keep = tonumber(ARGV[4])
for _, bucket in ipairs(redis.call('HKEYS', key)) do
  if tonumber(bucket) < keep then
    redis.call('HDEL', key, bucket)
  end
end
return redis.call('HSETNX', key, ARGV[2], ARGV[3])
