-- settle_reply: settle an open request with the reply that names it (open -> replied).
-- Accepted only while the marker is open and only if the reply matches the stored
-- request: reply.sender == stored `to`, reply.receiver == stored `from`, same
-- purpose, same trace. Then: store the reply, state replied, ZREM open + leases,
-- PEXPIRE retention, one settlement entry {id, state} (it only wakes the waiter, which
-- reads the reply once from the marker, the authority) and a
-- reply.settled audit record. A refusal changes nothing but one reply.refused
-- audit record (reason + cause).
-- Fenced (a.attempt an attempt): refused first, turn_lease_lost, unless the marker is
-- running under that very attempt (cause 'attempt' when another attempt claimed it since,
-- else the state; metadata {attempt, currentAttempt}); the stale attempt's refusal is audited
-- like any other (ADR 0023).
-- Time is the Redis server's TIME unless a.now overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<replyTo>  KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] leases zset  sos:{ns}:leases         KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args):
--   a.id message id (the reply's replyTo)   a.reply reply wire JSON
--   a.sender reply sender tag   a.receiver reply receiver tag   a.purpose reply purpose
--   a.trace reply trace id      a.now now ms or ""              a.retention retention ms
--   a.settled_maxlen settled MAXLEN ~   a.audit_maxlen audit MAXLEN ~
--   a.event audit event id      a.at now RFC 3339
--   a.fallback attribution JSON used when no context is stored
--     ({namespaceId, actor, authority, owner, purpose, traceId})
--   a.attempt the settling turn's attempt (fencing token) or "" (unfenced)
-- then the queued audit records' header ("" for none) and the records compacted against it
--   (store/audit.py compact_records), written first, whatever the outcome
-- returns {settled 1|0, code, state after the call or "", cause or ""}
local a, carried = named()
local function audit(ctx_json, etype, outcome, reason, cause, metadata)
  refuse(KEYS[5], a.audit_maxlen, ctx_json, a.fallback, {id = a.event, type = etype,
    outcome = outcome, at = a.at, messageId = a.id, reason = reason, cause = cause,
    metadata = metadata})
end

carry(KEYS[5], a.audit_maxlen, carried)
local m = redis.call('HMGET', KEYS[1], 'state', 'from', 'to', 'purpose', 'trace', 'ctx',
  'attempts')
local state = m[1]
if not state then
  audit(nil, 'reply.refused', 'denied', 'unknown_request', nil)
  return {0, 'unknown_request', '', ''}
end
local lost = lease_lost(state, m[7], a.attempt)
if lost then
  audit(m[6], 'reply.refused', 'denied', 'turn_lease_lost', lost,
    fence_metadata(a.attempt, m[7]))
  return {0, 'turn_lease_lost', state, lost}
end
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  audit(m[6], 'reply.refused', 'denied', 'request_closed', state)
  return {0, 'request_closed', state, state}
end
local cause = nil
if a.sender ~= m[3] then cause = 'sender'
elseif a.receiver ~= m[2] then cause = 'receiver'
elseif a.purpose ~= m[4] then cause = 'purpose'
elseif a.trace ~= m[5] then cause = 'trace_id'
end
if cause then
  audit(m[6], 'reply.refused', 'denied', 'reply_mismatch', cause)
  return {0, 'reply_mismatch', state, cause}
end
end_request(KEYS[1], KEYS[2], KEYS[3], a.id, a.retention, 'state', 'replied',
  'reply', a.reply, 'updated', string.format('%d', now_ms(a.now)))
announce(KEYS[4], a.settled_maxlen, a.id, 'replied', nil)
audit(m[6], 'reply.settled', 'succeeded', nil, nil)
return {1, 'settled', 'replied', ''}
