-- settle_failure: end an open request without a reply (open -> failed | timed_out |
-- cancelled | dead) with a reason code. Same cleanup as settle_reply: ZREM open +
-- leases, PEXPIRE retention, one settlement entry {id, state, result = code} (the
-- waiter wakes) and an audit record (request.failed | request.timed_out |
-- request.cancelled | request.dead_lettered); dead also appends a dead letter.
-- A terminal or missing marker is refused (request_closed / unknown_request) and
-- nothing changes: terminal states never change.
-- Fenced (ARGV[11] an attempt): refused first, turn_lease_lost, unless the marker is
-- running under that attempt; that refusal is audited (reply.refused, cause 'attempt' or
-- the state, metadata {attempt, currentAttempt}; ADR 0023), nothing else changes.
-- Time is the Redis server's TIME unless ARGV[4] overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>   KEYS[2] open zset  sos:{ns}:open
-- KEYS[3] leases zset  sos:{ns}:leases     KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit      KEYS[6] dead stream  sos:{ns}:dead
-- ARGV[1] message id   ARGV[2] terminal state   ARGV[3] reason code   ARGV[4] now ms or ""
-- ARGV[5] retention ms   ARGV[6] settled MAXLEN ~   ARGV[7] audit MAXLEN ~
-- ARGV[8] dead MAXLEN ~  ARGV[9] audit event id     ARGV[10] now RFC 3339
-- ARGV[11] the settling turn's attempt (fencing token) or "" (unfenced)
-- ARGV[12] attribution JSON used when no context is stored (see settle_reply)
-- ARGV[13] the queued audit records' header ("" for none), ARGV[14..] the records compacted
--   against it (store/audit.py compact_records), written first, whatever the outcome
-- returns {settled 1|0, code, state after the call or "", cause or ""}
local event_types = {
  failed = 'request.failed', timed_out = 'request.timed_out',
  cancelled = 'request.cancelled', dead = 'request.dead_lettered',
}
carry(KEYS[5], ARGV[7], 13)
local m = redis.call('HMGET', KEYS[1], 'state', 'ctx', 'attempts')
local state = m[1]
if not state then return {0, 'unknown_request', '', ''} end
local lost = lease_lost(state, m[3], ARGV[11])
if lost then
  refuse(KEYS[5], ARGV[7], m[2], ARGV[12], {id = ARGV[9], type = 'reply.refused',
    outcome = 'denied', at = ARGV[10], messageId = ARGV[1], reason = 'turn_lease_lost',
    cause = lost, metadata = fence_metadata(ARGV[11], m[3])})
  return {0, 'turn_lease_lost', state, lost}
end
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  return {0, 'request_closed', state, state}
end
end_request(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[5], 'state', ARGV[2], 'code', ARGV[3],
  'updated', string.format('%d', now_ms(ARGV[4])))
if ARGV[2] == 'dead' then
  dead_letter(KEYS[6], ARGV[8], ARGV[1], ARGV[3], ARGV[10])
end
announce(KEYS[4], ARGV[6], ARGV[1], ARGV[2], ARGV[3])
append_event(KEYS[5], ARGV[7], m[2], {id = ARGV[9], type = event_types[ARGV[2]],
  outcome = 'failed', at = ARGV[10], messageId = ARGV[1], reason = ARGV[3]})
return {1, 'settled', ARGV[2], ''}
