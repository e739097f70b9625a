-- marker_redrive: a human re-drive of a dead letter (dead -> accepted). The one
-- sanctioned exception to "terminal states never change": only `dead` moves, and
-- only by this host/admin call. attempts = 0, new deadline, code/reply/lease
-- cleared, back in the open index and the outbox (entry {id}, like accept), TTL
-- deadline + retention like accept, and a request.redriven audit record.
-- A re-drive is a new hop of its trace: it spends one hop of the trace budget like an
-- accept (an exhausted budget refuses it and gives back the sender's reserved grant use,
-- with its grant.usage.released record, as the accept script does).
-- Time is the Redis server's TIME unless ARGV[3] overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>   KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] outbox stream sos:{ns}:outbox    KEYS[4] audit stream sos:{ns}:audit
-- KEYS[5] budget  sos:{ns}:budget:<trace>  KEYS[6] usage hash  sos:{ns}:usage
-- ARGV[1] message id   ARGV[2] new deadline ms   ARGV[3] now ms or ""
-- ARGV[4] retention ms   ARGV[5] audit MAXLEN ~  ARGV[6] audit event id  ARGV[7] now RFC 3339
-- ARGV[8] default hops   ARGV[9] budget ttl ms   ARGV[10] reserved grant id ('' for none)
-- ARGV[11], ARGV[12] the grant.usage.released audit field/value
-- returns 1 re-driven; 0 the marker is gone or not dead; -1 the trace has no hops left
local m = redis.call('HMGET', KEYS[1], 'state', 'ctx')
if m[1] ~= 'dead' then return 0 end
local hops = tonumber(redis.call('GET', KEYS[5]) or ARGV[8])
if hops == nil or hops < 1 then
  if ARGV[10] ~= '' and tonumber(redis.call('HGET', KEYS[6], ARGV[10]) or '0') > 0 then
    redis.call('HINCRBY', KEYS[6], ARGV[10], -1)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', ARGV[11], ARGV[12])
  end
  return -1
end
redis.call('SET', KEYS[5], hops - 1, 'PX', ARGV[9])
redis.call('HDEL', KEYS[1], 'code', 'reply', 'lease')
redis.call('HSET', KEYS[1], 'state', 'accepted', 'attempts', '0', 'deadline', ARGV[2],
  'updated', string.format('%d', now_ms(ARGV[3])))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(ARGV[2]) + tonumber(ARGV[4])))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'id', ARGV[1])
append_event(KEYS[4], ARGV[5], m[2], {id = ARGV[6], type = 'request.redriven',
  outcome = 'succeeded', at = ARGV[7], messageId = ARGV[1]})
return 1
