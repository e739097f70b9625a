-- settle_failure: end an open request without a reply (open -> failed | timed_out |
-- cancelled | dead) with a reason code. Same cleanup as settle_reply: ZREM open +
-- leases, PEXPIRE retention, one settlement entry {id, state, result = code} (the
-- waiter wakes) and an audit record (request.failed | request.timed_out |
-- request.cancelled | request.dead_lettered); dead also appends a dead letter.
-- A terminal or missing marker is refused (request_closed / unknown_request) and
-- nothing changes: terminal states never change.
-- Fenced (a.attempt an attempt): refused first, turn_lease_lost, unless the marker is
-- running under that attempt; that refusal is audited (reply.refused, cause 'attempt' or
-- the state, metadata {attempt, currentAttempt}; ADR 0023), nothing else changes.
-- Time is the Redis server's TIME unless a.now overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>   KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] leases zset  sos:{ns}:leases     KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit      KEYS[6] dead stream  sos:{ns}:dead
-- ARGV named (named() in _prelude.lua, store/scripts.py named_args):
--   a.id message id   a.state terminal state   a.code reason code   a.now now ms or ""
--   a.retention retention ms   a.settled_maxlen settled MAXLEN ~
--   a.audit_maxlen audit MAXLEN ~   a.dead_maxlen dead MAXLEN ~
--   a.event audit event id   a.at now RFC 3339
--   a.attempt the settling turn's attempt (fencing token) or "" (unfenced)
--   a.fallback attribution JSON used when no context is stored (see settle_reply)
-- then the queued audit records' header ("" for none) and the records compacted against it
--   (store/audit.py compact_records), written first, whatever the outcome
-- returns {settled 1|0, code, state after the call or "", cause or ""}
local event_types = {
  failed = 'request.failed', timed_out = 'request.timed_out',
  cancelled = 'request.cancelled', dead = 'request.dead_lettered',
}
local a, carried = named()
carry(KEYS[5], a.audit_maxlen, carried)
local m = redis.call('HMGET', KEYS[1], 'state', 'ctx', 'attempts')
local state = m[1]
if not state then return {0, 'unknown_request', '', ''} end
local lost = lease_lost(state, m[3], a.attempt)
if lost then
  refuse(KEYS[5], a.audit_maxlen, m[2], a.fallback, {id = a.event, type = 'reply.refused',
    outcome = 'denied', at = a.at, messageId = a.id, reason = 'turn_lease_lost',
    cause = lost, metadata = fence_metadata(a.attempt, m[3])})
  return {0, 'turn_lease_lost', state, lost}
end
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  return {0, 'request_closed', state, state}
end
end_request(KEYS[1], KEYS[2], KEYS[3], a.id, a.retention, 'state', a.state, 'code', a.code,
  'updated', string.format('%d', now_ms(a.now)))
if a.state == 'dead' then
  dead_letter(KEYS[6], a.dead_maxlen, a.id, a.code, a.at)
end
announce(KEYS[4], a.settled_maxlen, a.id, a.state, a.code)
append_event(KEYS[5], a.audit_maxlen, m[2], {id = a.event, type = event_types[a.state],
  outcome = 'failed', at = a.at, messageId = a.id, reason = a.code})
return {1, 'settled', a.state, ''}
