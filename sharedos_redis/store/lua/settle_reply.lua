-- settle_reply: settle an open request with the reply that names it (open -> replied).
-- Accepted only while the marker is open and only if the reply matches the stored
-- request: reply.sender == stored `to`, reply.receiver == stored `from`, same
-- purpose, same trace. Then: store the reply, state replied, ZREM open + leases,
-- PEXPIRE retention, one settlement entry {id, state} (it only wakes the waiter, which
-- reads the reply once from the marker, the authority) and a
-- reply.settled audit record. A refusal changes nothing but one reply.refused
-- audit record (reason + cause).
-- Time is the Redis server's TIME unless ARGV[7] overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<replyTo>  KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] leases zset  sos:{ns}:leases         KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit
-- ARGV[1] message id (the reply's replyTo)  ARGV[2] reply wire JSON
-- ARGV[3] reply sender tag   ARGV[4] reply receiver tag   ARGV[5] reply purpose
-- ARGV[6] reply trace id     ARGV[7] now ms or ""         ARGV[8] retention ms
-- ARGV[9] settled MAXLEN ~   ARGV[10] audit MAXLEN ~      ARGV[11] audit event id
-- ARGV[12] now RFC 3339      ARGV[13] attribution JSON used when no context is stored
--   ({namespaceId, actor, authority, owner, purpose, traceId})
-- returns {settled 1|0, code, state after the call or "", cause or ""}
local function audit(ctx_json, etype, outcome, reason, cause)
  local ok, ctx = pcall(cjson.decode, ctx_json or ARGV[13])
  if not ok or type(ctx) ~= 'table' then ctx = cjson.decode(ARGV[13]) end
  local event = {
    version = '2', id = ARGV[11], type = etype, outcome = outcome, at = ARGV[12],
    traceId = ctx['traceId'], namespaceId = ctx['namespaceId'], actor = ctx['actor'],
    authority = ctx['authority'], owner = ctx['owner'], purpose = ctx['purpose'],
    messageId = ARGV[1], reason = reason, cause = cause,
  }
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[10], '*', 'e', cjson.encode(event))
end

local m = redis.call('HMGET', KEYS[1], 'state', 'from', 'to', 'purpose', 'trace', 'ctx')
local state = m[1]
if not state then
  audit(nil, 'reply.refused', 'denied', 'unknown_request', nil)
  return {0, 'unknown_request', '', ''}
end
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  audit(m[6], 'reply.refused', 'denied', 'request_closed', state)
  return {0, 'request_closed', state, state}
end
local cause = nil
if ARGV[3] ~= m[3] then cause = 'sender'
elseif ARGV[4] ~= m[2] then cause = 'receiver'
elseif ARGV[5] ~= m[4] then cause = 'purpose'
elseif ARGV[6] ~= m[5] then cause = 'trace_id'
end
if cause then
  audit(m[6], 'reply.refused', 'denied', 'reply_mismatch', cause)
  return {0, 'reply_mismatch', state, cause}
end
local now
if ARGV[7] ~= '' then
  now = tonumber(ARGV[7])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('HSET', KEYS[1], 'state', 'replied', 'reply', ARGV[2],
  'updated', string.format('%d', now))
redis.call('HDEL', KEYS[1], 'lease')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'id', ARGV[1], 'state', 'replied')
audit(m[6], 'reply.settled', 'succeeded', nil, nil)
return {1, 'settled', 'replied', ''}
