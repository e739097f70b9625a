-- marker_redrive: a human re-drive of a dead letter (dead -> accepted). The one
-- sanctioned exception to "terminal states never change": only `dead` moves, and
-- only by this host/admin call. attempts = 0, new deadline, code/reply/lease
-- cleared, back in the open index and the outbox (entry {id}, like accept), TTL
-- deadline + retention like accept, and a request.redriven audit record.
-- A re-drive is a new hop of its trace: it spends one hop of the trace budget like an
-- accept (an exhausted budget refuses it and gives back the sender's reserved grant use,
-- with its grant.usage.released record, as the accept script does).
-- Time is the Redis server's TIME unless a.now overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>   KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] outbox stream sos:{ns}:outbox    KEYS[4] audit stream sos:{ns}:audit
-- KEYS[5] budget  sos:{ns}:budget:<trace>  KEYS[6] usage hash  sos:{ns}:usage
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args):
--   a.id message id   a.deadline new deadline ms   a.now now ms or ""
--   a.retention retention ms   a.audit_maxlen audit MAXLEN ~   a.event audit event id
--   a.at now RFC 3339   a.hops default hops   a.budget_ttl budget ttl ms
--   a.grant reserved grant id ('' for none)
--   a.released_field, a.released_value the grant.usage.released audit field/value
-- returns 1 re-driven; 0 the marker is gone or not dead; -1 the trace has no hops left
local a = named()
local m = redis.call('HMGET', KEYS[1], 'state', 'ctx')
if m[1] ~= 'dead' then return 0 end
local hops = tonumber(redis.call('GET', KEYS[5]) or a.hops)
if hops == nil or hops < 1 then
  if a.grant ~= '' and tonumber(redis.call('HGET', KEYS[6], a.grant) or '0') > 0 then
    redis.call('HINCRBY', KEYS[6], a.grant, -1)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', a.audit_maxlen, '*', a.released_field,
      a.released_value)
  end
  return -1
end
redis.call('SET', KEYS[5], hops - 1, 'PX', a.budget_ttl)
redis.call('HDEL', KEYS[1], 'code', 'reply', 'lease')
redis.call('HSET', KEYS[1], 'state', 'accepted', 'attempts', '0', 'deadline', a.deadline,
  'updated', string.format('%d', now_ms(a.now)))
redis.call('PEXPIREAT', KEYS[1],
  string.format('%d', tonumber(a.deadline) + tonumber(a.retention)))
redis.call('ZADD', KEYS[2], a.deadline, a.id)
redis.call('XADD', KEYS[3], '*', 'id', a.id)
append_event(KEYS[4], a.audit_maxlen, m[2], {id = a.event, type = 'request.redriven',
  outcome = 'succeeded', at = a.at, messageId = a.id})
return 1
