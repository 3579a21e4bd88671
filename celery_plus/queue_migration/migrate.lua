--[[ migrate: move messages of a legacy kombu queue into the durable store, one atomic step
per batch (``celery-plus migrate-queue`` when the store is on the same Redis server).
Prepended: lib.lua (key schema of the store), then publish.lua wrapped as
``publish_job(A)`` (A = its ARGV), so a moved message is stored exactly as a publish would.

Legacy keys (kombu's layout, see queue_migration/layout.py), passed in ARGV:
  list mode     a LIST (a priority list of the queue, or its staging list): LPUSH in, the
                tail is the oldest; each move checks the tail still is the expected message
                (a legacy consumer may have popped it) and pops it
  unacked mode  the unacked HASH (delivery tag -> [envelope, exchange, routing key]) and its
                index ZSET; each move takes the tag out of both, if it is still there
ARGV: 1 store prefix, 2 mode ('list' | 'unacked'), 3 list or hash key, 4 index key ('' in
      list mode), then per message: expected raw (list) or delivery tag (unacked), kind
      ('job' | 'bad'), job id, n, and the n publish arguments after the prefix
A 'job' whose id the store already has (any state) is dropped as a copy of that job; a 'bad'
one (not a kombu envelope) is stored with its raw bytes in the side queue it names, to be
dead-lettered. List mode stops at the first tail that is not the expected message.
Returns {taken, moved, present, coalesced, bad}. ]]
local mode, src, index = ARGV[2], ARGV[3], ARGV[4]
local taken, moved, present, coalesced, bad = 0, 0, 0, 0, 0
local i = 5
while i <= #ARGV do
  local expect, kind, id, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local args = {P}
  for j = 1, n do args[j + 1] = ARGV[i + 3 + j] end
  i = i + 4 + n
  local raw
  if mode == 'list' then
    raw = redis.call('LINDEX', src, -1)
    if raw ~= expect then break end
    redis.call('RPOP', src)
  else
    raw = redis.call('HGET', src, expect)
    if raw then
      redis.call('HDEL', src, expect)
      redis.call('ZREM', index, expect)
    end
  end
  if raw then
    taken = taken + 1
    if kind == 'bad' then
      publish_job(args)
      bad = bad + 1
    elseif redis.call('EXISTS', jkey(id)) == 1 then
      present = present + 1
    elseif type(publish_job(args)) == 'number' then
      moved = moved + 1
    else
      coalesced = coalesced + 1
    end
  end
end
return {taken, moved, present, coalesced, bad}
