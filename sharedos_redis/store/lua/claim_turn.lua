-- claim_turn: take the turn lease of an open request (dispatched -> running).
-- A request that is accepted or dispatched, or running with an expired lease, is
-- claimed: attempts + 1, lease = now + lease_ms (indexed in the leases zset),
-- turn.started audited. A request that already used max_attempts turns is
-- dead-lettered instead: state dead, code request_dead_lettered, removed from the
-- open and leases indexes, PEXPIRE retention, one dead-letter entry, one
-- settlement entry (its waiter wakes) and a request.dead_lettered audit record.
-- Handed over by the relay (ARGV[13] the outbox entry id, issue 11): the claim also
-- retires that outbox entry (XACK + XDEL, whatever the outcome) and, claiming an
-- accepted request, audits message.dispatched ahead of turn.started: what the relay's
-- dispatch_request would have done, in the same step as the claim.
-- Time is the Redis server's TIME unless ARGV[5] overrides it (tests).
-- KEYS[1] marker hash  sos:{ns}:msg:<id>     KEYS[2] leases zset  sos:{ns}:leases
-- KEYS[3] open zset    sos:{ns}:open         KEYS[4] settled stream sos:{ns}:settled
-- KEYS[5] audit stream sos:{ns}:audit        KEYS[6] dead stream  sos:{ns}:dead
-- KEYS[7] outbox       sos:{ns}:outbox
-- ARGV[1] message id      ARGV[2] lease ms         ARGV[3] max attempts
-- ARGV[4] worker name     ARGV[5] now ms or ""     ARGV[6] retention ms
-- ARGV[7] settled MAXLEN ~  ARGV[8] audit MAXLEN ~  ARGV[9] dead MAXLEN ~
-- ARGV[10] audit event id   ARGV[11] now RFC 3339
-- ARGV[12] the relay's consumer group   ARGV[13] its outbox entry id or "" (not handed over)
-- ARGV[14] the message.dispatched audit event id (with ARGV[13])
-- returns {outcome, attempt, env, deadline, traceparent}; outcome is claimed | busy |
--   closed (terminal) | missing | dead (dead-lettered by this call)
local function audit(ctx_json, etype, outcome, reason, metadata, id)
  append_event(KEYS[5], ARGV[8], ctx_json, {id = id or ARGV[10], type = etype,
    outcome = outcome, at = ARGV[11], messageId = ARGV[1], reason = reason,
    metadata = metadata})
end

if ARGV[13] ~= '' then
  redis.call('XACK', KEYS[7], ARGV[12], ARGV[13])
  redis.call('XDEL', KEYS[7], ARGV[13])
end
local m = redis.call('HMGET', KEYS[1], 'state', 'attempts', 'lease', 'deadline', 'env', 'ctx',
  'tp')
local state = m[1]
if not state then return {'missing', 0, '', 0} end
local attempts = tonumber(m[2]) or 0
local deadline = m[4] or '0'
if state ~= 'accepted' and state ~= 'dispatched' and state ~= 'running' then
  return {'closed', attempts, '', deadline}
end
local now = now_ms(ARGV[5])
local now_s = string.format('%d', now)
if state == 'running' and (tonumber(m[3]) or 0) > now then
  return {'busy', attempts, '', deadline}
end
if state == 'accepted' and ARGV[13] ~= '' then
  audit(m[6], 'message.dispatched', 'succeeded', nil, nil, ARGV[14])
end
if attempts >= tonumber(ARGV[3]) then
  local code = 'request_dead_lettered'
  end_request(KEYS[1], KEYS[3], KEYS[2], ARGV[1], ARGV[6], 'state', 'dead', 'code', code,
    'updated', now_s)
  dead_letter(KEYS[6], ARGV[9], ARGV[1], code, ARGV[11])
  announce(KEYS[4], ARGV[7], ARGV[1], 'dead', code)
  audit(m[6], 'request.dead_lettered', 'failed', code, nil)
  return {'dead', attempts, '', deadline}
end
attempts = attempts + 1
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'state', 'running', 'attempts', string.format('%d', attempts),
  'lease', lease, 'updated', now_s)
redis.call('ZADD', KEYS[2], lease, ARGV[1])
audit(m[6], 'turn.started', 'succeeded', nil, {worker = ARGV[4], attempt = attempts})
return {'claimed', attempts, m[5], deadline, m[7] or ''}
