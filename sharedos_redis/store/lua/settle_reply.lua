-- settle_reply: settle an open request with the reply that names it (open -> replied).
-- Accepted only while the marker is open and only if the reply matches the stored
-- request: reply.sender == stored `to`, reply.receiver == stored `from`, same
-- purpose, same trace. Then: store the reply, state replied, ZREM open + leases,
-- PEXPIRE retention, one settlement entry {id, state} (it only wakes the waiter, which
-- reads the reply once from the marker, the authority) and a
-- reply.settled audit record. A refusal changes nothing but one reply.refused
-- audit record (reason + cause).
-- Fenced (ARGV[14] an attempt): refused first, turn_lease_lost, unless the marker is
-- running under that very attempt (cause 'attempt' when another attempt claimed it since,
-- else the state; metadata {attempt, currentAttempt}); the stale attempt's refusal is audited
-- like any other (ADR 0023).
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
-- ARGV[14] the settling turn's attempt (fencing token) or "" (unfenced)
-- ARGV[15] the queued audit records' header ("" for none), ARGV[16..] the records compacted
--   against it (store/audit.py compact_records), written first, whatever the outcome
-- returns {settled 1|0, code, state after the call or "", cause or ""}
local function audit(ctx_json, etype, outcome, reason, cause, metadata)
  refuse(KEYS[5], ARGV[10], ctx_json, ARGV[13], {id = ARGV[11], type = etype,
    outcome = outcome, at = ARGV[12], messageId = ARGV[1], reason = reason, cause = cause,
    metadata = metadata})
end

carry(KEYS[5], ARGV[10], 15)
local m = redis.call('HMGET', KEYS[1], 'state', 'from', 'to', 'purpose', 'trace', 'ctx',
  'attempts')
local state = m[1]
if not state then
  audit(nil, 'reply.refused', 'denied', 'unknown_request', nil)
  return {0, 'unknown_request', '', ''}
end
local lost = lease_lost(state, m[7], ARGV[14])
if lost then
  audit(m[6], 'reply.refused', 'denied', 'turn_lease_lost', lost,
    fence_metadata(ARGV[14], m[7]))
  return {0, 'turn_lease_lost', state, lost}
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
end_request(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[8], 'state', 'replied',
  'reply', ARGV[2], 'updated', string.format('%d', now_ms(ARGV[7])))
announce(KEYS[4], ARGV[9], ARGV[1], 'replied', nil)
audit(m[6], 'reply.settled', 'succeeded', nil, nil)
return {1, 'settled', 'replied', ''}
