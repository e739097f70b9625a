-- publish_wake: wake a request's turn again through the namespace's outbox (the
-- stream worker's re-wake: the relay of any worker in the group takes it). Appends
-- the entry {id} only if this (request, tag) was not published in the last ttl ms,
-- so reconcilers racing in one lease period append one entry.
-- KEYS[1] dedup marker  sos:{ns}:rewake:<id>:<tag>   KEYS[2] outbox  sos:{ns}:outbox
-- ARGV[1] message id    ARGV[2] dedup ttl ms
-- returns 1 appended; 0 already published in this period
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('XADD', KEYS[2], '*', 'id', ARGV[1])
return 1
